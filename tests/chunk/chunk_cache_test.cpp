// The per-thread chunk caches: memory a thread keeps cached is never lost to
// the others (exhaustion, statistics, trim, thread exit, teardown).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "api/handles.h"
#include "chunk/chunk_cache.h"
#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {
constexpr uint64_t K = 1024, M = 1024 * 1024;

// A thread that allocates and frees one-chunk objects, then waits, keeping
// whatever its cache holds, until told to exit.
struct Holder {
    std::atomic<bool> ready{false}, go{false};
    std::thread thread;
    Holder(uvm_manager_t *mgr, uint64_t chunk, int count) {
        thread = std::thread([=] {
            std::vector<uvm_mem_t *> objects(count);
            const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, chunk, 0, chunk);
            for (auto &o : objects)
                EXPECT_EQ(uvm_mem_alloc(mgr, &a, &o), UVM_OK);
            for (auto &o : objects)
                EXPECT_EQ(uvm_mem_free(mgr, o), UVM_OK);
            ready = true;
            while (!go)
                std::this_thread::yield();
        });
        while (!ready)
            std::this_thread::yield();
    }
    ~Holder() {
        go = true;
        thread.join();
    }
};

uint64_t free_bytes(uvm_manager_t *mgr) {
    uvm_gpu_stats_t s;
    EXPECT_EQ(uvm_gpu_stats(mgr, 0, &s), UVM_OK);
    return s.bytes_free[0] + s.bytes_free[1] + s.bytes_free[2];
}

}  // namespace

TEST(ChunkCache, ExhaustionTakesBackWhatOtherThreadsCache) {
    uvm_manager_params_t p = sim_params(1, 32 * M);  // 16 root chunks
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    {
        Holder h(mgr, 2 * M, 3);  // its cache keeps some 2 MiB roots
        uvm_mem_t *all;
        const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 32 * M);
        ASSERT_EQ(uvm_mem_alloc(mgr, &a, &all), UVM_OK) << "the whole GPU, cached chunks included";
        uvm_mem_t *more;
        const uvm_mem_alloc_params_t one = alloc_params(UVM_BACKING_VIDMEM, 4 * K);
        EXPECT_EQ(uvm_mem_alloc(mgr, &one, &more), UVM_ERR_OUT_OF_MEMORY);
        ASSERT_EQ(uvm_mem_free(mgr, all), UVM_OK);
    }
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(ChunkCache, StatsTrimAndThreadExitSeeEveryChunk) {
    uvm_manager_params_t p = sim_params(1, 64 * M);
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    {
        Holder small(mgr, 4 * K, 40), medium(mgr, 64 * K, 40);
        // Nothing is allocated: every byte the PMM holds is free, whoever cached it.
        uvm_gpu_stats_t s;
        ASSERT_EQ(uvm_gpu_stats(mgr, 0, &s), UVM_OK);
        EXPECT_EQ(s.bytes_pinned[0] + s.bytes_pinned[1] + s.bytes_pinned[2], 0u);
        EXPECT_EQ(s.bytes_free[0] + s.bytes_free[1] + s.bytes_free[2], s.root_chunks * 2 * M)
            << "every byte held is free, cached or not";
        uint64_t released = 0;
        ASSERT_EQ(uvm_gpu_trim(mgr, 0, &released), UVM_OK);
        EXPECT_GT(released, 0u);
        EXPECT_EQ(free_bytes(mgr), 0u);
    }
    // Threads that cached chunks and exited gave them back.
    {
        std::thread t([mgr] {
            const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 64 * K, 0, 64 * K);
            for (int i = 0; i < 10; ++i) {
                uvm_mem_t *m;
                ASSERT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_OK);
                ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
            }
        });
        t.join();
    }
    uint64_t released = 0;
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, &released), UVM_OK);
    EXPECT_EQ(released, 2 * M);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Reading the statistics changes nothing: the chunks threads cache stay
// cached (a metrics scrape must not empty every thread's cache), and they
// count as free, not pinned.
TEST(ChunkCache, ReadingStatisticsLeavesEveryCacheAsItWas) {
    uvm_manager_params_t p = sim_params(1, 64 * M);
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    {
        Holder small(mgr, 4 * K, 40), medium(mgr, 64 * K, 40);
        uvm::ChunkCaches &caches = uvm::from_handle(mgr)->gpu(0).caches;
        uint64_t before[3], after[3];
        caches.cached_bytes(before);
        ASSERT_GT(before[0] + before[1], 0u) << "the threads cache nothing: the test tests nothing";
        uvm_gpu_stats_t first, second;
        ASSERT_EQ(uvm_gpu_stats(mgr, 0, &first), UVM_OK);
        ASSERT_EQ(uvm_gpu_stats(mgr, 0, &second), UVM_OK);
        caches.cached_bytes(after);
        for (int i = 0; i < 3; ++i)
            EXPECT_EQ(after[i], before[i]) << "chunk size index " << i;
        for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(first.bytes_free[i], second.bytes_free[i]);
            EXPECT_EQ(first.bytes_pinned[i], 0u) << "cached chunks are free, not pinned";
            EXPECT_GE(first.bytes_free[i], before[i]);
        }
        EXPECT_EQ(first.root_chunks, second.root_chunks);
        char text[1 << 16];
        size_t needed = 0;
        ASSERT_EQ(uvm_manager_metrics(mgr, text, sizeof(text), &needed), UVM_OK);
        ASSERT_EQ(uvm_manager_snapshot(mgr, text, sizeof(text), &needed), UVM_OK);
        caches.cached_bytes(after);
        for (int i = 0; i < 3; ++i)
            EXPECT_EQ(after[i], before[i]) << "a scrape emptied the caches, chunk size index " << i;
    }
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// The cached chunks by address are the cached bytes, each a chunk the PMM
// counts as allocated; asking leaves them cached.
TEST(ChunkCache, CachedChunksAreTheCachedBytesByAddress) {
    uvm_manager_params_t p = sim_params(1, 64 * M);
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    {
        Holder small(mgr, 4 * K, 40), medium(mgr, 64 * K, 40), large(mgr, 2 * M, 3);
        uvm::GpuState &gpu = uvm::from_handle(mgr)->gpu(0);
        std::vector<uint64_t> chunks[3];
        gpu.caches.cached_chunks(chunks);
        uint64_t bytes[3];
        gpu.caches.cached_bytes(bytes);
        const uint64_t sizes[3] = {4 * K, 64 * K, 2 * M};
        for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(chunks[i].size() * sizes[i], bytes[i]) << "chunk size index " << i;
            for (uint64_t phys : chunks[i])
                EXPECT_EQ(gpu.pmm.state(phys, sizes[i]), uvm::chunk::ChunkState::Pinned);
        }
        ASSERT_GT(bytes[0] + bytes[1] + bytes[2], 0u) << "the threads cache nothing: the test tests nothing";
        uint64_t after[3];
        gpu.caches.cached_bytes(after);
        for (int i = 0; i < 3; ++i)
            EXPECT_EQ(after[i], bytes[i]);
    }
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(ChunkCache, ManagersComeAndGoUnderAThreadThatKeepsRunning) {
    // One thread's caches outlive the managers they served: new managers must
    // not see stale entries, and teardown must not wait on the thread.
    for (int round = 0; round < 20; ++round) {
        uvm_manager_params_t p = sim_params(1, 64 * M);
        uvm_manager_t *mgr;
        ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
        const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 4 * K);
        uvm_mem_t *m;
        ASSERT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
        EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
    }
}
