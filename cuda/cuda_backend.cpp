// CUDA backend: see docs/cuda_backend.md for the design.
//
// Vidmem. Root chunks live in large driver handles mapped into a per-GPU
// physical window (cuda/root_pool.h); a root chunk's physical address is its
// offset there. Every vidmem object is a contiguous run of the window (the
// PMM places it so), and its GPU kernel mapping is that range of the window:
// no driver call. A GPU user mapping at an address the manager picks is the
// same view; at an address of the caller's, the object's root chunks must be
// remappable (a handle each), which the driver maps again there.
//
// Sysmem. The object's pages (its linear mapping) are registered with
// cuMemHostRegister; the device pointer is the DMA address on every GPU, and
// also the object's kernel view on a GPU.
//
// Copy engine. One stream per GPU; cuMemcpyAsync / cuMemsetD8Async on CUDA
// virtual addresses (a physical address is turned into its window address).
//
// Streams. A CUstream (the caller's or one we make) and a fence per call to
// stream_fence: an event recorded on it, numbered in order; a fence is done
// when its event (or a later one) has completed, found by cuEventQuery from
// the oldest, and events are reused once complete.
#include "cuda/cuda_backend_private.h"

namespace uvm::cuda {

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
        const ContextGuard context = set_context(i);
        // Every query must answer: a GPU the driver cannot describe is not used.
        char name[96] = {};
        size_t total = 0;
        r = api_->cuDeviceGetName(name, sizeof(name) - 1, g.device);
        if (r == CUDA_SUCCESS)
            r = api_->cuDeviceTotalMem(&total, g.device);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuDeviceGetName/cuDeviceTotalMem");
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
        g.info.phys_space = 2 * g.info.memory_total;  // the window (root_pool.h)
        char bus[32] = {};
        r = api_->cuDeviceGetPCIBusId(bus, sizeof(bus) - 1, g.device);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuDeviceGetPCIBusId");
        g.info.pci_bus_id = bus;
        CUuuid uuid{};
        r = api_->cuDeviceGetUuid(&uuid, g.device);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuDeviceGetUuid");
        std::memcpy(g.info.uuid, uuid.bytes, sizeof(g.info.uuid));
        // Where the GPU sits: hwloc by PCI bus id; else the driver's node.
        g.info.place = topo::locate_pci_device(g.info.pci_bus_id);
        int numa = -1;
        if (g.info.place.numa_node < 0) {
            // A driver older than the attribute says INVALID_VALUE: the node is then unknown.
            r = api_->cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, g.device);
            if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE)
                return to_status(r, "cuDeviceGetAttribute (host NUMA id)");
            if (r == CUDA_SUCCESS && numa >= 0 && topo::host_topology().node(numa))
                g.info.place.numa_node = numa;
        }
        if (g.info.place.cpus.empty() && g.info.place.numa_node >= 0)
            g.info.place.cpus = topo::host_topology().node(g.info.place.numa_node)->cpus;
        for (uint32_t j = 0; j < gpus_.size(); ++j) {
            int can = 0;
            if (j == i)
                continue;
            r = api_->cuDeviceCanAccessPeer(&can, g.device, gpus_[j]->device);
            if (r != CUDA_SUCCESS)
                return to_status(r, "cuDeviceCanAccessPeer");
            if (can)
                g.info.peer_mask |= 1u << j;
        }
        r = api_->cuStreamCreate(&g.stream, CU_STREAM_NON_BLOCKING);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuStreamCreate");
        g.pool = std::make_unique<RootPool>(api_, g.device);
        const uvm_status_t status = g.pool->init(g.info.memory_total);
        if (status != UVM_OK)
            return status;
        // The kernel address space. Every kernel mapping the backend makes is
        // a placed view (the window, registered host pages), so the manager
        // never allocates here; it is kept as the range its allocator spans.
        g.kernel_va_size = kRootChunkSize;
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
        const ContextGuard context = set_context(i);
        UVM_ASSERT(user_mappings_.empty() && user_ranges_.empty());
        g.pool.reset();
        if (g.kernel_va)
            api_->cuMemAddressFree(g.kernel_va, g.kernel_va_size);
        if (g.stream)
            api_->cuStreamDestroy(g.stream);
        api_->cuDevicePrimaryCtxRelease(g.device);
    }
}

backend::GpuMemory CudaBackend::gpu_memory(uint32_t gpu) const {
    const ContextGuard context = set_context(gpu);
    size_t free = 0, total = 0;
    api_->cuMemGetInfo(&free, &total);
    std::lock_guard<std::mutex> guard(gpus_[gpu]->lock);
    backend::GpuMemory m;
    m.free = free;
    m.held = gpus_[gpu]->pool->held_bytes();
    m.ready = gpus_[gpu]->pool->ready_bytes();
    return m;
}

uvm_status_t CudaBackend::root_chunks_alloc(uint32_t gpu, size_t count, bool remappable, uint64_t *phys) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    const ContextGuard context = set_context(gpu);
    // Growth may come while a stream captures (an allocation on it, or on
    // another thread during a global capture): allowed (relaxed_capture_mode.h).
    // A failed growth's roll-back unmaps, which this does not make safe.
    const RelaxedCaptureMode relaxed(*api_);
    return g.pool->alloc(count, remappable, access_for((1u << gpu) | g.peers_granted), phys);
}

uint64_t CudaBackend::largest_free_run(uint32_t gpu, const Bitmap &held_free) const {
    const ContextGuard context = set_context(gpu);
    size_t free = 0, total = 0;
    if (api_->cuMemGetInfo(&free, &total) != CUDA_SUCCESS)
        free = 0;  // no answer: only what the pool holds
    std::lock_guard<std::mutex> guard(gpus_[gpu]->lock);
    return gpus_[gpu]->pool->largest_free_run(held_free, free);
}

void CudaBackend::root_chunk_free(uint32_t gpu, uint64_t phys) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    // The PMM gives root chunks back when it trims or rolls back: a handle
    // whose last root chunk this is goes back to the driver at once, but
    // while a capture is under way (unmapping would break it): it stays,
    // ready for growth, until a later release or trim with none.
    const ContextGuard context = set_context(gpu);
    if (!g.pool->frees_handle(phys)) {
        g.pool->free(phys);
        return;
    }
    const bool capture = capture_under_way();
    g.pool->free(phys, capture);
    if (!capture && g.pool->kept_empty())
        g.pool->release_empty();
}

bool CudaBackend::capture_under_way() {
    std::lock_guard<std::mutex> guard(streams_lock_);
    for (CudaStream *s : streams_) {
        backend::StreamCaptureInfo info;
        if (stream_capture_info(s, &info) == UVM_OK && info.status != backend::CaptureStatus::None)
            return true;
    }
    return false;
}

void CudaBackend::root_chunk_span(uint32_t gpu, uint64_t phys, uint64_t *first, size_t *count) const {
    std::lock_guard<std::mutex> guard(gpus_[gpu]->lock);
    gpus_[gpu]->pool->span(phys, first, count);
}

void CudaBackend::trim(uint32_t gpu) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    g.pool->trim();
    if (g.pool->kept_empty() && !capture_under_way()) {
        const ContextGuard context = set_context(gpu);
        g.pool->release_empty();
    }
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
    const ContextGuard context = set_context(gpu);
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
        const ContextGuard context = set_context(gpu);
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
    // Granting a peer costs milliseconds: do it once per pair, over every
    // handle the owner has, and every later handle includes the peer.
    const ContextGuard context = set_context(owner);
    const uvm_status_t status = o.pool->grant(access_for(1u << gpu));
    if (status == UVM_OK)
        o.peers_granted |= 1u << gpu;
    return status;
}

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
