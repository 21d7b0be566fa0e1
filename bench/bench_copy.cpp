// Copy-engine bandwidth on each path, through the objects' GPU kernel
// mappings, on the default backend (the GPU where there is one, else sim).
//
//   copy/<path>   256 MiB: 0 vidmem->vidmem, 1 sysmem->vidmem (H2D),
//                 2 vidmem->sysmem (D2H), 3 GPU 0 vidmem -> GPU 1 vidmem on GPU 1 (peer)
#include "bench/bench_common.h"

namespace {

using namespace uvm_bench;

constexpr uint64_t kBytes = 256 * kMiB;

void copy(benchmark::State &state) {
    uvm_manager_t *mgr = manager();
    if (!mgr)
        return state.SkipWithError("no manager");
    const int path = static_cast<int>(state.range(0));
    if (path == 3 && !peers(1, 0))
        return state.SkipWithError("needs two GPUs with peer access");
    // Which object backs each side, whose GPU owns it, and which GPU copies.
    const uvm_backing_t src_backing = path == 1 ? UVM_BACKING_SYSMEM : UVM_BACKING_VIDMEM;
    const uvm_backing_t dst_backing = path == 2 ? UVM_BACKING_SYSMEM : UVM_BACKING_VIDMEM;
    const uint32_t engine = path == 3 ? 1 : 0;
    uvm_mem_alloc_params_t sa = alloc_params(src_backing, kBytes);
    uvm_mem_alloc_params_t da = alloc_params(dst_backing, kBytes, path == 3 ? 1 : 0);
    uvm_mem_t *src = nullptr, *dst = nullptr;
    if (failed(state, uvm_mem_alloc(mgr, &sa, &src), "alloc") ||
        failed(state, uvm_mem_alloc(mgr, &da, &dst), "alloc") ||
        failed(state, uvm_mem_map_gpu_kernel(mgr, src, engine), "map source") ||
        failed(state, uvm_mem_map_gpu_kernel(mgr, dst, engine), "map destination")) {
        if (src)
            uvm_mem_free(mgr, src);
        if (dst)
            uvm_mem_free(mgr, dst);
        return;
    }
    uvm_mem_span_t d{dst, 0, UVM_VIEW_KERNEL}, s{src, 0, UVM_VIEW_KERNEL};
    for (auto _ : state)
        if (failed(state, uvm_mem_copy(mgr, engine, &d, &s, kBytes), "copy"))
            break;
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kBytes));
    uvm_mem_free(mgr, src);
    uvm_mem_free(mgr, dst);
}

}  // namespace

BENCHMARK(copy)->ArgName("path")->DenseRange(0, 3)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
