// Two promises of the header made tests (issue 28): what a failed call may
// release (cached free memory only, nothing live changes), and one rule for
// the eviction flags on memory that is never evicted (INVALID_ARGUMENT).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;

uvm_manager_stats_t manager_stats(uvm_manager_t *mgr) {
    uvm_manager_stats_t s;
    std::memset(&s, 0, sizeof(s));
    EXPECT_EQ(uvm_manager_stats(mgr, &s), UVM_OK);
    return s;
}

}  // namespace

// Only vidmem is ever evicted: UVM_MEM_EVICTABLE on sysmem or managed memory
// is INVALID_ARGUMENT, as UVM_MEM_DISCARDABLE is, and nothing is allocated.
TEST(MemFlags, EvictionFlagsOnMemoryNeverEvictedAreInvalidArgument) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    const uvm_manager_stats_t before = manager_stats(mgr);
    for (uvm_backing_t b : {UVM_BACKING_SYSMEM, UVM_BACKING_MANAGED})
        for (uint32_t flag : {UVM_MEM_EVICTABLE, UVM_MEM_DISCARDABLE, UVM_MEM_EVICTABLE | UVM_MEM_DISCARDABLE}) {
            uvm_mem_alloc_params_t p = alloc_params(b, 64 * K, 0, 0, flag);
            uvm_mem_t *m = nullptr;
            EXPECT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_ERR_INVALID_ARGUMENT) << "backing " << b << " flags " << flag;
            EXPECT_EQ(m, nullptr);
        }
    const uvm_manager_stats_t after = manager_stats(mgr);
    EXPECT_EQ(std::memcmp(&before, &after, sizeof(before)), 0) << "a refused allocation changed the manager";
    // The same flags on vidmem are fine.
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 64 * K, 0, 0, UVM_MEM_EVICTABLE);
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A failed allocation may give cached free memory back to the driver (the
// PMM hands scattered free roots back before asking for a contiguous run),
// as uvm.h says; nothing live changes: every object's description and
// bytes, the pinned and evictable bytes, the mappings and object counts.
TEST(FailedCall, AFailedAllocationReleasesOnlyCachedFreeMemory) {
    uvm_manager_params_t params = sim_params(1, 64 * M);
    params.sim.cpu_coherent = 1;  // the CPU reads the objects' bytes through its kernel mapping
    uvm_manager_t *mgr = nullptr;
    ASSERT_EQ(uvm_manager_create(&params, &mgr), UVM_OK);
    std::vector<uvm_mem_t *> live, freed;
    for (int i = 0; i < 16; ++i) {
        uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 4 * M, 0, 0, i % 4 == 1 ? UVM_MEM_EVICTABLE : 0);
        uvm_mem_t *m = nullptr;
        ASSERT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_OK) << i;
        (i % 2 ? live : freed).push_back(m);
    }
    uvm_eviction_policy_t policy{};
    policy.disabled = 1;  // the failure must be one: nothing moves out to make room
    ASSERT_EQ(uvm_manager_set_eviction_policy(mgr, &policy), UVM_OK);
    for (size_t i = 0; i < live.size(); ++i) {
        ASSERT_EQ(uvm_mem_map_cpu_kernel(mgr, live[i]), UVM_OK);
        void *cpu = nullptr;
        ASSERT_EQ(uvm_mem_cpu_kernel_address(mgr, live[i], 0, &cpu), UVM_OK);
        std::memset(cpu, 0x10 + static_cast<int>(i), 4 * M);
    }
    for (uvm_mem_t *m : freed)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);  // 4 MiB holes, held by the PMM
    auto infos = [&] {
        std::vector<uvm_mem_info_t> out;
        for (uvm_mem_t *m : live) {
            uvm_mem_info_t i;
            std::memset(&i, 0, sizeof(i));
            EXPECT_EQ(uvm_mem_info(mgr, m, &i), UVM_OK);
            out.push_back(i);
        }
        return out;
    };
    const std::vector<uvm_mem_info_t> before = infos();
    uvm_gpu_stats_t gs_before, gs_after;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &gs_before), UVM_OK);
    const uvm_manager_stats_t mgr_before = manager_stats(mgr);

    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 16 * M);
    uvm_mem_t *big = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &big), UVM_ERR_OUT_OF_MEMORY) << "only 4 MiB holes exist";
    EXPECT_EQ(big, nullptr);

    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &gs_after), UVM_OK);
    EXPECT_LE(gs_after.root_chunks, gs_before.root_chunks) << "a failed call holds nothing more";
    for (int c = 0; c < UVM_CHUNK_SIZE_COUNT; ++c) {
        EXPECT_EQ(gs_after.bytes_pinned[c], gs_before.bytes_pinned[c]);
        EXPECT_EQ(gs_after.bytes_evictable[c], gs_before.bytes_evictable[c]);
    }
    EXPECT_EQ(gs_after.vidmem_objects, gs_before.vidmem_objects);
    EXPECT_EQ(gs_after.kernel_mappings, gs_before.kernel_mappings);
    EXPECT_EQ(gs_after.evicted_objects, gs_before.evicted_objects);
    const uvm_manager_stats_t mgr_after = manager_stats(mgr);
    EXPECT_EQ(std::memcmp(&mgr_before, &mgr_after, sizeof(mgr_before)), 0);
    const std::vector<uvm_mem_info_t> after = infos();
    for (size_t i = 0; i < live.size(); ++i) {
        EXPECT_EQ(std::memcmp(&before[i], &after[i], sizeof(before[i])), 0) << "object " << i;
        void *cpu = nullptr;
        ASSERT_EQ(uvm_mem_cpu_kernel_address(mgr, live[i], 0, &cpu), UVM_OK);
        const auto *bytes = static_cast<const uint8_t *>(cpu);
        size_t wrong = 0;
        for (uint64_t b = 0; b < 4 * M; b += 4 * K)
            wrong += bytes[b] != static_cast<uint8_t>(0x10 + i);
        EXPECT_EQ(wrong, 0u) << "object " << i << "'s bytes changed";
    }
    // What went back was free: the holes are still usable as they were.
    uvm_mem_t *hole = nullptr;
    uvm_mem_alloc_params_t h = alloc_params(UVM_BACKING_VIDMEM, 4 * M);
    ASSERT_EQ(uvm_mem_alloc(mgr, &h, &hole), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, hole), UVM_OK);
    for (uvm_mem_t *m : live)
        EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// The growth policy's path (uvm_gpu_set_growth_slack 0): free memory that no
// run could use went back to make room, then the growth itself failed. The
// call reports the backend's failure; what went back was cached free memory
// only (as above), nothing live changed, and the next try grows.
TEST(FailedCall, AGrowthThatFailsAfterFreeMemoryWentBackChangesNothingLive) {
    uvm::backend::FaultInjectingBackend *faults = nullptr;
    uvm_manager_t *mgr = faulty_sim(sim_params(1, 256 * M).sim, &faults);
    ASSERT_NE(mgr, nullptr);
    ASSERT_EQ(uvm_gpu_set_growth_slack(mgr, 0, 0), UVM_OK);
    const uvm_mem_alloc_params_t p20 = alloc_params(UVM_BACKING_VIDMEM, 20 * M);
    const uvm_mem_alloc_params_t p24 = alloc_params(UVM_BACKING_VIDMEM, 24 * M);
    uvm_mem_t *a = nullptr, *b = nullptr, *c = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p20, &a), UVM_OK);
    ASSERT_EQ(uvm_mem_alloc(mgr, &p20, &b), UVM_OK);
    uvm_mem_info_t info_before, info_after;
    ASSERT_EQ(uvm_mem_info(mgr, b, &info_before), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, a), UVM_OK);
    uvm_gpu_stats_t before, after;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &before), UVM_OK);
    faults->fail_call(1);  // the growth, after a's roots went back
    EXPECT_EQ(uvm_mem_alloc(mgr, &p24, &c), UVM_ERR_BACKEND);
    EXPECT_TRUE(faults->fired());
    faults->fail_call(0);
    EXPECT_EQ(c, nullptr);
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &after), UVM_OK);
    EXPECT_EQ(after.root_chunks, before.root_chunks - 10) << "a's free roots went back";
    EXPECT_EQ(after.root_chunks_moved, before.root_chunks_moved + 10);
    EXPECT_EQ(after.root_chunks_grown, before.root_chunks_grown) << "a failed growth counts nothing";
    for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i) {
        EXPECT_EQ(after.bytes_pinned[i], before.bytes_pinned[i]);
        EXPECT_EQ(after.bytes_evictable[i], before.bytes_evictable[i]);
    }
    EXPECT_EQ(after.vidmem_objects, before.vidmem_objects);
    ASSERT_EQ(uvm_mem_info(mgr, b, &info_after), UVM_OK);
    EXPECT_EQ(std::memcmp(&info_before, &info_after, sizeof(info_before)), 0);
    ASSERT_EQ(uvm_mem_alloc(mgr, &p24, &c), UVM_OK);  // and the next try grows
    EXPECT_EQ(uvm_mem_free(mgr, b), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, c), UVM_OK);
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &after), UVM_OK);
    EXPECT_EQ(after.root_chunks, 0u);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
