// The kernel address radix table (address_map.h).
#include "uvm/address_map.h"

#include <new>

#include "common/assert.h"

namespace uvm {

// A slot is read as a seqlock is: handle (acquire), base, a fence, handle
// again; a writer clears the handle, fences, writes the base, then publishes
// the handle (release). A reader that sees a base written after a clear
// sees that clear (or later) in its second read, by the fences' pairing, so
// it never pairs a handle with another object's base. On x86 every one of
// these is a plain move: no locked instruction on the alloc/free path.
struct AddressMap::Slot {
    std::atomic<uint64_t> handle{0};
    std::atomic<uint64_t> base{0};
    std::atomic<Table *> child{nullptr};
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

// Apply `set` (insert: true) to [lo, hi) within `table`, whose slot 0 starts at `start`.
bool walk(AddressMap::Table &table, uint64_t start, uint64_t lo, uint64_t hi, uint64_t handle, uint64_t base,
          bool set) {
    const uint64_t span = table.span;
    uint32_t first = static_cast<uint32_t>((lo - start) / span);
    for (uint32_t i = first; i < table.count; ++i) {
        const uint64_t s_lo = start + i * span, s_hi = s_lo + span;
        if (s_lo >= hi)
            break;
        AddressMap::Slot &slot = table.slots[i];
        if (lo <= s_lo && s_hi <= hi) {  // the object covers the slot whole
            if (set && handle == 0) {
                continue;  // tables only
            } else if (set) {
                UVM_ASSERT(slot.handle.load(std::memory_order_relaxed) == 0);
                std::atomic_thread_fence(std::memory_order_release);  // after the clear that freed the slot
                slot.base.store(base, std::memory_order_relaxed);
                slot.handle.store(handle, std::memory_order_release);
            } else {
                // Nobody else writes the slot while the object holds the
                // range: a plain check and clear, no compare-and-swap.
                if (slot.handle.load(std::memory_order_relaxed) == handle)
                    slot.handle.store(0, std::memory_order_relaxed);
            }
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
        if (!walk(*child, s_lo, lo > s_lo ? lo : s_lo, hi < s_hi ? hi : s_hi, handle, base, set))
            return false;
    }
    return true;
}

}  // namespace

AddressMap::~AddressMap() {
    for (auto &m : root_)
        delete m.load();
}

AddressMap::Table *AddressMap::leaf_for(uint64_t address, bool create) {
    const uint64_t r = address >> (21 + kLeafBits + kMidBits);
    const uint64_t m = (address >> (21 + kLeafBits)) & ((1u << kMidBits) - 1);
    Mid *mid = get_or_make(root_[r], create, [] { return new (std::nothrow) Mid(); });
    if (!mid)
        return nullptr;
    return get_or_make(mid->leaves[m], create, [] { return make_table(k2M, 1u << kLeafBits); });
}

bool AddressMap::insert(uint64_t base, uint64_t size, uint64_t handle) {
    UVM_ASSERT(size != 0 && base % k4K == 0 && size % k4K == 0);
    if (base >= kLimit || size > kLimit - base)
        return true;  // never found, as the header says
    constexpr uint64_t kLeafSpan = k2M << kLeafBits;
    for (uint64_t at = base & ~(kLeafSpan - 1); at < base + size; at += kLeafSpan) {
        Table *leaf = leaf_for(at, true);
        const uint64_t lo = at > base ? at : base;
        const uint64_t hi = at + kLeafSpan < base + size ? at + kLeafSpan : base + size;
        if (!leaf || !walk(*leaf, at, lo, hi, handle, base, true)) {
            if (handle)
                erase(base, size, handle);  // what was recorded goes again
            return false;
        }
    }
    return true;
}

void AddressMap::erase(uint64_t base, uint64_t size, uint64_t handle) {
    if (base >= kLimit || size > kLimit - base)
        return;
    constexpr uint64_t kLeafSpan = k2M << kLeafBits;
    for (uint64_t at = base & ~(kLeafSpan - 1); at < base + size; at += kLeafSpan) {
        Table *leaf = leaf_for(at, false);
        const uint64_t lo = at > base ? at : base;
        const uint64_t hi = at + kLeafSpan < base + size ? at + kLeafSpan : base + size;
        if (leaf)
            walk(*leaf, at, lo, hi, handle, base, false);
    }
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
        for (;;) {
            const uint64_t h = slot.handle.load(std::memory_order_acquire);
            if (h == 0)
                break;
            const uint64_t b = slot.base.load(std::memory_order_relaxed);
            std::atomic_thread_fence(std::memory_order_acquire);
            if (slot.handle.load(std::memory_order_relaxed) != h)
                continue;  // rewritten while read: read again
            if (address < b)
                break;  // the same object, moved since: as if not found here
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
