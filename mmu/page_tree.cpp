// Page tree of one GPU address space: see page_tree.h for the level layout.
#include "mmu/page_tree.h"

#include <mutex>
#include <new>

#include "common/assert.h"
#include "common/sizes.h"

namespace uvm::mmu {

namespace {

// Level indices into PageTree::tables_ and PageTreeInfo::levels.
enum Level { kPde4 = 0, kPde3, kPde2, kPde1, kPde0, kPt64K, kPt4K };

struct LevelShape {
    const char *name;
    uint32_t hi, lo;
    uint64_t table_bytes;
};
constexpr LevelShape kShapes[PageTreeInfo::kLevels] = {
    {"PDE4", 56, 56, 4096},  {"PDE3", 55, 47, 4096},   {"PDE2", 46, 38, 4096},
    {"PDE1", 37, 29, 4096},  {"PDE0", 28, 21, 4096},   {"PT_64K", 20, 16, 256},
    {"PT_4K", 20, 12, 4096},
};

constexpr uint32_t index_at(uint64_t va, int level) {
    const uint32_t width = kShapes[level].hi - kShapes[level].lo + 1;
    return static_cast<uint32_t>((va >> kShapes[level].lo) & ((1ull << width) - 1));
}

constexpr uint32_t kEntries64K = 32;
constexpr uint32_t kEntries4K = 512;
constexpr uint32_t k4KPer64K = 16;

// Empty tables kept for reuse, per kind. A table is freed only once all its
// entries are invalid again, so a spare is ready as it is: taking it back
// costs no allocation and no zeroing. Without them, a mapping made and
// removed again at one place (an object's kernel view, mapped per use)
// allocates and zeroes its whole path of tables, some 30 KiB, every time.
// The statistics count the tables in use, never the spares.
constexpr size_t kSpareTables = 16;

}  // namespace

struct PageTree::PageTable {
    explicit PageTable(uint32_t n) : entries(new Pte[n]()), size(n) {}
    std::unique_ptr<Pte[]> entries;
    uint32_t size;
    uint32_t used = 0;
};

struct PageTree::Pde0 {
    struct Entry {
        Pte pte2m;                          // valid: the entry is a 2 MiB leaf
        std::unique_ptr<PageTable> big;     // 64K page table
        std::unique_ptr<PageTable> small;   // 4K page table
        bool in_use() const { return pte2m.valid() || big || small; }
    };
    std::array<Entry, 256> entries;
    uint32_t used = 0;  // entries in use
};

// PDE4..PDE1: children are directories one level down, or Pde0 under PDE1.
struct PageTree::Directory {
    explicit Directory(int lvl) : level(lvl) { children.fill(nullptr); }
    int level;
    std::array<void *, 512> children;
    uint32_t used = 0;
};

namespace {

template <typename Dir, typename Pde0T>
void destroy_directory(Dir *dir) {
    for (void *child : dir->children) {
        if (!child)
            continue;
        if (dir->level == kPde1)
            delete static_cast<Pde0T *>(child);
        else
            destroy_directory<Dir, Pde0T>(static_cast<Dir *>(child));
    }
    delete dir;
}

}  // namespace

PageTree::PageTree() : root_(new Directory(kPde4)) {
    // Giving a table back never allocates (unmap and rollback cannot fail).
    spare_tables_[0].reserve(kSpareTables);
    spare_tables_[1].reserve(kSpareTables);
    spare_pde0_.reserve(kSpareTables);
    spare_directories_.reserve(kSpareTables);
    for (auto &t : tables_)
        t = 0;
    tables_[kPde4] = 1;
    for (auto &b : mapped_bytes_)
        b = 0;
}

PageTree::~PageTree() {
    destroy_directory<Directory, Pde0>(root_.release());
    for (Pde0 *p : spare_pde0_)
        delete p;
    for (Directory *d : spare_directories_)
        delete d;
}

std::unique_ptr<PageTree::PageTable> PageTree::take_table(uint32_t entries) {
    auto &spares = spare_tables_[entries == kEntries4K];
    if (spares.empty())
        return std::make_unique<PageTable>(entries);
    std::unique_ptr<PageTable> table = std::move(spares.back());
    spares.pop_back();
    return table;
}

void PageTree::give_table(std::unique_ptr<PageTable> &table) {
    UVM_ASSERT(table->used == 0);
    auto &spares = spare_tables_[table->size == kEntries4K];
    if (spares.size() < kSpareTables)
        spares.push_back(std::move(table));
    table.reset();
}

namespace {

// A spare of `spares`, or a new one from `make` where there is none.
template <typename T, typename Make>
T *take_spare(std::vector<T *> &spares, Make &&make) {
    if (spares.empty())
        return make();
    T *t = spares.back();
    spares.pop_back();
    return t;
}

// An emptied table kept as a spare, or deleted where there are enough.
template <typename T>
void give_spare(std::vector<T *> &spares, T *t) {
    if (spares.size() < kSpareTables)
        spares.push_back(t);
    else
        delete t;
}

}  // namespace

PageTree::Pde0 *PageTree::take_pde0() {
    return take_spare(spare_pde0_, [] { return new Pde0(); });
}

void PageTree::give_pde0(Pde0 *pde0) {
    UVM_ASSERT(pde0->used == 0);
    give_spare(spare_pde0_, pde0);
}

PageTree::Directory *PageTree::take_directory(int level) {
    Directory *d = take_spare(spare_directories_, [level] { return new Directory(level); });
    d->level = level;
    return d;
}

void PageTree::give_directory(Directory *dir) {
    UVM_ASSERT(dir->used == 0);
    give_spare(spare_directories_, dir);
}

PageTree::Pde0 *PageTree::pde0_for(uint64_t va, bool create) {
    Directory *dir = root_.get();
    int level = kPde4;
    for (; level <= kPde1; ++level) {
        void *slot = dir->children[index_at(va, level)];
        if (!slot)
            break;
        if (level == kPde1)
            return static_cast<Pde0 *>(slot);
        dir = static_cast<Directory *>(slot);
    }
    if (!create)
        return nullptr;
    // The missing part of the path is made whole before any of it is linked,
    // so that a failed allocation leaves the tree as it was.
    std::unique_ptr<Directory> made[kPde1 + 1];
    for (int l = level; l < kPde1; ++l)
        made[l].reset(take_directory(l + 1));
    std::unique_ptr<Pde0> pde0(take_pde0());
    for (; level <= kPde1; ++level) {
        void *&slot = dir->children[index_at(va, level)];
        UVM_ASSERT(!slot);
        slot = level == kPde1 ? static_cast<void *>(pde0.release()) : static_cast<void *>(made[level].release());
        dir->used++;
        tables_[level + 1]++;
        if (level == kPde1)
            return static_cast<Pde0 *>(slot);
        dir = static_cast<Directory *>(slot);
    }
    return nullptr;
}

const PageTree::Pde0 *PageTree::pde0_for(uint64_t va) const {
    return const_cast<PageTree *>(this)->pde0_for(va, false);
}

void PageTree::release_pde0_if_empty(uint64_t va) {
    Directory *path[4];
    Directory *dir = root_.get();
    for (int level = kPde4; level <= kPde1; ++level) {
        path[level] = dir;
        void *child = dir->children[index_at(va, level)];
        UVM_ASSERT(child);
        if (level == kPde1) {
            Pde0 *pde0 = static_cast<Pde0 *>(child);
            if (pde0->used != 0)
                return;
            give_pde0(pde0);
            break;
        }
        dir = static_cast<Directory *>(child);
    }
    // Free the PDE0 and every directory above it that became empty; the root stays.
    for (int level = kPde1; level >= kPde4; --level) {
        Directory *parent = path[level];
        parent->children[index_at(va, level)] = nullptr;
        parent->used--;
        tables_[level + 1]--;
        if (parent->used != 0 || level == kPde4)
            break;
        give_directory(parent);
    }
}

static bool valid_request(uint64_t va, uint64_t page_size, size_t count) {
    if (chunk_size_index(page_size) < 0 || count == 0 || !is_aligned(va, page_size))
        return false;
    const uint64_t limit = 1ull << PageTree::kVaBits;
    if (count > limit / page_size)
        return false;
    return va < limit && count * page_size <= limit - va;
}

// A request to map `count` pages at `va` to `ptes`: each entry valid and
// aligned to the page size.
static bool valid_ptes(uint64_t va, uint64_t page_size, const Pte *ptes, size_t count) {
    if (!ptes || !valid_request(va, page_size, count))
        return false;
    for (size_t i = 0; i < count; ++i)
        if (!ptes[i].valid() || !is_aligned(ptes[i].address, page_size))
            return false;
    return true;
}

// The walks below go a PDE0 entry (2 MiB of VA) at a time: the pages of a
// range under one entry sit side by side in one page table, so they are
// checked and written as a run, and the upper levels are walked once per PDE0.

namespace {

// Pages of `page_size` (a power of two: shifts, no division) from `va` up to
// the end of its PDE0 entry, at most `left`.
size_t pages_in_entry(uint64_t va, uint64_t page_size, size_t left) {
    if (page_size == kPageSize2M)
        return 1;
    const uint64_t room = (kPageSize2M - (va & (kPageSize2M - 1))) >> __builtin_ctzll(page_size);
    return room < left ? static_cast<size_t>(room) : left;
}

// Pages from `va` up to the end of its PDE0 (512 MiB of VA), at most `left`.
size_t pages_in_pde0(uint64_t va, uint64_t page_size, size_t left) {
    const uint64_t span = 1ull << 29;
    const uint64_t room = (span - (va & (span - 1))) >> __builtin_ctzll(page_size);
    return room < left ? static_cast<size_t>(room) : left;
}

bool all_invalid(const Pte *entries, size_t first, size_t count) {
    for (size_t j = first; j < first + count; ++j)
        if (entries[j].valid())
            return false;
    return true;
}

bool all_valid(const Pte *entries, size_t first, size_t count) {
    for (size_t j = first; j < first + count; ++j)
        if (!entries[j].valid())
            return false;
    return true;
}

}  // namespace

// Visit [va, va + count pages) a PDE0 entry at a time: visit(pde0, va, i, k)
// for each run of k pages under one entry, from page i; pde0 is null where
// the PDE0 does not exist (`lookup` gave none), and k then runs to its end.
// The upper levels are walked once per PDE0. False where visit said stop.
template <typename Pde0Ptr, typename Lookup, typename Visit>
bool PageTree::walk(uint64_t va, uint64_t page_size, size_t count, Lookup &&lookup, Visit &&visit) {
    Pde0Ptr pde0 = nullptr;
    uint64_t pde0_region = ~0ull;
    for (size_t i = 0; i < count;) {
        if (va >> 29 != pde0_region) {
            pde0 = lookup(va);
            pde0_region = va >> 29;
        }
        const size_t k = pde0 ? pages_in_entry(va, page_size, count - i) : pages_in_pde0(va, page_size, count - i);
        if (!visit(pde0, va, i, k))
            return false;
        i += k;
        va += k * page_size;
    }
    return true;
}

bool PageTree::range_is_free(uint64_t va, uint64_t page_size, size_t count) const {
    auto lookup = [this](uint64_t a) { return pde0_for(a); };
    return walk<const Pde0 *>(va, page_size, count, lookup, [&](const Pde0 *pde0, uint64_t at, size_t, size_t k) {
        if (!pde0)
            return true;  // nothing mapped in this whole PDE0
        const Pde0::Entry &e = pde0->entries[index_at(at, kPde0)];
        if (page_size == kPageSize2M)
            return !e.in_use();
        if (e.pte2m.valid())
            return false;
        if (page_size == kPageSize64K) {
            const uint32_t first = index_at(at, kPt64K);
            return !(e.big && !all_invalid(e.big->entries.get(), first, k)) &&
                   !(e.small && !all_invalid(e.small->entries.get(), first * k4KPer64K, k * k4KPer64K));
        }
        const uint32_t first = index_at(at, kPt4K);
        return !(e.small && !all_invalid(e.small->entries.get(), first, k)) &&
               !(e.big && !all_invalid(e.big->entries.get(), first / k4KPer64K,
                                       (first + k - 1) / k4KPer64K - first / k4KPer64K + 1));
    });
}

bool PageTree::range_is_mapped(uint64_t va, uint64_t page_size, size_t count) const {
    auto lookup = [this](uint64_t a) { return pde0_for(a); };
    return walk<const Pde0 *>(va, page_size, count, lookup, [&](const Pde0 *pde0, uint64_t at, size_t, size_t k) {
        if (!pde0)
            return false;
        const Pde0::Entry &e = pde0->entries[index_at(at, kPde0)];
        if (page_size == kPageSize2M)
            return e.pte2m.valid();
        if (page_size == kPageSize64K)
            return e.big && all_valid(e.big->entries.get(), index_at(at, kPt64K), k);
        return e.small && all_valid(e.small->entries.get(), index_at(at, kPt4K), k);
    });
}

uvm_status_t PageTree::map(uint64_t va, uint64_t page_size, const Pte *ptes, size_t count) {
    if (!valid_ptes(va, page_size, ptes, count))
        return UVM_ERR_INVALID_ARGUMENT;

    std::unique_lock<std::shared_mutex> guard(lock_);
    if (!range_is_free(va, page_size, count))
        return UVM_ERR_ALREADY_MAPPED;
    auto lookup = [this](uint64_t a) { return pde0_for(a, true); };
    size_t done = 0;           // pages mapped so far, for the rollback
    uint64_t current_at = 0;   // where the walk is, for the rollback
    try {
        walk<Pde0 *>(va, page_size, count, lookup, [&](Pde0 *pde0, uint64_t at, size_t i, size_t k) {
            current_at = at;
            Pde0::Entry &e = pde0->entries[index_at(at, kPde0)];
            const bool was_in_use = e.in_use();
            if (page_size == kPageSize2M) {
                e.pte2m = ptes[i];
            } else {
                const bool big = page_size == kPageSize64K;
                std::unique_ptr<PageTable> &table = big ? e.big : e.small;
                if (!table) {
                    table = take_table(big ? kEntries64K : kEntries4K);
                    tables_[big ? kPt64K : kPt4K]++;
                }
                const uint32_t first = index_at(at, big ? kPt64K : kPt4K);
                for (size_t j = 0; j < k; ++j)
                    table->entries[first + j] = ptes[i + j];
                table->used += static_cast<uint32_t>(k);
            }
            if (!was_in_use)
                pde0->used++;
            done = i + k;
            return true;
        });
    } catch (const std::bad_alloc &) {
        // A table could not be made: what this call mapped goes again, and a
        // PDE0 made for the page that failed goes with its directories.
        if (done > 0)
            unmap_locked(va, page_size, done);
        if (done < count && pde0_for(current_at, false) && pde0_for(current_at, false)->used == 0)
            release_pde0_if_empty(current_at);
        return UVM_ERR_NO_HOST_MEMORY;
    }
    mapped_bytes_[chunk_size_index(page_size)] += count * page_size;
    return UVM_OK;
}

uvm_status_t PageTree::unmap(uint64_t va, uint64_t page_size, size_t count) {
    if (!valid_request(va, page_size, count))
        return UVM_ERR_INVALID_ARGUMENT;

    std::unique_lock<std::shared_mutex> guard(lock_);
    if (!range_is_mapped(va, page_size, count))
        return UVM_ERR_NOT_MAPPED;
    unmap_locked(va, page_size, count);
    mapped_bytes_[chunk_size_index(page_size)] -= count * page_size;
    return UVM_OK;
}

uvm_status_t PageTree::remap(uint64_t va, uint64_t page_size, const Pte *ptes, size_t count) {
    if (!valid_ptes(va, page_size, ptes, count))
        return UVM_ERR_INVALID_ARGUMENT;
    std::unique_lock<std::shared_mutex> guard(lock_);
    if (!range_is_mapped(va, page_size, count))
        return UVM_ERR_NOT_MAPPED;
    auto lookup = [this](uint64_t a) { return pde0_for(a, false); };
    walk<Pde0 *>(va, page_size, count, lookup, [&](Pde0 *pde0, uint64_t at, size_t i, size_t k) {
        Pde0::Entry &e = pde0->entries[index_at(at, kPde0)];
        if (page_size == kPageSize2M) {
            e.pte2m = ptes[i];
        } else {
            std::unique_ptr<PageTable> &table = page_size == kPageSize64K ? e.big : e.small;
            const uint32_t first = index_at(at, page_size == kPageSize64K ? kPt64K : kPt4K);
            for (size_t j = 0; j < k; ++j)
                table->entries[first + j] = ptes[i + j];
        }
        return true;
    });
    return UVM_OK;
}

void PageTree::unmap_locked(uint64_t va, uint64_t page_size, size_t count) {
    // A PDE0 released on the way held nothing more of the range (every page
    // of it was mapped): the walk's next PDE0 is another one.
    auto lookup = [this](uint64_t a) { return pde0_for(a, false); };
    walk<Pde0 *>(va, page_size, count, lookup, [&](Pde0 *pde0, uint64_t at, size_t, size_t k) {
        UVM_ASSERT(pde0);
        Pde0::Entry &e = pde0->entries[index_at(at, kPde0)];
        if (page_size == kPageSize2M) {
            e.pte2m = Pte();
        } else {
            const bool big = page_size == kPageSize64K;
            std::unique_ptr<PageTable> &table = big ? e.big : e.small;
            const uint32_t first = index_at(at, big ? kPt64K : kPt4K);
            for (size_t j = 0; j < k; ++j)
                table->entries[first + j] = Pte();
            UVM_ASSERT(table->used >= k);
            table->used -= static_cast<uint32_t>(k);
            if (table->used == 0) {
                give_table(table);
                tables_[big ? kPt64K : kPt4K]--;
            }
        }
        if (!e.in_use()) {
            UVM_ASSERT(pde0->used > 0);
            if (--pde0->used == 0)
                release_pde0_if_empty(at);
        }
        return true;
    });
}

bool PageTree::translate(uint64_t va, Translation *out) const {
    if (va >= (1ull << kVaBits))
        return false;
    std::shared_lock<std::shared_mutex> guard(lock_);
    const Pde0 *pde0 = pde0_for(va);
    if (!pde0)
        return false;
    const Pde0::Entry &e = pde0->entries[index_at(va, kPde0)];
    const Pte *pte = nullptr;
    uint64_t page_size = 0;
    if (e.pte2m.valid()) {
        pte = &e.pte2m;
        page_size = kPageSize2M;
    } else if (e.big && e.big->entries[index_at(va, kPt64K)].valid()) {
        pte = &e.big->entries[index_at(va, kPt64K)];
        page_size = kPageSize64K;
    } else if (e.small && e.small->entries[index_at(va, kPt4K)].valid()) {
        pte = &e.small->entries[index_at(va, kPt4K)];
        page_size = kPageSize4K;
    } else {
        return false;
    }
    out->page_size = page_size;
    out->page_offset = va & (page_size - 1);
    out->address = pte->address + out->page_offset;
    out->aperture = pte->aperture;
    out->peer_gpu = pte->peer_gpu;
    return true;
}

PageTreeInfo PageTree::info() const {
    std::shared_lock<std::shared_mutex> guard(lock_);
    PageTreeInfo info;
    for (int level = 0; level < PageTreeInfo::kLevels; ++level) {
        const LevelShape &s = kShapes[level];
        info.levels[level] = {s.name, s.hi, s.lo, tables_[level], tables_[level] * s.table_bytes};
        info.table_bytes += info.levels[level].bytes;
    }
    for (int i = 0; i < 3; ++i)
        info.mapped_bytes[i] = mapped_bytes_[i];
    return info;
}

}  // namespace uvm::mmu
