// Streams and trackers on the default backend, beside the driver's own
// stream-ordered calls in the same run (CUDA only; they skip on sim):
//   stream_alloc_free/<size>      uvm_mem_alloc_async + uvm_mem_free_async on one stream (pool warm)
//   plain_alloc_free/<size>       uvm_mem_alloc + uvm_mem_free (no stream), the baseline of the run
//   runtime_pair/<size>           uvm_mem_alloc_gpu + uvm_mem_free_async on one stream: the runtimes'
//                                 path (a kernel-mapped object and its address); 2 MiB to 256 MiB, whose
//                                 ratio says whether the reuse path grows with the object
//   runtime_pair_miss/<size>      the same, the size alternating between <size> and <size> + 2 MiB, so
//                                 that no parked object fits the next request: a long object made anew
//                                 from its stream's pending roots (what still grows with the size)
//   kv_cache_growth/<rows>        a generate() request's allocations on one stream, through the runtimes'
//                                 calls: GPT-2 small's KV cache (12 layers, a key and a value each, bf16)
//                                 of <rows> prompts of 256 tokens made anew a token longer for each of
//                                 128 new tokens (as transformers' DynamicCache concatenates), the old
//                                 one freed on the stream, and the token's logits; held memory at its
//                                 peak over the live bytes then, and how the held memory splits there
//   driver_alloc_async/<size>     cuMemAllocAsync + cuMemFreeAsync on one stream (cudaMallocAsync)
//   record_use                    uvm_mem_record_use of an object already tracking the stream
//   tracked_alloc_free/<size>     uvm_mem_alloc + uvm_mem_record_use + uvm_mem_free: the free takes a
//                                 fence (an event recorded on the stream) and retires or releases
//   async_copy/<MiB>              uvm_mem_copy_async vidmem -> vidmem (kernel views) + synchronize, bytes/s
//   driver_memcpy_async/<MiB>     cuMemcpyAsync of the same buffers + cuStreamSynchronize, bytes/s
#include <benchmark/benchmark.h>

#include <vector>

#include "bench/bench_common.h"

namespace {

using namespace uvm_bench;

uvm_stream_t *bench_stream() {
    static uvm_stream_t *s = [] {
        uvm_stream_t *out = nullptr;
        return manager() && uvm_stream_create(manager(), 0, nullptr, &out) == UVM_OK ? out : nullptr;
    }();
    return s;
}

void stream_alloc_free(benchmark::State &state) {
    uvm_stream_t *s = bench_stream();
    if (!s)
        return state.SkipWithError("no stream");
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, static_cast<uint64_t>(state.range(0)));
    uvm_mem_t *m = nullptr;
    if (failed(state, uvm_mem_alloc_async(manager(), &p, s, &m), "alloc_async") ||
        failed(state, uvm_mem_free_async(manager(), m, s), "free_async"))
        return;
    for (auto _ : state) {
        if (uvm_mem_alloc_async(manager(), &p, s, &m) != UVM_OK || uvm_mem_free_async(manager(), m, s) != UVM_OK)
            return state.SkipWithError("stream-ordered pair failed");
    }
    uvm_stream_synchronize(manager(), s);
}

void runtime_pair(benchmark::State &state) {
    uvm_stream_t *s = bench_stream();
    if (!s)
        return state.SkipWithError("no stream");
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, static_cast<uint64_t>(state.range(0)));
    uvm_mem_t *m = nullptr;
    uint64_t address = 0;
    for (auto _ : state) {
        if (uvm_mem_alloc_gpu(manager(), &p, s, &m, &address) != UVM_OK ||
            uvm_mem_free_async(manager(), m, s) != UVM_OK)
            return state.SkipWithError("runtime pair failed");
    }
    uvm_stream_synchronize(manager(), s);
}

void runtime_pair_miss(benchmark::State &state) {
    uvm_stream_t *s = bench_stream();
    if (!s)
        return state.SkipWithError("no stream");
    const uint64_t size = static_cast<uint64_t>(state.range(0));
    const uvm_mem_alloc_params_t p[2] = {alloc_params(UVM_BACKING_VIDMEM, size),
                                         alloc_params(UVM_BACKING_VIDMEM, size + 2 * kMiB)};
    uvm_mem_t *m = nullptr;
    uint64_t address = 0;
    size_t i = 0;
    for (auto _ : state) {
        if (uvm_mem_alloc_gpu(manager(), &p[i++ & 1], s, &m, &address) != UVM_OK ||
            uvm_mem_free_async(manager(), m, s) != UVM_OK)
            return state.SkipWithError("runtime pair failed");
    }
    uvm_stream_synchronize(manager(), s);
}

void kv_cache_growth(benchmark::State &state) {
    uvm_stream_t *s = bench_stream();
    if (!s)
        return state.SkipWithError("no stream");
    constexpr uint64_t kLayers = 12, kHeads = 12, kHeadDim = 64, kBf16 = 2, kVocab = 50257;
    constexpr uint64_t kPrompt = 256, kNew = 128;
    const uint64_t rows = static_cast<uint64_t>(state.range(0));
    const uint64_t per_token = rows * kHeads * kHeadDim * kBf16;  // one layer's key (or value), one token
    uint64_t live = 0, live_at_peak = 0;
    // The manager is the process's: what earlier benchmarks left cached goes
    // back first, so that the held peak is this one's, and growth counts from here.
    uvm_stream_synchronize(manager(), s);
    uvm_gpu_trim(manager(), 0, nullptr);
    uvm_gpu_stats_t before{}, at_peak{}, now{};
    uvm_gpu_stats(manager(), 0, &before);
    std::vector<uvm_mem_t *> cache(2 * kLayers, nullptr);
    std::vector<uint64_t> cache_size(2 * kLayers, 0);
    uint64_t address = 0;
    auto alloc = [&](uint64_t size, uvm_mem_t **m) {
        const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size);
        live += size;
        return uvm_mem_alloc_gpu(manager(), &p, s, m, &address) == UVM_OK;
    };
    auto release = [&](uvm_mem_t *m, uint64_t size) {
        live -= size;
        return uvm_mem_free_async(manager(), m, s) == UVM_OK;
    };
    for (auto _ : state) {
        for (uint64_t len = kPrompt; len <= kPrompt + kNew; ++len) {
            for (size_t i = 0; i < cache.size(); ++i) {
                uvm_mem_t *grown = nullptr;
                if (!alloc(len * per_token, &grown) || (cache[i] && !release(cache[i], cache_size[i])))
                    return state.SkipWithError("cache step failed");
                cache[i] = grown;
                cache_size[i] = len * per_token;
            }
            uvm_mem_t *logits = nullptr;
            const uint64_t logits_size = rows * kVocab * kBf16;
            if (!alloc(logits_size, &logits))
                return state.SkipWithError("logits failed");
            uvm_gpu_stats(manager(), 0, &now);
            if (now.held_bytes > at_peak.held_bytes) {
                at_peak = now;
                live_at_peak = live;
            }
            if (!release(logits, logits_size))
                return state.SkipWithError("logits free failed");
        }
        for (size_t i = 0; i < cache.size(); ++i) {
            if (!release(cache[i], cache_size[i]))
                return state.SkipWithError("cache free failed");
            cache[i] = nullptr;
        }
    }
    uvm_stream_synchronize(manager(), s);
    state.counters["held_over_live"] = static_cast<double>(at_peak.held_bytes) / static_cast<double>(live_at_peak);
    state.counters["live_at_peak_MiB"] = static_cast<double>(live_at_peak) / kMiB;
    state.counters["held_peak_MiB"] = static_cast<double>(at_peak.held_bytes) / kMiB;
    // The live objects' chunks: their sizes rounded up to their chunk size.
    state.counters["live_chunks_at_peak_MiB"] = static_cast<double>(at_peak.held_live_bytes) / kMiB;
    state.counters["cached_at_peak_MiB"] = static_cast<double>(at_peak.held_cached_bytes) / kMiB;
    state.counters["pooled_at_peak_MiB"] = static_cast<double>(at_peak.held_pooled_bytes) / kMiB;
    state.counters["unused_at_peak_MiB"] = static_cast<double>(at_peak.held_unused_bytes) / kMiB;
    state.counters["roots_grown"] = static_cast<double>(now.root_chunks_grown - before.root_chunks_grown);
}

void plain_alloc_free(benchmark::State &state) {
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, static_cast<uint64_t>(state.range(0)));
    uvm_mem_t *m = nullptr;
    for (auto _ : state) {
        if (uvm_mem_alloc(manager(), &p, &m) != UVM_OK || uvm_mem_free(manager(), m) != UVM_OK)
            return state.SkipWithError("pair failed");
    }
}

void record_use(benchmark::State &state) {
    uvm_stream_t *s = bench_stream();
    uvm_mem_t *m = nullptr;
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 64 * kKiB);
    if (!s || failed(state, uvm_mem_alloc(manager(), &p, &m), "alloc"))
        return;
    for (auto _ : state)
        if (uvm_mem_record_use(manager(), m, s) != UVM_OK)
            return state.SkipWithError("record_use failed");
    uvm_mem_free(manager(), m);
    uvm_stream_synchronize(manager(), s);
}

void tracked_alloc_free(benchmark::State &state) {
    uvm_stream_t *s = bench_stream();
    if (!s)
        return state.SkipWithError("no stream");
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, static_cast<uint64_t>(state.range(0)));
    uvm_mem_t *m = nullptr;
    for (auto _ : state) {
        if (uvm_mem_alloc(manager(), &p, &m) != UVM_OK || uvm_mem_record_use(manager(), m, s) != UVM_OK ||
            uvm_mem_free(manager(), m) != UVM_OK)
            return state.SkipWithError("tracked pair failed");
    }
    uvm_stream_synchronize(manager(), s);
}

void async_copy(benchmark::State &state) {
    uvm_stream_t *s = bench_stream();
    const uint64_t size = static_cast<uint64_t>(state.range(0)) * kMiB;
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size, 0, 2 * kMiB, UVM_MEM_GPU_MAPPED);
    uvm_mem_t *a = nullptr, *b = nullptr;
    if (!s || failed(state, uvm_mem_alloc(manager(), &p, &a), "alloc") ||
        failed(state, uvm_mem_alloc(manager(), &p, &b), "alloc"))
        return;
    uvm_mem_span_t d{b, 0, UVM_VIEW_KERNEL}, src{a, 0, UVM_VIEW_KERNEL};
    for (auto _ : state) {
        if (uvm_mem_copy_async(manager(), 0, &d, &src, size, s) != UVM_OK ||
            uvm_stream_synchronize(manager(), s) != UVM_OK)
            return state.SkipWithError("async copy failed");
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * size));
    uvm_mem_free(manager(), a);
    uvm_mem_free(manager(), b);
}

void driver_alloc_async(benchmark::State &state) { driver_alloc_async_pairs(state); }

void driver_memcpy_async(benchmark::State &state) {
#if defined(UVM_HAVE_CUDA)
    const uvm::cuda::DriverApi *api = driver_with_context();
    if (api) {
        const size_t size = static_cast<size_t>(state.range(0)) * kMiB;
        CUstream stream;
        CUdeviceptr a, b;
        api->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
        if (api->cuMemAlloc(&a, size) != CUDA_SUCCESS || api->cuMemAlloc(&b, size) != CUDA_SUCCESS)
            return state.SkipWithError("cuMemAlloc failed");
        for (auto _ : state) {
            if (api->cuMemcpyAsync(b, a, size, stream) != CUDA_SUCCESS ||
                api->cuStreamSynchronize(stream) != CUDA_SUCCESS)
                return state.SkipWithError("cuMemcpyAsync failed");
        }
        state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * size));
        api->cuMemFree(a);
        api->cuMemFree(b);
        api->cuStreamDestroy(stream);
        return;
    }
#endif
    state.SkipWithError("no CUDA GPU");
}

void sizes(benchmark::internal::Benchmark *b) {
    for (int64_t size : {4 * 1024, 64 * 1024, 2 * 1024 * 1024})
        b->Arg(size);
}

}  // namespace

BENCHMARK(stream_alloc_free)->Apply(sizes);
BENCHMARK(plain_alloc_free)->Apply(sizes);
BENCHMARK(runtime_pair)->Arg(2 << 20)->Arg(8 << 20)->Arg(32 << 20)->Arg(256 << 20);
BENCHMARK(runtime_pair_miss)->Arg(2 << 20)->Arg(32 << 20)->Arg(256 << 20);
BENCHMARK(kv_cache_growth)->ArgName("rows")->Arg(1)->Arg(8)->Arg(32)->Iterations(2)->Unit(benchmark::kMillisecond);
BENCHMARK(driver_alloc_async)->Apply(sizes);
BENCHMARK(record_use);
BENCHMARK(tracked_alloc_free)->Arg(64 * 1024)->Arg(2 * 1024 * 1024);
BENCHMARK(async_copy)->Arg(256)->UseRealTime();
BENCHMARK(driver_memcpy_async)->Arg(256)->UseRealTime();

BENCHMARK_MAIN();
