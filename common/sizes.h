// Page and chunk sizes shared by every layer.
#pragma once

#include <cstdint>

namespace uvm {

constexpr uint64_t kPageSize4K = 1ull << 12;
constexpr uint64_t kPageSize64K = 1ull << 16;
constexpr uint64_t kPageSize2M = 1ull << 21;
constexpr uint64_t kAllPageSizes = kPageSize4K | kPageSize64K | kPageSize2M;

// Root chunks, the unit the physical memory manager gets from a backend, are
// 2 MiB as in nvidia-uvm's PMM (UVM_CHUNK_SIZE_MAX).
constexpr uint64_t kRootChunkSize = kPageSize2M;

// Index of a chunk size in per-size arrays: 0 = 4K, 1 = 64K, 2 = 2M, -1 otherwise.
constexpr int chunk_size_index(uint64_t size) {
    return size == kPageSize4K ? 0 : size == kPageSize64K ? 1 : size == kPageSize2M ? 2 : -1;
}
constexpr uint64_t chunk_size_of_index(int index) {
    return index == 0 ? kPageSize4K : index == 1 ? kPageSize64K : kPageSize2M;
}

constexpr bool is_aligned(uint64_t value, uint64_t alignment) {
    return (value & (alignment - 1)) == 0;
}
constexpr uint64_t align_up(uint64_t value, uint64_t alignment) {
    return (value + alignment - 1) & ~(alignment - 1);
}

}  // namespace uvm
