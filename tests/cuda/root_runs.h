// Runs of root chunks in the CUDA tests (root_pool_test.cpp, offload_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "common/sizes.h"
#include "uvm/uvm.h"

namespace uvm_test {

// The `count` root chunks from `first`, side by side.
inline std::vector<uint64_t> roots_from(uint64_t first, size_t count) {
    std::vector<uint64_t> roots;
    for (size_t i = 0; i < count; ++i)
        roots.push_back(first + i * uvm::kRootChunkSize);
    return roots;
}

// Whether the run of `count` roots at `phys` misses the run of `roots` at `first`.
inline bool none_in(uint64_t phys, size_t count, uint64_t first, size_t roots) {
    return phys + count * uvm::kRootChunkSize <= first || phys >= first + roots * uvm::kRootChunkSize;
}

// `singles` root chunks (remappable and not, in turn) and a run of `run`
// from `alloc(count, remappable, &phys)`, each checked to miss the run of
// `roots` at `first`; every root chunk they took, to free.
template <typename Alloc>
std::vector<uint64_t> alloc_elsewhere(Alloc &&alloc, uint64_t first, size_t roots, int singles, size_t run) {
    std::vector<uint64_t> taken;
    for (int i = 0; i < singles; ++i) {
        uint64_t p = 0;
        const uvm_status_t status = alloc(1, i % 2 == 0, &p);
        EXPECT_EQ(status, UVM_OK);
        if (status != UVM_OK)
            return taken;
        EXPECT_TRUE(none_in(p, 1, first, roots)) << p;
        taken.push_back(p);
    }
    uint64_t p = 0;
    const uvm_status_t status = alloc(run, false, &p);
    EXPECT_EQ(status, UVM_OK);
    if (status != UVM_OK)
        return taken;
    EXPECT_TRUE(none_in(p, run, first, roots)) << p;
    for (uint64_t r : roots_from(p, run))
        taken.push_back(r);
    return taken;
}

}  // namespace uvm_test
