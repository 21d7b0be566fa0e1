// Allocator of virtual address ranges inside [base, base + size)
// (nvidia-uvm's uvm_range_allocator): aligned first-fit allocation, fixed
// reservations, and frees that coalesce with their neighbours.
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "uvm/uvm.h"

namespace uvm::mmu {

class RangeAllocator {
public:
    RangeAllocator(uint64_t base, uint64_t size);

    // A range of `size` bytes aligned to `alignment` (a power of two).
    // OUT_OF_MEMORY when no free range fits; INVALID_ARGUMENT for size 0.
    uvm_status_t alloc(uint64_t size, uint64_t alignment, uint64_t *out);

    // Take exactly [address, address + size). ADDRESS_IN_USE when any of it
    // is taken; INVALID_ARGUMENT when it lies outside the allocator's span.
    uvm_status_t reserve(uint64_t address, uint64_t size);

    // Give back a range from alloc or reserve (the whole of it, or a piece).
    // Never fails: a free that needs a new free-list node takes one from a
    // stash that alloc and reserve refill (kSpareNodes deep), so rollback
    // paths stay correct when host memory has run out.
    void free(uint64_t address, uint64_t size);

    uint64_t free_bytes() const;
    uint64_t largest_free_range() const;
    // The largest free range there would be were the ranges in `also_free`
    // (start, size; taken now) given back too, joined with their free
    // neighbours as free() would. Changes nothing.
    uint64_t largest_free_range_with(const std::vector<std::pair<uint64_t, uint64_t>> &also_free) const;

    static constexpr size_t kSpareNodes = 16;

private:
    using Map = std::map<uint64_t, uint64_t>;
    // Refill the stash (throws std::bad_alloc, changing nothing else).
    void refill_spares();
    // Take [start, start + size) out of the free range `it` (NO_HOST_MEMORY,
    // nothing changed, where a node cannot be made).
    uvm_status_t take(Map::iterator it, uint64_t start, uint64_t size);
    // A node for free_: from the heap, else from the stash.
    Map::node_type take_node(uint64_t start, uint64_t end);

    uint64_t base_;
    uint64_t end_;
    mutable std::mutex lock_;
    Map free_;  // start -> end of each free range
    Map::node_type spares_[kSpareNodes];
    size_t spare_count_ = 0;
    uint64_t free_bytes_;
};

}  // namespace uvm::mmu
