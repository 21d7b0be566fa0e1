// Failure injection under concurrency (issue 28, item 5): 8 threads allocate
// (vidmem and sysmem, random sizes and chunk sizes, evictable or not, on a
// stream or not), free, map and unmap GPU kernel and user mappings, evict,
// restore, write and check patterns, while the backend below the manager
// fails each failable call with a fixed probability. Every call must answer a
// status its contract allows (a failure is OUT_OF_MEMORY, BACKEND or
// NO_HOST_MEMORY, never a crash); an object whose pattern write succeeded
// reads it back whenever a check succeeds. After the threads join, with
// injection off: the manager's and each GPU's counts (objects, sysmem bytes,
// evicted objects, pinned and evictable bytes) equal the sums over the
// objects alive, every object still held is intact, freeing each succeeds,
// and trimming gives every byte back to the backend (no leaked chunk, count
// or object), so uvm_manager_destroy finds nothing left.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "api/handles.h"
#include "backend/fault_injection.h"
#include "sim/sim_backend.h"
#include "tests/uvm/fixtures.h"
#include "uvm/uvm_observe.h"
#include "uvm/uvm_pressure.h"

using namespace uvm_test;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;
constexpr int kThreads = 8;
constexpr int kSteps = 300;
constexpr uint64_t kMaxObject = 6 * M;
constexpr uint64_t kStaging = 8 * M;  // kMaxObject plus the largest pattern shift
constexpr uint32_t kGpus = 2;

bool clean_failure(uvm_status_t s) {
    return s == UVM_ERR_OUT_OF_MEMORY || s == UVM_ERR_BACKEND || s == UVM_ERR_NO_HOST_MEMORY;
}

struct Obj {
    uvm_mem_t *mem = nullptr;
    uvm_backing_t backing = UVM_BACKING_SYSMEM;
    uint64_t size = 0;
    uint32_t gpu = 0;
    uint32_t flags = 0;
    bool tracked = false;   // allocated on a stream: a free may need a fence (BACKEND)
    bool known = false;     // the pattern below was written in full
    uint64_t shift = 0;     // byte i holds staging byte i + shift
};

// One thread's world: its objects, and two sysmem objects made before the
// faults start (CPU mapped, DMA mapped on every GPU): staging holds the
// thread's pattern, copied into objects at a random shift (memcpy or the
// copy engine: byte loops would take TSan seconds), readback receives
// vidmem to check.
struct Worker {
    int id = 0;
    uvm_manager_t *mgr = nullptr;
    std::mt19937_64 rng;
    uvm_stream_t *stream[kGpus] = {};
    uvm_mem_t *staging = nullptr, *readback = nullptr;
    uint8_t *staging_cpu = nullptr, *readback_cpu = nullptr;
    std::vector<Obj> objs;
    uint64_t failures = 0, steps = 0;
    std::atomic<int> *bad = nullptr;

    void report(const char *what, uvm_status_t s) {
        (*bad)++;
        std::fprintf(stderr, "thread %d: %s -> %s\n", id, what, uvm_status_string(s));
    }
    // A status among `ok` ones, or a clean failure (counted).
    bool expect(uvm_status_t s, const char *what, std::initializer_list<uvm_status_t> ok) {
        for (uvm_status_t o : ok)
            if (s == o)
                return s == UVM_OK;
        if (clean_failure(s)) {
            failures++;
            return false;
        }
        report(what, s);
        return false;
    }

    // Copy the thread's pattern into a vidmem object; on a failed copy
    // (which may have written part of it) its bytes are no longer known.
    void fill_vidmem(Obj &o) {
        o.known = false;
        if (o.flags & UVM_MEM_DISCARDABLE)
            return;  // an eviction drops its bytes: nothing to check
        o.shift = rng() % (kStaging - kMaxObject);
        uvm_mem_span_t dst{o.mem, 0, UVM_VIEW_PHYSICAL}, src{staging, o.shift, UVM_VIEW_PHYSICAL};
        o.known = expect(uvm_mem_copy(mgr, o.gpu, &dst, &src, o.size), "copy in", {UVM_OK});
    }
    void fill_sysmem(Obj &o) {
        o.known = false;
        void *p = nullptr;
        if (uvm_mem_cpu_kernel_address(mgr, o.mem, 0, &p) != UVM_OK)
            return;  // not CPU mapped (the map failed): nothing written
        o.shift = rng() % (kStaging - kMaxObject);
        std::memcpy(p, staging_cpu + o.shift, o.size);
        o.known = true;
    }

    // Check an object's pattern where it is known. `must`: the reading
    // itself may not fail (injection is off).
    void check(Obj &o, bool must) {
        if (!o.known)
            return;
        if (o.backing == UVM_BACKING_SYSMEM) {
            void *p = nullptr;
            if (uvm_mem_cpu_kernel_address(mgr, o.mem, 0, &p) != UVM_OK)
                return report("sysmem lost its CPU mapping", UVM_ERR_NOT_MAPPED);
            if (std::memcmp(p, staging_cpu + o.shift, o.size) != 0)
                report("sysmem pattern", UVM_ERR_OUT_OF_RANGE);
            return;
        }
        uvm_mem_span_t dst{readback, 0, UVM_VIEW_PHYSICAL}, src{o.mem, 0, UVM_VIEW_PHYSICAL};
        const uvm_status_t s = uvm_mem_copy(mgr, o.gpu, &dst, &src, o.size);
        if (must ? s != UVM_OK : !expect(s, "copy out", {UVM_OK})) {
            if (must)
                report("copy out without faults", s);
            return;
        }
        if (std::memcmp(readback_cpu, staging_cpu + o.shift, o.size) != 0) {
            std::fprintf(stderr, "thread %d: vidmem of %llu bytes (GPU %u, flags %x) differs\n", id,
                         (unsigned long long)o.size, o.gpu, o.flags);
            report("vidmem pattern", UVM_ERR_OUT_OF_RANGE);
        }
    }

    uint64_t random_size() {
        const int log = 12 + static_cast<int>(rng() % 11);  // 4 KiB .. 4 MiB, then a bit more
        uint64_t s = (1ull << log) + rng() % (1ull << log);
        return s > kMaxObject ? kMaxObject : s;
    }
    uint64_t random_chunk() {
        static const uint64_t sizes[] = {0, 4 * K, 64 * K, 2 * M};
        return sizes[rng() % 4];
    }

    void alloc(bool on_stream) {
        Obj o;
        o.backing = (on_stream || rng() % 3) ? UVM_BACKING_VIDMEM : UVM_BACKING_SYSMEM;
        o.size = random_size();
        o.gpu = rng() % kGpus;
        const uint64_t chunk = random_chunk();
        if (o.backing == UVM_BACKING_VIDMEM) {
            if (rng() % 2)
                o.flags |= UVM_MEM_EVICTABLE;
            else if (rng() % 8 == 0)
                o.flags |= UVM_MEM_DISCARDABLE;
        } else if (rng() % 2) {
            o.flags |= UVM_MEM_USER_MAPPABLE;
        }
        if (rng() % 4 == 0)
            o.flags |= UVM_MEM_GPU_MAPPED;
        uvm_mem_alloc_params_t p = alloc_params(o.backing, o.size, o.gpu, chunk, o.flags);
        uvm_mem_t *sentinel = reinterpret_cast<uvm_mem_t *>(0x1);
        o.mem = sentinel;
        const uvm_status_t s = on_stream ? uvm_mem_alloc_async(mgr, &p, stream[o.gpu], &o.mem)
                                         : uvm_mem_alloc(mgr, &p, &o.mem);
        if (!expect(s, "alloc", {UVM_OK})) {
            if (o.mem != sentinel)
                report("a failed alloc wrote its handle", s);
            return;
        }
        o.tracked = on_stream;
        if (o.backing == UVM_BACKING_VIDMEM) {
            if (on_stream) {
                // Its memory may still be written by earlier work on the
                // stream: use it in the stream's order.
                if (!expect(uvm_stream_synchronize(mgr, stream[o.gpu]), "sync", {UVM_OK}))
                    return free_now(o, true);
            }
            fill_vidmem(o);
        } else if (expect(uvm_mem_map_cpu_kernel(mgr, o.mem), "map cpu kernel", {UVM_OK})) {
            fill_sysmem(o);
        }
        objs.push_back(o);
    }

    // Free now (on the object's stream, at random, if it has one). A free
    // fails only where a stream's fence could not be queued (BACKEND): the
    // object then stays alive and is kept.
    void free_now(Obj o, bool push_back_on_failure) {
        uvm_status_t s;
        if (o.tracked && rng() % 2)
            s = uvm_mem_free_async(mgr, o.mem, stream[o.gpu]);
        else
            s = uvm_mem_free(mgr, o.mem);
        if (s == UVM_OK)
            return;
        if (o.tracked && s == UVM_ERR_BACKEND) {
            failures++;
            if (push_back_on_failure)
                objs.push_back(o);
            return;
        }
        report("free", s);
    }

    void step() {
        steps++;
        if (objs.empty() || (objs.size() < 8 && rng() % 4 == 0))
            return alloc(rng() % 6 == 0);
        const size_t i = rng() % objs.size();
        Obj &o = objs[i];
        const bool vid = o.backing == UVM_BACKING_VIDMEM;
        // Vidmem is mapped on its owner only: a peer mapping would make it
        // unevictable (NOT_SUPPORTED), which is not what this test is about.
        const uint32_t gpu = vid ? o.gpu : static_cast<uint32_t>(rng() % kGpus);
        const bool evictable = vid && (o.flags & (UVM_MEM_EVICTABLE | UVM_MEM_DISCARDABLE));
        switch (rng() % 11) {
            case 0:
            case 1: {
                Obj gone = o;
                objs.erase(objs.begin() + static_cast<long>(i));
                return free_now(gone, true);
            }
            case 2:
                expect(uvm_mem_map_gpu_kernel(mgr, o.mem, gpu), "map gpu kernel", {UVM_OK, UVM_ERR_ALREADY_MAPPED});
                return;
            case 3:
                expect(uvm_mem_unmap_gpu_kernel(mgr, o.mem, gpu), "unmap gpu kernel", {UVM_OK, UVM_ERR_NOT_MAPPED});
                return;
            case 4:
                if (!vid && !(o.flags & UVM_MEM_USER_MAPPABLE))
                    expect(uvm_mem_map_gpu_user(mgr, o.mem, gpu, 0), "map gpu user (private sysmem)",
                           {UVM_OK, UVM_ERR_ALREADY_MAPPED, UVM_ERR_NOT_SUPPORTED});
                else
                    expect(uvm_mem_map_gpu_user(mgr, o.mem, gpu, 0), "map gpu user",
                           {UVM_OK, UVM_ERR_ALREADY_MAPPED});
                return;
            case 5:
                expect(uvm_mem_unmap_gpu_user(mgr, o.mem, gpu), "unmap gpu user", {UVM_OK, UVM_ERR_NOT_MAPPED});
                return;
            case 6:
                if (!evictable)
                    expect(uvm_mem_evict(mgr, o.mem), "evict (not evictable)", {UVM_ERR_NOT_SUPPORTED});
                else if (o.tracked)
                    expect(uvm_mem_evict(mgr, o.mem), "evict (tracked)", {UVM_OK, UVM_ERR_BUSY});
                else
                    expect(uvm_mem_evict(mgr, o.mem), "evict", {UVM_OK});
                return;
            case 7:
                expect(uvm_mem_make_resident(mgr, o.mem), "make resident", {UVM_OK});
                return;
            case 8:
                if (vid)
                    fill_vidmem(o);
                else
                    fill_sysmem(o);
                return;
            default:
                check(o, false);
                return;
        }
    }
};

// The manager's sim backend, behind an injector the test controls.
uvm_manager_t *faulty_sim(uvm::backend::FaultInjectingBackend **faults) {
    uvm_sim_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.gpu_count = kGpus;
    p.vidmem_size = 48 * M;  // 8 threads of up to 8 objects of up to 6 MiB: pressure, eviction, OOM
    return uvm_test::faulty_sim(p, faults);
}

}  // namespace

TEST(ConcurrentFaults, RandomBackendFailuresUnderEightThreadsLeaveEveryCountRight) {
    uvm::backend::FaultInjectingBackend *faults = nullptr;
    uvm_manager_t *mgr = faulty_sim(&faults);
    ASSERT_NE(mgr, nullptr);
    std::atomic<int> bad{0};

    // Each thread's streams and staging objects, made before any fault; the
    // threads' patterns are windows of one, at different offsets.
    std::vector<uint8_t> base(kStaging + kThreads * 4099);
    for (size_t i = 0; i < base.size(); ++i)
        base[i] = pattern(i, 28);
    std::vector<std::unique_ptr<Worker>> workers;
    for (int t = 0; t < kThreads; ++t) {
        auto w = std::make_unique<Worker>();
        w->id = t;
        w->mgr = mgr;
        w->rng.seed(0xC0FFEE + t);
        w->bad = &bad;
        for (uint32_t g = 0; g < kGpus; ++g)
            ASSERT_EQ(uvm_stream_create(mgr, g, nullptr, &w->stream[g]), UVM_OK);
        for (uvm_mem_t **m : {&w->staging, &w->readback}) {
            const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_SYSMEM, kStaging);
            ASSERT_EQ(uvm_mem_alloc(mgr, &a, m), UVM_OK);
            ASSERT_EQ(uvm_mem_map_cpu_kernel(mgr, *m), UVM_OK);
            for (uint32_t g = 0; g < kGpus; ++g)
                ASSERT_EQ(uvm_mem_map_gpu_phys(mgr, *m, g), UVM_OK);
        }
        void *p = nullptr;
        ASSERT_EQ(uvm_mem_cpu_kernel_address(mgr, w->staging, 0, &p), UVM_OK);
        w->staging_cpu = static_cast<uint8_t *>(p);
        ASSERT_EQ(uvm_mem_cpu_kernel_address(mgr, w->readback, 0, &p), UVM_OK);
        w->readback_cpu = static_cast<uint8_t *>(p);
        std::memcpy(w->staging_cpu, base.data() + t * 4099, kStaging);
        workers.push_back(std::move(w));
    }

    faults->fail_one_in(16, 28);  // about one failable backend call in 16 fails
    std::vector<std::thread> threads;
    for (auto &w : workers)
        threads.emplace_back([&w] {
            for (int s = 0; s < kSteps; ++s)
                w->step();
        });
    for (auto &t : threads)
        t.join();
    const uint64_t injected = faults->failures(), calls = faults->calls();
    faults->fail_one_in(0, 0);

    uint64_t failures = 0;
    for (auto &w : workers)
        failures += w->failures;
    EXPECT_EQ(bad.load(), 0) << "calls answered outside their contract (see stderr)";
    EXPECT_GT(injected, 50u) << "too few backend calls failed to test anything";
    EXPECT_GT(failures, 50u);
    std::printf("backend calls %llu, failed %llu; calls that reported a failure %llu\n",
                (unsigned long long)calls, (unsigned long long)injected, (unsigned long long)failures);

    // At quiescence the counts equal the sums over the objects alive.
    {
        uint64_t objects = 2 * kThreads, sys_objects = 2 * kThreads, sys_bytes = 2 * kThreads * kStaging;
        uint64_t vid_objects[kGpus] = {}, evicted[kGpus] = {}, pinned[kGpus] = {}, evictable[kGpus] = {};
        for (auto &w : workers) {
            for (uint32_t g = 0; g < kGpus; ++g)
                EXPECT_EQ(uvm_stream_synchronize(mgr, w->stream[g]), UVM_OK);
            for (Obj &o : w->objs) {
                uvm_mem_info_t info;
                uvm_residency_t r;
                ASSERT_EQ(uvm_mem_info(mgr, o.mem, &info), UVM_OK);
                ASSERT_EQ(uvm_mem_residency(mgr, o.mem, &r), UVM_OK);
                objects++;
                if (o.backing == UVM_BACKING_SYSMEM) {
                    sys_objects++;
                    sys_bytes += info.alloc_size;
                    continue;
                }
                vid_objects[o.gpu]++;
                if (!r.resident)
                    evicted[o.gpu]++;
                else if (o.flags & (UVM_MEM_EVICTABLE | UVM_MEM_DISCARDABLE))
                    evictable[o.gpu] += info.alloc_size;
                else
                    pinned[o.gpu] += info.alloc_size;
            }
        }
        uvm_manager_stats_t ms;
        ASSERT_EQ(uvm_manager_stats(mgr, &ms), UVM_OK);
        EXPECT_EQ(ms.objects, objects);
        EXPECT_EQ(ms.sysmem_objects, sys_objects);
        EXPECT_EQ(ms.sysmem_bytes, sys_bytes);
        EXPECT_EQ(ms.retiring_objects, 0u);
        for (uint32_t g = 0; g < kGpus; ++g) {
            uvm_gpu_stats_t s;
            ASSERT_EQ(uvm_gpu_stats(mgr, g, &s), UVM_OK);
            uint64_t p = 0, e = 0;
            for (int c = 0; c < UVM_CHUNK_SIZE_COUNT; ++c) {
                p += s.bytes_pinned[c];
                e += s.bytes_evictable[c];
            }
            EXPECT_EQ(s.vidmem_objects, vid_objects[g]) << "GPU " << g;
            EXPECT_EQ(s.evicted_objects, evicted[g]) << "GPU " << g;
            EXPECT_EQ(p, pinned[g]) << "GPU " << g << " page tables " << s.page_table_bytes;
            EXPECT_EQ(e, evictable[g]) << "GPU " << g;
        }
    }

    // Without faults: every object is intact and frees; then nothing is left.
    // Resident objects first: reading an evicted one restores it, which
    // may fairly fail for want of room while pinned objects fill the GPU or
    // split its free memory (a vidmem object is physically contiguous); once
    // the resident ones are gone, each restore finds the GPU empty.
    size_t held = 0;
    for (int pass = 0; pass < 2; ++pass) {
        for (auto &w : workers) {
            std::vector<Obj> left;
            for (Obj &o : w->objs) {
                uvm_residency_t r;
                ASSERT_EQ(uvm_mem_residency(mgr, o.mem, &r), UVM_OK);
                if (pass == 0 && !r.resident) {
                    left.push_back(o);
                    continue;
                }
                w->check(o, true);
                EXPECT_EQ(uvm_mem_free(mgr, o.mem), UVM_OK);
                held++;
            }
            w->objs = left;
        }
    }
    for (auto &w : workers) {
        EXPECT_EQ(uvm_mem_free(mgr, w->staging), UVM_OK);
        EXPECT_EQ(uvm_mem_free(mgr, w->readback), UVM_OK);
        for (uint32_t g = 0; g < kGpus; ++g)
            EXPECT_EQ(uvm_stream_destroy(mgr, w->stream[g]), UVM_OK);
    }
    EXPECT_EQ(bad.load(), 0) << "objects damaged (see stderr)";
    std::printf("objects held at the end %zu\n", held);

    uint64_t evictions = 0, restores = 0;
    for (uint32_t g = 0; g < kGpus; ++g) {
        ASSERT_EQ(uvm_gpu_trim(mgr, g, nullptr), UVM_OK);
        uvm_gpu_stats_t s;
        ASSERT_EQ(uvm_gpu_stats(mgr, g, &s), UVM_OK);
        evictions += s.evictions;
        restores += s.restores;
        EXPECT_EQ(s.held_bytes, 0u) << "GPU " << g;
        EXPECT_EQ(s.root_chunks, 0u) << "GPU " << g;
        EXPECT_EQ(s.vidmem_objects, 0u) << "GPU " << g;
        EXPECT_EQ(s.evicted_objects, 0u) << "GPU " << g;
        EXPECT_EQ(s.evicted_bytes, 0u) << "GPU " << g;
        EXPECT_EQ(s.kernel_mappings + s.user_mappings + s.phys_mappings, 0u) << "GPU " << g;
        for (int c = 0; c < UVM_CHUNK_SIZE_COUNT; ++c) {
            EXPECT_EQ(s.bytes_pinned[c], 0u) << "GPU " << g << " size index " << c;
            EXPECT_EQ(s.bytes_evictable[c], 0u) << "GPU " << g << " size index " << c;
            EXPECT_EQ(s.bytes_free[c], 0u) << "GPU " << g << " size index " << c;
        }
    }
    // The run exercised eviction and restore, not only allocation.
    EXPECT_GT(evictions, 0u);
    EXPECT_GT(restores, 0u);
    std::printf("evictions %llu, restores %llu\n", (unsigned long long)evictions, (unsigned long long)restores);
    uvm_manager_stats_t ms;
    ASSERT_EQ(uvm_manager_stats(mgr, &ms), UVM_OK);
    EXPECT_EQ(ms.objects, 0u);
    EXPECT_EQ(ms.sysmem_objects, 0u);
    EXPECT_EQ(ms.sysmem_bytes, 0u);
    EXPECT_EQ(ms.cpu_kernel_mappings + ms.cpu_user_mappings, 0u);
    EXPECT_EQ(ms.streams, 0u);
    EXPECT_EQ(ms.retiring_objects, 0u);
    EXPECT_EQ(ms.stream_pool_bytes, 0u);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
