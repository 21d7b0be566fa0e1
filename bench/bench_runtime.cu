// The baselines people would use instead, measured in the same run as ours:
// the CUDA runtime's allocators and copies, managed memory, and the HBM
// ceiling (a streaming kernel over a cudaMalloc buffer) next to the same
// kernel over a vidmem object mapped by the manager. Needs a GPU (skips
// without one) and nvcc to build (UVM_BENCH_CUDA_RUNTIME=ON).
//
//   rt_malloc_free/<size>        cudaMalloc + cudaFree
//   rt_malloc_async_free/<size>  cudaMallocAsync + cudaFreeAsync, pool hit (the pool keeps memory)
//   rt_replay/<trace>            the allocs and frees of a recorded PyTorch trace (bench/traces)
//                                through cudaMallocAsync + cudaFreeAsync on one stream, the pool
//                                warm; counters as bench_replay's (ns_per_op, held_peak_MiB: the
//                                pool's reserved high-water mark, held_over_live)
//   rt_managed_alloc_free/<size> cudaMallocManaged + cudaFree
//   rt_memcpy/<kind>             1 GiB: 0 H2D pinned, 1 D2H pinned, 2 D2D, 3 GPU0->GPU1 peer
//   stream_read/<src>            read 1 GiB with a streaming kernel: 0 cudaMalloc, 1 our vidmem object
//   host_copy_ab/<h2d>           1 GiB between sysmem and vidmem: ours (uvm_mem_copy, 2M chunks,
//                                kernel mappings) and pinned cudaMemcpy, alternately in every
//                                iteration; counters ours_GBps and rt_GBps
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "bench/trace.h"

namespace {

using namespace uvm_bench;

bool gpu_ready(benchmark::State &state) {
    // The manager first: it holds GPU 0's primary context, which the runtime shares.
    if (!on_cuda()) {
        state.SkipWithError("no CUDA GPU");
        return false;
    }
    return cudaSetDevice(0) == cudaSuccess;
}

bool cuda_failed(benchmark::State &state, cudaError_t e, const char *what) {
    if (e == cudaSuccess)
        return false;
    static thread_local char text[160];
    std::snprintf(text, sizeof(text), "%s: %s", what, cudaGetErrorString(e));
    state.SkipWithError(text);
    return true;
}

void rt_malloc_free(benchmark::State &state) {
    if (!gpu_ready(state))
        return;
    const size_t size = static_cast<size_t>(state.range(0));
    for (auto _ : state) {
        void *p = nullptr;
        if (cuda_failed(state, cudaMalloc(&p, size), "cudaMalloc") || cuda_failed(state, cudaFree(p), "cudaFree"))
            break;
    }
}

void rt_malloc_async_free(benchmark::State &state) {
    if (!gpu_ready(state))
        return;
    const size_t size = static_cast<size_t>(state.range(0));
    cudaStream_t stream;
    cudaMemPool_t pool;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaDeviceGetDefaultMemPool(&pool, 0);
    uint64_t keep = UINT64_MAX;  // freed memory stays in the pool: every alloc is a hit
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    void *p = nullptr;
    cudaMallocAsync(&p, size, stream);  // warm the pool
    cudaFreeAsync(p, stream);
    cudaStreamSynchronize(stream);
    for (auto _ : state) {
        if (cuda_failed(state, cudaMallocAsync(&p, size, stream), "cudaMallocAsync") ||
            cuda_failed(state, cudaFreeAsync(p, stream), "cudaFreeAsync"))
            break;
    }
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    uint64_t release = 0;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &release);
    cudaMemPoolTrimTo(pool, 0);
}

void rt_replay(benchmark::State &state) {
    if (!gpu_ready(state))
        return;
    const std::vector<uvm_trace::Trace> &traces = uvm_trace::shipped();
    if (static_cast<size_t>(state.range(0)) >= traces.size())
        return state.SkipWithError("trace not found");
    const uvm_trace::Trace &t = traces[static_cast<size_t>(state.range(0))];
    cudaStream_t stream;
    cudaMemPool_t pool;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaDeviceGetDefaultMemPool(&pool, 0);
    uint64_t keep = UINT64_MAX, zero = 0;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    cudaMemPoolTrimTo(pool, 0);
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero);
    std::vector<void *> ptrs(t.ids, nullptr);
    bool ok = true;
    // One replay; what is alive at its end is freed outside the time.
    auto run = [&]() {
        const auto t0 = std::chrono::steady_clock::now();
        for (const uvm_trace::Op &op : t.ops) {
            ok = (op.alloc ? cudaMallocAsync(&ptrs[op.id], op.size, stream) : cudaFreeAsync(ptrs[op.id], stream)) ==
                 cudaSuccess;
            if (!op.alloc)
                ptrs[op.id] = nullptr;
            if (!ok)
                break;
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (void *&p : ptrs) {
            if (p)
                cudaFreeAsync(p, stream);
            p = nullptr;
        }
        return seconds;
    };
    const double total = timed_runs(state, ok, run);
    cudaStreamSynchronize(stream);
    uint64_t high = 0;
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high);
    cudaStreamDestroy(stream);
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &zero);
    cudaMemPoolTrimTo(pool, 0);
    if (!ok)
        return state.SkipWithError("cudaMallocAsync failed");
    state.counters["ns_per_op"] =
        benchmark::Counter(total * 1e9 / static_cast<double>(t.ops.size()), benchmark::Counter::kAvgIterations);
    state.counters["peak_live_MiB"] = static_cast<double>(t.peak_live_bytes) / (1 << 20);
    state.counters["held_peak_MiB"] = static_cast<double>(high) / (1 << 20);
    state.counters["held_over_live"] = static_cast<double>(high) / static_cast<double>(t.peak_live_bytes);
    state.SetLabel(t.name);
}

void rt_managed_alloc_free(benchmark::State &state) {
    if (!gpu_ready(state))
        return;
    const size_t size = static_cast<size_t>(state.range(0));
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    if (size > free_bytes / 2)  // never more managed memory than the GPU has free
        return state.SkipWithError("not enough free GPU memory");
    for (auto _ : state) {
        void *p = nullptr;
        if (cuda_failed(state, cudaMallocManaged(&p, size), "cudaMallocManaged") ||
            cuda_failed(state, cudaFree(p), "cudaFree"))
            break;
    }
}

void rt_memcpy(benchmark::State &state) {
    if (!gpu_ready(state))
        return;
    const int kind = static_cast<int>(state.range(0));
    int devices = 0, can = 0;
    cudaGetDeviceCount(&devices);
    if (kind == 3) {
        if (devices < 2 || cudaDeviceCanAccessPeer(&can, 1, 0) != cudaSuccess || !can)
            return state.SkipWithError("needs two GPUs with peer access");
    }
    void *host = nullptr, *a = nullptr, *b = nullptr;
    bool ok = !cuda_failed(state, cudaMalloc(&a, kGiB), "cudaMalloc");
    if (ok && kind <= 1)
        ok = !cuda_failed(state, cudaMallocHost(&host, kGiB), "cudaMallocHost");
    if (ok && kind >= 2) {
        if (kind == 3)
            cudaSetDevice(1);
        ok = !cuda_failed(state, cudaMalloc(&b, kGiB), "cudaMalloc");
        if (ok && kind == 3) {
            cudaError_t e = cudaDeviceEnablePeerAccess(0, 0);  // GPU 1 reaches GPU 0
            ok = e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled;
            cudaGetLastError();
        }
        cudaSetDevice(0);
    }
    if (ok && host)
        memset(host, 1, kGiB);
    for (auto _ : state) {
        if (!ok)
            break;
        cudaError_t e = kind == 0   ? cudaMemcpy(a, host, kGiB, cudaMemcpyHostToDevice)
                        : kind == 1 ? cudaMemcpy(host, a, kGiB, cudaMemcpyDeviceToHost)
                        : kind == 2 ? cudaMemcpy(b, a, kGiB, cudaMemcpyDeviceToDevice)
                                    : cudaMemcpyPeer(b, 1, a, 0, kGiB);
        if (cuda_failed(state, e, "cudaMemcpy") || cuda_failed(state, cudaDeviceSynchronize(), "sync"))
            break;
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kGiB));
    if (host)
        cudaFreeHost(host);
    cudaFree(a);
    if (b) {
        if (kind == 3)
            cudaSetDevice(1);
        cudaFree(b);
        cudaSetDevice(0);
    }
}

// Every thread reads 16 bytes at a time over the whole buffer; the result is
// written only in a case that cannot happen, so the loads stay.
__global__ void read_stream(const uint4 *p, size_t n, unsigned *sink) {
    unsigned acc = 0;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9E3779B9u && sink)
        *sink = acc;
}

void stream_read(benchmark::State &state) {
    if (!gpu_ready(state))
        return;
    uvm_manager_t *mgr = manager();
    const bool ours = state.range(0) == 1;
    void *buffer = nullptr;
    uvm_mem_t *mem = nullptr;
    if (ours) {
        const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, kGiB, 0, 2 * kMiB);
        uint64_t va = 0;
        if (failed(state, uvm_mem_alloc(mgr, &a, &mem), "alloc") ||
            failed(state, uvm_mem_map_gpu_kernel(mgr, mem, 0), "map") ||
            failed(state, uvm_mem_gpu_kernel_address(mgr, mem, 0, 0, &va), "address"))
            return;
        buffer = reinterpret_cast<void *>(va);
    } else if (cuda_failed(state, cudaMalloc(&buffer, kGiB), "cudaMalloc")) {
        return;
    }
    cudaMemset(buffer, 0, kGiB);
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    const size_t n = kGiB / sizeof(uint4);
    read_stream<<<sms * 8, 512>>>(static_cast<const uint4 *>(buffer), n, nullptr);  // warm
    for (auto _ : state) {
        cudaEventRecord(start);
        read_stream<<<sms * 8, 512>>>(static_cast<const uint4 *>(buffer), n, nullptr);
        cudaEventRecord(stop);
        if (cuda_failed(state, cudaEventSynchronize(stop), "kernel"))
            break;
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        state.SetIterationTime(ms / 1e3);
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kGiB));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    if (ours)
        uvm_mem_free(mgr, mem);
    else
        cudaFree(buffer);
}

void host_copy_ab(benchmark::State &state) {
    if (!gpu_ready(state))
        return;
    uvm_manager_t *mgr = manager();
    const bool h2d = state.range(0) != 0;
    const uvm_mem_alloc_params_t sa = alloc_params(UVM_BACKING_SYSMEM, kGiB, 0, 2 * kMiB);
    const uvm_mem_alloc_params_t va = alloc_params(UVM_BACKING_VIDMEM, kGiB, 0, 2 * kMiB);
    uvm_mem_t *sys = nullptr, *vid = nullptr;
    void *host = nullptr, *dev = nullptr;
    bool ok = !failed(state, uvm_mem_alloc(mgr, &sa, &sys), "alloc") &&
              !failed(state, uvm_mem_alloc(mgr, &va, &vid), "alloc") &&
              !failed(state, uvm_mem_map_gpu_kernel(mgr, sys, 0), "map") &&
              !failed(state, uvm_mem_map_gpu_kernel(mgr, vid, 0), "map") &&
              !cuda_failed(state, cudaMallocHost(&host, kGiB), "cudaMallocHost") &&
              !cuda_failed(state, cudaMalloc(&dev, kGiB), "cudaMalloc");
    if (ok)
        memset(host, 1, kGiB);
    uvm_mem_span_t v{vid, 0, UVM_VIEW_KERNEL}, h{sys, 0, UVM_VIEW_KERNEL};
    double ours = 0, rt = 0;
    for (auto _ : state) {
        if (!ok)
            break;
        const auto t0 = std::chrono::steady_clock::now();
        if (failed(state, uvm_mem_copy(mgr, 0, h2d ? &v : &h, h2d ? &h : &v, kGiB), "copy"))
            break;
        const double o = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const auto t1 = std::chrono::steady_clock::now();
        if (cuda_failed(state, h2d ? cudaMemcpy(dev, host, kGiB, cudaMemcpyHostToDevice)
                                   : cudaMemcpy(host, dev, kGiB, cudaMemcpyDeviceToHost), "cudaMemcpy"))
            break;
        rt += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
        ours += o;
        state.SetIterationTime(o);
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kGiB));
    const double n = static_cast<double>(state.iterations());
    state.counters["ours_GBps"] = ours > 0 ? n * static_cast<double>(kGiB) / ours / 1e9 : 0;
    state.counters["rt_GBps"] = rt > 0 ? n * static_cast<double>(kGiB) / rt / 1e9 : 0;
    if (host)
        cudaFreeHost(host);
    if (dev)
        cudaFree(dev);
    if (sys)
        uvm_mem_free(mgr, sys);
    if (vid)
        uvm_mem_free(mgr, vid);
}

}  // namespace

BENCHMARK(rt_malloc_free)->Arg(4 << 10)->Arg(64 << 10)->Arg(2 << 20)->Arg(64 << 20)->UseRealTime();
BENCHMARK(rt_malloc_async_free)->Arg(4 << 10)->Arg(64 << 10)->Arg(2 << 20)->UseRealTime();
BENCHMARK(rt_replay)->ArgName("trace")->DenseRange(0, 2)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(rt_managed_alloc_free)->Arg(2 << 20)->UseRealTime();
BENCHMARK(rt_memcpy)->ArgName("kind")->DenseRange(0, 3)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(stream_read)->ArgName("ours")->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(host_copy_ab)->ArgName("h2d")->Arg(1)->Arg(0)->UseManualTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
