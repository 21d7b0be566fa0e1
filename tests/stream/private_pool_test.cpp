// Private pools (stream/private_pool.h, uvm.h "Private pools"): memory a
// stream allocates while set to a pool stays the pool's for its life; it is
// reused by the pool's later allocations (on the stream it was freed on, or
// on any once that stream's work is done), shared by captures one after
// another, never given to anyone else (other streams, plain allocations,
// trim, the OOM path, a release threshold), and goes back once the pool is
// destroyed and the work queued on the GPU's streams is done. Counted in
// uvm_pool_info and uvm_gpu_stats' held_private_bytes. The semantics run on
// sim (and on a GPU where there is one); held work, fault injection and the
// bad-input and thread cases on sim. tests/cuda/capture_test.cpp captures
// into a pool on the stand-in driver.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "backend/fault_injection.h"
#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;

uvm_pool_info_t pool_info(uvm_manager_t *mgr, uvm_pool_t *pool) {
    uvm_pool_info_t i;
    std::memset(&i, 0, sizeof(i));
    EXPECT_EQ(uvm_pool_info(mgr, pool, &i), UVM_OK);
    return i;
}

uvm_gpu_stats_t gpu_stats(uvm_manager_t *mgr, uint32_t gpu = 0) {
    uvm_gpu_stats_t s;
    std::memset(&s, 0, sizeof(s));
    EXPECT_EQ(uvm_gpu_stats(mgr, gpu, &s), UVM_OK);
    return s;
}

// The held parts add up to the held bytes (nothing moves while one thread reads).
void expect_held_parts(const uvm_gpu_stats_t &s) {
    EXPECT_EQ(s.held_live_bytes + s.held_cached_bytes + s.held_pooled_bytes + s.held_retiring_bytes +
                  s.held_private_bytes + s.held_unused_bytes + s.held_other_bytes,
              s.held_bytes);
    EXPECT_EQ(s.held_other_bytes, 0u);
}

uint64_t phys_of(uvm_manager_t *mgr, uvm_mem_t *mem) {
    uvm_gpu_phys_address_t pa;
    std::memset(&pa, 0, sizeof(pa));
    EXPECT_EQ(uvm_mem_gpu_phys_address(mgr, mem, 0, 0, 1, &pa), UVM_OK);
    return pa.address;
}

uvm_status_t alloc_gpu(uvm_manager_t *mgr, uvm_stream_t *s, uint64_t size, uvm_mem_t **out, uint32_t flags = 0,
                       uint32_t gpu = 0) {
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size, gpu, 0, flags);
    uint64_t address = 0;
    return uvm_mem_alloc_gpu(mgr, &p, s, out, &address);
}

class PoolTest : public ManagerTest {
protected:
    void SetUp() override {
        ManagerTest::SetUp();
        if (!IsSkipped() && !HasFatalFailure() && on_cuda())
            warm_up_streams();
    }
    void TearDown() override {
        if (mgr_) {
            for (uvm_stream_t *s : streams_)
                EXPECT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);
            for (uvm_pool_t *p : pools_)
                EXPECT_EQ(uvm_pool_destroy(mgr_, p), UVM_OK);
        }
        ManagerTest::TearDown();
    }
    uvm_stream_t *stream(uint32_t gpu = 0) {
        uvm_stream_t *s = nullptr;
        EXPECT_EQ(uvm_stream_create(mgr_, gpu, nullptr, &s), UVM_OK);
        streams_.push_back(s);
        return s;
    }
    uvm_pool_t *pool(uint32_t gpu = 0) {
        uvm_pool_t *p = nullptr;
        EXPECT_EQ(uvm_pool_create(mgr_, gpu, &p), UVM_OK);
        pools_.push_back(p);
        return p;
    }
    void forget(uvm_pool_t *p) { pools_.erase(std::find(pools_.begin(), pools_.end(), p)); }
    uvm_mem_t *on(uvm_stream_t *s, uint64_t size, uint32_t flags = 0) {
        uvm_mem_t *m = nullptr;
        EXPECT_EQ(alloc_gpu(mgr_, s, size, &m, flags), UVM_OK);
        return m;
    }
    uint64_t phys(uvm_mem_t *m) { return phys_of(mgr_, m); }
    uvm_pool_info_t info(uvm_pool_t *p) { return pool_info(mgr_, p); }

    std::vector<uvm_stream_t *> streams_;
    std::vector<uvm_pool_t *> pools_;
};

// A stream's allocations are the pool's while it is set; their memory stays
// the pool's when freed, and its next allocation there takes it back.
TEST_P(PoolTest, AllocationsOnAStreamSetToItAreItsObjects) {
    uvm_pool_t *p = pool();
    uvm_stream_t *s = stream();
    ASSERT_EQ(uvm_stream_set_pool(mgr_, s, p), UVM_OK);
    uvm_pool_info_t i = info(p);
    EXPECT_EQ(i.gpu, 0u);
    EXPECT_EQ(i.streams, 1u);
    EXPECT_EQ(i.held_bytes, 0u);

    uvm_mem_t *a = on(s, 4 * M);
    const uint64_t a_phys = phys(a);
    i = info(p);
    EXPECT_EQ(i.objects, 1u);
    EXPECT_EQ(i.live_bytes, 4 * M);
    EXPECT_EQ(i.free_bytes, 0u);
    EXPECT_EQ(i.held_bytes, 4 * M);
    ASSERT_EQ(uvm_mem_free_async(mgr_, a, s), UVM_OK);
    i = info(p);
    EXPECT_EQ(i.objects, 0u);
    EXPECT_EQ(i.live_bytes, 0u);
    EXPECT_EQ(i.free_bytes, 4 * M);
    EXPECT_EQ(i.held_bytes, 4 * M);
    uvm_gpu_stats_t g = gpu_stats(mgr_);
    EXPECT_EQ(g.held_private_bytes, 4 * M);
    EXPECT_EQ(g.vidmem_objects, 0u);
    expect_held_parts(g);

    // Within the pool: its freed memory again (as a capture's later allocations).
    uvm_mem_t *b = on(s, 4 * M);
    EXPECT_EQ(phys(b), a_phys);
    EXPECT_EQ(info(p).free_bytes, 0u);
    ASSERT_EQ(uvm_mem_free_async(mgr_, b, s), UVM_OK);
    // A smaller request takes part of the run; the rest stays free.
    uvm_mem_t *c = on(s, 2 * M);
    EXPECT_EQ(phys(c), a_phys);
    i = info(p);
    EXPECT_EQ(i.live_bytes, 2 * M);
    EXPECT_EQ(i.free_bytes, 2 * M);
    ASSERT_EQ(uvm_mem_free_async(mgr_, c, s), UVM_OK);

    // Unset: the stream's allocations are nobody's pool's again, and none of
    // them gets the pool's memory; nor another stream's, a plain
    // allocation, or trim.
    ASSERT_EQ(uvm_stream_set_pool(mgr_, s, nullptr), UVM_OK);
    EXPECT_EQ(info(p).streams, 0u);
    uvm_stream_t *t = stream();
    uvm_mem_t *d = on(s, 4 * M), *e = on(t, 4 * M), *f = nullptr;
    const uvm_mem_alloc_params_t plain = alloc_params(UVM_BACKING_VIDMEM, 4 * M);
    ASSERT_EQ(uvm_mem_alloc(mgr_, &plain, &f), UVM_OK);
    for (uvm_mem_t *m : {d, e, f})
        EXPECT_NE(phys(m), a_phys);
    i = info(p);
    EXPECT_EQ(i.objects, 0u);
    EXPECT_EQ(i.free_bytes, 4 * M);
    ASSERT_EQ(uvm_mem_free_async(mgr_, d, s), UVM_OK);
    ASSERT_EQ(uvm_mem_free_async(mgr_, e, t), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, f), UVM_OK);
    ASSERT_EQ(uvm_stream_synchronize(mgr_, s), UVM_OK);
    ASSERT_EQ(uvm_stream_synchronize(mgr_, t), UVM_OK);
    uint64_t released = 0;
    ASSERT_EQ(uvm_gpu_trim(mgr_, 0, &released), UVM_OK);
    g = gpu_stats(mgr_);
    EXPECT_EQ(g.held_private_bytes, 4 * M) << "trim gave the pool's memory back";
    EXPECT_GE(g.held_bytes, 4 * M);
    expect_held_parts(g);
    EXPECT_EQ(info(p).free_bytes, 4 * M);
}

// What a pool does not hold: requests whose memory cannot be kept for a
// graph (evictable, discardable, user-mappable), sysmem, another GPU's.
TEST_P(PoolTest, RequestsItDoesNotTake) {
    uvm_pool_t *p = pool();
    uvm_stream_t *s = stream();
    ASSERT_EQ(uvm_stream_set_pool(mgr_, s, p), UVM_OK);
    std::vector<uvm_mem_t *> kept;
    for (uint32_t flags : {UVM_MEM_EVICTABLE, UVM_MEM_DISCARDABLE, UVM_MEM_USER_MAPPABLE}) {
        uvm_mem_t *m = nullptr;
        ASSERT_EQ(alloc_gpu(mgr_, s, 2 * M, &m, flags), UVM_OK) << flags;
        kept.push_back(m);
    }
    const uvm_mem_alloc_params_t sys = alloc_params(UVM_BACKING_SYSMEM, 2 * M);
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(uvm_mem_alloc_async(mgr_, &sys, s, &m), UVM_OK);
    kept.push_back(m);
    if (gpus_ > 1) {
        ASSERT_EQ(alloc_gpu(mgr_, s, 2 * M, &m, 0, 1), UVM_OK);
        kept.push_back(m);
    }
    EXPECT_EQ(info(p).held_bytes, 0u);
    for (uvm_mem_t *k : kept)
        ASSERT_EQ(uvm_mem_free_async(mgr_, k, s), UVM_OK);
    EXPECT_EQ(info(p).held_bytes, 0u);
    // ... and one it does, as uvm_mem_alloc_async gives it (no mapping asked).
    const uvm_mem_alloc_params_t vid = alloc_params(UVM_BACKING_VIDMEM, 64 * K);
    ASSERT_EQ(uvm_mem_alloc_async(mgr_, &vid, s, &m), UVM_OK);
    EXPECT_EQ(info(p).live_bytes, 64 * K);
    ASSERT_EQ(uvm_mem_free_async(mgr_, m, s), UVM_OK);
    EXPECT_EQ(info(p).free_bytes, 64 * K);
}

// Memory freed on one stream serves the pool's allocations on that stream;
// another stream of the pool gets it once the first one's work is done.
TEST_P(PoolTest, FreedMemoryServesItsStreamThenAny) {
    uvm_pool_t *p = pool();
    uvm_stream_t *s = stream(), *t = stream();
    ASSERT_EQ(uvm_stream_set_pool(mgr_, s, p), UVM_OK);
    ASSERT_EQ(uvm_stream_set_pool(mgr_, t, p), UVM_OK);
    EXPECT_EQ(info(p).streams, 2u);
    uvm_mem_t *a = on(s, 4 * M);
    const uint64_t a_phys = phys(a);
    ASSERT_EQ(uvm_mem_free_async(mgr_, a, s), UVM_OK);
    uvm_mem_t *b = on(t, 4 * M);
    const uint64_t b_phys = phys(b);
    EXPECT_NE(b_phys, a_phys) << "t took memory s's work may still use";
    ASSERT_EQ(uvm_mem_free_async(mgr_, b, t), UVM_OK);
    uvm_mem_t *c = on(t, 4 * M);
    EXPECT_EQ(phys(c), b_phys);
    ASSERT_EQ(uvm_mem_free_async(mgr_, c, t), UVM_OK);
    EXPECT_EQ(info(p).free_bytes, 8 * M);

    ASSERT_EQ(uvm_stream_synchronize(mgr_, s), UVM_OK);
    const uint64_t held = gpu_stats(mgr_).held_bytes;
    uvm_mem_t *d = on(t, 4 * M), *e = on(t, 4 * M);
    EXPECT_EQ((std::set<uint64_t>{phys(d), phys(e)}), (std::set<uint64_t>{a_phys, b_phys}));
    EXPECT_EQ(gpu_stats(mgr_).held_bytes, held) << "grew where the pool had the memory";
    const uvm_pool_info_t i = info(p);
    EXPECT_EQ(i.free_bytes, 0u);
    EXPECT_EQ(i.live_bytes, 8 * M);
    EXPECT_EQ(i.objects, 2u);
    ASSERT_EQ(uvm_mem_free_async(mgr_, d, t), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, e), UVM_OK);
}

// Captures one after another into one pool share it (PyTorch's pool=): the
// second reuses what the first freed; what each kept live stays its own.
TEST_P(PoolTest, SharedByCapturesOneAfterAnother) {
    uvm_pool_t *p = pool();
    uvm_stream_t *s = stream();
    ASSERT_EQ(uvm_stream_set_pool(mgr_, s, p), UVM_OK);  // the first capture
    uvm_mem_t *out1 = on(s, 8 * M), *tmp = on(s, 8 * M);
    const uint64_t tmp_phys = phys(tmp);
    ASSERT_EQ(uvm_mem_free_async(mgr_, tmp, s), UVM_OK);
    ASSERT_EQ(uvm_stream_set_pool(mgr_, s, nullptr), UVM_OK);
    uvm_mem_t *eager = on(s, 8 * M);  // between the captures: not the pool's
    EXPECT_NE(phys(eager), tmp_phys);
    ASSERT_EQ(uvm_stream_set_pool(mgr_, s, p), UVM_OK);  // the second capture
    uvm_mem_t *out2 = on(s, 8 * M);
    EXPECT_EQ(phys(out2), tmp_phys);
    EXPECT_NE(phys(out2), phys(out1));
    ASSERT_EQ(uvm_stream_set_pool(mgr_, s, nullptr), UVM_OK);
    uvm_pool_info_t i = info(p);
    EXPECT_EQ(i.held_bytes, 16 * M);
    EXPECT_EQ(i.live_bytes, 16 * M);
    EXPECT_EQ(i.objects, 2u);
    // The outputs, freed after, go back to the pool, not to the stream.
    ASSERT_EQ(uvm_mem_free_async(mgr_, out1, s), UVM_OK);
    ASSERT_EQ(uvm_mem_free_async(mgr_, out2, s), UVM_OK);
    ASSERT_EQ(uvm_mem_free_async(mgr_, eager, s), UVM_OK);
    i = info(p);
    EXPECT_EQ(i.free_bytes, 16 * M);
    EXPECT_EQ(i.objects, 0u);
    EXPECT_EQ(gpu_stats(mgr_).held_private_bytes, 16 * M);
}

// Destroyed, the pool's free memory goes back; its live objects are
// anyone's memory when freed.
TEST_P(PoolTest, ReleasedWithThePool) {
    uvm_pool_t *p = pool();
    uvm_stream_t *s = stream();
    ASSERT_EQ(uvm_stream_set_pool(mgr_, s, p), UVM_OK);
    uvm_mem_t *a = on(s, 4 * M), *live = on(s, 2 * M);
    ASSERT_EQ(uvm_mem_free_async(mgr_, a, s), UVM_OK);
    EXPECT_EQ(uvm_pool_destroy(mgr_, p), UVM_ERR_BUSY) << "a stream allocates to it";
    EXPECT_EQ(info(p).held_bytes, 6 * M);
    ASSERT_EQ(uvm_stream_set_pool(mgr_, s, nullptr), UVM_OK);
    ASSERT_EQ(uvm_pool_destroy(mgr_, p), UVM_OK);
    forget(p);
    uvm_pool_info_t i;
    EXPECT_EQ(uvm_pool_info(mgr_, p, &i), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_pool_destroy(mgr_, p), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_stream_set_pool(mgr_, s, p), UVM_ERR_INVALID_HANDLE);
    ASSERT_EQ(uvm_stream_synchronize(mgr_, s), UVM_OK);
    uvm_gpu_stats_t g = gpu_stats(mgr_);
    EXPECT_EQ(g.held_private_bytes, 0u);
    EXPECT_EQ(g.held_retiring_bytes, 0u);
    expect_held_parts(g);
    EXPECT_EQ(g.vidmem_objects, 1u);
    ASSERT_EQ(uvm_mem_free_async(mgr_, live, s), UVM_OK);
    ASSERT_EQ(uvm_stream_synchronize(mgr_, s), UVM_OK);
    g = gpu_stats(mgr_);
    EXPECT_EQ(g.vidmem_objects, 0u);
    EXPECT_EQ(g.held_private_bytes, 0u);
    uint64_t released = 0;
    ASSERT_EQ(uvm_gpu_trim(mgr_, 0, &released), UVM_OK);
    EXPECT_EQ(gpu_stats(mgr_).root_chunks, 0u) << "the pool's memory did not come back";
}

// The pool's memory leaves it by no other way: the OOM path, a release
// threshold and trim leave it, and what a full GPU could give others excludes it.
TEST(PrivatePool, KeptFromTheOomPathTrimAndAReleaseThreshold) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_pool_t *p = nullptr;
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_pool_create(mgr, 0, &p), UVM_OK);
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &s), UVM_OK);
    ASSERT_EQ(uvm_stream_set_pool(mgr, s, p), UVM_OK);
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(alloc_gpu(mgr, s, 16 * M, &m), UVM_OK);
    const uint64_t pool_phys = phys_of(mgr, m);
    ASSERT_EQ(uvm_mem_free_async(mgr, m, s), UVM_OK);
    ASSERT_EQ(uvm_stream_set_pool(mgr, s, nullptr), UVM_OK);
    ASSERT_EQ(uvm_gpu_set_release_threshold(mgr, 0, 0), UVM_OK);
    std::vector<uvm_mem_t *> others;
    uvm_status_t status = UVM_OK;
    while (status == UVM_OK && others.size() < 64) {
        status = alloc_gpu(mgr, s, 2 * M, &m);
        if (status == UVM_OK)
            others.push_back(m);
    }
    EXPECT_EQ(status, UVM_ERR_OUT_OF_MEMORY);
    EXPECT_LE(others.size(), (64 - 16) / 2u);
    for (uvm_mem_t *o : others) {
        const uint64_t at = phys_of(mgr, o);
        EXPECT_TRUE(at + 2 * M <= pool_phys || at >= pool_phys + 16 * M) << "handed out the pool's memory";
    }
    EXPECT_EQ(pool_info(mgr, p).free_bytes, 16 * M);
    for (uvm_mem_t *o : others)
        ASSERT_EQ(uvm_mem_free_async(mgr, o, s), UVM_OK);
    ASSERT_EQ(uvm_stream_synchronize(mgr, s), UVM_OK);
    uint64_t released = 0;
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, &released), UVM_OK);
    uvm_gpu_stats_t g = gpu_stats(mgr);
    EXPECT_EQ(g.held_private_bytes, 16 * M);
    EXPECT_EQ(g.held_bytes, 16 * M);
    expect_held_parts(g);
    // The pool's next allocation is that memory again, with no growth.
    ASSERT_EQ(uvm_stream_set_pool(mgr, s, p), UVM_OK);
    ASSERT_EQ(alloc_gpu(mgr, s, 16 * M, &m), UVM_OK);
    EXPECT_EQ(phys_of(mgr, m), pool_phys);
    EXPECT_EQ(gpu_stats(mgr).held_bytes, 16 * M);
    ASSERT_EQ(uvm_mem_free_async(mgr, m, s), UVM_OK);
    // Left to the manager's teardown: a pool with memory, a stream set to it.
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Sim: a destroyed pool's memory waits for the work queued on the GPU's
// streams (a graph launched and still running), then comes back.
TEST(PrivatePool, DestroyedPoolsMemoryWaitsForTheGpusStreams) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_pool_t *p = nullptr;
    uvm_stream_t *s = nullptr, *launch = nullptr;
    ASSERT_EQ(uvm_pool_create(mgr, 0, &p), UVM_OK);
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &s), UVM_OK);
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &launch), UVM_OK);
    ASSERT_EQ(uvm_stream_set_pool(mgr, s, p), UVM_OK);
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(alloc_gpu(mgr, s, 8 * M, &m), UVM_OK);
    const uint64_t pool_phys = phys_of(mgr, m);
    ASSERT_EQ(uvm_mem_free_async(mgr, m, s), UVM_OK);
    ASSERT_EQ(uvm_stream_set_pool(mgr, s, nullptr), UVM_OK);
    ASSERT_EQ(uvm_sim_stream_hold(mgr, launch), UVM_OK);  // the graph, launched on another stream
    ASSERT_EQ(uvm_pool_destroy(mgr, p), UVM_OK);
    uvm_gpu_stats_t g = gpu_stats(mgr);
    EXPECT_EQ(g.held_private_bytes, 0u);
    EXPECT_EQ(g.held_retiring_bytes, 8 * M);
    expect_held_parts(g);
    std::vector<uvm_mem_t *> others;
    while (others.size() < 32 && alloc_gpu(mgr, nullptr, 2 * M, &m) == UVM_OK)
        others.push_back(m);
    EXPECT_LE(others.size(), (64 - 8) / 2u) << "the memory came back while the launch ran";
    for (uvm_mem_t *o : others) {
        const uint64_t at = phys_of(mgr, o);
        EXPECT_TRUE(at + 2 * M <= pool_phys || at >= pool_phys + 8 * M);
    }
    for (uvm_mem_t *o : others)
        ASSERT_EQ(uvm_mem_free(mgr, o), UVM_OK);
    ASSERT_EQ(uvm_sim_stream_release(mgr, launch), UVM_OK);
    ASSERT_EQ(uvm_stream_synchronize(mgr, launch), UVM_OK);
    g = gpu_stats(mgr);
    EXPECT_EQ(g.held_retiring_bytes, 0u);
    uint64_t released = 0;
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, &released), UVM_OK);
    EXPECT_EQ(gpu_stats(mgr).root_chunks, 0u);
    ASSERT_EQ(uvm_stream_destroy(mgr, launch), UVM_OK);
    ASSERT_EQ(uvm_stream_destroy(mgr, s), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Sim: an object of a pool freed with uvm_mem_free while work that uses it
// runs comes back to the pool, for any of its streams, once the work is done.
TEST(PrivatePool, UnorderedFreeComesBackWhenTheWorkIsDone) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_pool_t *p = nullptr;
    uvm_stream_t *s = nullptr, *t = nullptr;
    ASSERT_EQ(uvm_pool_create(mgr, 0, &p), UVM_OK);
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &s), UVM_OK);
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &t), UVM_OK);
    ASSERT_EQ(uvm_stream_set_pool(mgr, s, p), UVM_OK);
    ASSERT_EQ(uvm_stream_set_pool(mgr, t, p), UVM_OK);
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(alloc_gpu(mgr, s, 4 * M, &m), UVM_OK);
    const uint64_t pool_phys = phys_of(mgr, m);
    ASSERT_EQ(uvm_sim_stream_hold(mgr, s), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    uvm_pool_info_t i = pool_info(mgr, p);
    EXPECT_EQ(i.objects, 1u) << "retiring, still the pool's object";
    EXPECT_EQ(i.free_bytes, 0u);
    EXPECT_EQ(gpu_stats(mgr).held_retiring_bytes, 4 * M);
    ASSERT_EQ(uvm_sim_stream_release(mgr, s), UVM_OK);
    ASSERT_EQ(uvm_stream_synchronize(mgr, s), UVM_OK);
    i = pool_info(mgr, p);
    EXPECT_EQ(i.objects, 0u);
    EXPECT_EQ(i.free_bytes, 4 * M);
    ASSERT_EQ(alloc_gpu(mgr, t, 4 * M, &m), UVM_OK);
    EXPECT_EQ(phys_of(mgr, m), pool_phys) << "work done: for any stream of the pool";
    ASSERT_EQ(uvm_mem_free_async(mgr, m, t), UVM_OK);
    for (uvm_stream_t *st : {s, t})
        ASSERT_EQ(uvm_stream_destroy(mgr, st), UVM_OK);
    EXPECT_EQ(pool_info(mgr, p).streams, 0u) << "destroying a stream unsets it";
    ASSERT_EQ(uvm_pool_destroy(mgr, p), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Sim: UVM_MEM_ZERO of the pool's memory is done on the stream.
TEST(PrivatePool, ZeroedInTheStreamsOrder) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_pool_t *p = nullptr;
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_pool_create(mgr, 0, &p), UVM_OK);
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &s), UVM_OK);
    ASSERT_EQ(uvm_stream_set_pool(mgr, s, p), UVM_OK);
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(alloc_gpu(mgr, s, 2 * M, &m), UVM_OK);
    ASSERT_EQ(write_pattern(mgr, m, 2 * M, 7), UVM_OK);
    const uint64_t at = phys_of(mgr, m);
    ASSERT_EQ(uvm_mem_free_async(mgr, m, s), UVM_OK);
    ASSERT_EQ(alloc_gpu(mgr, s, 2 * M, &m, UVM_MEM_ZERO), UVM_OK);
    EXPECT_EQ(phys_of(mgr, m), at);
    ASSERT_EQ(uvm_stream_synchronize(mgr, s), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr, m, 2 * M, UINT32_MAX), 0u);
    uvm_mem_info_t mi;
    ASSERT_EQ(uvm_mem_info(mgr, m, &mi), UVM_OK);
    EXPECT_TRUE(mi.flags & UVM_MEM_ZERO);
    ASSERT_EQ(uvm_mem_free_async(mgr, m, s), UVM_OK);
    ASSERT_EQ(uvm_stream_destroy(mgr, s), UVM_OK);
    ASSERT_EQ(uvm_pool_destroy(mgr, p), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A request may name its pool (params.pool, as cudaMallocFromPoolAsync),
// whatever its stream's; one the pool cannot hold is refused.
TEST(PrivatePool, NamedByTheRequest) {
    uvm_manager_t *mgr = small_sim(2, 64 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_pool_t *p = nullptr, *q = nullptr, *dead = nullptr;
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_pool_create(mgr, 0, &p), UVM_OK);
    ASSERT_EQ(uvm_pool_create(mgr, 0, &q), UVM_OK);
    ASSERT_EQ(uvm_pool_create(mgr, 0, &dead), UVM_OK);
    ASSERT_EQ(uvm_pool_destroy(mgr, dead), UVM_OK);
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &s), UVM_OK);
    ASSERT_EQ(uvm_stream_set_pool(mgr, s, q), UVM_OK);
    uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 2 * M);
    a.pool = p;
    uvm_mem_t *m = nullptr;
    uint64_t address = 0;
    ASSERT_EQ(uvm_mem_alloc_gpu(mgr, &a, s, &m, &address), UVM_OK);
    EXPECT_EQ(pool_info(mgr, p).live_bytes, 2 * M) << "the request's pool, not the stream's";
    EXPECT_EQ(pool_info(mgr, q).live_bytes, 0u);
    const uint64_t at = phys_of(mgr, m);
    ASSERT_EQ(uvm_mem_free_async(mgr, m, s), UVM_OK);
    EXPECT_EQ(pool_info(mgr, p).free_bytes, 2 * M);
    ASSERT_EQ(uvm_mem_alloc_async(mgr, &a, s, &m), UVM_OK);
    EXPECT_EQ(phys_of(mgr, m), at);
    ASSERT_EQ(uvm_mem_free_async(mgr, m, s), UVM_OK);

    // Refused, nothing taken: no stream, what a pool cannot hold, a bad handle.
    EXPECT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_alloc_gpu(mgr, &a, nullptr, &m, &address), UVM_ERR_INVALID_ARGUMENT);
    for (uint32_t flags : {UVM_MEM_EVICTABLE, UVM_MEM_DISCARDABLE, UVM_MEM_USER_MAPPABLE}) {
        uvm_mem_alloc_params_t b = a;
        b.flags = flags;
        EXPECT_EQ(uvm_mem_alloc_async(mgr, &b, s, &m), UVM_ERR_INVALID_ARGUMENT) << flags;
    }
    uvm_mem_alloc_params_t b = alloc_params(UVM_BACKING_SYSMEM, 2 * M);
    b.pool = p;
    EXPECT_EQ(uvm_mem_alloc_async(mgr, &b, s, &m), UVM_ERR_INVALID_ARGUMENT);
    b = a;
    b.gpu = 1;
    EXPECT_EQ(uvm_mem_alloc_async(mgr, &b, s, &m), UVM_ERR_INVALID_ARGUMENT) << "another GPU's";
    uvm_client_t *sleeper = nullptr;
    ASSERT_EQ(uvm_client_create_sleepable(mgr, "sleeper", &sleeper), UVM_OK);
    b = a;
    b.client = sleeper;
    EXPECT_EQ(uvm_mem_alloc_async(mgr, &b, s, &m), UVM_ERR_INVALID_ARGUMENT) << "a sleepable client's";
    b = a;
    b.pool = dead;
    EXPECT_EQ(uvm_mem_alloc_async(mgr, &b, s, &m), UVM_ERR_INVALID_HANDLE);
    b.size = 0;
    EXPECT_EQ(uvm_mem_alloc_async(mgr, &b, s, &m), UVM_ERR_INVALID_HANDLE) << "size 0 checks it too";
    const uvm_pool_info_t i = pool_info(mgr, p);
    EXPECT_EQ(i.objects, 0u);
    EXPECT_EQ(i.free_bytes, 2 * M);
    EXPECT_EQ(pool_info(mgr, q).held_bytes, 0u);
    EXPECT_EQ(gpu_stats(mgr).vidmem_objects, 0u);

    ASSERT_EQ(uvm_client_destroy(mgr, sleeper), UVM_OK);
    ASSERT_EQ(uvm_stream_destroy(mgr, s), UVM_OK);
    ASSERT_EQ(uvm_pool_destroy(mgr, p), UVM_OK);
    ASSERT_EQ(uvm_pool_destroy(mgr, q), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Objects parked whole (by the stream on a stream-ordered free, by the
// thread on a plain free) are memory outside the pool: a request to a pool
// takes none of them, nor is a bad one served by them before its check.
TEST(PrivatePool, ParkedObjectsServeNoRequestToAPool) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_pool_t *p = nullptr;
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_pool_create(mgr, 0, &p), UVM_OK);
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &s), UVM_OK);
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(alloc_gpu(mgr, s, 2 * M, &m), UVM_OK);
    const uint64_t parked = phys_of(mgr, m);
    // Work held on s: its memory is nobody else's until that work is done,
    // parked or given back to s before the PMM grows.
    ASSERT_EQ(uvm_sim_stream_hold(mgr, s), UVM_OK);
    ASSERT_EQ(uvm_mem_free_async(mgr, m, s), UVM_OK);  // kept whole by s
    ASSERT_EQ(uvm_stream_set_pool(mgr, s, p), UVM_OK);
    ASSERT_EQ(alloc_gpu(mgr, s, 2 * M, &m), UVM_OK);
    EXPECT_NE(phys_of(mgr, m), parked) << "s's memory went to the pool";
    EXPECT_EQ(pool_info(mgr, p).live_bytes, 2 * M) << "the stream's parked object went to the pool";
    ASSERT_EQ(uvm_mem_free_async(mgr, m, s), UVM_OK);
    ASSERT_EQ(uvm_sim_stream_release(mgr, s), UVM_OK);
    ASSERT_EQ(uvm_stream_set_pool(mgr, s, nullptr), UVM_OK);
    uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 64 * K);
    ASSERT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);  // kept whole by this thread
    a.pool = p;
    m = nullptr;
    EXPECT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_ERR_INVALID_ARGUMENT) << "a pool without a stream";
    EXPECT_EQ(m, nullptr);
    EXPECT_EQ(pool_info(mgr, p).objects, 0u);
    ASSERT_EQ(uvm_stream_destroy(mgr, s), UVM_OK);
    ASSERT_EQ(uvm_pool_destroy(mgr, p), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Bad input gets a clear status and leaves the pool, the stream and their
// objects as they were.
TEST(PrivatePool, BadInput) {
    uvm_manager_t *mgr = small_sim(2, 64 * M), *other = small_sim(1, 64 * M);
    ASSERT_NE(mgr, nullptr);
    ASSERT_NE(other, nullptr);
    uvm_pool_t *p = nullptr, *p1 = nullptr, *foreign = nullptr;
    EXPECT_EQ(uvm_pool_create(nullptr, 0, &p), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pool_create(mgr, 0, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pool_create(mgr, 2, &p), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(p, nullptr);
    ASSERT_EQ(uvm_pool_create(mgr, 0, &p), UVM_OK);
    ASSERT_EQ(uvm_pool_create(mgr, 1, &p1), UVM_OK);
    ASSERT_EQ(uvm_pool_create(other, 0, &foreign), UVM_OK);
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &s), UVM_OK);
    ASSERT_EQ(uvm_stream_set_pool(mgr, s, p), UVM_OK);
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(alloc_gpu(mgr, s, 2 * M, &m), UVM_OK);

    EXPECT_EQ(uvm_stream_set_pool(nullptr, s, p), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_stream_set_pool(mgr, nullptr, p), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_stream_set_pool(mgr, s, p1), UVM_ERR_INVALID_ARGUMENT) << "a pool of another GPU";
    EXPECT_EQ(uvm_stream_set_pool(mgr, s, foreign), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_stream_set_pool(mgr, reinterpret_cast<uvm_stream_t *>(uintptr_t{0x1234}), p),
              UVM_ERR_INVALID_HANDLE);
    uvm_pool_info_t i;
    EXPECT_EQ(uvm_pool_info(nullptr, p, &i), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pool_info(mgr, nullptr, &i), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pool_info(mgr, p, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pool_info(mgr, foreign, &i), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_pool_destroy(nullptr, p), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pool_destroy(mgr, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pool_destroy(mgr, foreign), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_pool_destroy(mgr, p), UVM_ERR_BUSY);

    // All as it was: the stream still allocates to p, the object is p's.
    i = pool_info(mgr, p);
    EXPECT_EQ(i.streams, 1u);
    EXPECT_EQ(i.objects, 1u);
    EXPECT_EQ(i.live_bytes, 2 * M);
    EXPECT_EQ(pool_info(mgr, p1).streams, 0u);
    EXPECT_EQ(pool_info(other, foreign).streams, 0u);
    ASSERT_EQ(uvm_mem_free_async(mgr, m, s), UVM_OK);
    EXPECT_EQ(pool_info(mgr, p).free_bytes, 2 * M);

    ASSERT_EQ(uvm_stream_destroy(mgr, s), UVM_OK);
    EXPECT_EQ(uvm_stream_set_pool(mgr, s, p), UVM_ERR_INVALID_HANDLE) << "a destroyed stream";
    ASSERT_EQ(uvm_pool_destroy(mgr, p), UVM_OK);
    EXPECT_EQ(uvm_pool_destroy(mgr, p), UVM_ERR_INVALID_HANDLE);
    ASSERT_EQ(uvm_pool_destroy(mgr, p1), UVM_OK);
    ASSERT_EQ(uvm_pool_destroy(other, foreign), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(other), UVM_OK);
}

// A backend that fails its Nth call, for every N, along a pool's paths:
// new memory, reuse zeroed on the stream, frees of every kind, destroy. The
// failing call reports it, the pool's figures match the objects that live,
// and once nothing fails everything comes back.
TEST(PrivatePool, EveryFailureLeavesThePoolConsistent) {
    for (uint64_t n = 1;; ++n) {
        SCOPED_TRACE(n);
        uvm::backend::FaultInjectingBackend *faults = nullptr;
        uvm_manager_t *mgr = faulty_sim(sim_params(1, 128 * M).sim, &faults);
        ASSERT_NE(mgr, nullptr);
        uvm_pool_t *p = nullptr;
        ASSERT_EQ(uvm_pool_create(mgr, 0, &p), UVM_OK);  // no backend call
        faults->fail_call(n);
        Steps step;
        std::vector<uvm_mem_t *> live;
        uint64_t live_bytes = 0;
        uvm_stream_t *s = nullptr;
        if (step(uvm_stream_create(mgr, 0, nullptr, &s)) && step(uvm_stream_set_pool(mgr, s, p))) {
            for (uint64_t size : {64 * K, 2 * M, 6 * M}) {
                uvm_mem_t *a = nullptr, *b = nullptr;
                if (!step(alloc_gpu(mgr, s, size, &a)))
                    break;
                live.push_back(a);
                live_bytes += size;
                if (!step(uvm_mem_free_async(mgr, a, s)))
                    break;
                live.pop_back();
                live_bytes -= size;
                if (!step(alloc_gpu(mgr, s, size, &b, UVM_MEM_ZERO)))  // the run again, zeroed on s
                    break;
                live.push_back(b);
                live_bytes += size;
                if (!step(uvm_mem_free(mgr, b)))
                    break;
                live.pop_back();
                live_bytes -= size;
            }
        }
        const bool fired = faults->fired();
        faults->fail_call(0);
        const uvm_pool_info_t i = pool_info(mgr, p);
        EXPECT_EQ(i.objects, live.size());
        EXPECT_EQ(i.live_bytes, live_bytes);
        expect_held_parts(gpu_stats(mgr));
        for (uvm_mem_t *m : live)
            EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
        if (s)
            EXPECT_EQ(uvm_stream_destroy(mgr, s), UVM_OK);
        EXPECT_EQ(pool_info(mgr, p).live_bytes, 0u);
        EXPECT_EQ(uvm_pool_destroy(mgr, p), UVM_OK);
        uvm_manager_stats_t ms;
        ASSERT_EQ(uvm_manager_stats(mgr, &ms), UVM_OK);
        EXPECT_EQ(ms.objects, 0u);
        EXPECT_EQ(ms.retiring_objects, 0u);
        uint64_t released = 0;
        ASSERT_EQ(uvm_gpu_trim(mgr, 0, &released), UVM_OK);
        const uvm_gpu_stats_t g = gpu_stats(mgr);
        EXPECT_EQ(g.root_chunks, 0u);
        EXPECT_EQ(g.held_private_bytes, 0u);
        EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
        EXPECT_EQ(fired, step.failed);
        if (!fired)
            break;  // the whole sequence ran without reaching call n
    }
}

// Threads allocate to shared pools on streams of their own, set and unset
// them, and free, while another reads the figures: they always add up, and
// everything is accounted for at the end.
TEST(PrivatePool, Threads) {
    uvm_manager_t *mgr = small_sim(1, 512 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_pool_t *pools[2] = {};
    for (uvm_pool_t *&p : pools)
        ASSERT_EQ(uvm_pool_create(mgr, 0, &p), UVM_OK);
    constexpr int kThreads = 4;
    std::atomic<bool> done{false};
    std::atomic<int> failures{0};
    std::thread reader([&] {
        while (!done.load()) {
            for (uvm_pool_t *p : pools) {
                uvm_pool_info_t i;
                if (uvm_pool_info(mgr, p, &i) != UVM_OK || i.held_bytes != i.live_bytes + i.free_bytes)
                    failures++;
            }
            uvm_gpu_stats_t g;
            if (uvm_gpu_stats(mgr, 0, &g) != UVM_OK ||
                g.held_live_bytes + g.held_cached_bytes + g.held_pooled_bytes + g.held_retiring_bytes +
                        g.held_private_bytes + g.held_unused_bytes + g.held_other_bytes !=
                    g.held_bytes)
                failures++;
        }
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            std::mt19937 rng(static_cast<uint32_t>(t));
            uvm_stream_t *s = nullptr;
            if (uvm_stream_create(mgr, 0, nullptr, &s) != UVM_OK) {
                failures++;
                return;
            }
            const uint64_t sizes[] = {64 * K, 2 * M, 6 * M};
            std::vector<uvm_mem_t *> kept;
            for (int i = 0; i < 300; ++i) {
                if (i % 50 == 0 && uvm_stream_set_pool(mgr, s, (i / 50) % 3 == 2 ? nullptr : pools[(t + i / 50) % 2]) != UVM_OK)
                    failures++;
                uvm_mem_t *m = nullptr;
                if (alloc_gpu(mgr, s, sizes[rng() % 3], &m) != UVM_OK) {
                    failures++;
                    continue;
                }
                if (rng() % 4 == 0)
                    kept.push_back(m);
                else if (uvm_mem_free_async(mgr, m, s) != UVM_OK)
                    failures++;
                if (kept.size() > 8) {
                    if (uvm_mem_free(mgr, kept.front()) != UVM_OK)
                        failures++;
                    kept.erase(kept.begin());
                }
            }
            for (uvm_mem_t *m : kept)
                if (uvm_mem_free_async(mgr, m, s) != UVM_OK)
                    failures++;
            if (uvm_stream_destroy(mgr, s) != UVM_OK)
                failures++;
        });
    for (std::thread &t : threads)
        t.join();
    done = true;
    reader.join();
    EXPECT_EQ(failures.load(), 0);
    uint64_t free_bytes = 0;
    for (uvm_pool_t *p : pools) {
        const uvm_pool_info_t i = pool_info(mgr, p);
        EXPECT_EQ(i.objects, 0u);
        EXPECT_EQ(i.live_bytes, 0u);
        EXPECT_EQ(i.streams, 0u);
        free_bytes += i.free_bytes;
    }
    uvm_gpu_stats_t g = gpu_stats(mgr);
    EXPECT_EQ(g.held_private_bytes, free_bytes);
    EXPECT_EQ(g.vidmem_objects, 0u);
    expect_held_parts(g);
    for (uvm_pool_t *p : pools)
        ASSERT_EQ(uvm_pool_destroy(mgr, p), UVM_OK);
    uint64_t released = 0;
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, &released), UVM_OK);
    EXPECT_EQ(gpu_stats(mgr).root_chunks, 0u);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

INSTANTIATE_TEST_SUITE_P(Backends, PoolTest, ::testing::Values("sim", "cuda"),
                         [](const auto &info) { return info.param; });

}  // namespace
