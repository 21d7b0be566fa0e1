// What every benchmark program shares: the manager on the default backend
// (the GPU where there is one, else two simulated GPUs) and parameter builders.
#pragma once

#include <benchmark/benchmark.h>

#include <sys/mman.h>

#include <cstring>

#include "common/alloc_params.h"
#include "uvm/uvm.h"
#if defined(UVM_HAVE_CUDA)
#include "cuda/driver_api.h"
#endif

namespace uvm_bench {

using uvm::alloc_params;

constexpr uint64_t kKiB = 1ull << 10;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// One manager per program, on the default backend (UVM_BACKEND forces one).
// Simulated GPUs get 64 GiB each: reserved lazily, so a million live objects fit.
inline uvm_manager_t *manager() {
    static uvm_manager_t *mgr = [] {
        uvm_manager_params_t p;
        std::memset(&p, 0, sizeof(p));
        p.backend = UVM_BACKEND_AUTO;
        p.sim.gpu_count = 2;
        p.sim.vidmem_size = 64 * kGiB;
        uvm_manager_t *m = nullptr;
        return uvm_manager_create(&p, &m) == UVM_OK ? m : nullptr;
    }();
    return mgr;
}

inline uint32_t gpu_count() {
    uint32_t n = 0;
    return manager() && uvm_gpu_count(manager(), &n) == UVM_OK ? n : 0;
}

// GPU `gpu` can reach GPU `owner`'s vidmem.
inline bool peers(uint32_t gpu, uint32_t owner) {
    uvm_gpu_info_t gi;
    return gpu_count() > (gpu > owner ? gpu : owner) && uvm_gpu_info(manager(), gpu, &gi) == UVM_OK &&
           ((gi.peer_mask >> owner) & 1u);
}

// Stop the benchmark with the status's text; false when `s` is UVM_OK.
inline bool failed(benchmark::State &state, uvm_status_t s, const char *what) {
    if (s == UVM_OK)
        return false;
    static thread_local char text[160];
    std::snprintf(text, sizeof(text), "%s: %s", what, uvm_status_string(s));
    state.SkipWithError(text);
    return true;
}

// The allocator replays' timing: one untimed run to warm the pool, then one
// run per iteration timed by itself (manual time), until `ok` turns false;
// the timed runs' seconds. `run` returns its own seconds.
template <typename Run>
inline double timed_runs(benchmark::State &state, const bool &ok, Run &&run) {
    run();
    double total = 0;
    for (auto _ : state) {
        if (!ok)
            break;
        const double seconds = run();
        state.SetIterationTime(seconds);
        total += seconds;
    }
    return total;
}

inline bool on_cuda() {
    uvm_backend_kind_t kind = UVM_BACKEND_SIM;
    return manager() && uvm_manager_backend(manager(), &kind) == UVM_OK && kind == UVM_BACKEND_CUDA;
}

// An address range nothing in the process uses now, for CPU user mappings.
// Pick it after allocating the object: picked before, the object's own pages
// could land on it.
inline uint64_t cpu_user_range(uint64_t size, uint64_t align) {
    void *p = mmap(nullptr, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    munmap(p, size + align);
    return (reinterpret_cast<uintptr_t>(p) + align - 1) & ~(uintptr_t)(align - 1);
}

// A free address range for GPU user mappings: one the driver can reserve on
// CUDA (it places GPU mappings only inside its own VA heap, which the CPU
// does not share), an unused CPU range elsewhere.
inline uint64_t user_range(uint64_t size, uint64_t align) {
#if defined(UVM_HAVE_CUDA)
    if (on_cuda())
        return uvm::cuda::reservable_gpu_address(size, align);
#endif
    return cpu_user_range(size, align);
}

#if defined(UVM_HAVE_CUDA)
// The driver with GPU 0's primary context current, where the manager runs on
// CUDA (the baselines measured beside our figures); null elsewhere.
inline const uvm::cuda::DriverApi *driver_with_context() {
    if (!on_cuda())
        return nullptr;
    const uvm::cuda::DriverApi *api = uvm::cuda::driver_api();
    CUdevice dev;
    CUcontext ctx;
    api->cuDeviceGet(&dev, 0);
    api->cuDevicePrimaryCtxRetain(&ctx, dev);  // released at exit with the process
    api->cuCtxSetCurrent(ctx);
    return api;
}
#endif

// cuMemAllocAsync + cuMemFreeAsync of state.range(0) bytes on one stream,
// the pool warm (what cudaMallocAsync costs); skips without a GPU.
inline void driver_alloc_async_pairs(benchmark::State &state) {
#if defined(UVM_HAVE_CUDA)
    if (const uvm::cuda::DriverApi *api = driver_with_context()) {
        const size_t size = static_cast<size_t>(state.range(0));
        CUstream stream;
        api->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
        CUdeviceptr p;
        api->cuMemAllocAsync(&p, size, stream);  // warm the pool
        api->cuMemFreeAsync(p, stream);
        for (auto _ : state) {
            if (api->cuMemAllocAsync(&p, size, stream) != CUDA_SUCCESS ||
                api->cuMemFreeAsync(p, stream) != CUDA_SUCCESS)
                return state.SkipWithError("cuMemAllocAsync failed");
        }
        api->cuStreamSynchronize(stream);
        api->cuStreamDestroy(stream);
        return;
    }
#endif
    state.SkipWithError("no CUDA GPU");
}

}  // namespace uvm_bench
