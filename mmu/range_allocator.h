// Allocator of virtual address ranges inside [base, base + size)
// (nvidia-uvm's uvm_range_allocator): aligned first-fit allocation, fixed
// reservations, and frees that coalesce with their neighbours.
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

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

    // Give back a range from alloc or reserve (the whole of it).
    void free(uint64_t address, uint64_t size);

    uint64_t free_bytes() const;
    uint64_t largest_free_range() const;

private:
    uint64_t base_;
    uint64_t end_;
    mutable std::mutex lock_;
    std::map<uint64_t, uint64_t> free_;  // start -> end of each free range
    uint64_t free_bytes_;
};

}  // namespace uvm::mmu
