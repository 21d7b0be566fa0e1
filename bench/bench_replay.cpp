// Replays of real allocation traces (PyTorch training steps recorded with
// tools/record_torch_trace.py, bench/traces/) through the C API, on the
// default backend, against the driver's stream-ordered allocator
// (cuMemAllocAsync, what cudaMallocAsync calls; bench_runtime replays the
// runtime call itself, bench_torch PyTorch's caching allocator) on the same
// trace, where there is a GPU.
//
//   replay/<trace>/mode:0   uvm_mem_alloc + uvm_mem_free of vidmem on GPU 0
//   replay/<trace>/mode:1   the same with UVM_MEM_GPU_MAPPED: every object gets its
//                           GPU kernel address at allocation
//   replay/<trace>/mode:2   uvm_mem_alloc, then uvm_mem_map_gpu_kernel, and uvm_mem_free
//   replay_torch_path/<trace>  the calls of the PyTorch allocator (integrations/torch):
//                           uvm_mem_alloc_gpu on a stream (the kernel pointer at
//                           allocation), and a free by pointer: uvm_mem_lookup_gpu_kernel,
//                           then uvm_mem_free_async on that stream; no GPU work queued;
//                           held_over_live over two untimed replays, the split of the
//                           held memory at its peak (*_at_peak_MiB) and the most free
//                           2M memory held beside a growth (free_2m_at_growth_MiB)
//   replay_held/<trace>/policy:{0,1,2}  one untimed replay at the adaptive chunk
//                           size, forced 2M, forced 64K: the memory held from the GPU
//   replay_stream_held/<trace>/lag:{0,50,200}/mapped:{0,1}  stream-ordered (uvm_mem_alloc_async,
//                           or with mapped:1 uvm_mem_alloc_gpu as the PyTorch allocator calls it;
//                           free_async on one stream) with the stream's work held on sim
//                           (uvm_sim_stream_hold) and let go every `lag` ops (0: never, the
//                           GPU a whole replay behind): memory held while work is pending,
//                           two replays, held_over_live at the peak (sim only)
//   driver_async_replay/<trace>   cuMemAllocAsync + cuMemFreeAsync on one stream, pool kept
//
// BENCH_GROWTH_SLACK=<bytes>|inf replays the library under that growth policy
// (uvm_gpu_set_growth_slack); roots_grown and roots_moved count root chunks
// taken from the backend and moved (per timed replay for `replay`).
//
// Counters: ns_per_op (time per alloc or free, the pool warm: the first
// replay is untimed), ops, peak_live_MiB (the trace's peak of live requested
// bytes), held_peak_MiB and held_over_live (the peak of memory held from the
// GPU: what the driver gave out during the replay, looked at after every
// alloc of the untimed replay), torch_reserved_MiB (PyTorch's own reserved peak when the trace was
// recorded), kernel_checked (mode 1 on a GPU: objects a kernel wrote through
// their kernel address, every byte read back). Objects alive at the end of
// the trace are freed outside the timing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/bench_common.h"
#include "bench/trace.h"

namespace {

using namespace uvm_bench;

const std::vector<uvm_trace::Trace> &traces() { return uvm_trace::shipped(); }

const uvm_trace::Trace *trace_of(benchmark::State &state) {
    if (static_cast<size_t>(state.range(0)) >= traces().size()) {
        state.SkipWithError("trace not found (bench/traces/*.trace.gz, read with zlib)");
        return nullptr;
    }
    return &traces()[static_cast<size_t>(state.range(0))];
}

// The manager and the trace a replay benchmark names; false (skipped with
// the reason) where either is missing.
bool replay_inputs(benchmark::State &state, uvm_manager_t **mgr, const uvm_trace::Trace **t) {
    *mgr = manager();
    if (!*mgr) {
        state.SkipWithError("no manager");
        return false;
    }
    // BENCH_GROWTH_SLACK (bytes, or "inf"): the growth policy to replay under
    // (uvm_gpu_set_growth_slack; the library's default where unset).
    if (const char *slack = std::getenv("BENCH_GROWTH_SLACK"); slack && *slack)
        uvm_gpu_set_growth_slack(*mgr, 0, std::strcmp(slack, "inf") == 0 ? UINT64_MAX : std::strtoull(slack, nullptr, 0));
    *t = trace_of(state);
    return *t != nullptr;
}

void report(benchmark::State &state, const uvm_trace::Trace &t, double seconds, uint64_t held_peak) {
    state.counters["ns_per_op"] =
        benchmark::Counter(seconds * 1e9 / static_cast<double>(t.ops.size()), benchmark::Counter::kAvgIterations);
    state.counters["ops"] = static_cast<double>(t.ops.size());
    state.counters["peak_live_MiB"] = static_cast<double>(t.peak_live_bytes) / kMiB;
    if (held_peak) {
        state.counters["held_peak_MiB"] = static_cast<double>(held_peak) / kMiB;
        state.counters["held_over_live"] = static_cast<double>(held_peak) / static_cast<double>(t.peak_live_bytes);
    }
    if (t.torch_peak_reserved)
        state.counters["torch_reserved_MiB"] = static_cast<double>(t.torch_peak_reserved) / kMiB;
    state.SetLabel(t.name);
}

// Where the held memory was at its peak: free chunks, freed on the stream,
// never handed out, and the free 2M chunks among them.
void report_split(benchmark::State &state, const uvm_gpu_stats_t &at_peak) {
    state.counters["cached_at_peak_MiB"] = static_cast<double>(at_peak.held_cached_bytes) / kMiB;
    state.counters["pooled_at_peak_MiB"] = static_cast<double>(at_peak.held_pooled_bytes) / kMiB;
    state.counters["unused_at_peak_MiB"] = static_cast<double>(at_peak.held_unused_bytes) / kMiB;
    state.counters["free_2m_at_peak_MiB"] = static_cast<double>(at_peak.bytes_free[2]) / kMiB;
}

// Root chunks grown and moved (given back to grow elsewhere: chunk/pmm.h)
// on GPU 0 since `before`, the driver calls that holding less cost (`flags`:
// kAvgIterations for a figure per replay). GPU 0's figures now in *after,
// where given; false where they cannot be read.
bool growth(benchmark::State &state, uvm_manager_t *mgr, const uvm_gpu_stats_t &before,
            benchmark::Counter::Flags flags = benchmark::Counter::kDefaults, uvm_gpu_stats_t *after = nullptr) {
    uvm_gpu_stats_t now;
    if (uvm_gpu_stats(mgr, 0, &now) != UVM_OK)
        return false;
    state.counters["roots_grown"] =
        benchmark::Counter(static_cast<double>(now.root_chunks_grown - before.root_chunks_grown), flags);
    state.counters["roots_moved"] =
        benchmark::Counter(static_cast<double>(now.root_chunks_moved - before.root_chunks_moved), flags);
    if (after)
        *after = now;
    return true;
}

// Memory held from the GPU now: the root chunks held when the replay began
// (`base_held`, the pool trimmed: what the thread caches keep) and what the
// driver has given out since (`base_free`, its free memory then). On CUDA
// that counts the root pool's handles whole (they grow in doubling sizes,
// and a handle is memory whether or not the PMM uses all of its roots); on
// sim it is the root chunks held.
uint64_t held_since(uvm_manager_t *mgr, uint64_t base_held, uint64_t base_free) {
    uvm_gpu_info_t gi;
    if (uvm_gpu_info(mgr, 0, &gi) != UVM_OK || gi.memory_free > base_free)
        return base_held;
    return base_held + (base_free - gi.memory_free);
}

uint64_t roots_held(uvm_manager_t *mgr) {
    uvm_gpu_stats_t st;
    return uvm_gpu_stats(mgr, 0, &st) == UVM_OK ? st.root_chunks * UVM_PAGE_SIZE_2M : 0;
}

uint64_t driver_free(uvm_manager_t *mgr) {
    uvm_gpu_info_t gi;
    return uvm_gpu_info(mgr, 0, &gi) == UVM_OK ? gi.memory_free : 0;
}

// One replay of `t`; `held_peak` where given: the peak of held memory,
// looked at after every alloc (slow: untimed replays only). `each` is called
// with every new object. `seconds`, where given, gets the time of the
// trace's operations; the objects left alive are freed after it.
template <typename Each>
uvm_status_t replay_once(uvm_manager_t *mgr, const uvm_trace::Trace &t, uint32_t flags, uint64_t chunk, bool map,
                         uint64_t *held_peak, Each &&each, double *seconds = nullptr) {
    std::vector<uvm_mem_t *> objects(t.ids, nullptr);
    uvm_status_t s = UVM_OK;
    const uint64_t base_held = held_peak ? roots_held(mgr) : 0;
    const uint64_t base_free = held_peak ? driver_free(mgr) : 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const uvm_trace::Op &op : t.ops) {
        if (!op.alloc) {
            s = uvm_mem_free(mgr, objects[op.id]);
            objects[op.id] = nullptr;
        } else {
            const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, op.size, 0, chunk, flags);
            s = uvm_mem_alloc(mgr, &a, &objects[op.id]);
            if (s == UVM_OK && map)
                s = uvm_mem_map_gpu_kernel(mgr, objects[op.id], 0);
            if (s == UVM_OK && held_peak)
                *held_peak = std::max(*held_peak, held_since(mgr, base_held, base_free));
            if (s == UVM_OK)
                s = each(objects[op.id], op);
        }
        if (s != UVM_OK)
            break;
    }
    if (seconds)
        *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (uvm_mem_t *m : objects)
        if (m)
            uvm_mem_free(mgr, m);
    return s;
}

uvm_status_t nothing(uvm_mem_t *, const uvm_trace::Op &) { return UVM_OK; }

#if defined(UVM_HAVE_CUDA)
// dst[i] = value for i < n, a grid-stride loop (PTX: the library needs no nvcc).
const char kFillPtx[] = R"(
.version 7.8
.target sm_80
.address_size 64
.visible .entry fill(.param .u64 dst, .param .u64 n, .param .u32 value)
{
    .reg .pred p;
    .reg .b32 r<6>;
    .reg .b64 rd<8>;
    ld.param.u64 rd1, [dst];
    ld.param.u64 rd2, [n];
    ld.param.u32 r1, [value];
    mov.u32 r2, %ctaid.x;
    mov.u32 r3, %ntid.x;
    mov.u32 r4, %tid.x;
    mad.lo.s32 r5, r2, r3, r4;
    cvt.u64.u32 rd3, r5;
    mov.u32 r2, %nctaid.x;
    mul.wide.u32 rd4, r2, r3;
LOOP:
    setp.ge.u64 p, rd3, rd2;
    @p bra DONE;
    add.s64 rd5, rd1, rd3;
    st.global.u8 [rd5], r1;
    add.s64 rd3, rd3, rd4;
    bra LOOP;
DONE:
    ret;
}
)";

// A kernel writes a byte pattern through every 50th object's kernel address;
// the object is read back whole. The count of objects checked, or -1 where
// a byte was wrong or a driver call failed.
int64_t kernel_check(uvm_manager_t *mgr, const uvm_trace::Trace &t) {
    const uvm::cuda::DriverApi *api = driver_with_context();
    if (!api)
        return 0;
    CUmodule module;
    CUfunction fill;
    if (api->cuModuleLoadData(&module, kFillPtx) != CUDA_SUCCESS ||
        api->cuModuleGetFunction(&fill, module, "fill") != CUDA_SUCCESS)
        return -1;
    int64_t checked = 0;
    uint64_t n_alloc = 0;
    std::vector<uint8_t> host;
    const uvm_status_t s = replay_once(mgr, t, UVM_MEM_GPU_MAPPED, 0, false, nullptr,
                                       [&](uvm_mem_t *m, const uvm_trace::Op &op) -> uvm_status_t {
        if (n_alloc++ % 50 != 0 || checked < 0)
            return UVM_OK;
        uint64_t va = 0;
        if (uvm_mem_gpu_kernel_address(mgr, m, 0, 0, &va) != UVM_OK)
            return checked = -1, UVM_OK;
        CUdeviceptr dst = va;
        uint64_t n = op.size;
        unsigned value = 0x5a ^ (op.id & 0xff);
        void *args[] = {&dst, &n, &value};
        host.assign(op.size, 0);
        if (api->cuLaunchKernel(fill, 264, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr) != CUDA_SUCCESS ||
            api->cuCtxSynchronize() != CUDA_SUCCESS ||
            api->cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(host.data()), va, op.size, nullptr) != CUDA_SUCCESS ||
            api->cuCtxSynchronize() != CUDA_SUCCESS)
            return checked = -1, UVM_OK;
        for (uint8_t b : host)
            if (b != static_cast<uint8_t>(value))
                return checked = -1, UVM_OK;
        ++checked;
        return UVM_OK;
    });
    api->cuModuleUnload(module);
    return s == UVM_OK ? checked : -1;
}
#endif

void replay(benchmark::State &state) {
    uvm_manager_t *mgr;
    const uvm_trace::Trace *tp;
    if (!replay_inputs(state, &mgr, &tp))
        return;
    const uvm_trace::Trace &t = *tp;
    const int mode = static_cast<int>(state.range(1));
    const uint32_t flags = mode == 1 ? UVM_MEM_GPU_MAPPED : 0;
    // The untimed first replay warms the pool and measures what it holds.
    uvm_gpu_trim(mgr, 0, nullptr);
    uint64_t held_peak = 0;
    if (failed(state, replay_once(mgr, t, flags, 0, mode == 2, &held_peak, nothing), "replay"))
        return;
    double total = 0;
    uvm_gpu_stats_t before{};
    uvm_gpu_stats(mgr, 0, &before);
    for (auto _ : state) {
        double seconds = 0;
        const uvm_status_t s = replay_once(mgr, t, flags, 0, mode == 2, nullptr, nothing, &seconds);
        state.SetIterationTime(seconds);
        total += seconds;
        if (failed(state, s, "replay"))
            return;
    }
    report(state, t, total, held_peak);
    // Over the timed replays, the pool warm; and what the warm pool holds,
    // every object freed.
    uvm_gpu_stats_t after{};
    if (growth(state, mgr, before, benchmark::Counter::kAvgIterations, &after))
        state.counters["pool_over_live"] = static_cast<double>(after.held_bytes) / static_cast<double>(t.peak_live_bytes);
#if defined(UVM_HAVE_CUDA)
    if (mode == 1 && on_cuda()) {
        const int64_t checked = kernel_check(mgr, t);
        if (checked < 0)
            return state.SkipWithError("a kernel's write through an object's kernel address did not read back");
        state.counters["kernel_checked"] = static_cast<double>(checked);
    }
#endif
    uvm_gpu_trim(mgr, 0, nullptr);
}

// The memory held at each chunk-size policy (untimed: the held bytes are
// looked at after every alloc). On sim, the same numbers as the CI test.
void replay_held(benchmark::State &state) {
    uvm_manager_t *mgr;
    const uvm_trace::Trace *tp;
    if (!replay_inputs(state, &mgr, &tp))
        return;
    static const uint64_t chunks[] = {0, UVM_PAGE_SIZE_2M, UVM_PAGE_SIZE_64K};
    const uint64_t chunk = chunks[state.range(1)];
    uint64_t held_peak = 0;
    uvm_gpu_stats_t before{};
    for (auto _ : state) {
        uvm_gpu_trim(mgr, 0, nullptr);
        uvm_gpu_stats(mgr, 0, &before);
        held_peak = 0;
        if (failed(state, replay_once(mgr, *tp, 0, chunk, false, &held_peak, nothing), "replay"))
            return;
    }
    report(state, *tp, 0, held_peak);
    growth(state, mgr, before);
    uvm_gpu_trim(mgr, 0, nullptr);
}

// The trace stream-ordered on one stream whose work the sim holds: every free
// waits for the stream (pooled, reusable by the stream alone) until the work
// is let go, every `lag` ops or never. Two replays: the second finds the
// first's runs pooled. Memory held at the peak against the trace's peak live.
void replay_stream_held(benchmark::State &state) {
    uvm_manager_t *mgr;
    const uvm_trace::Trace *tp;
    if (!replay_inputs(state, &mgr, &tp))
        return;
    uvm_backend_kind_t kind;
    if (uvm_manager_backend(mgr, &kind) != UVM_OK || kind != UVM_BACKEND_SIM)
        return state.SkipWithError("held stream work is simulated (sim only)");
    const uvm_trace::Trace &t = *tp;
    const long lag = state.range(1);
    const bool mapped = state.range(2) != 0;  // uvm_mem_alloc_gpu, as the PyTorch allocator allocates
    uint64_t held_peak = 0;
    uvm_gpu_stats_t at_peak{};  // where the held memory was at its peak
    uvm_gpu_stats_t before{};
    for (auto _ : state) {
        uvm_gpu_trim(mgr, 0, nullptr);
        uvm_gpu_stats(mgr, 0, &before);
        uvm_stream_t *s = nullptr;
        if (failed(state, uvm_stream_create(mgr, 0, nullptr, &s), "stream"))
            return;
        std::vector<uvm_mem_t *> objs(t.ids, nullptr);
        bool held = false;
        long n = 0;
        uvm_status_t status = UVM_OK;
        // BENCH_PASSES: replays after the first (default 1), as training's steps.
        const char *passes_env = std::getenv("BENCH_PASSES");
        const int passes = passes_env && *passes_env ? 1 + std::atoi(passes_env) : 2;
        for (int pass = 0; pass < passes && status == UVM_OK; ++pass) {
            for (uvm_mem_t *&o : objs)
                if (o) {
                    uvm_mem_free_async(mgr, o, s);
                    o = nullptr;
                }
            for (const uvm_trace::Op &op : t.ops) {
                if (!held && (status = uvm_sim_stream_hold(mgr, s)) != UVM_OK)
                    break;
                held = true;
                if (op.alloc) {
                    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, op.size);
                    uint64_t address = 0;
                    status = mapped ? uvm_mem_alloc_gpu(mgr, &p, s, &objs[op.id], &address)
                                    : uvm_mem_alloc_async(mgr, &p, s, &objs[op.id]);
                } else {
                    status = uvm_mem_free_async(mgr, objs[op.id], s);
                    objs[op.id] = nullptr;
                }
                if (status != UVM_OK)
                    break;
                uvm_gpu_stats_t gs;
                if (uvm_gpu_stats(mgr, 0, &gs) == UVM_OK && gs.held_bytes > held_peak) {
                    held_peak = gs.held_bytes;
                    at_peak = gs;
                }
                if (lag && ++n % lag == 0) {
                    uvm_sim_stream_release(mgr, s);
                    held = false;
                }
            }
        }
        if (held)
            uvm_sim_stream_release(mgr, s);
        for (uvm_mem_t *o : objs)
            if (o)
                uvm_mem_free(mgr, o);
        uvm_stream_destroy(mgr, s);
        if (failed(state, status, "stream-ordered replay"))
            return;
    }
    report(state, t, 0, held_peak);
    growth(state, mgr, before);
    report_split(state, at_peak);
    uvm_gpu_trim(mgr, 0, nullptr);
}

// What PyTorch's allocator through this library costs per operation, warm
// (two replays untimed), its stream idle.
void replay_torch_path(benchmark::State &state) {
    uvm_manager_t *mgr;
    const uvm_trace::Trace *tp;
    if (!replay_inputs(state, &mgr, &tp))
        return;
    const uvm_trace::Trace &t = *tp;
    uvm_stream_t *stream = nullptr;
    if (failed(state, uvm_stream_create(mgr, 0, nullptr, &stream), "stream"))
        return;
    std::vector<uint64_t> ptrs(t.ids, 0);
    uvm_status_t status = UVM_OK;
    auto free_by_pointer = [&](uint64_t ptr) {
        uvm_mem_t *mem = nullptr;
        uint64_t offset = 0;
        uvm_status_t s = uvm_mem_lookup_gpu_kernel(mgr, 0, ptr, &mem, &offset);
        if (s == UVM_OK)
            s = offset ? UVM_ERR_INVALID_ARGUMENT : uvm_mem_free_async(mgr, mem, stream);
        return s;
    };
    uint64_t held_peak = 0, free_2m_at_growth = 0;
    uvm_gpu_stats_t at_peak{};
    auto run = [&](bool sample_held) {
        const auto t0 = std::chrono::steady_clock::now();
        for (const uvm_trace::Op &op : t.ops) {
            if (op.alloc) {
                const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, op.size);
                uvm_mem_t *mem = nullptr;
                uvm_gpu_stats_t was{}, gs;
                if (sample_held)
                    uvm_gpu_stats(mgr, 0, &was);
                status = uvm_mem_alloc_gpu(mgr, &p, stream, &mem, &ptrs[op.id]);
                if (sample_held && uvm_gpu_stats(mgr, 0, &gs) == UVM_OK) {
                    if (gs.held_bytes > held_peak) {
                        held_peak = gs.held_bytes;
                        at_peak = gs;
                    }
                    if (gs.root_chunks_grown > was.root_chunks_grown)  // grown beside free 2M chunks
                        free_2m_at_growth = std::max(free_2m_at_growth, was.bytes_free[2]);
                }
            } else {
                status = free_by_pointer(ptrs[op.id]);
                ptrs[op.id] = 0;
            }
            if (status != UVM_OK)
                break;
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (uint64_t &ptr : ptrs)
            if (ptr) {
                free_by_pointer(ptr);
                ptr = 0;
            }
        return seconds;
    };
    bool ok = true;
    double total = 0;
    uvm_gpu_stats_t before{};
    uvm_gpu_stats(mgr, 0, &before);
    // Both warm replays sampled (the held peak is reached in the first,
    // where the PMM grows): statistics are read around each allocation.
    run(true);
    run(true);
    for (auto _ : state) {
        const double seconds = run(false);
        ok = status == UVM_OK;
        if (!ok)
            break;
        state.SetIterationTime(seconds);
        total += seconds;
    }
    uvm_stream_synchronize(mgr, stream);
    uvm_stream_destroy(mgr, stream);
    if (failed(state, status, "replay"))
        return;
    report(state, t, total, held_peak);
    growth(state, mgr, before, benchmark::Counter::kAvgIterations);
    report_split(state, at_peak);
    // The most free 2M memory held beside a growth: what no run of the
    // request's length could be made of (one contiguous run per object).
    state.counters["free_2m_at_growth_MiB"] = static_cast<double>(free_2m_at_growth) / kMiB;
    uvm_gpu_trim(mgr, 0, nullptr);
}

#if defined(UVM_HAVE_CUDA)
void driver_async_replay(benchmark::State &state) {
    const uvm::cuda::DriverApi *api = driver_with_context();
    if (!api)
        return state.SkipWithError("no CUDA GPU");
    const uvm_trace::Trace *tp = trace_of(state);
    if (!tp)
        return;
    const uvm_trace::Trace &t = *tp;
    CUdevice dev;
    api->cuDeviceGet(&dev, 0);
    CUmemoryPool pool;
    api->cuDeviceGetDefaultMemPool(&pool, dev);
    // The pool keeps what it has between replays (warm).
    cuuint64_t keep = ~0ull, zero = 0;
    api->cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
    CUstream stream;
    api->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    std::vector<CUdeviceptr> ptrs(t.ids, 0);
    bool ok = true;
    // One replay, timed; what is alive at its end is freed after the time.
    auto run = [&]() {
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
        for (CUdeviceptr &p : ptrs) {
            if (p)
                api->cuMemFreeAsync(p, stream);
            p = 0;
        }
        return seconds;
    };
    const double total = timed_runs(state, ok, run);
    api->cuStreamSynchronize(stream);
    api->cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero);
    api->cuStreamDestroy(stream);
    api->cuCtxSynchronize();  // the pool gives its memory back at the next synchronization
    if (!ok)
        return state.SkipWithError("cuMemAllocAsync failed");
    // No held figure here: the pool keeps what earlier programs' runs left
    // (the driver has no trim in our table), so its high-water mark is not
    // this trace's. bench_runtime's rt_replay trims first and reports it.
    report(state, t, total, 0);
}
BENCHMARK(driver_async_replay)->ArgName("trace")->DenseRange(0, 4)->UseManualTime()->Unit(benchmark::kMillisecond);
#endif

}  // namespace

BENCHMARK(replay)->ArgNames({"trace", "mode"})->ArgsProduct({{0, 1, 2, 3, 4}, {0, 1, 2}})->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(replay_torch_path)->ArgName("trace")->DenseRange(0, 4)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(replay_stream_held)->ArgNames({"trace", "lag", "mapped"})->ArgsProduct({{0, 1, 2, 3, 4}, {0, 50, 200}, {0, 1}})
    ->Iterations(1);
BENCHMARK(replay_held)->ArgNames({"trace", "policy"})->ArgsProduct({{0, 1, 2, 3, 4}, {0, 1, 2}})->Iterations(1)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
