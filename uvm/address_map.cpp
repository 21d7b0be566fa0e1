// The kernel address radix table (address_map.h).
#include "uvm/address_map.h"

#include <new>

#include "common/assert.h"

namespace uvm {

// A slot holds the name of the range covering it whole (0: none), or a
// table of finer slots.
struct AddressMap::Slot {
    std::atomic<uint64_t> name{0};
    std::atomic<Table *> child{nullptr};
};

// A range's cell, read as a seqlock is: handle (acquire), base and size, a
// fence, handle again. Its base and size are written only while its handle
// is 0 (reserve), so a reader that sees them changed sees another handle in
// its second read, by the fences' pairing. On x86 every one of these is a
// plain move: no locked instruction on the alloc/free path.
struct AddressMap::Cell {
    std::atomic<uint64_t> handle{0};
    std::atomic<uint64_t> base{0};
    std::atomic<uint64_t> size{0};
};

// A table of slots of `span` bytes each: 1024 slots of 2 MiB (a leaf of the
// directories), 32 of 64 KiB or 16 of 4 KiB.
struct AddressMap::Table {
    Table(uint64_t span_, uint32_t count_, Slot *slots_) : span(span_), count(count_), slots(slots_) {}
    ~Table() {
        for (uint32_t i = 0; i < count; ++i)
            delete slots[i].child.load();
        delete[] slots;
    }
    const uint64_t span;
    const uint32_t count;
    Slot *const slots;
};

struct AddressMap::Mid {
    std::atomic<Table *> leaves[1u << kMidBits] = {};
    ~Mid() {
        for (auto &l : leaves)
            delete l.load();
    }
};

namespace {

constexpr uint64_t k2M = uint64_t{1} << 21, k64K = uint64_t{1} << 16, k4K = uint64_t{1} << 12;

// The table at `at`, made (and published) when asked to and missing.
template <typename T, typename Make>
T *get_or_make(std::atomic<T *> &at, bool create, Make &&make) {
    T *t = at.load(std::memory_order_acquire);
    if (t || !create)
        return t;
    T *fresh = make();
    if (!fresh)
        return nullptr;
    if (at.compare_exchange_strong(t, fresh, std::memory_order_acq_rel, std::memory_order_acquire))
        return fresh;
    delete fresh;  // another writer published one first
    return t;
}

// Host allocation failure is null, never an exception: the caller undoes its mapping.
AddressMap::Table *make_table(uint64_t span, uint32_t count) {
    auto *slots = new (std::nothrow) AddressMap::Slot[count];
    if (!slots)
        return nullptr;
    auto *table = new (std::nothrow) AddressMap::Table(span, count, slots);
    if (!table)
        delete[] slots;
    return table;
}

// The slot size below a slot of `span` bytes, and how many fit.
bool finer(uint64_t span, uint64_t *child_span, uint32_t *count) {
    if (span == k2M) {
        *child_span = k64K;
        *count = 32;
        return true;
    }
    if (span == k64K) {
        *child_span = k4K;
        *count = 16;
        return true;
    }
    return false;
}

// Write the name `value` into the slots of [lo, hi) within `table`, whose
// slot 0 starts at `start` (`set`), or clear those that hold it.
bool walk(AddressMap::Table &table, uint64_t start, uint64_t lo, uint64_t hi, uint64_t value, bool set) {
    const uint64_t span = table.span;
    uint32_t first = static_cast<uint32_t>((lo - start) / span);
    for (uint32_t i = first; i < table.count; ++i) {
        const uint64_t s_lo = start + i * span, s_hi = s_lo + span;
        if (s_lo >= hi)
            break;
        AddressMap::Slot &slot = table.slots[i];
        if (lo <= s_lo && s_hi <= hi) {
            // The object covers this slot whole, and every slot after it up
            // to the one holding its end: one tight loop over them (a long
            // object's slots were ~25 instructions each in the general one).
            const uint64_t whole_end = (hi - start) / span;
            const uint32_t end = whole_end < table.count ? static_cast<uint32_t>(whole_end) : table.count;
            if (set) {
                for (uint32_t k = i; k < end; ++k) {
                    UVM_ASSERT(table.slots[k].name.load(std::memory_order_relaxed) == 0);
                    table.slots[k].name.store(value, std::memory_order_release);
                }
            } else {
                // Nobody else writes the slots while the range is named: a
                // plain check and clear, no compare-and-swap.
                for (uint32_t k = i; k < end; ++k)
                    if (table.slots[k].name.load(std::memory_order_relaxed) == value)
                        table.slots[k].name.store(0, std::memory_order_relaxed);
            }
            i = end - 1;  // the loop's increment moves past them
            continue;
        }
        uint64_t child_span = 0;
        uint32_t count = 0;
        const bool split = finer(span, &child_span, &count);
        UVM_ASSERT(split);  // every object is 4 KiB aligned and sized
        if (!split)
            return false;
        AddressMap::Table *child =
            get_or_make(slot.child, set, [&] { return make_table(child_span, count); });
        if (!child) {
            if (set)
                return false;
            continue;
        }
        if (!walk(*child, s_lo, lo > s_lo ? lo : s_lo, hi < s_hi ? hi : s_hi, value, set))
            return false;
    }
    return true;
}

}  // namespace

AddressMap::~AddressMap() {
    for (auto &m : root_)
        delete m.load();
    for (auto &b : blocks_)
        delete[] b.load();
}

AddressMap::Table *AddressMap::leaf_for(uint64_t address, bool create) {
    const uint64_t r = address >> (21 + kLeafBits + kMidBits);
    const uint64_t m = (address >> (21 + kLeafBits)) & ((1u << kMidBits) - 1);
    Mid *mid = get_or_make(root_[r], create, [] { return new (std::nothrow) Mid(); });
    if (!mid)
        return nullptr;
    return get_or_make(mid->leaves[m], create, [] { return make_table(k2M, 1u << kLeafBits); });
}

bool AddressMap::walk_range(uint64_t base, uint64_t size, uint64_t value, bool set) {
    constexpr uint64_t kLeafSpan = k2M << kLeafBits;
    for (uint64_t at = base & ~(kLeafSpan - 1); at < base + size; at += kLeafSpan) {
        Table *leaf = leaf_for(at, set);
        const uint64_t lo = at > base ? at : base;
        const uint64_t hi = at + kLeafSpan < base + size ? at + kLeafSpan : base + size;
        if (leaf && !walk(*leaf, at, lo, hi, value, set))
            return false;
        if (!leaf && set)
            return false;
    }
    return true;
}

AddressMap::Cell *AddressMap::cell(uint32_t name) const {
    Cell *block = blocks_[name >> kCellBits].load(std::memory_order_acquire);
    return block ? &block[name & ((1u << kCellBits) - 1)] : nullptr;
}

uint32_t AddressMap::reserve(uint64_t base, uint64_t size) {
    UVM_ASSERT(size != 0 && base % k4K == 0 && size % k4K == 0);
    if (base >= kLimit || size > kLimit - base)
        return kUnkept;  // never found, as the header says
    uint32_t name = 0;
    {
        std::lock_guard<std::mutex> guard(names_lock_);
        if (!free_names_.empty()) {
            name = free_names_.back();
            free_names_.pop_back();
        } else {
            if (next_name_ >> kCellBits >= kBlocks)
                return 0;
            std::atomic<Cell *> &block = blocks_[next_name_ >> kCellBits];
            if (!block.load(std::memory_order_relaxed)) {
                Cell *fresh = new (std::nothrow) Cell[1u << kCellBits];
                if (!fresh)
                    return 0;
                block.store(fresh, std::memory_order_release);
            }
            // Room for every name's return, so that erase never allocates.
            try {
                free_names_.reserve(next_name_);
            } catch (const std::bad_alloc &) {
                return 0;
            }
            name = next_name_++;
        }
    }
    Cell *c = cell(name);
    UVM_ASSERT(c && c->handle.load(std::memory_order_relaxed) == 0);
    std::atomic_thread_fence(std::memory_order_release);  // after the clear that freed the name
    c->base.store(base, std::memory_order_relaxed);
    c->size.store(size, std::memory_order_relaxed);
    if (!walk_range(base, size, name, true)) {
        walk_range(base, size, name, false);  // what was recorded goes again
        std::lock_guard<std::mutex> guard(names_lock_);
        free_names_.push_back(name);  // within the capacity reserved above
        return 0;
    }
    return name;
}

void AddressMap::name(uint32_t name, uint64_t handle) {
    if (name == kUnkept)
        return;
    UVM_ASSERT(name != 0);
    cell(name)->handle.store(handle, std::memory_order_release);
}

void AddressMap::erase(uint32_t name) {
    if (name == kUnkept || name == 0)
        return;
    Cell *c = cell(name);
    walk_range(c->base.load(std::memory_order_relaxed), c->size.load(std::memory_order_relaxed), name, false);
    c->handle.store(0, std::memory_order_release);
    std::lock_guard<std::mutex> guard(names_lock_);
    free_names_.push_back(name);  // within the capacity reserve made
}

bool AddressMap::find(uint64_t address, uint64_t *handle, uint64_t *base) const {
    if (address >= kLimit)
        return false;
    const Mid *mid = root_[address >> (21 + kLeafBits + kMidBits)].load(std::memory_order_acquire);
    if (!mid)
        return false;
    const Table *table = mid->leaves[(address >> (21 + kLeafBits)) & ((1u << kMidBits) - 1)].load(std::memory_order_acquire);
    uint64_t start = address & ~((k2M << kLeafBits) - 1);
    while (table) {
        const uint64_t i = (address - start) / table->span;
        const Slot &slot = table->slots[i];
        const uint64_t name = slot.name.load(std::memory_order_acquire);
        const Cell *c = name ? cell(static_cast<uint32_t>(name)) : nullptr;
        while (c) {
            const uint64_t h = c->handle.load(std::memory_order_acquire);
            if (h == 0)
                return false;  // a range of nobody's now
            const uint64_t b = c->base.load(std::memory_order_relaxed);
            const uint64_t sz = c->size.load(std::memory_order_relaxed);
            std::atomic_thread_fence(std::memory_order_acquire);
            if (c->handle.load(std::memory_order_relaxed) != h)
                continue;  // renamed while read: read again
            if (address < b || address - b >= sz)
                break;  // the name went to another range since: as if not found here
            *handle = h;
            *base = b;
            return true;
        }
        start += i * table->span;
        table = slot.child.load(std::memory_order_acquire);
    }
    return false;
}

}  // namespace uvm
