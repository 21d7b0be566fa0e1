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

#include <cstdlib>

#include "common/last_error.h"

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

// Creation describes every GPU with calls that need no context (cuDevice*,
// and cuMemGetAllocationGranularity, which takes the device in its
// CUmemAllocationProp and lists no context error in the driver's reference);
// each GPU is opened by its first use (Gpu in cuda_backend_private.h).
uvm_status_t CudaBackend::init() {
    CUresult r = api_->cuInit(0);
    if (r != CUDA_SUCCESS)
        return fail(UVM_ERR_NO_DEVICE, "cuInit failed: %s", driver_error_string(r));
    int count = 0;
    if (api_->cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= 0)
        return fail(UVM_ERR_NO_DEVICE, "the CUDA driver sees no GPU (CUDA_VISIBLE_DEVICES=%.100s)",
                    std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "(unset)");
    count = std::min(count, UVM_MAX_GPUS);
    for (int i = 0; i < count; ++i) {
        auto g = std::make_unique<Gpu>();
        if (api_->cuDeviceGet(&g->device, i) != CUDA_SUCCESS)
            return UVM_ERR_NO_DEVICE;
        gpus_.push_back(std::move(g));
    }
    for (uint32_t i = 0; i < gpus_.size(); ++i) {
        Gpu &g = *gpus_[i];
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
        if (r == CUDA_ERROR_INVALID_CONTEXT) {
            // A driver that wants a context after all: asked again under the
            // GPU's primary context, retained for the query only.
            CUcontext context = nullptr;
            r = api_->cuDevicePrimaryCtxRetain(&context, g.device);
            if (r == CUDA_SUCCESS) {
                {
                    const ContextGuard current(*api_, context);
                    r = api_->cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
                }
                api_->cuDevicePrimaryCtxRelease(g.device);
            }
        }
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
    }
    return UVM_OK;
}

uvm_status_t CudaBackend::open(uint32_t gpu) const {
    Gpu &g = *gpus_[gpu];
    if (g.opened.load(std::memory_order_acquire))
        return UVM_OK;
    std::lock_guard<std::mutex> guard(g.open_lock);
    if (g.opened.load(std::memory_order_relaxed))
        return UVM_OK;  // another thread opened it while this one waited
    // A first use may come while another stream captures (a global capture
    // on another GPU): the window's reservation is allowed then, as growth is
    // (relaxed_capture_mode.h).
    const RelaxedCaptureMode relaxed(*api_);
    CUcontext context = nullptr;
    CUresult r = api_->cuDevicePrimaryCtxRetain(&context, g.device);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuDevicePrimaryCtxRetain");
    CUstream stream = nullptr;
    auto pool = std::make_unique<RootPool>(api_, g.device);
    uvm_status_t status = UVM_OK;
    {
        const ContextGuard current(*api_, context);
        r = api_->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
        status = r == CUDA_SUCCESS ? pool->init(g.info.memory_total) : to_status(r, "cuStreamCreate");
        if (status != UVM_OK) {
            pool.reset();
            if (stream)
                api_->cuStreamDestroy(stream);
        }
    }
    if (status != UVM_OK) {
        api_->cuDevicePrimaryCtxRelease(g.device);
        return status;
    }
    g.context = context;
    g.stream = stream;
    g.pool = std::move(pool);
    g.opened.store(true, std::memory_order_release);
    return UVM_OK;
}

uvm_status_t CudaBackend::any_open_gpu(uint32_t *gpu) const {
    for (uint32_t i = 0; i < gpus_.size(); ++i)
        if (is_open(i)) {
            *gpu = i;
            return UVM_OK;
        }
    *gpu = 0;
    return open(0);
}

// Only what was opened is released: a GPU never used holds nothing.
CudaBackend::~CudaBackend() {
    UVM_ASSERT(user_mappings_.empty() && user_ranges_.empty() && stitched_.empty());
    {
        std::lock_guard<std::mutex> users(user_lock_);
        for (const auto &entry : stitched_later_)  // kept by a capture: no capture outlives the streams
            if (is_open(entry.second.gpu))
                unmap_stitched(entry.first, entry.second);
        stitched_later_.clear();
    }
    for (uint32_t i = 0; i < gpus_.size(); ++i) {
        Gpu &g = *gpus_[i];
        if (!is_open(i))
            continue;
        {
            const ContextGuard context = set_context(i);
            g.pool.reset();
            api_->cuStreamDestroy(g.stream);
        }
        api_->cuDevicePrimaryCtxRelease(g.device);
    }
}

// A GPU not opened yet holds nothing, and the driver tells its free memory
// only through a context, which a query does not make: free reads 0 there
// (uvm_gpu_info opens the GPU first, uvm.h).
backend::GpuMemory CudaBackend::gpu_memory(uint32_t gpu) const {
    backend::GpuMemory m;
    if (!is_open(gpu))
        return m;
    size_t free = 0, total = 0;
    {
        const ContextGuard context = set_context(gpu);
        api_->cuMemGetInfo(&free, &total);
    }
    std::lock_guard<std::mutex> guard(gpus_[gpu]->lock);
    m.free = free;
    m.held = gpus_[gpu]->pool->held_bytes();
    m.ready = gpus_[gpu]->pool->ready_bytes();
    return m;
}

uint64_t CudaBackend::gpu_memory_held(uint32_t gpu) const {
    if (!is_open(gpu))
        return 0;
    std::lock_guard<std::mutex> guard(gpus_[gpu]->lock);
    return gpus_[gpu]->pool->held_bytes();
}

uvm_status_t CudaBackend::root_chunks_alloc(uint32_t gpu, size_t count, bool remappable, uint64_t *phys) {
    return grow_roots(gpu, [&](RootPool &pool, const std::vector<CUmemAccessDesc> &access) {
        return pool.alloc(count, remappable, access, phys);
    });
}

uint64_t CudaBackend::largest_free_run(uint32_t gpu, const Bitmap &held_free) const {
    if (!is_open(gpu))
        return 0;  // nothing held, and the driver's free memory unknown (gpu_memory)
    const ContextGuard context = set_context(gpu);
    size_t free = 0, total = 0;
    if (api_->cuMemGetInfo(&free, &total) != CUDA_SUCCESS)
        free = 0;  // no answer: only what the pool holds
    std::lock_guard<std::mutex> guard(gpus_[gpu]->lock);
    return gpus_[gpu]->pool->largest_free_run(held_free, free);
}

void CudaBackend::root_chunk_free(uint32_t gpu, uint64_t phys) {
    Gpu &g = *gpus_[gpu];
    // The stitched views first, where there are any (before the GPU's lock).
    std::unique_lock<std::mutex> users(user_lock_, std::defer_lock);
    if (stitched_views_.load(std::memory_order_relaxed) != 0) {
        users.lock();
        release_kept_after(unmap_stitched_later());  // views a capture kept, where it is over
    }
    std::lock_guard<std::mutex> guard(g.lock);
    // The PMM gives root chunks back when it trims or rolls back: a handle
    // whose last root chunk this is goes back to the driver at once, but
    // while a capture is under way (unmapping would break it), or while a
    // stitched view still maps it (the driver would keep its memory unseen
    // until the view goes): it stays, ready for growth, until a later
    // release or trim where neither holds.
    const ContextGuard context = set_context(gpu);
    if (!g.pool->frees_handle(phys)) {
        g.pool->free(phys);
        return;
    }
    uint64_t first = 0;
    size_t count = 0;
    g.pool->span(phys, &first, &count);
    const bool capture = capture_under_way();
    g.pool->free(phys, capture || (users.owns_lock() && stitched_roots(gpu, first, count * kRootChunkSize)));
    if (!capture && g.pool->kept_empty())
        release_kept(gpu, users.owns_lock());
}

// The GPU's empty handles kept, given back but those a stitched view maps
// (user_lock_ held where `views`; the GPU's lock held).
void CudaBackend::release_kept(uint32_t gpu, bool views) {
    if (!views) {
        gpus_[gpu]->pool->release_empty();
        return;
    }
    gpus_[gpu]->pool->release_empty(
        [&](uint64_t first, uint64_t size) { return stitched_roots(gpu, first, size); });
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
    UVM_ASSERT(is_open(gpu));  // it gave this root chunk
    std::lock_guard<std::mutex> guard(gpus_[gpu]->lock);
    gpus_[gpu]->pool->span(phys, first, count);
}

void CudaBackend::trim(uint32_t gpu) {
    if (!is_open(gpu))
        return;  // nothing cached
    Gpu &g = *gpus_[gpu];
    std::unique_lock<std::mutex> users(user_lock_, std::defer_lock);
    if (stitched_views_.load(std::memory_order_relaxed) != 0) {
        users.lock();  // before the GPU's lock
        release_kept_after(unmap_stitched_later());  // views a capture kept, where it is over
    }
    std::lock_guard<std::mutex> guard(g.lock);
    g.pool->trim();
    if (g.pool->kept_empty() && !capture_under_way()) {
        const ContextGuard context = set_context(gpu);
        release_kept(gpu, users.owns_lock());
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
    const uvm_status_t status = open(gpu);
    if (status != UVM_OK)
        return status;
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
    // The owner's memory is granted to the GPU's device: both are in use from here.
    uvm_status_t status = open(owner);
    if (status == UVM_OK)
        status = open(gpu);
    if (status != UVM_OK)
        return status;
    Gpu &o = *gpus_[owner];
    std::lock_guard<std::mutex> users(user_lock_);  // the stitched views, before the GPU's lock
    std::lock_guard<std::mutex> guard(o.lock);
    if ((o.peers_granted >> gpu) & 1u)
        return UVM_OK;
    // Granting a peer costs milliseconds: do it once per pair, over every
    // handle the owner has, and every later handle includes the peer; the
    // owner's stitched views too (made with the peers granted then).
    const ContextGuard context = set_context(owner);
    const auto peer = access_for(1u << gpu);
    status = o.pool->grant(peer);
    for (const auto &entry : stitched_)
        if (status == UVM_OK && entry.second.gpu == owner)
            status = to_status(api_->cuMemSetAccess(entry.first, entry.second.size, peer.data(), peer.size()),
                               "cuMemSetAccess (stitched, peer)");
    if (status == UVM_OK)
        o.peers_granted |= 1u << gpu;
    return status;
}

uvm_status_t create_cuda_backend(std::unique_ptr<backend::Backend> *out) {
    const DriverApi *api = driver_api();
    if (!api)
        return fail(UVM_ERR_NO_DEVICE, "%s", driver_load_error());
    auto backend = std::make_unique<CudaBackend>(api);
    const uvm_status_t status = backend->init();
    if (status != UVM_OK)
        return status;
    *out = std::move(backend);
    return UVM_OK;
}

}  // namespace uvm::cuda
