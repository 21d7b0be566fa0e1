// Each mapping kind's map+unmap pair, and the page tree underneath, on the
// default backend (the GPU where there is one, else sim).
//
//   map_cpu_user/<size>              sysmem (shareable) at a second CPU address
//   map_gpu_phys/<size>              sysmem DMA map (pinning) on GPU 0
//   map_gpu_kernel/<backing>/<chunk> a 2 MiB object in GPU 0's kernel space
//   map_gpu_user/<backing>/<picked>  a 2 MiB object allocated UVM_MEM_USER_MAPPABLE (vidmem:
//                                    remappable; sysmem: shareable) at a chosen GPU user address,
//                                    or (picked) at one the manager picks (on CUDA: vidmem's range
//                                    of the window; sysmem's CPU mapping there, registered)
//   map_peer_kernel                  GPU 0's 2 MiB vidmem in GPU 1's kernel space
//   page_tree_map/<page>/<MiB>       map+unmap of a range in a bare page tree
#include <vector>

#include "bench/bench_common.h"
#include "common/sizes.h"
#include "mmu/page_tree.h"

namespace {

using namespace uvm_bench;

// Time map+unmap pairs on a fresh object. `prepare` runs once, untimed, after
// the allocation: what the pair needs first (a DMA mapping, a peer grant, a
// user address picked after the object exists, so that its own pages cannot
// land on it).
template <typename Prepare, typename Map, typename Unmap>
void pair(benchmark::State &state, const uvm_mem_alloc_params_t &a, Prepare prepare, Map map, Unmap unmap) {
    uvm_manager_t *mgr = manager();
    if (!mgr)
        return state.SkipWithError("no manager");
    uvm_mem_t *mem;
    if (failed(state, uvm_mem_alloc(mgr, &a, &mem), "alloc"))
        return;
    if (!failed(state, prepare(mgr, mem), "prepare")) {
        for (auto _ : state)
            if (failed(state, map(mgr, mem), "map") || failed(state, unmap(mgr, mem), "unmap"))
                break;
    }
    uvm_mem_free(mgr, mem);
}

uvm_status_t nothing(uvm_manager_t *, uvm_mem_t *) { return UVM_OK; }

void map_cpu_user(benchmark::State &state) {
    const uint64_t size = static_cast<uint64_t>(state.range(0));
    void *where = nullptr;
    pair(state, alloc_params(UVM_BACKING_SYSMEM, size, 0, 0, UVM_MEM_USER_MAPPABLE),
         [&](uvm_manager_t *, uvm_mem_t *) {
             where = reinterpret_cast<void *>(cpu_user_range(size, 2 * kMiB));
             return where ? UVM_OK : UVM_ERR_ADDRESS_IN_USE;
         },
         [&](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_map_cpu_user(m, mem, where); },
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_unmap_cpu_user(m, mem); });
}

void map_gpu_phys(benchmark::State &state) {
    pair(state, alloc_params(UVM_BACKING_SYSMEM, static_cast<uint64_t>(state.range(0))), nothing,
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_map_gpu_phys(m, mem, 0); },
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_unmap_gpu_phys(m, mem, 0); });
}

void map_gpu_kernel(benchmark::State &state) {
    const uvm_backing_t backing = static_cast<uvm_backing_t>(state.range(0));
    // Sysmem is DMA-mapped first, so the pair times the virtual mapping only.
    pair(state, alloc_params(backing, 2 * kMiB, 0, static_cast<uint64_t>(state.range(1))),
         [&](uvm_manager_t *m, uvm_mem_t *mem) {
             return backing == UVM_BACKING_SYSMEM ? uvm_mem_map_gpu_phys(m, mem, 0) : UVM_OK;
         },
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_map_gpu_kernel(m, mem, 0); },
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_unmap_gpu_kernel(m, mem, 0); });
}

void map_gpu_user(benchmark::State &state) {
    uint64_t where = 0;
    const uvm_backing_t backing = static_cast<uvm_backing_t>(state.range(0));
    const bool picked = state.range(1) == 1;
    pair(state, alloc_params(backing, 2 * kMiB, 0, 0, UVM_MEM_USER_MAPPABLE),
         [&](uvm_manager_t *, uvm_mem_t *) {
             // Host pages go where the CPU can map them; vidmem where the driver can.
             where = picked                            ? 0
                     : backing == UVM_BACKING_SYSMEM ? cpu_user_range(2 * kMiB, 2 * kMiB)
                                                     : user_range(2 * kMiB, 2 * kMiB);
             return where || picked ? UVM_OK : UVM_ERR_ADDRESS_IN_USE;
         },
         [&](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_map_gpu_user(m, mem, 0, where); },
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_unmap_gpu_user(m, mem, 0); });
}

void map_peer_kernel(benchmark::State &state) {
    if (!peers(1, 0))
        return state.SkipWithError("needs two GPUs with peer access");
    // The pair's peer access is granted once, by the physical mapping.
    pair(state, alloc_params(UVM_BACKING_VIDMEM, 2 * kMiB),
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_map_gpu_phys(m, mem, 1); },
         [](uvm_manager_t *m, uvm_mem_t *mem) { return uvm_mem_map_gpu_kernel(m, mem, 1); },
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
BENCHMARK(map_gpu_user)
    ->ArgNames({"backing", "picked"})
    ->ArgsProduct({{UVM_BACKING_VIDMEM, UVM_BACKING_SYSMEM}, {0, 1}})
    ->UseRealTime();
BENCHMARK(map_peer_kernel)->UseRealTime();
BENCHMARK(page_tree_map)
    ->ArgNames({"page", "MiB"})
    ->Args({4 << 10, 2})
    ->Args({64 << 10, 2})
    ->Args({2 << 20, 2})
    ->Args({4 << 10, 1024})
    ->Args({2 << 20, 1024});

BENCHMARK_MAIN();
