// What a vidmem object costs on real GPUs (the CUDA backend), against the
// driver's own allocation measured in the same run. Skips without a GPU.
//
//   cuda_growth/<MiB>               alloc of one object of MiB (2M chunks) with an empty pool:
//                                   the pool grows first; counter per_2MiB_us
//   cuda_growth_objects/<MiB>       MiB / 2 objects of 2 MiB, one after another, from an empty pool
//   driver_growth/<MiB>/<handle>    the floor: reserve MiB of VA, cuMemCreate + cuMemMap handles
//                                   of <handle> MiB, one cuMemSetAccess; counter per_2MiB_us
//   cuda_alloc_kernel_map/<size>    alloc + kernel map + unmap + free of a held object (adaptive chunks)
//   cuda_alloc_mapped/<size>        alloc with UVM_MEM_GPU_MAPPED + free
//   driver_alloc_async/<size>       cuMemAllocAsync + cuMemFreeAsync, pool hit (cudaMallocAsync)
//   cuda_alloc_map_2m/held          alloc + map in GPU 0's kernel space, chunks held
//   cuda_alloc_map_2m/cold          the same with an empty pool (grows a slab first)
//   cuda_peer_map_2m                map of a held 2M object on GPU 1 once peers are granted
//   driver_cuMemAlloc_2m            cuMemAlloc of 2 MiB (what cudaMalloc does in the driver)
//   driver_cuMemAlloc_free_2m       cuMemAlloc + cuMemFree of 2 MiB
//   driver_vmm_2m                   cuMemCreate + cuMemAddressReserve + cuMemMap + cuMemSetAccess
//   driver_cuMemCreate_2m           cuMemCreate of 2 MiB alone
//   driver_set_access_span/<n>      one cuMemSetAccess over n 2 MiB handles mapped side by side
//   sysmem_dma_map_1g/<chunk>       DMA-map (pin) a 1 GiB sysmem object of 4K or 2M chunks on GPU 0,
//                                   alternating with cuMemHostRegister of the same pages
//   driver_host_register_1g/<thp>   cuMemHostRegister of 1 GiB of anonymous memory (thp: MADV_HUGEPAGE)
//   driver_host_numa_1g             cuMemCreate(HOST_NUMA) 1 GiB + reserve + map + set access
//   sysmem_copy_1g/<h2d>/<chunk>    copy 1 GiB sysmem <-> vidmem on GPU 0's copy engine (bytes/s)
#include <benchmark/benchmark.h>

#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "bench/bench_common.h"
#include "cuda/driver_api.h"

namespace {

using namespace uvm_bench;

// The manager, where it runs on CUDA.
uvm_manager_t *cuda_manager() { return on_cuda() ? manager() : nullptr; }

uvm_mem_alloc_params_t vidmem(uint64_t size, uint32_t gpu = 0) {
    return alloc_params(UVM_BACKING_VIDMEM, size, gpu);
}

void cuda_alloc_map_2m(benchmark::State &state) {
    uvm_manager_t *mgr = cuda_manager();
    if (!mgr)
        return state.SkipWithError("no CUDA GPU");
    const bool cold = state.range(0) == 1;
    const uvm_mem_alloc_params_t a = vidmem(2 * kMiB);
    uvm_mem_t *mem;
    uvm_mem_alloc(mgr, &a, &mem);
    uvm_mem_free(mgr, mem);
    for (auto _ : state) {
        if (cold) {
            state.PauseTiming();
            uvm_gpu_trim(mgr, 0, nullptr);
            state.ResumeTiming();
        }
        if (uvm_mem_alloc(mgr, &a, &mem) != UVM_OK || uvm_mem_map_gpu_kernel(mgr, mem, 0) != UVM_OK)
            return state.SkipWithError("alloc/map failed");
        state.PauseTiming();
        uvm_mem_free(mgr, mem);
        state.ResumeTiming();
    }
}

void cuda_peer_map_2m(benchmark::State &state) {
    uvm_manager_t *mgr = cuda_manager();
    uint32_t n = 0;
    uvm_gpu_info_t gi;
    if (!mgr || uvm_gpu_count(mgr, &n) != UVM_OK || n < 2 || uvm_gpu_info(mgr, 1, &gi) != UVM_OK ||
        !(gi.peer_mask & 1u))
        return state.SkipWithError("needs two GPUs with peer access");
    const uvm_mem_alloc_params_t a = vidmem(2 * kMiB);
    uvm_mem_t *mem;
    uvm_mem_alloc(mgr, &a, &mem);
    uvm_mem_map_gpu_phys(mgr, mem, 1);  // the pair's access is granted here, once
    for (auto _ : state) {
        if (uvm_mem_map_gpu_kernel(mgr, mem, 1) != UVM_OK)
            return state.SkipWithError("map failed");
        state.PauseTiming();
        uvm_mem_unmap_gpu_kernel(mgr, mem, 1);
        state.ResumeTiming();
    }
    uvm_mem_free(mgr, mem);
}

// Time `body` on a clock; the benchmark runs on manual time.
template <typename Body>
double seconds(Body &&body) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Microseconds per 2 MiB grown, averaged over the iterations.
void per_2mib(benchmark::State &state, double total_seconds, uint64_t bytes) {
    state.counters["per_2MiB_us"] =
        benchmark::Counter(total_seconds * 1e6 / static_cast<double>(bytes / (2 * kMiB)),
                           benchmark::Counter::kAvgIterations);
}

// Time `grow` from an empty pool (every handle back to the driver, growth
// from 2 MiB again) in each iteration, `release` untimed after; counter
// per_2MiB_us over `bytes`.
template <typename Grow, typename Release>
void growth_loop(benchmark::State &state, uvm_manager_t *mgr, uint64_t bytes, Grow &&grow, Release &&release) {
    double total = 0;
    for (auto _ : state) {
        uvm_gpu_trim(mgr, 0, nullptr);
        uvm_status_t s = UVM_OK;
        const double t = seconds([&] { s = grow(); });
        if (failed(state, s, "alloc")) {
            release();  // what was made before the failure
            break;
        }
        state.SetIterationTime(t);
        total += t;
        release();
    }
    uvm_gpu_trim(mgr, 0, nullptr);
    per_2mib(state, total, bytes);
}

void cuda_growth(benchmark::State &state) {
    uvm_manager_t *mgr = cuda_manager();
    if (!mgr)
        return state.SkipWithError("no CUDA GPU");
    const uint64_t size = static_cast<uint64_t>(state.range(0)) * kMiB;
    const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, size, 0, 2 * kMiB);
    uvm_mem_t *mem = nullptr;
    growth_loop(
        state, mgr, size, [&] { return uvm_mem_alloc(mgr, &a, &mem); }, [&] { uvm_mem_free(mgr, mem); });
}

void cuda_growth_objects(benchmark::State &state) {
    uvm_manager_t *mgr = cuda_manager();
    if (!mgr)
        return state.SkipWithError("no CUDA GPU");
    const uint64_t size = static_cast<uint64_t>(state.range(0)) * kMiB;
    const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 2 * kMiB, 0, 2 * kMiB);
    std::vector<uvm_mem_t *> mems(size / (2 * kMiB), nullptr);
    growth_loop(
        state, mgr, size,
        [&] {
            uvm_status_t s = UVM_OK;
            for (uvm_mem_t *&m : mems)
                if (s == UVM_OK)
                    s = uvm_mem_alloc(mgr, &a, &m);
            return s;
        },
        [&] {
            for (uvm_mem_t *&m : mems) {
                uvm_mem_free(mgr, m);
                m = nullptr;
            }
        });
}

void cuda_alloc_kernel_map(benchmark::State &state) {
    uvm_manager_t *mgr = cuda_manager();
    if (!mgr)
        return state.SkipWithError("no CUDA GPU");
    const uvm_mem_alloc_params_t a = vidmem(static_cast<uint64_t>(state.range(0)));
    uvm_mem_t *mem;
    if (failed(state, uvm_mem_alloc(mgr, &a, &mem), "alloc"))  // warm: the pool holds the chunks
        return;
    uvm_mem_free(mgr, mem);
    for (auto _ : state) {
        if (failed(state, uvm_mem_alloc(mgr, &a, &mem), "alloc") ||
            failed(state, uvm_mem_map_gpu_kernel(mgr, mem, 0), "map") ||
            failed(state, uvm_mem_unmap_gpu_kernel(mgr, mem, 0), "unmap") ||
            failed(state, uvm_mem_free(mgr, mem), "free"))
            break;
    }
}

void cuda_alloc_mapped(benchmark::State &state) {
    uvm_manager_t *mgr = cuda_manager();
    if (!mgr)
        return state.SkipWithError("no CUDA GPU");
    uvm_mem_alloc_params_t a = vidmem(static_cast<uint64_t>(state.range(0)));
    a.flags = UVM_MEM_GPU_MAPPED;
    uvm_mem_t *mem;
    if (failed(state, uvm_mem_alloc(mgr, &a, &mem), "alloc"))
        return;
    uvm_mem_free(mgr, mem);
    for (auto _ : state) {
        if (failed(state, uvm_mem_alloc(mgr, &a, &mem), "alloc") || failed(state, uvm_mem_free(mgr, mem), "free"))
            break;
    }
}

void driver_cuMemAlloc_2m(benchmark::State &state) {
    const uvm::cuda::DriverApi *api = driver_with_context();
    if (!api)
        return state.SkipWithError("no CUDA GPU");
    const bool with_free = state.range(0) == 1;
    for (auto _ : state) {
        CUdeviceptr p;
        if (api->cuMemAlloc(&p, 2 * kMiB) != CUDA_SUCCESS)
            return state.SkipWithError("cuMemAlloc failed");
        if (!with_free)
            state.PauseTiming();
        api->cuMemFree(p);
        if (!with_free)
            state.ResumeTiming();
    }
}

CUmemAllocationProp device_prop() {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    return prop;
}

// Read-write access for GPU 0.
CUmemAccessDesc device_access() {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return access;
}

void driver_growth(benchmark::State &state) {
    const uvm::cuda::DriverApi *api = driver_with_context();
    if (!api)
        return state.SkipWithError("no CUDA GPU");
    const uint64_t size = static_cast<uint64_t>(state.range(0)) * kMiB;
    const uint64_t handle_size = static_cast<uint64_t>(state.range(1)) * kMiB;
    const CUmemAllocationProp prop = device_prop();
    const CUmemAccessDesc access = device_access();
    std::vector<CUmemGenericAllocationHandle> handles(size / handle_size);
    double total = 0;
    for (auto _ : state) {
        CUdeviceptr va = 0;
        bool ok = true;
        const double t = seconds([&] {
            ok = api->cuMemAddressReserve(&va, size, 2 * kMiB, 0, 0) == CUDA_SUCCESS;
            for (size_t i = 0; ok && i < handles.size(); ++i)
                ok = api->cuMemCreate(&handles[i], handle_size, &prop, 0) == CUDA_SUCCESS &&
                     api->cuMemMap(va + i * handle_size, handle_size, 0, handles[i], 0) == CUDA_SUCCESS;
            ok = ok && api->cuMemSetAccess(va, size, &access, 1) == CUDA_SUCCESS;
        });
        if (!ok)
            return state.SkipWithError("driver growth failed");
        state.SetIterationTime(t);
        total += t;
        api->cuMemUnmap(va, size);
        for (CUmemGenericAllocationHandle h : handles)
            api->cuMemRelease(h);
        api->cuMemAddressFree(va, size);
    }
    per_2mib(state, total, size);
}

void driver_alloc_async(benchmark::State &state) { driver_alloc_async_pairs(state); }

void driver_vmm_2m(benchmark::State &state) {
    const uvm::cuda::DriverApi *api = driver_with_context();
    if (!api)
        return state.SkipWithError("no CUDA GPU");
    const CUmemAllocationProp prop = device_prop();
    const CUmemAccessDesc access = device_access();
    for (auto _ : state) {
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        if (api->cuMemCreate(&h, 2 * kMiB, &prop, 0) != CUDA_SUCCESS ||
            api->cuMemAddressReserve(&va, 2 * kMiB, 2 * kMiB, 0, 0) != CUDA_SUCCESS ||
            api->cuMemMap(va, 2 * kMiB, 0, h, 0) != CUDA_SUCCESS ||
            api->cuMemSetAccess(va, 2 * kMiB, &access, 1) != CUDA_SUCCESS)
            return state.SkipWithError("VMM call failed");
        state.PauseTiming();
        api->cuMemUnmap(va, 2 * kMiB);
        api->cuMemAddressFree(va, 2 * kMiB);
        api->cuMemRelease(h);
        state.ResumeTiming();
    }
}

void driver_cuMemCreate_2m(benchmark::State &state) {
    const uvm::cuda::DriverApi *api = driver_with_context();
    if (!api)
        return state.SkipWithError("no CUDA GPU");
    const CUmemAllocationProp prop = device_prop();
    for (auto _ : state) {
        CUmemGenericAllocationHandle h;
        if (api->cuMemCreate(&h, 2 * kMiB, &prop, 0) != CUDA_SUCCESS)
            return state.SkipWithError("cuMemCreate failed");
        state.PauseTiming();
        api->cuMemRelease(h);
        state.ResumeTiming();
    }
}

void driver_set_access_span(benchmark::State &state) {
    const uvm::cuda::DriverApi *api = driver_with_context();
    if (!api)
        return state.SkipWithError("no CUDA GPU");
    const uint64_t n = static_cast<uint64_t>(state.range(0));
    const CUmemAllocationProp prop = device_prop();
    const CUmemAccessDesc access = device_access();
    CUdeviceptr va;
    if (api->cuMemAddressReserve(&va, n * 2 * kMiB, 2 * kMiB, 0, 0) != CUDA_SUCCESS)
        return state.SkipWithError("reserve failed");
    std::vector<CUmemGenericAllocationHandle> handles(n);
    for (auto _ : state) {
        state.PauseTiming();
        for (uint64_t i = 0; i < n; ++i) {
            api->cuMemCreate(&handles[i], 2 * kMiB, &prop, 0);
            api->cuMemMap(va + i * 2 * kMiB, 2 * kMiB, 0, handles[i], 0);
        }
        state.ResumeTiming();
        const CUresult r = api->cuMemSetAccess(va, n * 2 * kMiB, &access, 1);
        state.PauseTiming();
        for (uint64_t i = 0; i < n; ++i) {
            api->cuMemUnmap(va + i * 2 * kMiB, 2 * kMiB);
            api->cuMemRelease(handles[i]);
        }
        state.ResumeTiming();
        if (r != CUDA_SUCCESS) {
            state.SkipWithError("cuMemSetAccess over several handles refused");
            break;
        }
    }
    api->cuMemAddressFree(va, n * 2 * kMiB);
}


// DMA-map (pin) a 1 GiB sysmem object on GPU 0 through the manager, and pin
// the very same pages with cuMemHostRegister, alternately in every iteration:
// the manager's cost over the driver's on identical pages, free of the drift
// between runs that page placement causes. The time is ours; counters ours_ms
// and raw_ms are the two means. One pin before timing, so that neither pays
// the kernel's first-pin page migration.
void sysmem_dma_map_1g(benchmark::State &state) {
    uvm_manager_t *mgr = cuda_manager();
    const uvm::cuda::DriverApi *api = driver_with_context();
    if (!mgr || !api)
        return state.SkipWithError("no CUDA GPU");
    const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_SYSMEM, kGiB, 0, static_cast<uint64_t>(state.range(0)));
    uvm_mem_t *mem;
    void *pages = nullptr;
    if (failed(state, uvm_mem_alloc(mgr, &a, &mem), "alloc") ||
        failed(state, uvm_mem_map_cpu_kernel(mgr, mem), "map") ||
        failed(state, uvm_mem_cpu_kernel_address(mgr, mem, 0, &pages), "address"))
        return;
    uvm_host_pages_t host;
    if (uvm_mem_host_pages(mgr, mem, &host) == UVM_OK)
        state.counters["huge_MiB"] = static_cast<double>(host.huge_bytes >> 20);
    const unsigned flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;
    using clock = std::chrono::steady_clock;
    double ours = 0, raw = 0;
    if (!failed(state, uvm_mem_map_gpu_phys(mgr, mem, 0), "first pin")) {
        uvm_mem_unmap_gpu_phys(mgr, mem, 0);
        for (auto _ : state) {
            const auto t0 = clock::now();
            const uvm_status_t s = uvm_mem_map_gpu_phys(mgr, mem, 0);
            const auto t1 = clock::now();
            if (failed(state, s, "pin"))
                break;
            uvm_mem_unmap_gpu_phys(mgr, mem, 0);
            const auto t2 = clock::now();
            const CUresult r = api->cuMemHostRegister(pages, kGiB, flags);
            const auto t3 = clock::now();
            if (r != CUDA_SUCCESS) {
                state.SkipWithError("cuMemHostRegister failed");
                break;
            }
            api->cuMemHostUnregister(pages);
            const double o = std::chrono::duration<double>(t1 - t0).count();
            ours += o;
            raw += std::chrono::duration<double>(t3 - t2).count();
            state.SetIterationTime(o);
        }
    }
    const double n = static_cast<double>(state.iterations() ? state.iterations() : 1);
    state.counters["ours_ms"] = ours / n * 1e3;
    state.counters["raw_ms"] = raw / n * 1e3;
    uvm_mem_free(mgr, mem);
}

void driver_host_register_1g(benchmark::State &state) {
    const uvm::cuda::DriverApi *api = driver_with_context();
    if (!api)
        return state.SkipWithError("no CUDA GPU");
    void *raw = mmap(nullptr, kGiB + 2 * kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *p = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw) + 2 * kMiB - 1) & ~(2 * kMiB - 1));
    madvise(p, kGiB, state.range(0) ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    std::memset(p, 1, kGiB);  // populate, as a sysmem object's pages are
    for (auto _ : state) {
        if (api->cuMemHostRegister(p, kGiB, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) != CUDA_SUCCESS)
            return state.SkipWithError("cuMemHostRegister failed");
        state.PauseTiming();
        api->cuMemHostUnregister(p);
        state.ResumeTiming();
    }
    munmap(raw, kGiB + 2 * kMiB);
}

void driver_host_numa_1g(benchmark::State &state) {
    const uvm::cuda::DriverApi *api = driver_with_context();
    if (!api)
        return state.SkipWithError("no CUDA GPU");
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop.location.id = 0;
    const CUmemAccessDesc access = device_access();
    for (auto _ : state) {
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        if (api->cuMemCreate(&h, kGiB, &prop, 0) != CUDA_SUCCESS)
            return state.SkipWithError("cuMemCreate(HOST_NUMA) failed");
        if (api->cuMemAddressReserve(&va, kGiB, 2 * kMiB, 0, 0) != CUDA_SUCCESS ||
            api->cuMemMap(va, kGiB, 0, h, 0) != CUDA_SUCCESS || api->cuMemSetAccess(va, kGiB, &access, 1) != CUDA_SUCCESS)
            return state.SkipWithError("map failed");
        state.PauseTiming();
        api->cuMemUnmap(va, kGiB);
        api->cuMemAddressFree(va, kGiB);
        api->cuMemRelease(h);
        state.ResumeTiming();
    }
}

// Copy 1 GiB between a sysmem object (4K or 2M chunks) and vidmem on GPU 0's
// copy engine: H2D (to_vidmem 1) or D2H (0).
void sysmem_copy_1g(benchmark::State &state) {
    uvm_manager_t *mgr = cuda_manager();
    if (!mgr)
        return state.SkipWithError("no CUDA GPU");
    uvm_mem_alloc_params_t a;
    std::memset(&a, 0, sizeof(a));
    a.size = kGiB;
    a.chunk_size = static_cast<uint64_t>(state.range(1));
    uvm_mem_t *sys, *vid;
    if (uvm_mem_alloc(mgr, &a, &sys) != UVM_OK)
        return state.SkipWithError("alloc failed");
    a.backing = UVM_BACKING_VIDMEM;
    a.chunk_size = 0;
    if (uvm_mem_alloc(mgr, &a, &vid) != UVM_OK || uvm_mem_map_gpu_phys(mgr, sys, 0) != UVM_OK)
        return state.SkipWithError("alloc/map failed");
    uvm_mem_span_t v{vid, 0, UVM_VIEW_PHYSICAL}, h{sys, 0, UVM_VIEW_PHYSICAL};
    const bool h2d = state.range(0) != 0;
    for (auto _ : state)
        if (uvm_mem_copy(mgr, 0, h2d ? &v : &h, h2d ? &h : &v, kGiB) != UVM_OK)
            return state.SkipWithError("copy failed");
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kGiB));
    uvm_mem_free(mgr, vid);
    uvm_mem_free(mgr, sys);
}

}  // namespace

BENCHMARK(sysmem_dma_map_1g)->ArgName("chunk")->Arg(4 << 10)->Arg(2 << 20)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(driver_host_register_1g)->ArgName("thp")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(driver_host_numa_1g)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(sysmem_copy_1g)->ArgNames({"h2d", "chunk"})->ArgsProduct({{1, 0}, {4 << 10, 2 << 20}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(driver_cuMemCreate_2m)->UseRealTime();
BENCHMARK(driver_set_access_span)->Arg(1)->Arg(16)->UseRealTime();
BENCHMARK(cuda_alloc_map_2m)->ArgName("cold")->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(driver_cuMemAlloc_2m)->ArgName("with_free")->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(driver_vmm_2m)->UseRealTime();

BENCHMARK(cuda_growth)->ArgName("MiB")->Arg(2)->Arg(32)->Arg(256)->Arg(1024)->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMicrosecond);
BENCHMARK(cuda_growth_objects)->ArgName("MiB")->Arg(32)->Arg(256)->Arg(1024)->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMicrosecond);
BENCHMARK(driver_growth)->ArgNames({"MiB", "handle"})->Args({2, 2})->Args({32, 2})->Args({32, 32})->Args({256, 256})
    ->Args({1024, 1024})->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMicrosecond);
BENCHMARK(cuda_alloc_kernel_map)->ArgName("size")->Arg(4 << 10)->Arg(12 << 10)->Arg(64 << 10)->Arg(1000 << 10)
    ->Arg(2048000)->Arg(2 << 20)->Arg(6 << 20)->UseRealTime();
BENCHMARK(cuda_alloc_mapped)->ArgName("size")->Arg(4 << 10)->Arg(64 << 10)->Arg(2048000)->Arg(2 << 20)->UseRealTime();
BENCHMARK(driver_alloc_async)->ArgName("size")->Arg(4 << 10)->Arg(64 << 10)->Arg(2048000)->Arg(2 << 20)->UseRealTime();
// Last: once a peer is granted, every later growth grants it too (one more
// cuMemSetAccess per handle, ~1 ms on the H200 pair), which the growth
// figures above are measured without.
BENCHMARK(cuda_peer_map_2m)->UseRealTime();

BENCHMARK_MAIN();
