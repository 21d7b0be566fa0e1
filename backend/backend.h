// The one narrow interface between the memory objects (uvm/) and a backend
// (sim/, cuda/): root chunks, physical and DMA addresses, CPU and GPU
// mappings, and the copy engine. Nothing above it knows which backend runs;
// a backend knows nothing of objects.
//
// Calls that return a status may fail and then leave nothing behind; calls
// that tear down return nothing and cannot fail, as in the driver.
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mmu/page_tree.h"
#include "mmu/pte.h"
#include "topo/placement.h"
#include "topo/topology.h"
#include "uvm/uvm.h"

namespace uvm::backend {

struct GpuInfo {
    std::string name;
    uint64_t memory_total = 0;
    uint64_t page_sizes = 0;  // mask of supported page sizes
    uint32_t peer_mask = 0;   // bit j: this GPU can reach GPU j's vidmem
    bool cpu_coherent = false;
    uint64_t granularity = 0;
    // The span of physical addresses root chunks get (memory_total, or more
    // where the backend's physical addresses are places in a VA window that
    // must have room to spare).
    uint64_t phys_space = 0;
    std::string pci_bus_id;
    uint8_t uuid[16] = {};      // the GPU's UUID (made up on sim); all zero where unknown
    topo::GpuPlace place;       // host NUMA node, local CPUs, PCI path
};

// What a sysmem object asks of host memory.
struct HostRequest {
    uint64_t size = 0;        // whole chunks
    uint64_t chunk_size = 0;
    bool shareable = false;   // a memfd, mappable again (UVM_MEM_USER_MAPPABLE)
    topo::HostPolicy policy;  // NUMA policy set before the pages are allocated
};

// Host memory of one sysmem object: the manager's linear mapping of it and,
// for shareable objects, the memfd that lets it be mapped again.
struct HostAllocation {
    int fd = -1;  // -1: private anonymous pages
    void *linear = nullptr;
    uint64_t size = 0;        // whole chunks
    uint64_t chunk_size = 0;
    void *backend_data = nullptr;  // the backend's own per-allocation state
};

// One side of a copy-engine operation.
struct CeAddress {
    // Virtual: `address` is a VA that `tree` (the GPU's page tree for that
    // address space) translates. Physical: `address` is in `aperture`.
    bool is_virtual = false;
    const mmu::PageTree *tree = nullptr;
    uvm_va_space_kind_t space = UVM_VA_SPACE_KERNEL;
    uint64_t address = 0;
    mmu::Aperture aperture = mmu::Aperture::Vid;
    uint32_t peer_gpu = 0;
};

struct CeCounters {
    uint64_t operations = 0;
    uint64_t bytes = 0;
    uint64_t translations = 0;
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual uvm_backend_kind_t kind() const = 0;
    virtual uint32_t gpu_count() const = 0;
    virtual const GpuInfo &gpu_info(uint32_t gpu) const = 0;
    virtual uint64_t gpu_memory_free(uint32_t gpu) const = 0;
    // The host's NUMA nodes as this backend presents them (GpuInfo::place
    // names nodes of it).
    virtual const topo::Topology &topology() const = 0;
    // The span of the GPU's kernel address space where the manager places mappings.
    virtual void kernel_va_range(uint32_t gpu, uint64_t *base, uint64_t *size) const = 0;

    // Vidmem root chunks: `count` of 2 MiB side by side from the 2 MiB-aligned
    // physical address *phys, below GpuInfo::phys_space; each is freed on its
    // own. `remappable`: each can also be mapped on its own at another address
    // (a GPU user mapping of 2M pages at an address of the caller's); where
    // that costs the backend more (on CUDA, a driver handle per root chunk
    // instead of one large handle for many), only objects that ask get them.
    virtual uvm_status_t root_chunks_alloc(uint32_t gpu, size_t count, bool remappable, uint64_t *phys) = 0;
    virtual void root_chunk_free(uint32_t gpu, uint64_t phys) = 0;
    // Give back whatever the backend keeps cached for `gpu` (uvm_gpu_trim).
    virtual void trim(uint32_t gpu) {}

    // CPU mapping of vidmem chunks, in order, at one contiguous address:
    // `fixed` (never replacing anything there: ADDRESS_IN_USE) or anywhere
    // when null. Coherent platforms only, else NOT_SUPPORTED.
    virtual uvm_status_t vidmem_cpu_map(uint32_t gpu, const uint64_t *chunks, size_t count,
                                        uint64_t chunk_size, void *fixed, void **out) = 0;
    virtual void vidmem_cpu_unmap(void *address, uint64_t size) = 0;

    // Sysmem.
    virtual uvm_status_t sysmem_alloc(const HostRequest &request, HostAllocation *out) = 0;
    virtual void sysmem_free(HostAllocation *alloc) = 0;
    // Map a shareable allocation's pages at `fixed` (never replacing anything
    // there: ADDRESS_IN_USE), or where the system chooses when `fixed` is
    // null. NOT_SUPPORTED for private allocations.
    virtual uvm_status_t sysmem_cpu_map(const HostAllocation &alloc, void *fixed, void **out) = 0;
    virtual void sysmem_cpu_unmap(void *address, uint64_t size) = 0;
    // DMA address of the allocation's first byte for `gpu`; the rest follows contiguously.
    virtual uvm_status_t sysmem_dma_map(uint32_t gpu, const HostAllocation &alloc, uint64_t *dma) = 0;
    virtual void sysmem_dma_unmap(uint32_t gpu, const HostAllocation &alloc, uint64_t dma) = 0;

    // Sharing with other processes (uvm_mem_export / uvm_mem_import).
    //
    // A remappable root chunk as a file descriptor another process can map,
    // and where in it the root is (sim: a dup of its run's memfd; CUDA:
    // cuMemExportToShareableHandle of its own handle, a POSIX fd, offset 0).
    // The memory lives while any process holds it.
    virtual uvm_status_t root_chunk_export(uint32_t gpu, uint64_t phys, int *fd, uint64_t *offset) {
        return UVM_ERR_NOT_SUPPORTED;
    }
    // What root_chunk_export gives: 1 a memfd, 2 a CUDA POSIX fd (ipc::ShareHandleKind).
    virtual int export_handle_kind() const { return 0; }
    // `count` exported root chunks (`fds` at `offsets`, which stay the caller's) placed
    // side by side from *phys in `gpu`'s physical space beyond its own memory,
    // reachable by `gpu` and every GPU granted peer access to it. Each can be
    // mapped on its own (as remappable roots). OUT_OF_MEMORY where the space
    // has no such hole; INVALID_ARGUMENT for an fd of the wrong kind or size.
    virtual uvm_status_t roots_import(uint32_t gpu, const int *fds, const uint64_t *offsets, size_t count,
                                      uint64_t *phys) {
        return UVM_ERR_NOT_SUPPORTED;
    }
    virtual void roots_import_release(uint32_t gpu, uint64_t phys, size_t count) {}
    // Host memory of another process: `size` bytes of memfd `fd` (which
    // stays the caller's; the allocation keeps its own), as a shareable
    // allocation.
    virtual uvm_status_t sysmem_import(int fd, uint64_t size, uint64_t chunk_size, HostAllocation *out) {
        return UVM_ERR_NOT_SUPPORTED;
    }

    // Vidmem of `owner` made reachable by `gpu` over the peer link.
    virtual uvm_status_t peer_access(uint32_t gpu, uint32_t owner) = 0;

    // Where a GPU kernel mapping of these pages must be placed. *va = 0 lets
    // the manager pick; a backend whose mapping granularity rules out a
    // manager-picked address for some pages names the address it can give
    // (an existing view of them), or says NOT_SUPPORTED.
    virtual uvm_status_t kernel_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes,
                                             size_t count, uint64_t *va) {
        *va = 0;
        return UVM_OK;
    }

    // Where a GPU user mapping of these pages goes when the caller leaves the
    // address to the manager: a backend that has a view of them every GPU
    // and the CPU can use (on CUDA, the physical window, inside the driver's
    // own VA reservation) names it; 0 lets the manager pick.
    virtual uvm_status_t user_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes,
                                           size_t count, uint64_t *va) {
        *va = 0;
        return UVM_OK;
    }

    // A user address range the caller reserves (uvm_user_range_reserve). A
    // backend that places GPU mappings only inside ranges it reserves from
    // its driver (CUDA) takes one there and names it, and later maps GPU user
    // mappings inside it without reserving again; *va = 0: the manager picks.
    virtual uvm_status_t user_range_reserve(uint64_t size, uint64_t *va) {
        *va = 0;
        return UVM_OK;
    }
    virtual void user_range_release(uint64_t va, uint64_t size) {}

    // Whether a GPU reaches host memory at a user address only through the
    // pages' CPU mapping there (CUDA: registered host memory has the device
    // address of its CPU address). Then the manager maps a shareable sysmem
    // object's pages at its user address on the CPU before a GPU user
    // mapping, and gpu_va_map of host pages in the user space makes that CPU
    // mapping reachable (sim: the GPU maps the DMA pages, no CPU mapping needed).
    virtual bool gpu_user_sysmem_through_cpu() const { return false; }

    // Whether a vidmem object's GPU user mapping can be made again at the
    // same address over other chunks (an evicted object's restore).
    // `remappable`: its chunks are remappable roots. CUDA: only then (other
    // objects' user addresses are views of their physical memory).
    virtual bool gpu_user_survives_move(bool remappable) const { return true; }

    // GPU virtual mappings. The manager records each one in its page tree
    // first; the backend makes it real (the sim needs nothing more).
    virtual uvm_status_t gpu_va_map(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va,
                                    uint64_t page_size, const mmu::Pte *ptes, size_t count) = 0;
    virtual void gpu_va_unmap(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va,
                              uint64_t size) = 0;

    // Managed memory (cuMemAllocManaged): an address every processor can use,
    // migrated by the driver. NOT_SUPPORTED where the backend has none.
    // `processor` is a GPU index or UVM_PROCESSOR_CPU.
    virtual uvm_status_t managed_alloc(uint32_t gpu, uint64_t size, uint64_t *address) {
        return UVM_ERR_NOT_SUPPORTED;
    }
    virtual void managed_free(uint64_t address) {}
    virtual uvm_status_t managed_advise(uint64_t address, uint64_t size, uvm_managed_advice_t advice,
                                        int32_t processor) {
        return UVM_ERR_NOT_SUPPORTED;
    }
    virtual uvm_status_t managed_prefetch(uint64_t address, uint64_t size, int32_t processor) {
        return UVM_ERR_NOT_SUPPORTED;
    }

    // Streams: ordered queues of GPU work (a CUstream on CUDA, a simulated
    // queue on sim). A backend without them says NOT_SUPPORTED to
    // stream_create and is never asked the rest.
    //
    // A fence is a point in a stream: all work queued on it before the fence
    // was taken. Fences of one stream complete in order, and a fence of a
    // stream that has been destroyed is complete. fence_done is cheap (no
    // waiting, no driver call where the answer is already known) and never
    // blocks.
    //
    // `native`: a stream of the caller's to use (CUDA: a CUstream of the
    // GPU's primary context, else INVALID_ARGUMENT; the caller keeps owning
    // it); null: the backend makes one.
    virtual uvm_status_t stream_create(uint32_t gpu, void *native, void **stream) {
        return UVM_ERR_NOT_SUPPORTED;
    }
    // Waits for the stream's work, then forgets it (destroying it if the
    // backend made it). BUSY where the work cannot finish by itself (sim:
    // held work), and then nothing changes.
    virtual uvm_status_t stream_destroy(void *stream) { return UVM_ERR_NOT_SUPPORTED; }
    virtual void *stream_native(void *stream) { return nullptr; }
    virtual uvm_status_t stream_fence(void *stream, uint64_t *fence) { return UVM_ERR_NOT_SUPPORTED; }
    virtual bool fence_done(void *stream, uint64_t fence) { return true; }
    // Work queued on `waiter` from now on runs after `fence` of `stream`.
    virtual uvm_status_t stream_wait(void *waiter, void *stream, uint64_t fence) {
        return UVM_ERR_NOT_SUPPORTED;
    }
    // Wait until every fence taken so far on the stream is done. BUSY where
    // the work cannot finish by itself (sim: held work).
    virtual uvm_status_t stream_synchronize(void *stream) { return UVM_ERR_NOT_SUPPORTED; }
    // Copy-engine work queued on a stream of `gpu`; returns once queued. The
    // addresses are resolved when the call is made (a later change of a
    // mapping does not move queued work).
    virtual uvm_status_t ce_copy_async(uint32_t gpu, void *stream, const CeAddress &dst, const CeAddress &src,
                                       uint64_t size) {
        return UVM_ERR_NOT_SUPPORTED;
    }
    virtual uvm_status_t ce_memset_async(uint32_t gpu, void *stream, const CeAddress &dst, uint8_t value,
                                         uint64_t size) {
        return UVM_ERR_NOT_SUPPORTED;
    }
    // Sim only (NOT_SUPPORTED elsewhere): queue work that stays in flight
    // until released, as a kernel that spins on a flag would; release lets
    // the oldest held work of the stream finish.
    virtual uvm_status_t stream_hold(void *stream) { return UVM_ERR_NOT_SUPPORTED; }
    virtual uvm_status_t stream_release(void *stream) { return UVM_ERR_NOT_SUPPORTED; }

    // Copy engine of `gpu`; synchronous.
    virtual uvm_status_t ce_copy(uint32_t gpu, const CeAddress &dst, const CeAddress &src,
                                 uint64_t size) = 0;
    virtual uvm_status_t ce_memset(uint32_t gpu, const CeAddress &dst, uint8_t value,
                                   uint64_t size) = 0;
    virtual CeCounters ce_counters(uint32_t gpu) const = 0;
};

// Create the backend a manager's params ask for (see uvm_manager_create).
uvm_status_t create_backend(const uvm_manager_params_t &params, std::unique_ptr<Backend> *out);

}  // namespace uvm::backend
