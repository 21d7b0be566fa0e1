// Free memory that one pool of a GPU holds goes to another pool's allocation
// before it fails (uvm.h, uvm_gpu_set_release_threshold: free root chunks go
// back once the driver has no more; OUT_OF_MEMORY means the GPU's memory is
// exhausted). The pools: the GPU's PMM, its remappable PMM (user-mappable
// objects of 2M chunks) and each sleepable client's roots.
//
// Each case runs on a manager whose GPU 0 the driver can give kRoom more
// bytes at most: a small simulated GPU (residency_test.cpp), or the CUDA
// backend beside a ballast (driver_fault_test.cpp: the stand-in driver, or
// a GPU). It fills all but a few MiB of that room from one pool, frees it
// (the pool keeps the roots free), checks the driver has too little left for
// the request, and asks from another pool.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tests/uvm/fixtures.h"

namespace uvm_test::free_roots {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kRoom = 64 * kMiB;
constexpr uint64_t kRequest = 8 * kMiB;

inline uvm_gpu_info_t gpu0_info(uvm_manager_t *mgr) {
    uvm_gpu_info_t i;
    std::memset(&i, 0, sizeof(i));
    EXPECT_EQ(uvm_gpu_info(mgr, 0, &i), UVM_OK);
    return i;
}

inline uvm_gpu_stats_t gpu0_stats(uvm_manager_t *mgr) {
    uvm_gpu_stats_t s;
    std::memset(&s, 0, sizeof(s));
    EXPECT_EQ(uvm_gpu_stats(mgr, 0, &s), UVM_OK);
    return s;
}

// Objects of `object` bytes in `chunk` chunks (more than one: never kept
// whole by a thread for reuse), vidmem of `client` (null: the default one)
// with `flags`, until the driver has less than `leave` + `object` free, then
// all freed: their pool holds the roots free, and the driver has less than
// that left.
inline void fill_and_free(uvm_manager_t *mgr, uvm_client_t *client, uint32_t flags, uint64_t leave = 4 * kMiB,
                          uint64_t object = 4 * kMiB, uint64_t chunk = 2 * kMiB) {
    ASSERT_GE(gpu0_info(mgr).memory_free, kRoom / 2) << "the driver has less room than the case needs";
    std::vector<uvm_mem_t *> objects;
    uint64_t filled = 0;
    bool refused = false;  // the driver said no: it has too little for `object`, whatever it counts
    while (gpu0_info(mgr).memory_free >= leave + object) {
        uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, object, 0, chunk, flags);
        a.client = client;
        uvm_mem_t *m = nullptr;
        const uvm_status_t s = uvm_mem_alloc(mgr, &a, &m);
        if (s == UVM_ERR_OUT_OF_MEMORY) {
            // A real driver's free figure (cuMemGetInfo) counts bytes: it can
            // say a few MiB are free where cuMemCreate finds no 2 MiB page
            // (its own page tables and small allocations share the rest).
            // The room is then full; what must not happen is a refusal while
            // the manager holds enough free memory of its own to serve it.
            EXPECT_LT(gpu0_stats(mgr).held_cached_bytes, object)
                << "OUT_OF_MEMORY after " << filled / kMiB << " MiB with the manager's free memory enough for it";
            std::printf("[ fill ] the driver refused at %llu MiB filled, %llu MiB free by its count\n",
                        static_cast<unsigned long long>(filled / kMiB),
                        static_cast<unsigned long long>(gpu0_info(mgr).memory_free / kMiB));
            refused = true;
            break;
        }
        ASSERT_EQ(s, UVM_OK) << "after " << filled / kMiB << " MiB";
        objects.push_back(m);
        filled += object;
    }
    for (uvm_mem_t *m : objects)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    if (!refused)
        EXPECT_LT(gpu0_info(mgr).memory_free, leave + object) << "the driver got memory back";
    EXPECT_GE(gpu0_stats(mgr).held_cached_bytes, filled) << "the pool gave its free roots back";
}

// `size` of vidmem of `client` with `flags` (2M chunks from 2 MiB up)
// succeeds, its bytes its own, and it is freed.
inline void request_succeeds(uvm_manager_t *mgr, uvm_client_t *client, uint32_t flags, uint64_t size = kRequest) {
    uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, size, 0, size >= 2 * kMiB ? 2 * kMiB : 0, flags);
    a.client = client;
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_OK)
        << "OUT_OF_MEMORY while the manager holds " << gpu0_stats(mgr).held_cached_bytes / kMiB << " MiB free";
    EXPECT_EQ(write_pattern(mgr, m, size, 7), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr, m, size, 7), 0u);
    EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
}

inline uvm_client_t *sleepable_client(uvm_manager_t *mgr, const char *name) {
    uvm_client_t *c = nullptr;
    EXPECT_EQ(uvm_client_create_sleepable(mgr, name, &c), UVM_OK);
    return c;
}

// The GPU's PMM holds the free roots; a user-mappable object (the
// remappable PMM) asks.
inline void gpu_pool_to_user_mappable(uvm_manager_t *mgr) {
    fill_and_free(mgr, nullptr, 0);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    request_succeeds(mgr, nullptr, UVM_MEM_USER_MAPPABLE);
}

// The GPU's PMM holds them; a sleepable client (its own roots) asks.
inline void gpu_pool_to_sleepable_client(uvm_manager_t *mgr) {
    uvm_client_t *model = sleepable_client(mgr, "model");
    fill_and_free(mgr, nullptr, 0);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    request_succeeds(mgr, model, 0);
    EXPECT_EQ(uvm_client_destroy(mgr, model), UVM_OK);
}

// A sleepable client's roots hold them; the default client asks.
inline void sleepers_roots_to_default_client(uvm_manager_t *mgr) {
    uvm_client_t *model = sleepable_client(mgr, "model");
    fill_and_free(mgr, model, 0);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    request_succeeds(mgr, nullptr, 0);
    EXPECT_EQ(uvm_client_destroy(mgr, model), UVM_OK);
}

// The remappable PMM holds them; the default client asks (the GPU's PMM).
inline void remappable_pool_to_default_client(uvm_manager_t *mgr) {
    fill_and_free(mgr, nullptr, UVM_MEM_USER_MAPPABLE);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    request_succeeds(mgr, nullptr, 0);
}

// After a wake (which takes its memory back from the driver, or from the
// PMMs' free roots): the GPU's PMM holds free roots, the driver has less
// than a root, and the woken client's first 4 KiB needs a root of its own.
inline void after_a_wake(uvm_manager_t *mgr) {
    uvm_client_t *model = sleepable_client(mgr, "model");
    uvm_mem_t *weights = nullptr;
    uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, kRequest, 0, 2 * kMiB, 0);
    a.client = model;
    ASSERT_EQ(uvm_mem_alloc(mgr, &a, &weights), UVM_OK);  // its roots, full
    ASSERT_EQ(write_pattern(mgr, weights, kRequest, 3), UVM_OK);
    ASSERT_EQ(uvm_client_sleep(mgr, model, nullptr), UVM_OK);
    fill_and_free(mgr, nullptr, 0);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_EQ(uvm_client_wake(mgr, model), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr, weights, kRequest, 3), 0u);
    fill_and_free(mgr, nullptr, 0, 0, 2 * kMiB, 64 * 1024);  // less than a root left
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    request_succeeds(mgr, model, 0, 4096);
    EXPECT_EQ(uvm_mem_free(mgr, weights), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr, model), UVM_OK);
}

}  // namespace uvm_test::free_roots
