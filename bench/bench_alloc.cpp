// Cost of object allocation and mapping on the sim backend (or the backend
// UVM_BACKEND names). Run with --benchmark_repetitions=N to get medians.
//
//   vidmem_alloc_free/<size>:   an alloc+free pair served from chunks the PMM
//                               already holds (the pool is warmed first)
//   sysmem_alloc_free/<size>:   the same for sysmem (a memfd and its pages per object)
//   map_gpu_kernel/<chunk>:     map+unmap of a 2 MiB object in a GPU's kernel space
//   page_tree_map/<page>:       map+unmap of 2 MiB in a bare page tree
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "common/sizes.h"
#include "mmu/page_tree.h"
#include "uvm/uvm.h"

namespace {

uvm_manager_t *make_manager() {
    uvm_manager_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backend = UVM_BACKEND_AUTO;
    p.sim.gpu_count = 1;
    p.sim.vidmem_size = 1ull << 30;
    uvm_manager_t *mgr = nullptr;
    if (uvm_manager_create(&p, &mgr) != UVM_OK)
        return nullptr;
    return mgr;
}

uvm_mem_alloc_params_t params(uvm_backing_t backing, uint64_t size, uint64_t chunk) {
    uvm_mem_alloc_params_t a;
    std::memset(&a, 0, sizeof(a));
    a.backing = backing;
    a.size = size;
    a.chunk_size = chunk;
    return a;
}

void alloc_free(benchmark::State &state, uvm_backing_t backing) {
    uvm_manager_t *mgr = make_manager();
    if (!mgr) {
        state.SkipWithError("no manager");
        return;
    }
    const uint64_t size = static_cast<uint64_t>(state.range(0));
    const uvm_mem_alloc_params_t a = params(backing, size, size);
    uvm_mem_t *mem;
    // Warm the pool: the PMM holds a root chunk from here on.
    if (uvm_mem_alloc(mgr, &a, &mem) != UVM_OK || uvm_mem_free(mgr, mem) != UVM_OK) {
        state.SkipWithError("warm-up failed");
        return;
    }
    for (auto _ : state) {
        if (uvm_mem_alloc(mgr, &a, &mem) != UVM_OK || uvm_mem_free(mgr, mem) != UVM_OK) {
            state.SkipWithError("alloc/free failed");
            break;
        }
    }
    uvm_manager_destroy(mgr);
}

void vidmem_alloc_free(benchmark::State &state) { alloc_free(state, UVM_BACKING_VIDMEM); }
void sysmem_alloc_free(benchmark::State &state) { alloc_free(state, UVM_BACKING_SYSMEM); }

void map_gpu_kernel(benchmark::State &state) {
    uvm_manager_t *mgr = make_manager();
    const uvm_mem_alloc_params_t a = params(UVM_BACKING_VIDMEM, uvm::kPageSize2M, state.range(0));
    uvm_mem_t *mem;
    if (!mgr || uvm_mem_alloc(mgr, &a, &mem) != UVM_OK) {
        state.SkipWithError("setup failed");
        return;
    }
    for (auto _ : state) {
        if (uvm_mem_map_gpu_kernel(mgr, mem, 0) != UVM_OK || uvm_mem_unmap_gpu_kernel(mgr, mem, 0) != UVM_OK) {
            state.SkipWithError("map failed");
            break;
        }
    }
    uvm_mem_free(mgr, mem);
    uvm_manager_destroy(mgr);
}

void page_tree_map(benchmark::State &state) {
    uvm::mmu::PageTree tree;
    const uint64_t page = static_cast<uint64_t>(state.range(0));
    std::vector<uvm::mmu::Pte> ptes(uvm::kPageSize2M / page);
    for (size_t i = 0; i < ptes.size(); ++i)
        ptes[i] = uvm::mmu::Pte{i * page, uvm::mmu::Aperture::Vid, 0};
    const uint64_t va = 1ull << 40;
    for (auto _ : state) {
        tree.map(va, page, ptes.data(), ptes.size());
        tree.unmap(va, page, ptes.size());
    }
    state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ptes.size()));
}

}  // namespace

BENCHMARK(vidmem_alloc_free)->Arg(4 << 10)->Arg(64 << 10)->Arg(2 << 20);
BENCHMARK(sysmem_alloc_free)->Arg(4 << 10)->Arg(2 << 20);
BENCHMARK(map_gpu_kernel)->Arg(4 << 10)->Arg(64 << 10)->Arg(2 << 20);
BENCHMARK(page_tree_map)->Arg(4 << 10)->Arg(64 << 10)->Arg(2 << 20);

BENCHMARK_MAIN();
