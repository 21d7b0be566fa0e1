// Placement of GPU mappings by the backend: for a backend whose driver, not
// the manager, decides where some GPU mappings can go (CUDA: the physical
// window and registered host memory have addresses of their own; GPU user
// addresses must lie in ranges reserved from the driver). A backend
// capability (backend.h): Backend::placement() is null where the manager
// places everything itself (sim), and the manager then does what each method
// below names as the answer "the manager picks".
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace uvm::backend {

class PlacementCapability {
public:
    // Where a GPU kernel mapping of these pages must be placed. *va = 0 lets
    // the manager pick; a backend whose mapping granularity rules out a
    // manager-picked address for some pages names the address it can give
    // (an existing view of them), or says NOT_SUPPORTED.
    virtual uvm_status_t kernel_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes,
                                             size_t count, uint64_t *va) = 0;

    // Where a GPU user mapping of these pages goes when the caller leaves the
    // address to the manager: a backend that has a view of them every GPU
    // and the CPU can use (on CUDA, the physical window, inside the driver's
    // own VA reservation) names it; 0 lets the manager pick.
    virtual uvm_status_t user_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes,
                                           size_t count, uint64_t *va) = 0;

    // A user address range the caller reserves (uvm_user_range_reserve). A
    // backend that places GPU mappings only inside ranges it reserves from
    // its driver (CUDA) takes one there and names it, and later maps GPU user
    // mappings inside it without reserving again; *va = 0: the manager picks.
    virtual uvm_status_t user_range_reserve(uint64_t size, uint64_t *va) = 0;
    virtual void user_range_release(uint64_t va, uint64_t size) = 0;

    // Whether a GPU reaches host memory at a user address only through the
    // pages' CPU mapping there (CUDA: registered host memory has the device
    // address of its CPU address). Then the manager maps a shareable sysmem
    // object's pages at its user address on the CPU before a GPU user
    // mapping, and gpu_va_map of host pages in the user space makes that CPU
    // mapping reachable. Without this capability: false (sim: the GPU maps
    // the DMA pages, no CPU mapping needed).
    virtual bool gpu_user_sysmem_through_cpu() const = 0;

    // Whether a vidmem object's GPU user mapping can be made again at the
    // same address over other chunks (an evicted object's restore).
    // `remappable`: its chunks are remappable roots. CUDA: only then (other
    // objects' user addresses are views of their physical memory). Without
    // this capability: true.
    virtual bool gpu_user_survives_move(bool remappable) const = 0;

protected:
    // Owned by the backend that hands it out, never through this interface.
    ~PlacementCapability() = default;
};

}  // namespace uvm::backend
