// CUDA backend: see docs/cuda_backend.md for the design.
//
// Vidmem. Physical memory comes from cuMemCreate in slabs of several 2 MiB
// root chunks, mapped into a per-GPU *physical window* (a VA range as large as
// the GPU's memory): a root chunk's physical address is its offset in the
// window. One cuMemSetAccess per slab grants the owner (and every peer that
// has asked) access to all of its root chunks at once. A 2 MiB-page virtual
// mapping maps the slab's handle again at the manager's VA (cuMemMap) and sets
// access once for the whole object. Smaller pages cannot be mapped by the
// driver (its granularity is 2 MiB): their kernel view is the window itself,
// where the object's chunks are physically contiguous.
//
// Sysmem. The object's memfd pages (its linear mapping) are registered with
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

// Slabs grow the pool by up to this much at a time: one cuMemCreate, one
// cuMemMap and one cuMemSetAccess for all of it.
constexpr uint64_t kSlabBytes = 32ull << 20;

uvm_status_t to_status(CUresult r, const char *what) {
    if (r == CUDA_SUCCESS)
        return UVM_OK;
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return UVM_ERR_OUT_OF_MEMORY;
    if (std::getenv("UVM_DEBUG"))
        std::fprintf(stderr, "uvm: %s failed: %s\n", what, driver_error_string(r));
    return UVM_ERR_BACKEND;
}

struct Slab {
    CUmemGenericAllocationHandle handle = 0;
    uint64_t phys = 0;       // offset in the window
    uint64_t size = 0;
    uint32_t roots_out = 0;  // root chunks given to the PMM
};

struct VaMapping {
    uint64_t size;
    bool reserved;  // we reserved the range (user space): free it on unmap
};

struct Gpu {
    CUdevice device = 0;
    CUcontext context = nullptr;
    CUstream stream = nullptr;
    backend::GpuInfo info;

    std::mutex lock;  // slabs, ready roots, peers, VA mappings
    CUdeviceptr window = 0;
    uint64_t window_size = 0;
    std::unique_ptr<mmu::RangeAllocator> window_space;
    std::vector<Slab *> slab_of_root;  // by phys / 2 MiB
    std::vector<Slab *> slabs;
    std::vector<uint64_t> ready;       // root chunks in slabs, not given out (lowest last)
    uint32_t peers_granted = 0;        // GPUs granted access to every slab
    std::map<uint64_t, VaMapping> va_mappings;

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
    void kernel_va_range(uint32_t gpu, uint64_t *base, uint64_t *size) const override {
        *base = gpus_[gpu]->kernel_va;
        *size = gpus_[gpu]->kernel_va_size;
    }

    uvm_status_t root_chunk_alloc(uint32_t gpu, uint64_t *phys) override;
    void root_chunk_free(uint32_t gpu, uint64_t phys) override;
    uvm_status_t vidmem_cpu_map(uint32_t, const uint64_t *, size_t, uint64_t, void *, void **) override {
        return UVM_ERR_NOT_SUPPORTED;  // vidmem is not CPU-addressable over PCIe
    }
    void vidmem_cpu_unmap(void *, uint64_t) override {}

    uvm_status_t sysmem_alloc(uint64_t size, uint64_t chunk_size, backend::HostAllocation *out) override;
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
    void release_slab(Gpu &g, Slab *slab);
    CUdeviceptr ce_pointer(uint32_t gpu, const backend::CeAddress &a) const;

    const DriverApi *api_;
    std::vector<std::unique_ptr<Gpu>> gpus_;
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
        g.slab_of_root.assign(g.window_size / kRootChunkSize, nullptr);
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
        while (!g.slabs.empty())
            release_slab(g, g.slabs.back());
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

// One more slab: the largest that fits, up to kSlabBytes. Lock held.
uvm_status_t CudaBackend::grow(Gpu &g, uint32_t gpu) {
    set_context(gpu);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g.device;
    uvm_status_t status = UVM_ERR_OUT_OF_MEMORY;
    for (uint64_t size = kSlabBytes; size >= kRootChunkSize; size /= 2) {
        uint64_t phys = 0;
        if (g.window_space->alloc(size, kRootChunkSize, &phys) != UVM_OK)
            continue;  // the window is nearly full: try smaller
        auto slab = std::make_unique<Slab>();
        slab->phys = phys;
        slab->size = size;
        CUresult r = api_->cuMemCreate(&slab->handle, size, &prop, 0);
        if (r == CUDA_SUCCESS) {
            r = api_->cuMemMap(g.window + phys, size, 0, slab->handle, 0);
            if (r == CUDA_SUCCESS) {
                const auto descs = access_for((1u << gpu) | g.peers_granted);
                r = api_->cuMemSetAccess(g.window + phys, size, descs.data(), descs.size());
                if (r != CUDA_SUCCESS)
                    api_->cuMemUnmap(g.window + phys, size);
            }
            if (r != CUDA_SUCCESS)
                api_->cuMemRelease(slab->handle);
        }
        if (r != CUDA_SUCCESS) {
            g.window_space->free(phys, size);
            status = to_status(r, "slab");
            if (status != UVM_ERR_OUT_OF_MEMORY)
                return status;
            continue;
        }
        for (uint64_t off = size; off > 0; off -= kRootChunkSize) {
            g.ready.push_back(phys + off - kRootChunkSize);
            g.slab_of_root[(phys + off - kRootChunkSize) / kRootChunkSize] = slab.get();
        }
        g.slabs.push_back(slab.release());
        return UVM_OK;
    }
    return status;
}

void CudaBackend::release_slab(Gpu &g, Slab *slab) {
    g.ready.erase(std::remove_if(g.ready.begin(), g.ready.end(),
                                 [&](uint64_t p) { return p >= slab->phys && p < slab->phys + slab->size; }),
                  g.ready.end());
    for (uint64_t p = slab->phys; p < slab->phys + slab->size; p += kRootChunkSize)
        g.slab_of_root[p / kRootChunkSize] = nullptr;
    api_->cuMemUnmap(g.window + slab->phys, slab->size);
    api_->cuMemRelease(slab->handle);
    g.window_space->free(slab->phys, slab->size);
    g.slabs.erase(std::find(g.slabs.begin(), g.slabs.end(), slab));
    delete slab;
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
    g.slab_of_root[*phys / kRootChunkSize]->roots_out++;
    return UVM_OK;
}

void CudaBackend::root_chunk_free(uint32_t gpu, uint64_t phys) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    Slab *slab = g.slab_of_root[phys / kRootChunkSize];
    UVM_ASSERT(slab && slab->roots_out > 0);
    g.ready.push_back(phys);
    // A slab whose every root chunk came back goes back to the driver.
    if (--slab->roots_out == 0) {
        set_context(gpu);
        release_slab(g, slab);
    }
}

uvm_status_t CudaBackend::sysmem_alloc(uint64_t size, uint64_t chunk_size, backend::HostAllocation *out) {
    uvm_status_t status = backend::host_memory_create(size, chunk_size, out);
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
    // Granting a peer costs milliseconds: do it once per pair, for every slab
    // the owner has, and every later slab includes the peer from the start.
    set_context(owner);
    const auto descs = access_for(1u << gpu);
    for (Slab *slab : o.slabs) {
        const CUresult r = api_->cuMemSetAccess(o.window + slab->phys, slab->size, descs.data(), descs.size());
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuMemSetAccess (peer)");
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

uvm_status_t CudaBackend::gpu_va_map(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va, uint64_t page_size,
                                     const mmu::Pte *ptes, size_t count) {
    Gpu &g = *gpus_[gpu];
    const bool user = space == UVM_VA_SPACE_USER;
    if (!user && (va < g.kernel_va || va >= g.kernel_va + g.kernel_va_size))
        return UVM_OK;  // a placed view (window or registered host pages): already reachable
    if (page_size != kRootChunkSize || ptes[0].aperture == mmu::Aperture::Sys)
        return UVM_ERR_NOT_SUPPORTED;  // the driver maps device memory only, 2 MiB at a time
    const uint64_t size = count * page_size;
    set_context(gpu);
    bool reserved = false;
    if (user) {
        CUdeviceptr got = 0;
        CUresult r = api_->cuMemAddressReserve(&got, size, kRootChunkSize, va, 0);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuMemAddressReserve (user)");
        if (got != va) {
            api_->cuMemAddressFree(got, size);
            return UVM_ERR_ADDRESS_IN_USE;
        }
        reserved = true;
    }
    // Map each run of chunks that lie together in one slab with one cuMemMap.
    const uint32_t owner = ptes[0].aperture == mmu::Aperture::Vid ? gpu : ptes[0].peer_gpu;
    Gpu &o = *gpus_[owner];
    uvm_status_t status = UVM_OK;
    size_t mapped = 0;
    {
        std::lock_guard<std::mutex> guard(o.lock);
        while (mapped < count) {
            Slab *slab = o.slab_of_root[ptes[mapped].address / kRootChunkSize];
            UVM_ASSERT(slab);
            size_t run = 1;
            while (mapped + run < count && ptes[mapped + run].address == ptes[mapped].address + run * page_size &&
                   ptes[mapped + run].address < slab->phys + slab->size)
                ++run;
            const CUresult r = api_->cuMemMap(va + mapped * page_size, run * page_size,
                                              ptes[mapped].address - slab->phys, slab->handle, 0);
            if (r != CUDA_SUCCESS) {
                status = to_status(r, "cuMemMap");
                break;
            }
            mapped += run;
        }
    }
    if (status == UVM_OK) {
        const auto descs = access_for(1u << gpu);
        status = to_status(api_->cuMemSetAccess(va, size, descs.data(), descs.size()), "cuMemSetAccess");
    }
    if (status != UVM_OK) {
        if (mapped)
            api_->cuMemUnmap(va, mapped * page_size);
        if (reserved)
            api_->cuMemAddressFree(va, size);
        return status;
    }
    std::lock_guard<std::mutex> guard(g.lock);
    g.va_mappings[va] = VaMapping{size, reserved};
    return UVM_OK;
}

void CudaBackend::gpu_va_unmap(uint32_t gpu, uvm_va_space_kind_t, uint64_t va, uint64_t size) {
    Gpu &g = *gpus_[gpu];
    VaMapping m;
    {
        std::lock_guard<std::mutex> guard(g.lock);
        auto it = g.va_mappings.find(va);
        if (it == g.va_mappings.end())
            return;  // a placed view: nothing was mapped
        m = it->second;
        g.va_mappings.erase(it);
    }
    UVM_ASSERT(m.size == size);
    set_context(gpu);
    api_->cuMemUnmap(va, size);
    if (m.reserved)
        api_->cuMemAddressFree(va, size);
}

CUdeviceptr CudaBackend::ce_pointer(uint32_t gpu, const backend::CeAddress &a) const {
    if (a.is_virtual || a.aperture == mmu::Aperture::Sys)
        return a.address;  // CUDA VAs, and registered host memory's device pointer
    const uint32_t owner = a.aperture == mmu::Aperture::Vid ? gpu : a.peer_gpu;
    return gpus_[owner]->window + a.address;
}

uvm_status_t CudaBackend::ce_copy(uint32_t gpu, const backend::CeAddress &dst, const backend::CeAddress &src,
                                  uint64_t size) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.ce_lock);
    set_context(gpu);
    CUresult r = api_->cuMemcpyAsync(ce_pointer(gpu, dst), ce_pointer(gpu, src), size, g.stream);
    if (r == CUDA_SUCCESS)
        r = api_->cuStreamSynchronize(g.stream);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemcpyAsync");
    g.ce_operations++;
    g.ce_bytes += size;
    return UVM_OK;
}

uvm_status_t CudaBackend::ce_memset(uint32_t gpu, const backend::CeAddress &dst, uint8_t value, uint64_t size) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.ce_lock);
    set_context(gpu);
    CUresult r = api_->cuMemsetD8Async(ce_pointer(gpu, dst), value, size, g.stream);
    if (r == CUDA_SUCCESS)
        r = api_->cuStreamSynchronize(g.stream);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemsetD8Async");
    g.ce_operations++;
    g.ce_bytes += size;
    return UVM_OK;
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
