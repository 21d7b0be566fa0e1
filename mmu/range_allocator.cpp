#include "mmu/range_allocator.h"

#include <algorithm>
#include <new>

#include "common/assert.h"
#include "common/sizes.h"

namespace uvm::mmu {

RangeAllocator::RangeAllocator(uint64_t base, uint64_t size)
    : base_(base), end_(base + size), free_bytes_(size) {
    UVM_ASSERT(size > 0 && end_ > base_);
    free_.emplace(base_, end_);
    refill_spares();
}

void RangeAllocator::refill_spares() {
    Map scratch;
    while (spare_count_ < kSpareNodes) {
        scratch.emplace(0, 0);
        spares_[spare_count_++] = scratch.extract(scratch.begin());
    }
}

RangeAllocator::Map::node_type RangeAllocator::take_node(uint64_t start, uint64_t end) {
    Map::node_type node;
    try {
        Map scratch;
        scratch.emplace(start, end);
        node = scratch.extract(scratch.begin());
    } catch (const std::bad_alloc &) {
        UVM_ASSERT(spare_count_ > 0);  // alloc and reserve keep the stash full
        node = std::move(spares_[--spare_count_]);
        node.key() = start;
        node.mapped() = end;
    }
    return node;
}

// Take [start, start + size) out of the free range `it`: the range shrinks in
// place, and a new node holds what is left after it, made (like the stash's
// refill) before anything changes, so that a failed allocation leaves the
// allocator as it was.
uvm_status_t RangeAllocator::take(Map::iterator it, uint64_t start, uint64_t size) {
    const uint64_t range_start = it->first, range_end = it->second;
    try {
        refill_spares();
        if (start + size < range_end)
            free_.emplace_hint(std::next(it), start + size, range_end);
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
    if (range_start < start)
        it->second = start;
    else
        free_.erase(it);
    free_bytes_ -= size;
    return UVM_OK;
}

uvm_status_t RangeAllocator::alloc(uint64_t size, uint64_t alignment, uint64_t *out) {
    if (size == 0 || alignment == 0 || (alignment & (alignment - 1)) != 0)
        return UVM_ERR_INVALID_ARGUMENT;
    std::lock_guard<std::mutex> guard(lock_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
        const uint64_t start = align_up(it->first, alignment);
        if (start < it->first || start >= it->second || it->second - start < size)
            continue;
        const uvm_status_t status = take(it, start, size);
        if (status == UVM_OK)
            *out = start;
        return status;
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
    return take(it, address, size);
}

void RangeAllocator::free(uint64_t address, uint64_t size) {
    std::lock_guard<std::mutex> guard(lock_);
    uint64_t start = address, end = address + size;
    UVM_ASSERT(start >= base_ && end <= end_);
    auto next = free_.lower_bound(start);
    UVM_ASSERT(next == free_.end() || next->first >= end);
    const bool joins_next = next != free_.end() && next->first == end;
    auto prev = next == free_.begin() ? free_.end() : std::prev(next);
    UVM_ASSERT(prev == free_.end() || prev->second <= start);
    const bool joins_prev = prev != free_.end() && prev->second == start;
    // Coalescing reuses the neighbours' nodes; only a lone range needs a new one.
    if (joins_prev) {
        prev->second = joins_next ? next->second : end;
        if (joins_next)
            free_.erase(next);
    } else if (joins_next) {
        auto node = free_.extract(next);
        node.key() = start;
        free_.insert(std::move(node));
    } else {
        free_.insert(take_node(start, end));
    }
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

uint64_t RangeAllocator::largest_free_range_with(const std::vector<std::pair<uint64_t, uint64_t>> &also_free) const {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // start, end
    {
        std::lock_guard<std::mutex> guard(lock_);
        ranges.assign(free_.begin(), free_.end());
    }
    for (const auto &r : also_free)
        ranges.emplace_back(r.first, r.first + r.second);
    std::sort(ranges.begin(), ranges.end());
    uint64_t largest = 0, start = 0, end = 0;
    for (size_t i = 0; i < ranges.size(); ++i) {
        if (i == 0 || ranges[i].first > end) {
            start = ranges[i].first;  // a gap: a new range begins
            end = ranges[i].second;
        } else {
            end = std::max(end, ranges[i].second);
        }
        largest = std::max(largest, end - start);
    }
    return largest;
}

}  // namespace uvm::mmu
