// The page tree of one GPU virtual address space (nvidia-uvm's uvm_page_tree).
//
// The levels model Hopper's MMU (format "ver3", 57-bit virtual addresses):
//
//   level   name    VA bits   entries  table bytes on the GPU
//   0       PDE4    56:56     2        4096 (the HW minimum allocation)
//   1       PDE3    55:47     512      4096
//   2       PDE2    46:38     512      4096
//   3       PDE1    37:29     512      4096
//   4       PDE0    28:21     256      4096 (16-byte dual entries)
//   5       PT_64K  20:16     32       256
//   5       PT_4K   20:12     512      4096
//
// A PDE0 entry is either a 2 MiB PTE (a leaf) or a dual PDE that points to a
// 64K page table, a 4K page table, or both, so page sizes mix within one tree
// and within one 2 MiB region. Overlapping mappings are refused: a VA is
// mapped by at most one page.
//
// Thread safety: every method may be called concurrently (a reader/writer
// lock guards the tree; walks share it).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <vector>

#include "mmu/pte.h"
#include "uvm/uvm.h"

namespace uvm::mmu {

struct PageTreeLevelInfo {
    const char *name;
    uint32_t va_bit_hi;
    uint32_t va_bit_lo;
    uint64_t tables;
    uint64_t bytes;
};

struct PageTreeInfo {
    static constexpr int kLevels = 7;  // PDE4..PDE0, PT_64K, PT_4K
    std::array<PageTreeLevelInfo, kLevels> levels{};
    uint64_t table_bytes = 0;
    uint64_t mapped_bytes[3] = {0, 0, 0};  // by page size index (4K, 64K, 2M)
};

class PageTree {
public:
    static constexpr uint32_t kVaBits = 57;

    PageTree();
    ~PageTree();
    PageTree(const PageTree &) = delete;
    PageTree &operator=(const PageTree &) = delete;

    // Map `count` consecutive pages of `page_size` from `va`, page i to
    // ptes[i]. All or nothing: INVALID_ARGUMENT for a bad page size, a
    // misaligned VA or one beyond the VA bits; ALREADY_MAPPED when any page
    // overlaps an existing mapping (of any page size).
    uvm_status_t map(uint64_t va, uint64_t page_size, const Pte *ptes, size_t count);

    // Unmap `count` pages of `page_size` from `va`. All or nothing:
    // NOT_MAPPED unless every one of them is mapped with exactly that page
    // size. Tables left empty are freed.
    uvm_status_t unmap(uint64_t va, uint64_t page_size, size_t count);

    // Point `count` mapped pages of `page_size` from `va` at ptes[i] instead,
    // in place (compaction moves an object's memory behind its addresses).
    // All or nothing: INVALID_ARGUMENT as for map; NOT_MAPPED unless every
    // page is mapped with exactly that page size. Allocates nothing, so it
    // cannot fail otherwise (its undo is one more remap).
    uvm_status_t remap(uint64_t va, uint64_t page_size, const Pte *ptes, size_t count);

    // Walk the tree for `va`. False where nothing maps it.
    bool translate(uint64_t va, Translation *out) const;

    PageTreeInfo info() const;

private:
    struct PageTable;
    struct Pde0;
    struct Directory;

    template <typename Pde0Ptr, typename Lookup, typename Visit>
    static bool walk(uint64_t va, uint64_t page_size, size_t count, Lookup &&lookup, Visit &&visit);
    bool range_is_free(uint64_t va, uint64_t page_size, size_t count) const;
    bool range_is_mapped(uint64_t va, uint64_t page_size, size_t count) const;
    Pde0 *pde0_for(uint64_t va, bool create);
    const Pde0 *pde0_for(uint64_t va) const;
    void release_pde0_if_empty(uint64_t va);
    // Tables are taken from and given back to spares: see page_tree.cpp.
    std::unique_ptr<PageTable> take_table(uint32_t entries);
    // Clear `count` mapped pages from va and release what empties (lock held;
    // never allocates: the rollback of a failed map uses it too).
    void unmap_locked(uint64_t va, uint64_t page_size, size_t count);
    void give_table(std::unique_ptr<PageTable> &table);
    Pde0 *take_pde0();
    void give_pde0(Pde0 *pde0);
    Directory *take_directory(int level);
    void give_directory(Directory *dir);

    mutable std::shared_mutex lock_;
    std::unique_ptr<Directory> root_;        // PDE4
    uint64_t tables_[PageTreeInfo::kLevels]; // live tables per level
    uint64_t mapped_bytes_[3];
    std::vector<std::unique_ptr<PageTable>> spare_tables_[2];  // 64K, 4K page tables
    std::vector<Pde0 *> spare_pde0_;
    std::vector<Directory *> spare_directories_;
};

}  // namespace uvm::mmu
