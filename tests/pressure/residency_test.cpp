// Evictable vidmem (pressure/residency.h): evicted to host memory and back with
// its bytes intact, evicted under pressure least recently used first, never
// when pinned, mapped where the manager cannot follow, or busy on a stream.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/fault_injection.h"
#include "sim/sim_backend.h"
#include "tests/pressure/free_roots_cases.h"
#include "tests/uvm/fixtures.h"
#include "api/handles.h"

using namespace uvm_test;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;

// Helpers shared by the fixture-based and the small-GPU tests.
struct Objects {
    uvm_manager_t *mgr;

    uvm_mem_t *alloc(uint64_t size, uint64_t chunk = 0, uint32_t flags = UVM_MEM_EVICTABLE) {
        const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size, 0, chunk, flags);
        uvm_mem_t *m = nullptr;
        const uvm_status_t s = uvm_mem_alloc(mgr, &p, &m);
        return s == UVM_OK ? m : nullptr;
    }
    uvm_status_t write(uvm_mem_t *mem, uint64_t size, uint32_t seed) { return write_pattern(mgr, mem, size, seed); }
    uint64_t wrong(uvm_mem_t *mem, uint64_t size, uint32_t seed) { return wrong_bytes(mgr, mem, size, seed); }
    uvm_residency_t residency(uvm_mem_t *mem) {
        uvm_residency_t r;
        std::memset(&r, 0, sizeof(r));
        EXPECT_EQ(uvm_mem_residency(mgr, mem, &r), UVM_OK);
        return r;
    }
    uvm_gpu_stats_t stats() {
        uvm_gpu_stats_t s;
        std::memset(&s, 0, sizeof(s));
        EXPECT_EQ(uvm_gpu_stats(mgr, 0, &s), UVM_OK);
        return s;
    }
};

class Residency : public ManagerTest {
protected:
    Objects o() { return Objects{mgr_}; }
};

INSTANTIATE_TEST_SUITE_P(Backends, Residency, ::testing::ValuesIn(backend_names()),
                         [](const auto &info) { return info.param; });

}  // namespace

TEST_P(Residency, EvictAndRestoreKeepEveryByteAndTheKernelMapping) {
    Objects x = o();
    for (uint64_t chunk : {4 * K, 64 * K, 2 * M}) {
        SCOPED_TRACE(chunk);
        const uint64_t size = 3 * M + 8 * K;
        uvm_mem_t *a = x.alloc(size, chunk);
        ASSERT_NE(a, nullptr);
        ASSERT_EQ(x.write(a, size, 9), UVM_OK);
        ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, a, 0), UVM_OK);
        const uvm_gpu_stats_t before = x.stats();
        ASSERT_EQ(uvm_mem_evict(mgr_, a), UVM_OK);
        ASSERT_EQ(uvm_mem_evict(mgr_, a), UVM_OK);  // already evicted: nothing more
        uvm_residency_t r = x.residency(a);
        EXPECT_EQ(r.resident, 0);
        EXPECT_EQ(r.evictions, 1u);
        uvm_gpu_stats_t s = x.stats();
        EXPECT_EQ(s.evictions, before.evictions + 1);
        EXPECT_EQ(s.evicted_objects, 1u);
        EXPECT_EQ(s.evicted_bytes, info(a).alloc_size);
        EXPECT_EQ(s.bytes_evicted, before.bytes_evicted + info(a).alloc_size);
        EXPECT_EQ(info(a).gpu_kernel_mask, 0u) << "an evicted object has no mappings";
        // Asking for its kernel address brings it back, mapped again.
        uint64_t va = 0;
        ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, a, 0, 0, &va), UVM_OK);
        EXPECT_NE(va, 0u);
        r = x.residency(a);
        EXPECT_EQ(r.resident, 1);
        EXPECT_EQ(r.restores, 1u);
        EXPECT_EQ(x.stats().evicted_objects, 0u);
        EXPECT_EQ(x.wrong(a, size, 9), 0u);
        // Evicted again and freed while evicted: its host bytes go too.
        ASSERT_EQ(uvm_mem_evict(mgr_, a), UVM_OK);
        ASSERT_EQ(uvm_mem_make_resident(mgr_, a), UVM_OK);
        ASSERT_EQ(uvm_mem_make_resident(mgr_, a), UVM_OK);
        EXPECT_EQ(x.wrong(a, size, 9), 0u);
        ASSERT_EQ(uvm_mem_evict(mgr_, a), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr_, a), UVM_OK);
        EXPECT_EQ(x.stats().evicted_bytes, 0u);
    }
}

TEST_P(Residency, WhatCannotMoveIsRefused) {
    Objects x = o();
    uvm_mem_t *pinned = x.alloc(2 * M, 0, 0);
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 64 * K);
    EXPECT_EQ(uvm_mem_evict(mgr_, pinned), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(uvm_mem_evict(mgr_, sys), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(x.residency(pinned).resident, 1);
    // A user mapping on a peer: an address another GPU holds.
    uvm_mem_t *user = x.alloc(2 * M, 2 * M);
    if (peers()) {
        ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, user, 1, 0), UVM_OK);
        EXPECT_EQ(uvm_mem_evict(mgr_, user), UVM_ERR_NOT_SUPPORTED);
    }
    // Bad input.
    uvm_residency_t r;
    EXPECT_EQ(uvm_mem_residency(mgr_, user, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_evict(nullptr, user), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_manager_set_eviction_policy(mgr_, nullptr), UVM_ERR_INVALID_ARGUMENT);
    for (uvm_mem_t *m : {pinned, sys, user})
        ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    EXPECT_EQ(uvm_mem_evict(mgr_, user), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_mem_make_resident(mgr_, user), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_mem_touch(mgr_, user), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_mem_residency(mgr_, user, &r), UVM_ERR_INVALID_HANDLE);
}

// An object's user address stays its own while it is evicted, and its user
// mapping comes back there. On CUDA that takes remappable chunks (2M,
// UVM_MEM_USER_MAPPABLE): other objects' user addresses are views of their
// physical memory, which moves, so they are not evicted.
TEST_P(Residency, TheUserAddressSurvivesEviction) {
    Objects x = o();
    const uint64_t size = 4 * M;
    uvm_mem_t *view = x.alloc(size, 2 * M);
    ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, view, 0, 0), UVM_OK);
    uvm_mem_t *a = x.alloc(size, 2 * M, UVM_MEM_EVICTABLE | UVM_MEM_USER_MAPPABLE);
    ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, a, 0, gpu_user_range(size, 2 * M)), UVM_OK);
    if (on_cuda())
        EXPECT_EQ(uvm_mem_evict(mgr_, view), UVM_ERR_NOT_SUPPORTED);
    for (uvm_mem_t *m : on_cuda() ? std::vector<uvm_mem_t *>{a} : std::vector<uvm_mem_t *>{a, view}) {
        ASSERT_EQ(x.write(m, size, 21), UVM_OK);
        const uint64_t address = info(m).user_address;
        ASSERT_EQ(uvm_mem_evict(mgr_, m), UVM_OK);
        EXPECT_EQ(info(m).user_address, address) << "the address was given up while evicted";
        EXPECT_EQ(info(m).gpu_user_mask, 0u);
        uint64_t got = 0;
        ASSERT_EQ(uvm_mem_gpu_user_address(mgr_, m, 0, 0, &got), UVM_OK);  // brings it back
        EXPECT_EQ(got, address);
        EXPECT_EQ(x.residency(m).restores, 1u);
        // Read through the user mapping itself.
        uvm_mem_t *host = alloc(UVM_BACKING_SYSMEM, size);
        ASSERT_EQ(uvm_mem_map_gpu_phys(mgr_, host, 0), UVM_OK);
        uvm_mem_span_t d{host, 0, UVM_VIEW_PHYSICAL}, src{m, 0, UVM_VIEW_USER};
        ASSERT_EQ(uvm_mem_copy(mgr_, 0, &d, &src, size), UVM_OK);
        uint64_t wrong = 0;
        for (uint64_t i = 0; i < size; ++i)
            wrong += cpu(host)[i] != pattern(i, 21);
        EXPECT_EQ(wrong, 0u);
        ASSERT_EQ(uvm_mem_free(mgr_, host), UVM_OK);
        // Freed while evicted, it gives the address back.
        ASSERT_EQ(uvm_mem_evict(mgr_, m), UVM_OK);
    }
    ASSERT_EQ(uvm_mem_free(mgr_, a), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, view), UVM_OK);
}

// Work queued on a stream still uses the object: it stays.
TEST_P(Residency, BusyObjectsStay) {
    if (on_cuda())
        GTEST_SKIP() << "held work is simulated";
    Objects x = o();
    uvm_mem_t *a = x.alloc(2 * M);
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr_, 0, nullptr, &s), UVM_OK);
    ASSERT_EQ(uvm_sim_stream_hold(mgr_, s), UVM_OK);
    ASSERT_EQ(uvm_mem_record_use(mgr_, a, s), UVM_OK);
    EXPECT_EQ(uvm_mem_evict(mgr_, a), UVM_ERR_BUSY);
    ASSERT_EQ(uvm_sim_stream_release(mgr_, s), UVM_OK);
    EXPECT_EQ(uvm_mem_evict(mgr_, a), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, a), UVM_OK);
    ASSERT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);
}

// Three times the GPU's memory of evictable objects, each written once and
// read back at the end: every byte survives, least recently used objects go
// first, and the statistics add up.
TEST(ResidencyPressure, ThreeTimesTheGpusMemory) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    Objects x{mgr};
    std::vector<uvm_mem_t *> objs;
    for (uint32_t i = 0; i < 96; ++i) {
        uvm_mem_t *m = x.alloc(2 * M);
        ASSERT_NE(m, nullptr) << i;
        ASSERT_EQ(x.write(m, 2 * M, i), UVM_OK) << i;
        objs.push_back(m);
    }
    uvm_gpu_stats_t s = x.stats();
    EXPECT_GE(s.evictions, 64u);
    EXPECT_EQ(x.residency(objs.front()).resident, 0) << "the oldest went first";
    EXPECT_EQ(x.residency(objs.back()).resident, 1);
    for (uint32_t i = 0; i < objs.size(); ++i)
        ASSERT_EQ(x.wrong(objs[i], 2 * M, i), 0u) << i;
    s = x.stats();
    EXPECT_EQ(s.bytes_evicted, s.evictions * 2 * M);
    EXPECT_EQ(s.bytes_restored, s.restores * 2 * M);
    EXPECT_EQ(s.evicted_bytes, s.evicted_objects * 2 * M);
    EXPECT_EQ(s.evictions - s.restores, s.evicted_objects);
    for (uvm_mem_t *m : objs)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(x.stats().evicted_objects, 0u);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Pinned memory never moves: with the GPU full of it, the next allocation is
// OUT_OF_MEMORY and nothing was evicted; with eviction off, a full GPU of
// evictable objects is OUT_OF_MEMORY too; a host limit stops eviction.
TEST(ResidencyPressure, PinnedMemoryAndThePolicyStopEviction) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    Objects x{mgr};
    std::vector<uvm_mem_t *> pinned;
    for (int i = 0; i < 16; ++i)
        pinned.push_back(x.alloc(2 * M, 0, 0));
    for (uvm_mem_t *m : pinned)
        ASSERT_NE(m, nullptr);
    EXPECT_EQ(x.alloc(2 * M), nullptr);
    EXPECT_EQ(x.stats().evictions, 0u);
    for (uvm_mem_t *m : pinned)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);

    std::vector<uvm_mem_t *> evictable;
    for (int i = 0; i < 16; ++i)
        evictable.push_back(x.alloc(2 * M));
    uvm_eviction_policy_t policy;
    std::memset(&policy, 0, sizeof(policy));
    policy.disabled = 1;
    ASSERT_EQ(uvm_manager_set_eviction_policy(mgr, &policy), UVM_OK);
    EXPECT_EQ(x.alloc(2 * M), nullptr);
    EXPECT_EQ(x.stats().evictions, 0u);
    policy.disabled = 0;
    policy.sysmem_limit = 4 * M;  // room for two evicted objects
    ASSERT_EQ(uvm_manager_set_eviction_policy(mgr, &policy), UVM_OK);
    uvm_mem_t *a = x.alloc(2 * M), *b = x.alloc(2 * M);
    EXPECT_NE(a, nullptr);
    EXPECT_NE(b, nullptr);
    EXPECT_EQ(x.alloc(2 * M), nullptr) << "evicted beyond the host limit";
    EXPECT_EQ(x.stats().evicted_bytes, 4 * M);
    for (uvm_mem_t *m : evictable)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    for (uvm_mem_t *m : {a, b})
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A request that eviction could not satisfy fails at once, and nothing moved.
TEST(ResidencyPressure, AnImpossibleRequestMovesNothing) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    Objects x{mgr};
    std::vector<uvm_mem_t *> objs;
    for (int i = 0; i < 8; ++i)
        objs.push_back(x.alloc(2 * M, 0, 0));  // pinned: half the GPU
    for (int i = 0; i < 8; ++i)
        objs.push_back(x.alloc(2 * M));
    for (uvm_mem_t *m : objs)
        ASSERT_NE(m, nullptr);
    EXPECT_EQ(x.alloc(20 * M), nullptr);
    EXPECT_EQ(x.stats().evictions, 0u) << "evicted for a request that could never fit";
    uvm_mem_t *big = x.alloc(16 * M);
    EXPECT_NE(big, nullptr) << "what eviction can free, it frees";
    EXPECT_EQ(x.stats().evictions, 8u);
    objs.push_back(big);
    for (uvm_mem_t *m : objs)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// More than the GPU has is OUT_OF_MEMORY, as cudaMalloc says it, and at
// once: nothing evicted, no memory a stream has finished with moved, a
// report left that names the request.
TEST(ResidencyPressure, ARequestLargerThanTheGpuIsOutOfMemoryAtOnce) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    Objects x{mgr};
    std::vector<uvm_mem_t *> objs;
    for (int i = 0; i < 8; ++i)
        objs.push_back(x.alloc(2 * M));
    uvm_stream_t *stream = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &stream), UVM_OK);
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 4 * M);
    uvm_mem_t *pooled = nullptr;
    ASSERT_EQ(uvm_mem_alloc_async(mgr, &p, stream, &pooled), UVM_OK);
    ASSERT_EQ(uvm_mem_free_async(mgr, pooled, stream), UVM_OK);
    const uvm_gpu_stats_t before = x.stats();
    ASSERT_EQ(before.held_pooled_bytes + before.held_retiring_bytes, 4 * M);
    for (uint64_t size : {uint64_t{32 * M + 4 * K}, uint64_t{1} << 40}) {
        p = alloc_params(UVM_BACKING_VIDMEM, size, 0, 0, UVM_MEM_EVICTABLE);
        uvm_mem_t *m = nullptr;
        EXPECT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_ERR_OUT_OF_MEMORY);
        EXPECT_NE(std::string(uvm_last_error_message()).find("is more than GPU 0's memory, 32 MiB"), std::string::npos)
            << uvm_last_error_message();
        EXPECT_EQ(m, nullptr);
    }
    const uvm_gpu_stats_t after = x.stats();
    EXPECT_EQ(after.evictions, 0u);
    EXPECT_EQ(after.held_pooled_bytes + after.held_retiring_bytes, 4 * M) << "the stream's memory moved";
    EXPECT_EQ(after.held_bytes, before.held_bytes);
    size_t needed = 0;
    EXPECT_EQ(uvm_oom_report(mgr, UVM_REPORT_TEXT, nullptr, 0, &needed), UVM_ERR_BUFFER_TOO_SMALL);
    std::string report(needed, '\0');
    ASSERT_EQ(uvm_oom_report(mgr, UVM_REPORT_TEXT, &report[0], needed, &needed), UVM_OK);
    EXPECT_NE(report.find("1024.00 GiB"), std::string::npos) << report;  // the last request
    for (uvm_mem_t *m : objs)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    ASSERT_EQ(uvm_stream_destroy(mgr, stream), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Eviction counts the runs it would leave, not the bytes: with a pinned root
// after every two evictable ones, evicting everything leaves holes of 4 MiB,
// so a request for 8 MiB of 2M chunks, or 6 MiB of 64K chunks (a run of
// whole roots), fails at once and nothing moves, every object as it was;
// one for 4 MiB evicts the two objects of one hole.
TEST(ResidencyPressure, ARequestNoHoleCouldHoldMovesNothing) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    Objects x{mgr};
    std::vector<uvm_mem_t *> all, evictable;
    for (uint32_t i = 0; i < 16; ++i) {  // roots P E E P E E ... P
        uvm_mem_t *m = x.alloc(2 * M, 2 * M, i % 3 == 0 ? 0 : UVM_MEM_EVICTABLE);
        ASSERT_NE(m, nullptr) << i;
        uvm_gpu_phys_address_t pa;
        ASSERT_EQ(uvm_mem_gpu_phys_address(mgr, m, 0, 0, 1, &pa), UVM_OK);
        if (!all.empty()) {
            uvm_gpu_phys_address_t prev;
            ASSERT_EQ(uvm_mem_gpu_phys_address(mgr, all.back(), 0, 0, 1, &prev), UVM_OK);
            ASSERT_EQ(pa.address, prev.address + 2 * M) << "the roots are not in the order the test needs";
        }
        all.push_back(m);
        if (i % 3)
            evictable.push_back(m);
    }
    for (size_t i = 0; i < evictable.size(); ++i)
        ASSERT_EQ(x.write(evictable[i], 2 * M, static_cast<uint32_t>(i)), UVM_OK);
    EXPECT_EQ(x.alloc(8 * M, 2 * M, 0), nullptr);
    EXPECT_EQ(x.alloc(6 * M, 64 * K, 0), nullptr);
    EXPECT_EQ(x.stats().evictions, 0u) << "evicted for a request no hole could hold";
    for (uvm_mem_t *m : evictable)
        EXPECT_EQ(x.residency(m).resident, 1);
    uvm_mem_t *fits = x.alloc(4 * M, 2 * M, 0);
    ASSERT_NE(fits, nullptr) << "what eviction can free, it frees";
    EXPECT_EQ(x.stats().evictions, 2u);
    all.push_back(fits);
    for (size_t i = 0; i < evictable.size(); ++i)
        ASSERT_EQ(x.wrong(evictable[i], 2 * M, static_cast<uint32_t>(i)), 0u) << i;
    for (uvm_mem_t *m : all)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Free memory one pool holds goes to another pool's allocation before it
// fails (free_roots_cases.h), on a simulated GPU of 64 MiB.
namespace {
template <typename Case>
void on_small_gpu(Case run) {
    uvm_manager_t *mgr = small_sim(1, free_roots::kRoom);
    ASSERT_NE(mgr, nullptr);
    run(mgr);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
}  // namespace

TEST(FreeRootsAcrossPools, TheGpusPoolGivesToAUserMappableObject) {
    on_small_gpu(free_roots::gpu_pool_to_user_mappable);
}
TEST(FreeRootsAcrossPools, TheGpusPoolGivesToASleepableClient) {
    on_small_gpu(free_roots::gpu_pool_to_sleepable_client);
}
TEST(FreeRootsAcrossPools, ASleepersRootsGiveToTheDefaultClient) {
    on_small_gpu(free_roots::sleepers_roots_to_default_client);
}
TEST(FreeRootsAcrossPools, TheRemappablePoolGivesToTheDefaultClient) {
    on_small_gpu(free_roots::remappable_pool_to_default_client);
}
TEST(FreeRootsAcrossPools, TheGpusPoolGivesToAWokenClient) {
    on_small_gpu(free_roots::after_a_wake);
}

// Four threads, one per pool (the GPU's PMM, the remappable one, two
// sleepable clients' roots), allocate and free on a GPU their pools fill,
// so that requests give back roots other pools keep free while those pools
// allocate and free: nothing deadlocks, every object keeps its bytes, and
// in the end every root goes back.
TEST(FreeRootsAcrossPools, FourThreadsOfFourPoolsAtTheDriversEnd) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_client_t *a = free_roots::sleepable_client(mgr, "a"), *b = free_roots::sleepable_client(mgr, "b");
    std::atomic<uint64_t> served{0};
    auto work = [&](uvm_client_t *client, uint32_t flags, uint64_t chunk, uint32_t seed) {
        for (uint32_t i = 0; i < 40; ++i) {
            uvm_mem_t *m[2] = {nullptr, nullptr};
            for (uvm_mem_t *&one : m) {
                uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 2 * M, 0, chunk, flags);
                p.client = client;
                const uvm_status_t s = uvm_mem_alloc(mgr, &p, &one);
                // Another thread may take what a trim gave back before the retry.
                ASSERT_TRUE(s == UVM_OK || s == UVM_ERR_OUT_OF_MEMORY) << uvm_status_string(s);
                if (s == UVM_OK) {
                    ASSERT_EQ(write_pattern(mgr, one, 2 * M, seed + i), UVM_OK);
                    served++;
                }
            }
            for (uvm_mem_t *one : m)
                if (one) {
                    EXPECT_EQ(wrong_bytes(mgr, one, 2 * M, seed + i), 0u);
                    ASSERT_EQ(uvm_mem_free(mgr, one), UVM_OK);
                }
        }
    };
    std::vector<std::thread> threads;
    threads.emplace_back(work, nullptr, 0, 64 * K, 1);
    threads.emplace_back(work, nullptr, UVM_MEM_USER_MAPPABLE, 2 * M, 2);
    threads.emplace_back(work, a, 0, 64 * K, 3);
    threads.emplace_back(work, b, 0, 64 * K, 4);
    for (std::thread &t : threads)
        t.join();
    EXPECT_GT(served.load(), 4u * 40u) << "most requests found room";
    EXPECT_EQ(uvm_client_destroy(mgr, a), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr, b), UVM_OK);
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
    EXPECT_EQ(free_roots::gpu0_stats(mgr).held_bytes, 0u);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Discardable objects: evicting drops the bytes, and the residency query
// says so; back in vidmem they read as zeroes.
TEST(ResidencyPressure, DiscardableObjectsDropTheirBytes) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    Objects x{mgr};
    uvm_mem_t *cache = x.alloc(2 * M, 0, UVM_MEM_DISCARDABLE);
    ASSERT_NE(cache, nullptr);
    ASSERT_EQ(x.write(cache, 2 * M, 3), UVM_OK);
    ASSERT_EQ(uvm_mem_evict(mgr, cache), UVM_OK);
    uvm_gpu_stats_t s = x.stats();
    EXPECT_EQ(s.evicted_objects, 1u);
    EXPECT_EQ(s.evicted_bytes, 0u) << "a discarded object keeps nothing in host memory";
    EXPECT_EQ(s.bytes_evicted, 0u);
    ASSERT_EQ(uvm_mem_make_resident(mgr, cache), UVM_OK);
    const uvm_residency_t r = x.residency(cache);
    EXPECT_EQ(r.discards, 1u);
    EXPECT_EQ(r.restores, 1u);
    uvm_mem_t *zero = x.alloc(2 * M, 0, UVM_MEM_ZERO);
    ASSERT_EQ(x.write(zero, 2 * M, 3), UVM_OK);
    uvm_mem_span_t d{zero, 0, UVM_VIEW_PHYSICAL}, src{cache, 0, UVM_VIEW_PHYSICAL};
    ASSERT_EQ(uvm_mem_copy(mgr, 0, &d, &src, 2 * M), UVM_OK);
    EXPECT_EQ(x.wrong(zero, 2 * M, 3), 2 * M - [] {
        uint64_t zeros = 0;  // bytes of the pattern that are zero anyway
        for (uint64_t i = 0; i < 2 * M; ++i)
            zeros += pattern(i, 3) == 0;
        return zeros;
    }());
    const uvm_mem_alloc_params_t bad = alloc_params(UVM_BACKING_SYSMEM, 4 * K, 0, 0, UVM_MEM_DISCARDABLE);
    uvm_mem_t *out = nullptr;
    EXPECT_EQ(uvm_mem_alloc(mgr, &bad, &out), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(uvm_mem_free(mgr, cache), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, zero), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A GPU fragmented by 4K evictable objects over every root still gives a
// whole 2 MiB root when asked; roots that also hold pinned memory are left.
TEST(ResidencyPressure, AFragmentedGpuStillYieldsAWholeRoot) {
    uvm_manager_t *mgr = small_sim(1, 16 * M);
    Objects x{mgr};
    uvm_eviction_policy_t off;
    std::memset(&off, 0, sizeof(off));
    off.disabled = 1;
    ASSERT_EQ(uvm_manager_set_eviction_policy(mgr, &off), UVM_OK);
    std::vector<uvm_mem_t *> small;
    for (;;) {
        uvm_mem_t *m = x.alloc(4 * K);
        if (!m)
            break;
        small.push_back(m);
    }
    ASSERT_EQ(small.size(), 8u * 512u);
    // Every other one freed: every root half used.
    std::vector<uvm_mem_t *> kept;
    for (size_t i = 0; i < small.size(); ++i) {
        if (i % 2)
            ASSERT_EQ(uvm_mem_free(mgr, small[i]), UVM_OK);
        else
            kept.push_back(small[i]);
    }
    for (size_t i = 0; i < kept.size(); i += 97)
        ASSERT_EQ(x.write(kept[i], 4 * K, static_cast<uint32_t>(i)), UVM_OK);
    uvm_eviction_policy_t on;
    std::memset(&on, 0, sizeof(on));
    ASSERT_EQ(uvm_manager_set_eviction_policy(mgr, &on), UVM_OK);
    uvm_mem_t *big = x.alloc(2 * M, 2 * M, 0);
    ASSERT_NE(big, nullptr) << "no whole root came free";
    const uvm_gpu_stats_t s = x.stats();
    EXPECT_GE(s.evictions, 256u);
    EXPECT_LE(s.evictions, 1024u) << "evicted far more than one root's worth";
    for (size_t i = 0; i < kept.size(); i += 97)
        ASSERT_EQ(x.wrong(kept[i], 4 * K, static_cast<uint32_t>(i)), 0u) << i;
    ASSERT_EQ(uvm_mem_free(mgr, big), UVM_OK);
    for (uvm_mem_t *m : kept)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Random evict / restore / touch / map / copy / alloc / free steps on a GPU
// under pressure, each object checked against its one seed.
TEST(ResidencyPressure, RandomStepsKeepEveryObjectsBytes) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    Objects x{mgr};
    struct Obj {
        uvm_mem_t *mem;
        uint64_t size;
        uint32_t seed;
    };
    std::vector<Obj> live;
    std::mt19937_64 rng(11);
    const uint64_t sizes[] = {4 * K, 64 * K, 200 * K, 2 * M, 3 * M};
    uint32_t seeds = 0;
    for (int step = 0; step < 2000 && !::testing::Test::HasFatalFailure(); ++step) {
        const int what = static_cast<int>(rng() % 100);
        if (what < 25 || live.size() < 3) {
            Obj ob{nullptr, sizes[rng() % 5], ++seeds};
            ob.mem = x.alloc(ob.size);
            if (!ob.mem)
                continue;  // everything left is busy or pinned: allowed
            ASSERT_EQ(x.write(ob.mem, ob.size, ob.seed), UVM_OK);
            live.push_back(ob);
            continue;
        }
        Obj &ob = live[rng() % live.size()];
        if (what < 40) {
            ASSERT_EQ(uvm_mem_evict(mgr, ob.mem), UVM_OK);
        } else if (what < 50) {
            ASSERT_EQ(uvm_mem_make_resident(mgr, ob.mem), UVM_OK);
        } else if (what < 55) {
            ASSERT_EQ(uvm_mem_touch(mgr, ob.mem), UVM_OK);
        } else if (what < 65) {
            uint64_t va;
            if (uvm_mem_gpu_kernel_address(mgr, ob.mem, 0, 0, &va) == UVM_ERR_NOT_MAPPED)
                ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, ob.mem, 0), UVM_OK);
        } else if (what < 75) {
            Obj &other = live[rng() % live.size()];
            if (&other == &ob || other.size != ob.size)
                continue;
            uvm_mem_span_t d{other.mem, 0, UVM_VIEW_PHYSICAL}, s{ob.mem, 0, UVM_VIEW_PHYSICAL};
            ASSERT_EQ(uvm_mem_copy(mgr, 0, &d, &s, ob.size), UVM_OK);
            other.seed = ob.seed;
        } else if (what < 85) {
            ASSERT_EQ(x.wrong(ob.mem, ob.size, ob.seed), 0u) << "step " << step;
        } else {
            const size_t i = static_cast<size_t>(&ob - live.data());
            ASSERT_EQ(uvm_mem_free(mgr, ob.mem), UVM_OK);
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        }
    }
    for (const Obj &ob : live)
        ASSERT_EQ(x.wrong(ob.mem, ob.size, ob.seed), 0u);
    EXPECT_GT(x.stats().evictions, 0u);
    EXPECT_GT(x.stats().restores, 0u);
    for (const Obj &ob : live)
        ASSERT_EQ(uvm_mem_free(mgr, ob.mem), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Eight threads allocating, writing, mapping, checking and freeing evictable
// objects on a GPU that holds a third of what they ask for.
TEST(ResidencyPressure, StressEightThreadsUnderEviction) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            Objects x{mgr};
            std::mt19937_64 rng(static_cast<uint64_t>(t) + 100);
            std::vector<std::pair<uvm_mem_t *, uint32_t>> mine;
            for (int i = 0; i < 60; ++i) {
                const uint32_t seed = static_cast<uint32_t>(t * 1000 + i);
                uvm_mem_t *m = x.alloc(2 * M);
                if (!m) {
                    failures++;
                    continue;
                }
                failures += x.write(m, 2 * M, seed) != UVM_OK;
                failures += uvm_mem_map_gpu_kernel(mgr, m, 0) != UVM_OK;
                mine.emplace_back(m, seed);
                if (mine.size() > 3) {
                    const size_t k = rng() % mine.size();
                    failures += x.wrong(mine[k].first, 2 * M, mine[k].second) != 0;
                    failures += uvm_mem_free(mgr, mine[k].first) != UVM_OK;
                    mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
                }
            }
            for (auto &m : mine) {
                failures += x.wrong(m.first, 2 * M, m.second) != 0;
                failures += uvm_mem_free(mgr, m.first) != UVM_OK;
            }
        });
    }
    for (auto &th : threads)
        th.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A backend failing its Nth call along eviction and restore, for every N:
// the call reports it, and the object keeps its bytes either way.
TEST(ResidencyFaults, EveryFailureAlongEvictionAndRestoreKeepsTheBytes) {
    for (int restore = 0; restore < 2; ++restore) {
        for (uint64_t n = 1;; ++n) {
            SCOPED_TRACE(n);
            uvm::backend::FaultInjectingBackend *faults = nullptr;
            uvm_manager_t *mgr = faulty_sim(sim_params(1, 64 * M).sim, &faults);
            ASSERT_NE(mgr, nullptr);
            Objects x{mgr};
            uvm_mem_t *a = x.alloc(4 * M);
            ASSERT_NE(a, nullptr);
            ASSERT_EQ(x.write(a, 4 * M, 5), UVM_OK);
            ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, a, 0), UVM_OK);
            ASSERT_EQ(uvm_mem_map_gpu_user(mgr, a, 0, 0), UVM_OK);
            uvm_mem_info_t before;
            ASSERT_EQ(uvm_mem_info(mgr, a, &before), UVM_OK);
            if (restore)
                ASSERT_EQ(uvm_mem_evict(mgr, a), UVM_OK);
            faults->fail_call(n);
            const uvm_status_t s = restore ? uvm_mem_make_resident(mgr, a) : uvm_mem_evict(mgr, a);
            const bool fired = faults->fired();
            faults->fail_call(0);
            if (fired) {
                EXPECT_EQ(s, UVM_ERR_BACKEND);
                EXPECT_EQ(x.residency(a).resident, restore ? 0 : 1) << "a failed call changed residency";
            } else {
                EXPECT_EQ(s, UVM_OK);
            }
            EXPECT_EQ(x.wrong(a, 4 * M, 5), 0u);
            uvm_gpu_stats_t st = x.stats();
            EXPECT_EQ(st.evicted_objects, 0u);
            EXPECT_EQ(st.kernel_mappings, 1u) << "the kernel mapping came back";
            EXPECT_EQ(st.user_mappings, 1u) << "the user mapping came back";
            uvm_mem_info_t after;
            ASSERT_EQ(uvm_mem_info(mgr, a, &after), UVM_OK);
            EXPECT_EQ(after.user_address, before.user_address);
            ASSERT_EQ(uvm_mem_free(mgr, a), UVM_OK);
            ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
            EXPECT_EQ(x.stats().root_chunks, 0u);
            EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
            if (!fired)
                break;
        }
    }
}
