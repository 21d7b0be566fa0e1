// PyTorch's CUDA caching allocator as a peer: the raw_alloc/raw_delete pair,
// served from its cache after the first call. Built where PyTorch's C++
// headers and libraries are found (UVM_TORCH_DIR); skips without a GPU.
//
//   torch_raw_alloc_delete/<size>
//   torch_replay/<trace>   the allocs and frees of a recorded trace (bench/traces)
//                          through raw_alloc/raw_delete, the cache warm; counters as
//                          bench_replay's (held_peak_MiB: the allocator's reserved peak)
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

#include "bench/trace.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

namespace {

bool torch_ready() {
    static const bool ready = [] {
        try {
            const int n = c10::cuda::device_count();
            if (n < 1)
                return false;
            c10::cuda::CUDACachingAllocator::init(n);
            return true;
        } catch (...) {
            return false;
        }
    }();
    return ready;
}

void torch_raw_alloc_delete(benchmark::State &state) {
    if (!torch_ready())
        return state.SkipWithError("no CUDA GPU for PyTorch");
    const size_t size = static_cast<size_t>(state.range(0));
    c10::cuda::CUDACachingAllocator::raw_delete(c10::cuda::CUDACachingAllocator::raw_alloc(size));  // warm
    for (auto _ : state) {
        void *p = c10::cuda::CUDACachingAllocator::raw_alloc(size);
        benchmark::DoNotOptimize(p);
        c10::cuda::CUDACachingAllocator::raw_delete(p);
    }
    c10::cuda::CUDACachingAllocator::emptyCache();
}

void torch_replay(benchmark::State &state) {
    namespace alloc = c10::cuda::CUDACachingAllocator;
    if (!torch_ready())
        return state.SkipWithError("no CUDA GPU for PyTorch");
    const std::vector<uvm_trace::Trace> &traces = uvm_trace::shipped();
    if (static_cast<size_t>(state.range(0)) >= traces.size())
        return state.SkipWithError("trace not found");
    const uvm_trace::Trace &t = traces[static_cast<size_t>(state.range(0))];
    alloc::emptyCache();
    alloc::resetPeakStats(0);
    std::vector<void *> ptrs(t.ids, nullptr);
    auto run = [&](bool timed) {
        const auto t0 = std::chrono::steady_clock::now();
        for (const uvm_trace::Op &op : t.ops) {
            if (op.alloc) {
                ptrs[op.id] = alloc::raw_alloc(op.size);
            } else {
                alloc::raw_delete(ptrs[op.id]);
                ptrs[op.id] = nullptr;
            }
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (void *&p : ptrs) {
            if (p)
                alloc::raw_delete(p);
            p = nullptr;
        }
        if (timed)
            state.SetIterationTime(seconds);
        return seconds;
    };
    try {
        run(false);  // warm, untimed
        double total = 0;
        for (auto _ : state)
            total += run(true);
        const auto stats = alloc::getDeviceStats(0);
        const double held = static_cast<double>(stats.reserved_bytes[0].peak);
        state.counters["ns_per_op"] =
            benchmark::Counter(total * 1e9 / static_cast<double>(t.ops.size()), benchmark::Counter::kAvgIterations);
        state.counters["peak_live_MiB"] = static_cast<double>(t.peak_live_bytes) / (1 << 20);
        state.counters["held_peak_MiB"] = held / (1 << 20);
        state.counters["held_over_live"] = held / static_cast<double>(t.peak_live_bytes);
        state.SetLabel(t.name);
    } catch (const std::exception &e) {
        state.SkipWithError(e.what());
    }
    alloc::emptyCache();
}

}  // namespace

BENCHMARK(torch_replay)->ArgName("trace")->DenseRange(0, 4)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(torch_raw_alloc_delete)->Arg(4 << 10)->Arg(64 << 10)->Arg(2 << 20);

BENCHMARK_MAIN();
