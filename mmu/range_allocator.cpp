#include "mmu/range_allocator.h"

#include "common/assert.h"
#include "common/sizes.h"

namespace uvm::mmu {

RangeAllocator::RangeAllocator(uint64_t base, uint64_t size)
    : base_(base), end_(base + size), free_bytes_(size) {
    UVM_ASSERT(size > 0 && end_ > base_);
    free_.emplace(base_, end_);
}

uvm_status_t RangeAllocator::alloc(uint64_t size, uint64_t alignment, uint64_t *out) {
    if (size == 0 || alignment == 0 || (alignment & (alignment - 1)) != 0)
        return UVM_ERR_INVALID_ARGUMENT;
    std::lock_guard<std::mutex> guard(lock_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
        const uint64_t start = align_up(it->first, alignment);
        if (start < it->first || start >= it->second || it->second - start < size)
            continue;
        const uint64_t range_start = it->first, range_end = it->second;
        free_.erase(it);
        if (range_start < start)
            free_.emplace(range_start, start);
        if (start + size < range_end)
            free_.emplace(start + size, range_end);
        free_bytes_ -= size;
        *out = start;
        return UVM_OK;
    }
    return UVM_ERR_OUT_OF_MEMORY;
}

uvm_status_t RangeAllocator::reserve(uint64_t address, uint64_t size) {
    if (size == 0 || address < base_ || address >= end_ || size > end_ - address)
        return UVM_ERR_INVALID_ARGUMENT;
    std::lock_guard<std::mutex> guard(lock_);
    // The free range holding `address`, if any, is the last one starting at or before it.
    auto it = free_.upper_bound(address);
    if (it == free_.begin())
        return UVM_ERR_ADDRESS_IN_USE;
    --it;
    if (it->second < address + size)
        return UVM_ERR_ADDRESS_IN_USE;
    const uint64_t range_start = it->first, range_end = it->second;
    free_.erase(it);
    if (range_start < address)
        free_.emplace(range_start, address);
    if (address + size < range_end)
        free_.emplace(address + size, range_end);
    free_bytes_ -= size;
    return UVM_OK;
}

void RangeAllocator::free(uint64_t address, uint64_t size) {
    std::lock_guard<std::mutex> guard(lock_);
    uint64_t start = address, end = address + size;
    UVM_ASSERT(start >= base_ && end <= end_);
    auto next = free_.lower_bound(start);
    UVM_ASSERT(next == free_.end() || next->first >= end);
    if (next != free_.end() && next->first == end) {
        end = next->second;
        next = free_.erase(next);
    }
    if (next != free_.begin()) {
        auto prev = std::prev(next);
        UVM_ASSERT(prev->second <= start);
        if (prev->second == start) {
            start = prev->first;
            free_.erase(prev);
        }
    }
    free_.emplace(start, end);
    free_bytes_ += size;
}

uint64_t RangeAllocator::free_bytes() const {
    std::lock_guard<std::mutex> guard(lock_);
    return free_bytes_;
}

uint64_t RangeAllocator::largest_free_range() const {
    std::lock_guard<std::mutex> guard(lock_);
    uint64_t largest = 0;
    for (const auto &r : free_)
        largest = std::max(largest, r.second - r.first);
    return largest;
}

}  // namespace uvm::mmu
