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

// Runs of up to this many root chunks are short: they come from pooled
// driver handles and may share their roots with smaller objects, where a
// longer run gets handles of its own (chunk/pmm.h, cuda/root_pool.h).
constexpr uint64_t kShortRunRoots = 4;
constexpr uint64_t kShortRunBytes = kShortRunRoots * kRootChunkSize;

// Index of a chunk size in per-size arrays (the statistics' UVM_CHUNK_INDEX_*),
// kNoSizeIndex for a size that is none of them.
enum SizeIndex : int { kNoSizeIndex = -1, kIndex4K = 0, kIndex64K = 1, kIndex2M = 2 };
constexpr int kSizeIndexCount = 3;

constexpr SizeIndex chunk_size_index(uint64_t size) {
    return size == kPageSize4K    ? kIndex4K
           : size == kPageSize64K ? kIndex64K
           : size == kPageSize2M  ? kIndex2M
                                  : kNoSizeIndex;
}
constexpr uint64_t chunk_size_of_index(int index) {
    return index == kIndex4K ? kPageSize4K : index == kIndex64K ? kPageSize64K : kPageSize2M;
}

constexpr bool is_aligned(uint64_t value, uint64_t alignment) {
    return (value & (alignment - 1)) == 0;
}
constexpr uint64_t align_up(uint64_t value, uint64_t alignment) {
    return (value + alignment - 1) & ~(alignment - 1);
}

}  // namespace uvm
