// Object allocation on the default backend (the GPU where there is one, else
// sim). Run with --benchmark_repetitions=N for medians.
//
//   alloc_free/<backing>/<size>   alloc+free pair served from chunks the manager
//                                 holds (vidmem) or fresh host pages (sysmem)
//   alloc_cold/<MiB>              vidmem alloc with an empty pool: the pool grows
//                                 first; counter chunks = 2 MiB roots grown
//   alloc_free_client/<size>      the vidmem pair owned by a client with a budget
//   alloc_free_traced/<size>      the vidmem pair with the event trace on
//   alloc_free_live/<n>           the 4 KiB vidmem pair with n 4 KiB objects alive
//   alloc_free_threads            the 64 KiB vidmem pair from 1..16 threads at once
#include <chrono>
#include <vector>

#include "bench/bench_common.h"

namespace {

using namespace uvm_bench;

// Timed alloc+free pairs of `a`, after one untimed pair that warms the pool
// (the PMM holds a root chunk from here on).
void held_pairs(benchmark::State &state, uvm_manager_t *mgr, const uvm_mem_alloc_params_t &a) {
    uvm_mem_t *mem;
    if (failed(state, uvm_mem_alloc(mgr, &a, &mem), "alloc") || failed(state, uvm_mem_free(mgr, mem), "free"))
        return;
    for (auto _ : state) {
        if (failed(state, uvm_mem_alloc(mgr, &a, &mem), "alloc") || failed(state, uvm_mem_free(mgr, mem), "free"))
            break;
    }
}

void alloc_free(benchmark::State &state) {
    uvm_manager_t *mgr = manager();
    if (!mgr)
        return state.SkipWithError("no manager");
    const uvm_backing_t backing = static_cast<uvm_backing_t>(state.range(0));
    const uint64_t size = static_cast<uint64_t>(state.range(1));
    const uvm_mem_alloc_params_t a = alloc_params(backing, size, 0, size);
    held_pairs(state, mgr, a);
}

// The same pair, owned by a client with a budget (clients and accounting on).
void alloc_free_client(benchmark::State &state) {
    uvm_manager_t *mgr = manager();
    static uvm_client_t *client = nullptr;
    if (!mgr || (!client && uvm_client_create(mgr, "bench", &client) != UVM_OK))
        return state.SkipWithError("no manager or client");
    uvm_client_set_budget(mgr, client, 0, 1ull << 40);
    const uint64_t size = static_cast<uint64_t>(state.range(0));
    uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, size, 0, size);
    a.client = client;
    held_pairs(state, mgr, a);
}

// The plain pair with the event trace on (a 16 MiB ring, wrapping).
void alloc_free_traced(benchmark::State &state) {
    uvm_manager_t *mgr = manager();
    if (!mgr)
        return state.SkipWithError("no manager");
    const uvm_status_t s = uvm_trace_start(mgr, 0);
    if (s == UVM_ERR_NOT_SUPPORTED)
        return state.SkipWithError("a build without the trace");
    if (failed(state, s, "trace start"))
        return;
    const uint64_t size = static_cast<uint64_t>(state.range(0));
    held_pairs(state, mgr, alloc_params(UVM_BACKING_VIDMEM, size, 0, size));
    uvm_trace_stop(mgr);
}

void alloc_cold(benchmark::State &state) {
    uvm_manager_t *mgr = manager();
    if (!mgr)
        return state.SkipWithError("no manager");
    const uint64_t size = static_cast<uint64_t>(state.range(0)) * kMiB;
    const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, size, 0, 2 * kMiB);
    uvm_mem_t *mem;
    for (auto _ : state) {
        uvm_gpu_trim(mgr, 0, nullptr);  // the pool gives every free root back
        const auto t0 = std::chrono::steady_clock::now();
        const uvm_status_t s = uvm_mem_alloc(mgr, &a, &mem);
        const auto t1 = std::chrono::steady_clock::now();
        if (failed(state, s, "alloc"))
            break;
        state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
        uvm_mem_free(mgr, mem);
    }
    uvm_gpu_trim(mgr, 0, nullptr);
    state.counters["chunks"] = static_cast<double>(size / (2 * kMiB));
}

void alloc_free_live(benchmark::State &state) {
    uvm_manager_t *mgr = manager();
    if (!mgr)
        return state.SkipWithError("no manager");
    const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 4 * kKiB, 0, 4 * kKiB);
    std::vector<uvm_mem_t *> live(static_cast<size_t>(state.range(0)));
    size_t made = 0;
    for (; made < live.size(); ++made)
        if (failed(state, uvm_mem_alloc(mgr, &a, &live[made]), "alloc of the live set"))
            break;
    uvm_mem_t *mem;
    if (made == live.size()) {
        for (auto _ : state) {
            if (failed(state, uvm_mem_alloc(mgr, &a, &mem), "alloc") ||
                failed(state, uvm_mem_free(mgr, mem), "free"))
                break;
        }
    }
    for (size_t i = 0; i < made; ++i)
        uvm_mem_free(mgr, live[i]);
    uvm_gpu_trim(mgr, 0, nullptr);
}

void alloc_free_threads(benchmark::State &state) {
    uvm_manager_t *mgr = manager();
    if (!mgr)
        return state.SkipWithError("no manager");
    const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 64 * kKiB, 0, 64 * kKiB);
    uvm_mem_t *mem;
    for (auto _ : state) {
        if (failed(state, uvm_mem_alloc(mgr, &a, &mem), "alloc") || failed(state, uvm_mem_free(mgr, mem), "free"))
            break;
    }
}

}  // namespace

BENCHMARK(alloc_free)
    ->ArgNames({"backing", "size"})
    ->Args({UVM_BACKING_VIDMEM, 4 << 10})
    ->Args({UVM_BACKING_VIDMEM, 64 << 10})
    ->Args({UVM_BACKING_VIDMEM, 2 << 20})
    ->Args({UVM_BACKING_SYSMEM, 4 << 10})
    ->Args({UVM_BACKING_SYSMEM, 2 << 20});
BENCHMARK(alloc_cold)->ArgName("MiB")->Arg(2)->Arg(32)->Arg(256)->UseManualTime();
BENCHMARK(alloc_free_client)->Arg(4096)->Arg(65536)->Arg(2097152);
BENCHMARK(alloc_free_traced)->Arg(4096)->Arg(65536)->Arg(2097152);
BENCHMARK(alloc_free_live)->ArgName("live")->RangeMultiplier(10)->Range(1000, 1000000);
BENCHMARK(alloc_free_threads)->ThreadRange(1, 16)->UseRealTime();

BENCHMARK_MAIN();
