// Each mapping kind's map+unmap pair, and the page tree underneath, on the
// default backend (the GPU where there is one, else sim).
//
//   map_cpu_user/<size>              sysmem (shareable) at a second CPU address
//   map_gpu_phys/<size>              sysmem DMA map (pinning) on GPU 0
//   map_gpu_kernel/<backing>/<chunk> a 2 MiB object in GPU 0's kernel space
//   map_gpu_user/<backing>           a 2 MiB object at a chosen GPU user address
//   map_peer_kernel                  GPU 0's 2 MiB vidmem in GPU 1's kernel space
//   page_tree_map/<page>/<MiB>       map+unmap of a range in a bare page tree
#include <vector>

#include "bench/bench_common.h"
#include "common/sizes.h"
#include "mmu/page_tree.h"

namespace {

using namespace uvm_bench;

// Run map/unmap over a fresh object; `map` and `unmap` take the object.
template <typename Map, typename Unmap>
void pair(benchmark::State &state, const uvm_mem_alloc_params_t &a, Map map, Unmap unmap) {
    uvm_manager_t *mgr = manager();
    if (!mgr)
        return state.SkipWithError("no manager");
    uvm_mem_t *mem;
    if (failed(state, uvm_mem_alloc(mgr, &a, &mem), "alloc"))
        return;
    for (auto _ : state)
        if (failed(state, map(mgr, mem), "map") || failed(state, unmap(mgr, mem), "unmap"))
            break;
    uvm_mem_free(mgr, mem);
}

void map_cpu_user(benchmark::State &state) {
    const uint64_t size = static_cast<uint64_t>(state.range(0));
    void *where = nullptr;
    pair(state, params(UVM_BACKING_SYSMEM, size, 0, 0, UVM_MEM_USER_MAPPABLE),
         [&](uvm_manager_t *m, uvm_mem_t *mem) {
             if (!where)  // the object's one user address, good for the CPU and the GPUs
                 where = reinterpret_cast<void *>(uvm_bench::user_range(size, 2 * kMiB));
             return uvm_mem_map_cpu_user(m, mem, where);
         },
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_unmap_cpu_user(m, mem); });
}

void map_gpu_phys(benchmark::State &state) {
    pair(state, params(UVM_BACKING_SYSMEM, static_cast<uint64_t>(state.range(0))),
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_map_gpu_phys(m, mem, 0); },
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_unmap_gpu_phys(m, mem, 0); });
}

void map_gpu_kernel(benchmark::State &state) {
    const uvm_backing_t backing = static_cast<uvm_backing_t>(state.range(0));
    // Sysmem is DMA-mapped once first, so the pair times the virtual mapping only.
    uvm_mem_alloc_params_t a = params(backing, 2 * kMiB, static_cast<uint64_t>(state.range(1)));
    pair(state, a,
         [&](uvm_manager_t *m, uvm_mem_t *mem) {
             static thread_local uvm_mem_t *phys_done = nullptr;
             if (backing == UVM_BACKING_SYSMEM && phys_done != mem) {
                 uvm_status_t s = uvm_mem_map_gpu_phys(m, mem, 0);
                 if (s != UVM_OK)
                     return s;
                 phys_done = mem;
             }
             return uvm_mem_map_gpu_kernel(m, mem, 0);
         },
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_unmap_gpu_kernel(m, mem, 0); });
}

void map_gpu_user(benchmark::State &state) {
    uint64_t where = 0;
    pair(state, params(static_cast<uvm_backing_t>(state.range(0)), 2 * kMiB),
         [&](uvm_manager_t *m, uvm_mem_t *mem) {
             if (!where)
                 where = user_range(2 * kMiB, 2 * kMiB);
             return uvm_mem_map_gpu_user(m, mem, 0, where);
         },
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_unmap_gpu_user(m, mem, 0); });
}

void map_peer_kernel(benchmark::State &state) {
    if (!peers(1, 0))
        return state.SkipWithError("needs two GPUs with peer access");
    bool granted = false;
    pair(state, params(UVM_BACKING_VIDMEM, 2 * kMiB),
         [&](uvm_manager_t *m, uvm_mem_t *mem) {
             if (!granted) {  // the pair's peer access is granted once, outside the loop's steady state
                 uvm_status_t s = uvm_mem_map_gpu_phys(m, mem, 1);
                 if (s != UVM_OK)
                     return s;
                 granted = true;
             }
             return uvm_mem_map_gpu_kernel(m, mem, 1);
         },
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_unmap_gpu_kernel(m, mem, 1); });
}

void page_tree_map(benchmark::State &state) {
    uvm::mmu::PageTree tree;
    const uint64_t page = static_cast<uint64_t>(state.range(0));
    const uint64_t bytes = static_cast<uint64_t>(state.range(1)) * kMiB;
    std::vector<uvm::mmu::Pte> ptes(bytes / page);
    for (size_t i = 0; i < ptes.size(); ++i)
        ptes[i] = uvm::mmu::Pte{i * page, uvm::mmu::Aperture::Vid, 0};
    const uint64_t va = 1ull << 40;
    for (auto _ : state) {
        tree.map(va, page, ptes.data(), ptes.size());
        tree.unmap(va, page, ptes.size());
    }
    state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ptes.size()));
    // What the mapping costs in page-table memory, as on the GPU.
    tree.map(va, page, ptes.data(), ptes.size());
    state.counters["table_KiB"] = static_cast<double>(tree.info().table_bytes) / 1024.0;
    tree.unmap(va, page, ptes.size());
}

}  // namespace

BENCHMARK(map_cpu_user)->Arg(64 << 10)->Arg(2 << 20);
BENCHMARK(map_gpu_phys)->Arg(64 << 10)->Arg(2 << 20)->UseRealTime();
BENCHMARK(map_gpu_kernel)
    ->ArgNames({"backing", "chunk"})
    ->Args({UVM_BACKING_VIDMEM, 4 << 10})
    ->Args({UVM_BACKING_VIDMEM, 64 << 10})
    ->Args({UVM_BACKING_VIDMEM, 2 << 20})
    ->Args({UVM_BACKING_SYSMEM, 2 << 20})
    ->UseRealTime();
BENCHMARK(map_gpu_user)->ArgName("backing")->Arg(UVM_BACKING_VIDMEM)->Arg(UVM_BACKING_SYSMEM)->UseRealTime();
BENCHMARK(map_peer_kernel)->UseRealTime();
BENCHMARK(page_tree_map)
    ->ArgNames({"page", "MiB"})
    ->Args({4 << 10, 2})
    ->Args({64 << 10, 2})
    ->Args({2 << 20, 2})
    ->Args({4 << 10, 1024})
    ->Args({2 << 20, 1024});

BENCHMARK_MAIN();
