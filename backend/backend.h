// The one narrow interface between the memory objects (uvm/) and a backend
// (sim/, cuda/): root chunks, physical and DMA addresses, CPU and GPU
// mappings, and the copy engine. Nothing above it knows which backend runs;
// a backend knows nothing of objects.
//
// What every backend has is here; what only some have is a capability of its
// own, found through an accessor that returns null where the backend lacks it
// (as mimalloc keeps its OS layer narrow): streams (stream_capability.h),
// sharing with other processes (sharing_capability.h), managed memory
// (managed_capability.h), placement of GPU mappings by the driver
// (placement_capability.h) and offload of root chunks' memory
// (offload_capability.h). A caller that finds a capability absent says
// NOT_SUPPORTED, or does what a backend without it needs (placement).
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

#include "common/bitmap.h"
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

    // A GPU's own vidmem at `phys`, and host memory at DMA address `dma`.
    static CeAddress vid(uint64_t phys) {
        CeAddress a;
        a.address = phys;
        return a;
    }
    static CeAddress sys(uint64_t dma) {
        CeAddress a;
        a.aperture = mmu::Aperture::Sys;
        a.address = dma;
        return a;
    }
};

struct CeCounters {
    uint64_t operations = 0;
    uint64_t bytes = 0;
    uint64_t translations = 0;
};

// The capability interfaces (each in its own header).
class StreamCapability;
class SharingCapability;
class ManagedCapability;
class PlacementCapability;
class OffloadCapability;

// A GPU's memory as the driver counts it, for this process.
struct GpuMemory {
    uint64_t free = 0;   // what the driver has free (for every process)
    uint64_t held = 0;   // what this process holds from it for the GPU (whole driver allocations)
    uint64_t ready = 0;  // of `held`, not handed out as root chunks yet (unused parts of handles)
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual uvm_backend_kind_t kind() const = 0;
    virtual uint32_t gpu_count() const = 0;
    virtual const GpuInfo &gpu_info(uint32_t gpu) const = 0;
    virtual GpuMemory gpu_memory(uint32_t gpu) const = 0;
    // GpuMemory::held alone, where the backend knows it without asking the
    // driver what is free (on CUDA, a cuMemGetInfo).
    virtual uint64_t gpu_memory_held(uint32_t gpu) const { return gpu_memory(gpu).held; }
    // Make the GPU ready for use now. A backend that opens each GPU on its
    // first use (CUDA: its context, at the first call that takes it) does it
    // here too, for queries that need it open (uvm_gpu_info's free memory);
    // the others have nothing to do. Thread-safe; a failure leaves nothing.
    virtual uvm_status_t gpu_open(uint32_t gpu) {
        (void)gpu;
        return UVM_OK;
    }
    // What root_chunks_alloc can still give: the driver's free memory and
    // the unused parts of handles held.
    uint64_t gpu_memory_free(uint32_t gpu) const {
        const GpuMemory m = gpu_memory(gpu);
        return m.free + m.ready;
    }
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
    // The root chunks whose memory goes back to the driver together with the
    // given one's (one driver allocation; chunk::RootChunkSource::release_span).
    // Each on its own by default.
    virtual void root_chunk_span(uint32_t gpu, uint64_t phys, uint64_t *first, size_t *count) const {
        (void)gpu;
        *first = phys;
        *count = 1;
    }
    // The longest run of adjacent root chunks that one root_chunks_alloc (not
    // remappable) could give now, in root chunks, were the root chunks set in
    // `held_free` given back first (bit phys / 2 MiB, over GpuInfo::phys_space:
    // whole free ones the caller holds), as the PMM gives back its free roots
    // before its last try. Reads only: for the OOM report's "largest request
    // that fits" (pressure/fits.h).
    virtual uint64_t largest_free_run(uint32_t gpu, const Bitmap &held_free) const = 0;
    // Give back whatever the backend keeps cached for `gpu` (uvm_gpu_trim);
    // a backend that caches nothing does nothing.
    virtual void trim(uint32_t gpu) = 0;

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

    // Vidmem of `owner` made reachable by `gpu` over the peer link.
    virtual uvm_status_t peer_access(uint32_t gpu, uint32_t owner) = 0;

    // GPU virtual mappings. The manager records each one in its page tree
    // first; the backend makes it real (the sim needs nothing more).
    virtual uvm_status_t gpu_va_map(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va,
                                    uint64_t page_size, const mmu::Pte *ptes, size_t count) = 0;
    virtual void gpu_va_unmap(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va,
                              uint64_t size) = 0;

    // Copy engine of `gpu`; synchronous.
    virtual uvm_status_t ce_copy(uint32_t gpu, const CeAddress &dst, const CeAddress &src,
                                 uint64_t size) = 0;
    virtual uvm_status_t ce_memset(uint32_t gpu, const CeAddress &dst, uint8_t value,
                                   uint64_t size) = 0;
    virtual CeCounters ce_counters(uint32_t gpu) const = 0;

    // Capabilities: what only some backends have, each a small interface of
    // its own (stream_capability.h, sharing_capability.h, ...), null where
    // the backend lacks it. The same pointer for the backend's whole life,
    // so a caller may ask once and keep it (the manager does, at creation:
    // no lookup on the alloc/free path). The object is the backend's (often
    // the backend itself); never deleted through this pointer.
    virtual StreamCapability *streams() { return nullptr; }
    virtual SharingCapability *sharing() { return nullptr; }
    virtual ManagedCapability *managed() { return nullptr; }
    virtual PlacementCapability *placement() { return nullptr; }
    virtual OffloadCapability *offload() { return nullptr; }
};

// Create the backend a manager's params ask for (see uvm_manager_create).
uvm_status_t create_backend(const uvm_manager_params_t &params, std::unique_ptr<Backend> *out);

}  // namespace uvm::backend
