// CUDA backend: see docs/cuda_backend.md for the design.
//
// Vidmem. Each 2 MiB root chunk is its own cuMemCreate handle (cuMemMap maps
// a handle from offset 0 only, so a root chunk must be a whole handle to be
// mapped on its own). The pool grows in batches: a batch of root chunks is
// mapped side by side into a per-GPU *physical window* (a VA range as large as
// the GPU's memory), and one cuMemSetAccess grants the owner (and every peer
// that has asked) access to the whole batch. A root chunk's physical address
// is its offset in the window. A 2 MiB-page virtual mapping maps the root
// chunks' handles again at the manager's VA and sets access once for the
// whole object. Smaller pages cannot be mapped by the
// driver (its granularity is 2 MiB): their kernel view is the window itself,
// where the object's chunks are physically contiguous.
//
// Sysmem. The object's pages (its linear mapping) are registered with
// cuMemHostRegister; the device pointer is the DMA address on every GPU, and
// also the object's kernel view on a GPU.
//
// Copy engine. One stream per GPU; cuMemcpyAsync / cuMemsetD8Async on CUDA
// virtual addresses (a physical address is turned into its window address).
#include "cuda/cuda_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "backend/host_memory.h"
#include "common/assert.h"
#include "common/sizes.h"
#include "cuda/driver_api.h"
#include "mmu/range_allocator.h"

namespace uvm::cuda {

namespace {

// The pool grows by batches of root chunks, up to this much at a time, with
// one cuMemSetAccess for the whole batch.
constexpr uint64_t kMaxBatchBytes = 64ull << 20;

uvm_status_t to_status(CUresult r, const char *what) {
    if (r == CUDA_SUCCESS)
        return UVM_OK;
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return UVM_ERR_OUT_OF_MEMORY;
    if (std::getenv("UVM_DEBUG"))
        std::fprintf(stderr, "uvm: %s failed: %s\n", what, driver_error_string(r));
    return UVM_ERR_BACKEND;
}

struct RootChunk {
    CUmemGenericAllocationHandle handle = 0;
    bool given = false;  // handed to the PMM (else cached here, ready)
};

// A user-space mapping: one per address in the process, shared by the GPUs
// that map it.
struct UserMapping {
    uint64_t size;
    uint32_t gpus;  // GPUs granted access
};

struct Gpu {
    CUdevice device = 0;
    CUcontext context = nullptr;
    CUstream stream = nullptr;
    backend::GpuInfo info;

    std::mutex lock;  // root chunks, ready list, peers, VA mappings
    CUdeviceptr window = 0;
    uint64_t window_size = 0;
    std::unique_ptr<mmu::RangeAllocator> window_space;
    std::vector<RootChunk *> roots;   // by phys / 2 MiB; null where none
    std::vector<uint64_t> ready;      // root chunks made but not given out (lowest last)
    uint32_t batch = 1;               // root chunks the next growth makes
    uint32_t peers_granted = 0;       // GPUs granted access to every root chunk
    std::map<uint64_t, uint64_t> va_mappings;  // kernel-space mappings we made: VA -> size

    CUdeviceptr kernel_va = 0;
    uint64_t kernel_va_size = 0;

    std::mutex ce_lock;
    std::atomic<uint64_t> ce_operations{0};
    std::atomic<uint64_t> ce_bytes{0};
};

// Per-allocation state of sysmem: registered once, for every GPU.
struct HostRegistration {
    uint32_t gpus = 0;  // GPUs holding a DMA mapping
    CUdeviceptr device_pointer = 0;
};

class CudaBackend final : public backend::Backend {
public:
    explicit CudaBackend(const DriverApi *api) : api_(api) {}
    ~CudaBackend() override;
    uvm_status_t init();

    uvm_backend_kind_t kind() const override { return UVM_BACKEND_CUDA; }
    uint32_t gpu_count() const override { return static_cast<uint32_t>(gpus_.size()); }
    const backend::GpuInfo &gpu_info(uint32_t gpu) const override { return gpus_[gpu]->info; }
    uint64_t gpu_memory_free(uint32_t gpu) const override;
    const topo::Topology &topology() const override { return topo::host_topology(); }
    void kernel_va_range(uint32_t gpu, uint64_t *base, uint64_t *size) const override {
        *base = gpus_[gpu]->kernel_va;
        *size = gpus_[gpu]->kernel_va_size;
    }

    uvm_status_t root_chunk_alloc(uint32_t gpu, uint64_t *phys) override;
    void root_chunk_free(uint32_t gpu, uint64_t phys) override;
    void trim(uint32_t gpu) override;
    uvm_status_t vidmem_cpu_map(uint32_t, const uint64_t *, size_t, uint64_t, void *, void **) override {
        return UVM_ERR_NOT_SUPPORTED;  // vidmem is not CPU-addressable over PCIe
    }
    void vidmem_cpu_unmap(void *, uint64_t) override {}

    uvm_status_t sysmem_alloc(const backend::HostRequest &request, backend::HostAllocation *out) override;
    void sysmem_free(backend::HostAllocation *alloc) override;
    uvm_status_t sysmem_cpu_map(const backend::HostAllocation &alloc, void *fixed, void **out) override {
        return backend::host_memory_map(alloc, fixed, out);
    }
    void sysmem_cpu_unmap(void *address, uint64_t size) override { backend::host_memory_unmap(address, size); }
    uvm_status_t sysmem_dma_map(uint32_t gpu, const backend::HostAllocation &alloc, uint64_t *dma) override;
    void sysmem_dma_unmap(uint32_t gpu, const backend::HostAllocation &alloc, uint64_t dma) override;

    uvm_status_t peer_access(uint32_t gpu, uint32_t owner) override;
    uvm_status_t kernel_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes, size_t count,
                                     uint64_t *va) override;
    uvm_status_t gpu_va_map(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va, uint64_t page_size,
                            const mmu::Pte *ptes, size_t count) override;
    void gpu_va_unmap(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va, uint64_t size) override;

    uvm_status_t managed_alloc(uint32_t gpu, uint64_t size, uint64_t *address) override;
    void managed_free(uint64_t address) override;
    uvm_status_t managed_advise(uint64_t address, uint64_t size, uvm_managed_advice_t advice,
                                int32_t processor) override;
    uvm_status_t managed_prefetch(uint64_t address, uint64_t size, int32_t processor) override;

    uvm_status_t ce_copy(uint32_t gpu, const backend::CeAddress &dst, const backend::CeAddress &src,
                         uint64_t size) override;
    uvm_status_t ce_memset(uint32_t gpu, const backend::CeAddress &dst, uint8_t value, uint64_t size) override;
    backend::CeCounters ce_counters(uint32_t gpu) const override {
        return {gpus_[gpu]->ce_operations.load(), gpus_[gpu]->ce_bytes.load(), 0};
    }

private:
    void set_context(uint32_t gpu) const { api_->cuCtxSetCurrent(gpus_[gpu]->context); }
    std::vector<CUmemAccessDesc> access_for(uint32_t owner_mask) const;
    uvm_status_t grow(Gpu &g, uint32_t gpu);
    void release_root(Gpu &g, uint64_t phys);
    uvm_status_t set_access(Gpu &g, uint64_t phys, uint64_t size, uint32_t mask);
    CUdeviceptr ce_pointer(uint32_t gpu, const backend::CeAddress &a) const;
    template <typename Enqueue>
    uvm_status_t run_on_stream(uint32_t gpu, uint64_t size, const char *what, Enqueue &&enqueue);
    CUmemLocation location_of(int32_t processor) const;
    uvm_status_t map_root_chunks(uint32_t owner, uint64_t va, const mmu::Pte *ptes, size_t count);
    void unmap_root_chunks(uint64_t va, uint64_t size);

    const DriverApi *api_;
    std::vector<std::unique_ptr<Gpu>> gpus_;
    std::mutex user_lock_;
    std::map<uint64_t, UserMapping> user_mappings_;
};

std::vector<CUmemAccessDesc> CudaBackend::access_for(uint32_t mask) const {
    std::vector<CUmemAccessDesc> descs;
    for (uint32_t g = 0; g < gpus_.size(); ++g) {
        if (!((mask >> g) & 1u))
            continue;
        CUmemAccessDesc d{};
        d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        d.location.id = gpus_[g]->device;
        d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        descs.push_back(d);
    }
    return descs;
}

uvm_status_t CudaBackend::init() {
    CUresult r = api_->cuInit(0);
    if (r != CUDA_SUCCESS)
        return UVM_ERR_NO_DEVICE;
    int count = 0;
    if (api_->cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= 0)
        return UVM_ERR_NO_DEVICE;
    count = std::min(count, UVM_MAX_GPUS);
    for (int i = 0; i < count; ++i) {
        auto g = std::make_unique<Gpu>();
        if (api_->cuDeviceGet(&g->device, i) != CUDA_SUCCESS ||
            api_->cuDevicePrimaryCtxRetain(&g->context, g->device) != CUDA_SUCCESS)
            return UVM_ERR_NO_DEVICE;
        gpus_.push_back(std::move(g));
    }
    for (uint32_t i = 0; i < gpus_.size(); ++i) {
        Gpu &g = *gpus_[i];
        set_context(i);
        char name[96] = {};
        api_->cuDeviceGetName(name, sizeof(name) - 1, g.device);
        size_t total = 0;
        api_->cuDeviceTotalMem(&total, g.device);
        CUmemAllocationProp prop{};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = g.device;
        size_t granularity = 0;
        r = api_->cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (r != CUDA_SUCCESS || granularity == 0 || kRootChunkSize % granularity != 0)
            return to_status(r == CUDA_SUCCESS ? CUDA_ERROR_NOT_SUPPORTED : r, "granularity");
        g.info.name = name;
        g.info.memory_total = total & ~(kRootChunkSize - 1);
        g.info.page_sizes = kAllPageSizes;
        g.info.cpu_coherent = false;
        g.info.granularity = granularity;
        char bus[32] = {};
        if (api_->cuDeviceGetPCIBusId(bus, sizeof(bus) - 1, g.device) == CUDA_SUCCESS)
            g.info.pci_bus_id = bus;
        // Where the GPU sits: hwloc by PCI bus id; else the driver's node.
        g.info.place = topo::locate_pci_device(g.info.pci_bus_id);
        int numa = -1;
        if (g.info.place.numa_node < 0 &&
            api_->cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, g.device) == CUDA_SUCCESS &&
            numa >= 0 && topo::host_topology().node(numa))
            g.info.place.numa_node = numa;
        if (g.info.place.cpus.empty() && g.info.place.numa_node >= 0)
            g.info.place.cpus = topo::host_topology().node(g.info.place.numa_node)->cpus;
        for (uint32_t j = 0; j < gpus_.size(); ++j) {
            int can = 0;
            if (j != i && api_->cuDeviceCanAccessPeer(&can, g.device, gpus_[j]->device) == CUDA_SUCCESS && can)
                g.info.peer_mask |= 1u << j;
        }
        if (api_->cuStreamCreate(&g.stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
            return UVM_ERR_BACKEND;
        // The physical window: as large as the GPU's memory.
        g.window_size = g.info.memory_total;
        r = api_->cuMemAddressReserve(&g.window, g.window_size, kRootChunkSize, 0, 0);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuMemAddressReserve (window)");
        g.window_space = std::make_unique<mmu::RangeAllocator>(0, g.window_size);
        g.roots.assign(g.window_size / kRootChunkSize, nullptr);
        // The kernel address space: room to map all of memory several times over.
        g.kernel_va_size = 4 * g.window_size;
        r = api_->cuMemAddressReserve(&g.kernel_va, g.kernel_va_size, kRootChunkSize, 0, 0);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuMemAddressReserve (kernel space)");
    }
    return UVM_OK;
}

CudaBackend::~CudaBackend() {
    for (uint32_t i = 0; i < gpus_.size(); ++i) {
        Gpu &g = *gpus_[i];
        if (!g.context)
            continue;
        set_context(i);
        UVM_ASSERT(g.va_mappings.empty());
        UVM_ASSERT(user_mappings_.empty());
        for (uint64_t r = 0; r < g.roots.size(); ++r)
            if (g.roots[r])
                release_root(g, r * kRootChunkSize);
        if (g.kernel_va)
            api_->cuMemAddressFree(g.kernel_va, g.kernel_va_size);
        if (g.window)
            api_->cuMemAddressFree(g.window, g.window_size);
        if (g.stream)
            api_->cuStreamDestroy(g.stream);
        api_->cuDevicePrimaryCtxRelease(g.device);
    }
}

uint64_t CudaBackend::gpu_memory_free(uint32_t gpu) const {
    set_context(gpu);
    size_t free = 0, total = 0;
    api_->cuMemGetInfo(&free, &total);
    std::lock_guard<std::mutex> guard(gpus_[gpu]->lock);
    return free + gpus_[gpu]->ready.size() * kRootChunkSize;
}

// Grant `mask`'s GPUs access to [phys, phys + size) of the window: one call
// for the run where the driver takes it, else one per root chunk.
uvm_status_t CudaBackend::set_access(Gpu &g, uint64_t phys, uint64_t size, uint32_t mask) {
    const auto descs = access_for(mask);
    CUresult r = api_->cuMemSetAccess(g.window + phys, size, descs.data(), descs.size());
    if (r != CUDA_SUCCESS && size > kRootChunkSize) {
        r = CUDA_SUCCESS;
        for (uint64_t off = 0; off < size && r == CUDA_SUCCESS; off += kRootChunkSize)
            r = api_->cuMemSetAccess(g.window + phys + off, kRootChunkSize, descs.data(), descs.size());
    }
    return to_status(r, "cuMemSetAccess");
}

// Make a batch of root chunks, side by side in the window, with one grant of
// access for all of them. The batch doubles with each growth up to
// kMaxBatchBytes, so that a growing pool pays the ~25 us of cuMemSetAccess once
// per many root chunks. Lock held.
uvm_status_t CudaBackend::grow(Gpu &g, uint32_t gpu) {
    set_context(gpu);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g.device;
    uint32_t count = g.batch;
    uint64_t phys = 0;
    while (g.window_space->alloc(count * kRootChunkSize, kRootChunkSize, &phys) != UVM_OK) {
        if (count == 1)
            return UVM_ERR_OUT_OF_MEMORY;  // the window is full: all memory is ours
        count /= 2;
    }
    uint32_t made = 0;
    CUresult r = CUDA_SUCCESS;
    for (; made < count; ++made) {
        auto root = std::make_unique<RootChunk>();
        r = api_->cuMemCreate(&root->handle, kRootChunkSize, &prop, 0);
        if (r != CUDA_SUCCESS)
            break;
        const uint64_t at = phys + made * kRootChunkSize;
        r = api_->cuMemMap(g.window + at, kRootChunkSize, 0, root->handle, 0);
        if (r != CUDA_SUCCESS) {
            api_->cuMemRelease(root->handle);
            break;
        }
        g.roots[at / kRootChunkSize] = root.release();
    }
    // Out of memory part way: keep what was made. Any other failure: undo all.
    uvm_status_t status = made ? UVM_OK : to_status(r, "cuMemCreate/cuMemMap");
    if (status == UVM_OK)
        status = set_access(g, phys, made * kRootChunkSize, (1u << gpu) | g.peers_granted);
    if (made < count)
        g.window_space->free(phys + made * kRootChunkSize, (count - made) * kRootChunkSize);
    if (status != UVM_OK) {
        for (uint32_t i = 0; i < made; ++i)
            release_root(g, phys + i * kRootChunkSize);
        return status;
    }
    for (uint32_t i = made; i > 0; --i)
        g.ready.push_back(phys + (i - 1) * kRootChunkSize);
    g.batch = static_cast<uint32_t>(std::min<uint64_t>(g.batch * 2, kMaxBatchBytes / kRootChunkSize));
    return UVM_OK;
}

void CudaBackend::release_root(Gpu &g, uint64_t phys) {
    RootChunk *root = g.roots[phys / kRootChunkSize];
    UVM_ASSERT(root);
    api_->cuMemUnmap(g.window + phys, kRootChunkSize);
    api_->cuMemRelease(root->handle);
    g.window_space->free(phys, kRootChunkSize);
    g.roots[phys / kRootChunkSize] = nullptr;
    delete root;
}

uvm_status_t CudaBackend::root_chunk_alloc(uint32_t gpu, uint64_t *phys) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    if (g.ready.empty()) {
        const uvm_status_t status = grow(g, gpu);
        if (status != UVM_OK)
            return status;
    }
    *phys = g.ready.back();
    g.ready.pop_back();
    g.roots[*phys / kRootChunkSize]->given = true;
    return UVM_OK;
}

void CudaBackend::root_chunk_free(uint32_t gpu, uint64_t phys) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    UVM_ASSERT(g.roots[phys / kRootChunkSize] && g.roots[phys / kRootChunkSize]->given);
    // The PMM gives root chunks back when it trims or rolls back: the memory
    // goes back to the driver at once.
    set_context(gpu);
    release_root(g, phys);
}

void CudaBackend::trim(uint32_t gpu) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    set_context(gpu);
    for (uint64_t phys : g.ready)
        release_root(g, phys);
    g.ready.clear();
    g.batch = 1;
}

uvm_status_t CudaBackend::sysmem_alloc(const backend::HostRequest &request, backend::HostAllocation *out) {
    uvm_status_t status = backend::host_memory_create(request, out);
    if (status == UVM_OK)
        out->backend_data = new HostRegistration();
    return status;
}

void CudaBackend::sysmem_free(backend::HostAllocation *alloc) {
    auto *reg = static_cast<HostRegistration *>(alloc->backend_data);
    UVM_ASSERT(!reg || reg->gpus == 0);
    delete reg;
    alloc->backend_data = nullptr;
    backend::host_memory_destroy(alloc);
}

uvm_status_t CudaBackend::sysmem_dma_map(uint32_t gpu, const backend::HostAllocation &alloc, uint64_t *dma) {
    auto *reg = static_cast<HostRegistration *>(alloc.backend_data);
    set_context(gpu);
    if (reg->gpus == 0) {
        // Pin once, portable to every context: each GPU then only asks for its pointer.
        CUresult r = api_->cuMemHostRegister(alloc.linear, alloc.size,
                                             CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuMemHostRegister");
    }
    CUdeviceptr ptr = 0;
    CUresult r = api_->cuMemHostGetDevicePointer(&ptr, alloc.linear, 0);
    if (r != CUDA_SUCCESS) {
        if (reg->gpus == 0)
            api_->cuMemHostUnregister(alloc.linear);
        return to_status(r, "cuMemHostGetDevicePointer");
    }
    reg->gpus++;
    reg->device_pointer = ptr;
    *dma = ptr;
    return UVM_OK;
}

void CudaBackend::sysmem_dma_unmap(uint32_t gpu, const backend::HostAllocation &alloc, uint64_t) {
    auto *reg = static_cast<HostRegistration *>(alloc.backend_data);
    UVM_ASSERT(reg->gpus > 0);
    if (--reg->gpus == 0) {
        set_context(gpu);
        api_->cuMemHostUnregister(alloc.linear);
    }
}

uvm_status_t CudaBackend::peer_access(uint32_t gpu, uint32_t owner) {
    if (!((gpus_[gpu]->info.peer_mask >> owner) & 1u))
        return UVM_ERR_NO_PEER_ACCESS;
    Gpu &o = *gpus_[owner];
    std::lock_guard<std::mutex> guard(o.lock);
    if ((o.peers_granted >> gpu) & 1u)
        return UVM_OK;
    // Granting a peer costs milliseconds: do it once per pair, over every run
    // of root chunks the owner has, and every later batch includes the peer.
    set_context(owner);
    const uint64_t n = o.roots.size();
    for (uint64_t r = 0; r < n;) {
        if (!o.roots[r]) {
            ++r;
            continue;
        }
        uint64_t end = r;
        while (end < n && o.roots[end])
            ++end;
        const uvm_status_t status = set_access(o, r * kRootChunkSize, (end - r) * kRootChunkSize, 1u << gpu);
        if (status != UVM_OK)
            return status;
        r = end;
    }
    o.peers_granted |= 1u << gpu;
    return UVM_OK;
}

uvm_status_t CudaBackend::kernel_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes,
                                              size_t count, uint64_t *va) {
    *va = 0;
    if (ptes[0].aperture == mmu::Aperture::Sys) {
        // The device pointer of the registered pages is their kernel view.
        *va = ptes[0].address;
        return UVM_OK;
    }
    if (page_size == kRootChunkSize)
        return UVM_OK;  // mapped for real at an address the manager picks
    // Below 2 MiB the driver cannot map: the view is the physical window,
    // which exists only where the chunks are physically contiguous.
    for (size_t i = 1; i < count; ++i)
        if (ptes[i].address != ptes[0].address + i * page_size)
            return UVM_ERR_NOT_SUPPORTED;
    const uint32_t owner = ptes[0].aperture == mmu::Aperture::Vid ? gpu : ptes[0].peer_gpu;
    *va = gpus_[owner]->window + ptes[0].address;
    return UVM_OK;
}

// Map the root chunks named by `ptes` (2M pages of `owner`'s vidmem) at `va`.
uvm_status_t CudaBackend::map_root_chunks(uint32_t owner, uint64_t va, const mmu::Pte *ptes, size_t count) {
    Gpu &o = *gpus_[owner];
    std::lock_guard<std::mutex> guard(o.lock);
    for (size_t i = 0; i < count; ++i) {
        RootChunk *root = o.roots[ptes[i].address / kRootChunkSize];
        UVM_ASSERT(root && root->given);
        const CUresult r = api_->cuMemMap(va + i * kRootChunkSize, kRootChunkSize, 0, root->handle, 0);
        if (r != CUDA_SUCCESS) {
            for (size_t j = 0; j < i; ++j)
                api_->cuMemUnmap(va + j * kRootChunkSize, kRootChunkSize);
            return to_status(r, "cuMemMap");
        }
    }
    return UVM_OK;
}

void CudaBackend::unmap_root_chunks(uint64_t va, uint64_t size) {
    for (uint64_t off = 0; off < size; off += kRootChunkSize)
        api_->cuMemUnmap(va + off, kRootChunkSize);
}

uvm_status_t CudaBackend::gpu_va_map(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va, uint64_t page_size,
                                     const mmu::Pte *ptes, size_t count) {
    Gpu &g = *gpus_[gpu];
    const bool user = space == UVM_VA_SPACE_USER;
    if (!user && (va < g.kernel_va || va >= g.kernel_va + g.kernel_va_size))
        return UVM_OK;  // a placed view (window or registered host pages): already reachable
    if (page_size != kRootChunkSize || ptes[0].aperture == mmu::Aperture::Sys)
        return UVM_ERR_NOT_SUPPORTED;  // the driver maps device memory only, 2 MiB at a time
    const uint64_t size = count * page_size;
    const uint32_t owner = ptes[0].aperture == mmu::Aperture::Vid ? gpu : ptes[0].peer_gpu;
    const auto access = access_for(1u << gpu);
    set_context(gpu);

    if (!user) {
        // Each GPU's kernel space is its own reservation: map the handles again there.
        uvm_status_t status = map_root_chunks(owner, va, ptes, count);
        if (status != UVM_OK)
            return status;
        status = to_status(api_->cuMemSetAccess(va, size, access.data(), access.size()), "cuMemSetAccess");
        if (status != UVM_OK) {
            unmap_root_chunks(va, size);
            return status;
        }
        std::lock_guard<std::mutex> guard(g.lock);
        g.va_mappings[va] = size;
        return UVM_OK;
    }

    // The user address space is the process's one unified space: a user
    // address is reserved and mapped once, and every further GPU that maps
    // the object there is granted access to that one mapping.
    std::lock_guard<std::mutex> guard(user_lock_);
    auto it = user_mappings_.find(va);
    if (it != user_mappings_.end()) {
        if (it->second.size != size || (it->second.gpus >> gpu) & 1u)
            return UVM_ERR_ADDRESS_IN_USE;
        const uvm_status_t status =
            to_status(api_->cuMemSetAccess(va, size, access.data(), access.size()), "cuMemSetAccess (user)");
        if (status == UVM_OK)
            it->second.gpus |= 1u << gpu;
        return status;
    }
    CUdeviceptr got = 0;
    CUresult r = api_->cuMemAddressReserve(&got, size, kRootChunkSize, va, 0);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemAddressReserve (user)");
    if (got != va) {
        // The driver places GPU mappings inside its own VA heap only.
        api_->cuMemAddressFree(got, size);
        return UVM_ERR_ADDRESS_IN_USE;
    }
    uvm_status_t status = map_root_chunks(owner, va, ptes, count);
    if (status == UVM_OK) {
        status = to_status(api_->cuMemSetAccess(va, size, access.data(), access.size()), "cuMemSetAccess (user)");
        if (status != UVM_OK)
            unmap_root_chunks(va, size);
    }
    if (status != UVM_OK) {
        api_->cuMemAddressFree(va, size);
        return status;
    }
    user_mappings_[va] = UserMapping{size, 1u << gpu};
    return UVM_OK;
}

void CudaBackend::gpu_va_unmap(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va, uint64_t size) {
    Gpu &g = *gpus_[gpu];
    set_context(gpu);
    if (space != UVM_VA_SPACE_USER) {
        {
            std::lock_guard<std::mutex> guard(g.lock);
            auto it = g.va_mappings.find(va);
            if (it == g.va_mappings.end())
                return;  // a placed view: nothing was mapped
            UVM_ASSERT(it->second == size);
            g.va_mappings.erase(it);
        }
        unmap_root_chunks(va, size);
        return;
    }
    std::lock_guard<std::mutex> guard(user_lock_);
    auto it = user_mappings_.find(va);
    if (it == user_mappings_.end())
        return;
    UVM_ASSERT(it->second.size == size && ((it->second.gpus >> gpu) & 1u));
    it->second.gpus &= ~(1u << gpu);
    if (it->second.gpus != 0) {
        // Others still map it: take this GPU's access away only.
        CUmemAccessDesc none{};
        none.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        none.location.id = g.device;
        none.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        api_->cuMemSetAccess(va, size, &none, 1);
        return;
    }
    user_mappings_.erase(it);
    unmap_root_chunks(va, size);
    api_->cuMemAddressFree(va, size);
}

uvm_status_t CudaBackend::managed_alloc(uint32_t gpu, uint64_t size, uint64_t *address) {
    set_context(gpu);
    size_t free = 0, total = 0;
    CUresult r = api_->cuMemGetInfo(&free, &total);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemGetInfo");
    // Never ask the driver for more managed memory than the GPU has free:
    // oversubscription is the manager's to do (by eviction), not the driver's.
    if (size > free)
        return UVM_ERR_OUT_OF_MEMORY;
    CUdeviceptr p = 0;
    r = api_->cuMemAllocManaged(&p, size, CU_MEM_ATTACH_GLOBAL);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemAllocManaged");
    *address = p;
    return UVM_OK;
}

void CudaBackend::managed_free(uint64_t address) {
    set_context(0);
    api_->cuMemFree(address);
}

CUmemLocation CudaBackend::location_of(int32_t processor) const {
    CUmemLocation loc{};
    if (processor == UVM_PROCESSOR_CPU) {
        loc.type = CU_MEM_LOCATION_TYPE_HOST;
    } else {
        loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
        loc.id = gpus_[processor]->device;
    }
    return loc;
}

uvm_status_t CudaBackend::managed_advise(uint64_t address, uint64_t size, uvm_managed_advice_t advice,
                                         int32_t processor) {
    CUmem_advise a;
    switch (advice) {
        case UVM_ADVISE_SET_READ_MOSTLY: a = CU_MEM_ADVISE_SET_READ_MOSTLY; break;
        case UVM_ADVISE_UNSET_READ_MOSTLY: a = CU_MEM_ADVISE_UNSET_READ_MOSTLY; break;
        case UVM_ADVISE_SET_PREFERRED_LOCATION: a = CU_MEM_ADVISE_SET_PREFERRED_LOCATION; break;
        case UVM_ADVISE_UNSET_PREFERRED_LOCATION: a = CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION; break;
        case UVM_ADVISE_SET_ACCESSED_BY: a = CU_MEM_ADVISE_SET_ACCESSED_BY; break;
        case UVM_ADVISE_UNSET_ACCESSED_BY: a = CU_MEM_ADVISE_UNSET_ACCESSED_BY; break;
        default: return UVM_ERR_INVALID_ARGUMENT;
    }
    set_context(processor == UVM_PROCESSOR_CPU ? 0 : static_cast<uint32_t>(processor));
    return to_status(api_->cuMemAdvise(address, size, a, location_of(processor)), "cuMemAdvise");
}

uvm_status_t CudaBackend::managed_prefetch(uint64_t address, uint64_t size, int32_t processor) {
    const uint32_t gpu = processor == UVM_PROCESSOR_CPU ? 0 : static_cast<uint32_t>(processor);
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.ce_lock);
    set_context(gpu);
    CUresult r = api_->cuMemPrefetchAsync(address, size, location_of(processor), 0, g.stream);
    if (r == CUDA_SUCCESS)
        r = api_->cuStreamSynchronize(g.stream);
    return to_status(r, "cuMemPrefetchAsync");
}

CUdeviceptr CudaBackend::ce_pointer(uint32_t gpu, const backend::CeAddress &a) const {
    if (a.is_virtual || a.aperture == mmu::Aperture::Sys)
        return a.address;  // CUDA VAs, and registered host memory's device pointer
    const uint32_t owner = a.aperture == mmu::Aperture::Vid ? gpu : a.peer_gpu;
    return gpus_[owner]->window + a.address;
}

// Run one copy-engine operation on `gpu`'s stream and wait for it.
template <typename Enqueue>
uvm_status_t CudaBackend::run_on_stream(uint32_t gpu, uint64_t size, const char *what, Enqueue &&enqueue) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.ce_lock);
    set_context(gpu);
    CUresult r = enqueue(g.stream);
    if (r == CUDA_SUCCESS)
        r = api_->cuStreamSynchronize(g.stream);
    if (r != CUDA_SUCCESS)
        return to_status(r, what);
    g.ce_operations++;
    g.ce_bytes += size;
    return UVM_OK;
}

uvm_status_t CudaBackend::ce_copy(uint32_t gpu, const backend::CeAddress &dst, const backend::CeAddress &src,
                                  uint64_t size) {
    return run_on_stream(gpu, size, "cuMemcpyAsync", [&](CUstream stream) {
        return api_->cuMemcpyAsync(ce_pointer(gpu, dst), ce_pointer(gpu, src), size, stream);
    });
}

uvm_status_t CudaBackend::ce_memset(uint32_t gpu, const backend::CeAddress &dst, uint8_t value, uint64_t size) {
    return run_on_stream(gpu, size, "cuMemsetD8Async", [&](CUstream stream) {
        return api_->cuMemsetD8Async(ce_pointer(gpu, dst), value, size, stream);
    });
}

}  // namespace

uvm_status_t create_cuda_backend(std::unique_ptr<backend::Backend> *out) {
    const DriverApi *api = driver_api();
    if (!api)
        return UVM_ERR_NO_DEVICE;
    auto backend = std::make_unique<CudaBackend>(api);
    const uvm_status_t status = backend->init();
    if (status != UVM_OK)
        return status;
    *out = std::move(backend);
    return UVM_OK;
}

}  // namespace uvm::cuda
