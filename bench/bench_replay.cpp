// Replays of real allocation traces (PyTorch training steps recorded with
// tools/record_torch_trace.py, bench/traces/) through the C API, on the
// default backend, against the driver's stream-ordered allocator
// (cuMemAllocAsync, what cudaMallocAsync calls) on the same trace, where
// there is a GPU. Counter ns_per_op: time per alloc or free.
//
//   replay/<trace>/mode:0   uvm_mem_alloc + uvm_mem_free of vidmem on GPU 0
//   replay/<trace>/mode:1   the same with UVM_MEM_GPU_MAPPED: every object gets its
//                           GPU kernel address at allocation
//   replay/<trace>/mode:2   uvm_mem_alloc, then uvm_mem_map_gpu_kernel, and uvm_mem_free
//   driver_async_replay/<trace>   cuMemAllocAsync + cuMemFreeAsync on one stream, pool kept
//
// Objects still alive at the end of the trace are freed outside the timing.
#include <chrono>
#include <vector>

#include "bench/bench_common.h"
#include "bench/trace.h"

namespace {

using namespace uvm_bench;

const std::vector<uvm_trace::Trace> &traces() {
    static const std::vector<uvm_trace::Trace> all = [] {
        std::vector<uvm_trace::Trace> t;
        for (const std::string &path : uvm_trace::shipped_traces()) {
            uvm_trace::Trace one;
            if (uvm_trace::read_trace(path, &one))
                t.push_back(std::move(one));
        }
        return t;
    }();
    return all;
}

void report(benchmark::State &state, const uvm_trace::Trace &t, double seconds) {
    state.counters["ns_per_op"] =
        benchmark::Counter(seconds * 1e9 / static_cast<double>(t.ops.size()), benchmark::Counter::kAvgIterations);
    state.counters["ops"] = static_cast<double>(t.ops.size());
    state.counters["peak_live_MiB"] = static_cast<double>(t.peak_live_bytes) / kMiB;
}

void replay(benchmark::State &state) {
    uvm_manager_t *mgr = manager();
    if (!mgr)
        return state.SkipWithError("no manager");
    if (static_cast<size_t>(state.range(0)) >= traces().size())
        return state.SkipWithError("trace not found");
    const uvm_trace::Trace &t = traces()[static_cast<size_t>(state.range(0))];
    const int mode = static_cast<int>(state.range(1));
    std::vector<uvm_mem_t *> objects(t.ids, nullptr);
    double total = 0;
    for (auto _ : state) {
        uvm_status_t s = UVM_OK;
        const auto t0 = std::chrono::steady_clock::now();
        for (const uvm_trace::Op &op : t.ops) {
            if (!op.alloc) {
                s = uvm_mem_free(mgr, objects[op.id]);
                objects[op.id] = nullptr;
            } else {
                const uvm_mem_alloc_params_t a =
                    alloc_params(UVM_BACKING_VIDMEM, op.size, 0, 0, mode == 1 ? UVM_MEM_GPU_MAPPED : 0);
                s = uvm_mem_alloc(mgr, &a, &objects[op.id]);
                if (s == UVM_OK && mode == 2)
                    s = uvm_mem_map_gpu_kernel(mgr, objects[op.id], 0);
            }
            if (s != UVM_OK)
                break;
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        state.SetIterationTime(seconds);
        total += seconds;
        for (uvm_mem_t *&m : objects) {
            if (m)
                uvm_mem_free(mgr, m);
            m = nullptr;
        }
        if (failed(state, s, "replay"))
            return;
    }
    report(state, t, total);
    state.SetLabel(t.name);
}

#if defined(UVM_HAVE_CUDA)
void driver_async_replay(benchmark::State &state) {
    if (!on_cuda())
        return state.SkipWithError("no CUDA GPU");
    if (static_cast<size_t>(state.range(0)) >= traces().size())
        return state.SkipWithError("trace not found");
    const uvm_trace::Trace &t = traces()[static_cast<size_t>(state.range(0))];
    const uvm::cuda::DriverApi *api = uvm::cuda::driver_api();
    CUdevice dev;
    CUcontext ctx;
    api->cuDeviceGet(&dev, 0);
    api->cuDevicePrimaryCtxRetain(&ctx, dev);
    api->cuCtxSetCurrent(ctx);
    CUstream stream;
    api->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    std::vector<CUdeviceptr> ptrs(t.ids, 0);
    double total = 0;
    bool ok = true;
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        for (const uvm_trace::Op &op : t.ops) {
            ok = (op.alloc ? api->cuMemAllocAsync(&ptrs[op.id], op.size, stream)
                           : api->cuMemFreeAsync(ptrs[op.id], stream)) == CUDA_SUCCESS;
            if (!op.alloc)
                ptrs[op.id] = 0;
            if (!ok)
                break;
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        state.SetIterationTime(seconds);
        total += seconds;
        for (CUdeviceptr &p : ptrs) {
            if (p)
                api->cuMemFreeAsync(p, stream);
            p = 0;
        }
        if (!ok)
            break;
    }
    api->cuStreamSynchronize(stream);
    api->cuStreamDestroy(stream);
    api->cuDevicePrimaryCtxRelease(dev);
    if (!ok)
        return state.SkipWithError("cuMemAllocAsync failed");
    report(state, t, total);
}
BENCHMARK(driver_async_replay)->ArgName("trace")->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);
#endif

}  // namespace

BENCHMARK(replay)->ArgNames({"trace", "mode"})->ArgsProduct({{0, 1}, {0, 1, 2}})->UseManualTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
