// Memory objects and their mappings (nvidia-uvm's uvm_mem).
//
// Every function here works on one object whose lock the caller holds, and
// either succeeds or leaves the object, the manager and the backend as they
// were.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "common/assert.h"
#include "uvm/manager.h"
#include "uvm/uvm.h"

namespace uvm {

// What one object has on one GPU.
struct GpuMapping {
    bool phys = false;       // physical/DMA mapping
    uint64_t dma = 0;        // sysmem: DMA address of byte 0
    bool kernel = false;     // kernel virtual mapping
    uint64_t kernel_va = 0;
    bool kernel_va_placed = false;  // the backend placed it: not from the kernel VA allocator
    bool user = false;       // user virtual mapping (at Mem::user_address)
};

// A vidmem object's chunk addresses. Most objects are one chunk: that one is
// held inline, so the alloc/free fast path makes no heap allocation for it.
class ChunkList {
public:
    void resize(size_t n) {
        UVM_ASSERT(size_ == 0);
        if (n > 1)
            heap_ = std::make_unique<uint64_t[]>(n);
        size_ = n;
    }
    size_t size() const { return size_; }
    uint64_t *data() { return heap_ ? heap_.get() : &inline_; }
    const uint64_t *data() const { return heap_ ? heap_.get() : &inline_; }
    uint64_t &operator[](size_t i) { return data()[i]; }
    uint64_t operator[](size_t i) const { return data()[i]; }

private:
    uint64_t inline_ = 0;
    size_t size_ = 0;
    std::unique_ptr<uint64_t[]> heap_;
};

struct Mem {
    std::mutex lock;
    bool dead = false;  // freed: every call through a stale reference fails

    uint64_t size = 0;
    uint64_t alloc_size = 0;
    uint64_t chunk_size = 0;
    uvm_backing_t backing = UVM_BACKING_SYSMEM;
    uint32_t owner = 0;  // vidmem and managed: the owning GPU; sysmem: the GPU it is for
    bool evictable = false;
    bool remappable = false;  // vidmem from the GPU's remap_pmm (see GpuState)
    uint32_t flags = 0;          // UVM_MEM_* as allocated
    int32_t numa_node = -1;      // sysmem: the node its placement resolved to
    uint64_t numa_node_mask = 0; // sysmem: the nodes it is bound to

    ChunkList chunks;                // vidmem: physical address of each chunk
    backend::HostAllocation host;    // sysmem
    uint64_t managed = 0;            // managed: the address every processor uses

    void *cpu_kernel = nullptr;
    void *cpu_user = nullptr;
    uint64_t user_address = 0;  // one address for the CPU and every GPU user mapping
    uint32_t user_refs = 0;     // user mappings holding it
    bool user_address_picked = false;  // the manager picked it (UserSpace::pick)
    // Sysmem: the pages are mapped on the CPU at user_address, for the CPU
    // user mapping or for GPU user mappings that reach them through it
    // (Backend::gpu_user_sysmem_through_cpu); it goes when neither needs it.
    bool host_at_user = false;

    std::vector<GpuMapping> gpus;  // sized to the GPU count on first use
    uint64_t chunk_count() const { return alloc_size / chunk_size; }
    bool is_vidmem() const { return backing == UVM_BACKING_VIDMEM; }
    bool is_managed() const { return backing == UVM_BACKING_MANAGED; }
};

// Pick the chunk size for an object (after nvidia-uvm's mem_pick_chunk_size).
// `requested` 0 = adaptive. PAGE_SIZE_NOT_SUPPORTED for a forced size that
// `supported` (a mask of page sizes) lacks.
uvm_status_t pick_chunk_size(uvm_backing_t backing, uint64_t size, uint64_t requested,
                             uint64_t supported, uint64_t *out);

uvm_status_t mem_alloc(Manager &mgr, const uvm_mem_alloc_params_t &params,
                       std::shared_ptr<Mem> *out);
// Remove every mapping, then release the memory. Cannot fail.
void mem_release(Manager &mgr, Mem &mem);

uvm_status_t mem_map_cpu_kernel(Manager &mgr, Mem &mem);
uvm_status_t mem_unmap_cpu_kernel(Manager &mgr, Mem &mem);
uvm_status_t mem_map_cpu_user(Manager &mgr, Mem &mem, void *address);
uvm_status_t mem_unmap_cpu_user(Manager &mgr, Mem &mem);
uvm_status_t mem_map_gpu_phys(Manager &mgr, Mem &mem, uint32_t gpu);
uvm_status_t mem_unmap_gpu_phys(Manager &mgr, Mem &mem, uint32_t gpu);
uvm_status_t mem_map_gpu_virtual(Manager &mgr, Mem &mem, uint32_t gpu, uvm_va_space_kind_t space,
                                 uint64_t address);
uvm_status_t mem_unmap_gpu_virtual(Manager &mgr, Mem &mem, uint32_t gpu, uvm_va_space_kind_t space);

uvm_status_t mem_advise(Manager &mgr, Mem &mem, int advice, int32_t processor);
uvm_status_t mem_prefetch(Manager &mgr, Mem &mem, uint64_t offset, uint64_t size, int32_t processor);

uvm_status_t mem_gpu_phys_address(Manager &mgr, Mem &mem, uint32_t gpu, uint64_t offset,
                                  uint64_t size, uvm_gpu_phys_address_t *out);

// Where the copy engine of `gpu` finds byte `offset` of `mem` through `view`,
// and how many bytes from there it may take in one piece.
uvm_status_t mem_ce_address(Manager &mgr, Mem &mem, uint32_t gpu, uvm_gpu_view_t view,
                            uint64_t offset, backend::CeAddress *out, uint64_t *piece);

}  // namespace uvm
