// Eviction and restore on the default backend, beside pinned copies of the
// driver in the same run (CUDA only), with the host store warm (its first
// slab is made before timing: a one-time cost of about 0.5 s per 256 MiB of
// fresh pages on sim). The job gets 1,280 MiB of GPU memory:
// on sim a simulated GPU of that size, on a real GPU what a pinned ballast
// object leaves free.
//   evict_1g/<restore>            evicting 1 GiB of 2M-chunk objects (16 x 64 MiB), or restoring it (bytes/s)
//   driver_pinned_copy_1g/<h2d>   cuMemcpyAsync of 1 GiB between cuMemAlloc memory and registered
//                                 host memory, then synchronize (bytes/s)
//   alloc_2m/<evicting>           a 2 MiB evictable allocation served from free memory, or one that
//                                 must evict the coldest 2 MiB object first (then freed)
//   out_of_core/<times>           write then read back a working set of <times> x 1,280 MiB in
//                                 64 MiB objects (bytes/s of working set, both passes)
#include <benchmark/benchmark.h>

#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "bench/bench_common.h"

namespace {

using namespace uvm_bench;

constexpr uint64_t kJob = 1280 * kMiB;

// The manager of this program, with kJob of GPU memory for the benchmarks.
uvm_manager_t *job() {
    static uvm_manager_t *mgr = [] {
        uvm_manager_params_t p;
        std::memset(&p, 0, sizeof(p));
        p.sim.gpu_count = 1;
        p.sim.vidmem_size = kJob;
        uvm_manager_t *m = nullptr;
        if (uvm_manager_create(&p, &m) != UVM_OK)
            return static_cast<uvm_manager_t *>(nullptr);
        uvm_backend_kind_t kind;
        uvm_gpu_info_t gi;
        if (uvm_manager_backend(m, &kind) == UVM_OK && kind == UVM_BACKEND_CUDA &&
            uvm_gpu_info(m, 0, &gi) == UVM_OK && gi.memory_free > kJob + kGiB) {
            uvm_mem_alloc_params_t b = alloc_params(UVM_BACKING_VIDMEM, (gi.memory_free - kJob) & ~(2 * kMiB - 1));
            uvm_mem_t *ballast = nullptr;  // held for the program's life
            if (uvm_mem_alloc(m, &b, &ballast) != UVM_OK)
                return static_cast<uvm_manager_t *>(nullptr);
        }
        return m;
    }();
    return mgr;
}

std::vector<uvm_mem_t *> alloc_many(benchmark::State &state, size_t n, uint64_t size) {
    std::vector<uvm_mem_t *> v;
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size, 0, 2 * kMiB, UVM_MEM_EVICTABLE);
    for (size_t i = 0; i < n; ++i) {
        uvm_mem_t *m = nullptr;
        if (failed(state, uvm_mem_alloc(job(), &p, &m), "alloc"))
            break;
        v.push_back(m);
        // Written once, as a real working set is (untouched simulated
        // vidmem would cost a page fault per 4 KiB on its first read).
        uvm_mem_span_t d{m, 0, UVM_VIEW_PHYSICAL};
        if (failed(state, uvm_mem_memset(job(), 0, &d, static_cast<uint8_t>(i), size), "memset"))
            break;
    }
    return v;
}

void free_all(std::vector<uvm_mem_t *> &v) {
    for (uvm_mem_t *m : v)
        uvm_mem_free(job(), m);
    v.clear();
    uvm_gpu_trim(job(), 0, nullptr);
}

void evict_1g(benchmark::State &state) {
    if (!job())
        return state.SkipWithError("no manager");
    const bool restore = state.range(0) == 1;
    std::vector<uvm_mem_t *> objs = alloc_many(state, 16, 64 * kMiB);
    if (objs.size() != 16)
        return free_all(objs);
    // A first round makes the host store's memory (allocated, pinned, kept).
    for (int phase = 0; phase < 2; ++phase)
        for (uvm_mem_t *m : objs)
            if ((phase == 0 ? uvm_mem_evict(job(), m) : uvm_mem_make_resident(job(), m)) != UVM_OK)
                return state.SkipWithError("warm-up failed");
    for (auto _ : state) {
        for (int phase = 0; phase < 2; ++phase) {
            const bool timed = (phase == 1) == restore;
            if (!timed)
                state.PauseTiming();
            for (uvm_mem_t *m : objs)
                if (phase == 0 ? uvm_mem_evict(job(), m) != UVM_OK : uvm_mem_make_resident(job(), m) != UVM_OK)
                    return state.SkipWithError("evict or restore failed");
            if (!timed)
                state.ResumeTiming();
        }
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kGiB));
    free_all(objs);
}

void driver_pinned_copy_1g(benchmark::State &state) {
#if defined(UVM_HAVE_CUDA)
    if (job() && driver_with_context()) {
        const uvm::cuda::DriverApi *api = driver_with_context();
        const bool h2d = state.range(0) == 1;
        CUdeviceptr dev;
        CUstream stream;
        void *host = mmap(nullptr, kGiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        madvise(host, kGiB, MADV_HUGEPAGE);
        std::memset(host, 1, kGiB);
        if (api->cuMemAlloc(&dev, kGiB) != CUDA_SUCCESS || api->cuMemHostRegister(host, kGiB, 0) != CUDA_SUCCESS)
            return state.SkipWithError("cuMemAlloc or cuMemHostRegister failed");
        api->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
        for (auto _ : state) {
            const CUdeviceptr h = reinterpret_cast<CUdeviceptr>(host);
            if (api->cuMemcpyAsync(h2d ? dev : h, h2d ? h : dev, kGiB, stream) != CUDA_SUCCESS ||
                api->cuStreamSynchronize(stream) != CUDA_SUCCESS)
                return state.SkipWithError("copy failed");
        }
        state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kGiB));
        api->cuStreamDestroy(stream);
        api->cuMemHostUnregister(host);
        api->cuMemFree(dev);
        munmap(host, kGiB);
        return;
    }
#endif
    state.SkipWithError("no CUDA GPU");
}

void alloc_2m(benchmark::State &state) {
    if (!job())
        return state.SkipWithError("no manager");
    const bool evicting = state.range(0) == 1;
    // Fill the job's memory with 2 MiB evictable objects (or leave room).
    const size_t want = evicting ? kJob / (2 * kMiB) : 8;
    std::vector<uvm_mem_t *> objs = alloc_many(state, want, 2 * kMiB);
    if (objs.size() != want)
        return free_all(objs);
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 2 * kMiB, 0, 2 * kMiB, UVM_MEM_EVICTABLE);
    size_t victim = 0;
    if (evicting && (uvm_mem_evict(job(), objs[0]) != UVM_OK || uvm_mem_make_resident(job(), objs[0]) != UVM_OK))
        return state.SkipWithError("warm-up failed");  // the host store's first slab
    for (auto _ : state) {
        uvm_mem_t *m = nullptr;
        if (uvm_mem_alloc(job(), &p, &m) != UVM_OK)
            return state.SkipWithError("alloc failed");
        state.PauseTiming();
        uvm_mem_free(job(), m);
        if (evicting) {  // bring the victim back (into the root just freed), so the next alloc evicts again
            uvm_residency_t r;
            for (size_t i = 0; i < objs.size(); ++i, victim = (victim + 1) % objs.size())
                if (uvm_mem_residency(job(), objs[victim], &r) == UVM_OK && !r.resident)
                    break;
            uvm_mem_make_resident(job(), objs[victim]);
        }
        state.ResumeTiming();
    }
    free_all(objs);
}

void out_of_core(benchmark::State &state) {
    if (!job())
        return state.SkipWithError("no manager");
    const uint64_t object = 64 * kMiB;
    const size_t count = static_cast<size_t>(state.range(0)) * kJob / object;
    uvm_mem_t *staging = nullptr;
    const uvm_mem_alloc_params_t sp = alloc_params(UVM_BACKING_SYSMEM, object);
    if (failed(state, uvm_mem_alloc(job(), &sp, &staging), "staging") ||
        failed(state, uvm_mem_map_gpu_phys(job(), staging, 0), "map"))
        return;
    std::vector<uvm_mem_t *> objs = alloc_many(state, count, object);
    for (auto _ : state) {
        for (int pass = 0; pass < 2; ++pass)
            for (uvm_mem_t *m : objs) {
                uvm_mem_span_t a{m, 0, UVM_VIEW_PHYSICAL}, h{staging, 0, UVM_VIEW_PHYSICAL};
                if ((pass == 0 ? uvm_mem_copy(job(), 0, &a, &h, object) : uvm_mem_copy(job(), 0, &h, &a, object)) !=
                    UVM_OK)
                    return state.SkipWithError("copy failed");
            }
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * count * object));
    free_all(objs);
    uvm_mem_free(job(), staging);
}

}  // namespace

BENCHMARK(evict_1g)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(driver_pinned_copy_1g)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(alloc_2m)->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(out_of_core)->Arg(1)->Arg(2)->Arg(3)->UseRealTime()->Iterations(2)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
