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
#include "cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "backend/host_memory.h"
#include "common/assert.h"
#include "common/sizes.h"
#include "cuda/driver_api.h"
#include "cuda/context_guard.h"
#include "cuda/root_pool.h"

namespace uvm::cuda {

namespace {

// A user-space mapping: one per address in the process, shared by the GPUs
// that map it.
struct UserMapping {
    uint64_t size;
    uint32_t gpus;      // GPUs granted access
    bool host = false;  // host pages registered at their CPU address (not handles mapped here)
};

struct Gpu {
    CUdevice device = 0;
    CUcontext context = nullptr;
    CUstream stream = nullptr;
    backend::GpuInfo info;

    std::mutex lock;  // the root pool and the peers granted
    std::unique_ptr<RootPool> pool;
    uint32_t peers_granted = 0;       // GPUs granted access to every root chunk

    CUdeviceptr kernel_va = 0;
    uint64_t kernel_va_size = 0;

    std::mutex ce_lock;
    std::atomic<uint64_t> ce_operations{0};
    std::atomic<uint64_t> ce_bytes{0};
};

struct CudaStream {
    uint32_t gpu = 0;
    CUstream stream = nullptr;
    bool owned = false;
    // The manager serialises calls on one stream (stream/stream.h), so plain
    // fields do.
    std::deque<std::pair<uint64_t, CUevent>> pending;  // fences not known done, oldest first
    std::vector<CUevent> spare;
    uint64_t next = 0;       // the last fence taken
    uint64_t completed = 0;  // every fence up to this one is done
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

    uvm_status_t root_chunks_alloc(uint32_t gpu, size_t count, bool remappable, uint64_t *phys) override;
    void root_chunk_free(uint32_t gpu, uint64_t phys) override;
    uvm_status_t root_chunk_export(uint32_t gpu, uint64_t phys, int *fd, uint64_t *offset) override;
    int export_handle_kind() const override { return 2; }  // a CUDA POSIX fd
    uvm_status_t roots_import(uint32_t gpu, const int *fds, const uint64_t *offsets, size_t count,
                              uint64_t *phys) override;
    void roots_import_release(uint32_t gpu, uint64_t phys, size_t count) override;
    uvm_status_t sysmem_import(int fd, uint64_t size, uint64_t chunk_size, backend::HostAllocation *out) override;
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
    uvm_status_t user_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes, size_t count,
                                   uint64_t *va) override;
    uvm_status_t user_range_reserve(uint64_t size, uint64_t *va) override;
    bool gpu_user_sysmem_through_cpu() const override { return true; }
    bool gpu_user_survives_move(bool remappable) const override { return remappable; }
    void user_range_release(uint64_t va, uint64_t size) override;
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

    uvm_status_t stream_create(uint32_t gpu, void *native, void **stream) override;
    uvm_status_t stream_destroy(void *stream) override;
    void *stream_native(void *stream) override { return static_cast<CudaStream *>(stream)->stream; }
    uvm_status_t stream_fence(void *stream, uint64_t *fence) override;
    bool fence_done(void *stream, uint64_t fence) override;
    uvm_status_t stream_wait(void *waiter, void *stream, uint64_t fence) override;
    uvm_status_t stream_synchronize(void *stream) override;
    uvm_status_t ce_copy_async(uint32_t gpu, void *stream, const backend::CeAddress &dst,
                               const backend::CeAddress &src, uint64_t size) override;
    uvm_status_t ce_memset_async(uint32_t gpu, void *stream, const backend::CeAddress &dst, uint8_t value,
                                 uint64_t size) override;

private:
    // The GPU's context current until the guard's scope ends (context_guard.h).
    ContextGuard set_context(uint32_t gpu) const { return ContextGuard(*api_, gpus_[gpu]->context); }
    std::vector<CUmemAccessDesc> access_for(uint32_t owner_mask) const;
    uvm_status_t window_view(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes, size_t count, uint64_t *va);
    bool in_some_window(uint64_t va) const;
    CUdeviceptr ce_pointer(uint32_t gpu, const backend::CeAddress &a) const;
    template <typename Enqueue>
    uvm_status_t run_on_stream(uint32_t gpu, uint64_t size, const char *what, Enqueue &&enqueue);
    CUmemLocation location_of(int32_t processor) const;
    uvm_status_t map_root_chunks(uint32_t owner, uint64_t va, const mmu::Pte *ptes, size_t count);
    void unmap_root_chunks(uint64_t va, uint64_t size);

    const DriverApi *api_;
    std::vector<std::unique_ptr<Gpu>> gpus_;
    bool in_user_range(uint64_t va, uint64_t size) const;  // user_lock_ held
    uvm_status_t map_host_user(uint32_t gpu, uint64_t va, uint64_t size);

    std::mutex user_lock_;
    std::map<uint64_t, UserMapping> user_mappings_;
    std::map<uint64_t, uint64_t> user_ranges_;  // reserved for callers: start -> size
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

uint64_t CudaBackend::gpu_memory_free(uint32_t gpu) const {
    const ContextGuard context = set_context(gpu);
    size_t free = 0, total = 0;
    api_->cuMemGetInfo(&free, &total);
    std::lock_guard<std::mutex> guard(gpus_[gpu]->lock);
    return free + gpus_[gpu]->pool->ready_bytes();
}

uvm_status_t CudaBackend::root_chunks_alloc(uint32_t gpu, size_t count, bool remappable, uint64_t *phys) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    const ContextGuard context = set_context(gpu);
    return g.pool->alloc(count, remappable, access_for((1u << gpu) | g.peers_granted), phys);
}

void CudaBackend::root_chunk_free(uint32_t gpu, uint64_t phys) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    // The PMM gives root chunks back when it trims or rolls back: a handle
    // whose last root chunk this is goes back to the driver at once.
    const ContextGuard context = set_context(gpu);
    g.pool->free(phys);
}

uvm_status_t CudaBackend::root_chunk_export(uint32_t gpu, uint64_t phys, int *fd, uint64_t *offset) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    const ContextGuard context = set_context(gpu);
    *offset = 0;  // a handle of its own
    return g.pool->export_root(phys, fd);
}

uvm_status_t CudaBackend::roots_import(uint32_t gpu, const int *fds, const uint64_t *offsets, size_t count,
                                       uint64_t *phys) {
    for (size_t i = 0; i < count; ++i)
        if (offsets[i] != 0)
            return UVM_ERR_INVALID_ARGUMENT;  // a driver handle is imported whole
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    const ContextGuard context = set_context(gpu);
    return g.pool->import(fds, count, access_for((1u << gpu) | g.peers_granted), phys);
}

void CudaBackend::roots_import_release(uint32_t gpu, uint64_t phys, size_t count) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    const ContextGuard context = set_context(gpu);
    g.pool->release_import(phys, count);
}

uvm_status_t CudaBackend::sysmem_import(int fd, uint64_t size, uint64_t chunk_size, backend::HostAllocation *out) {
    uvm_status_t status = backend::host_memory_adopt(fd, size, chunk_size, out);
    if (status == UVM_OK)
        out->backend_data = new HostRegistration();
    return status;
}

void CudaBackend::trim(uint32_t gpu) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    g.pool->trim();
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

// The range of the owner's physical window that holds these pages, where they
// are physically contiguous (the PMM places every object so).
uvm_status_t CudaBackend::window_view(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes, size_t count,
                                      uint64_t *va) {
    for (size_t i = 1; i < count; ++i)
        if (ptes[i].address != ptes[0].address + i * page_size)
            return UVM_ERR_NOT_SUPPORTED;
    const uint32_t owner = ptes[0].aperture == mmu::Aperture::Vid ? gpu : ptes[0].peer_gpu;
    *va = gpus_[owner]->pool->window() + ptes[0].address;
    return UVM_OK;
}

bool CudaBackend::in_some_window(uint64_t va) const {
    for (const auto &g : gpus_)
        if (g->pool->in_window(va))
            return true;
    return false;
}

uvm_status_t CudaBackend::kernel_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes,
                                              size_t count, uint64_t *va) {
    if (ptes[0].aperture == mmu::Aperture::Sys) {
        // The device pointer of the registered pages is their kernel view.
        *va = ptes[0].address;
        return UVM_OK;
    }
    return window_view(gpu, page_size, ptes, count, va);
}

uvm_status_t CudaBackend::user_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes,
                                            size_t count, uint64_t *va) {
    *va = 0;
    if (ptes[0].aperture == mmu::Aperture::Sys)
        return UVM_OK;  // the manager picks; gpu_va_map then says what it can do
    // The window is inside the driver's own reservation and one address on
    // every GPU granted access: unified addressing, at no cost.
    return window_view(gpu, page_size, ptes, count, va);
}

uvm_status_t CudaBackend::user_range_reserve(uint64_t size, uint64_t *va) {
    const ContextGuard context = set_context(0);
    CUdeviceptr got = 0;
    const CUresult r = api_->cuMemAddressReserve(&got, size, kRootChunkSize, 0, 0);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemAddressReserve (user range)");
    std::lock_guard<std::mutex> guard(user_lock_);
    user_ranges_[got] = size;
    *va = got;
    return UVM_OK;
}

void CudaBackend::user_range_release(uint64_t va, uint64_t size) {
    {
        std::lock_guard<std::mutex> guard(user_lock_);
        auto it = user_ranges_.find(va);
        UVM_ASSERT(it != user_ranges_.end() && it->second == size);
        user_ranges_.erase(it);
    }
    const ContextGuard context = set_context(0);
    api_->cuMemAddressFree(va, size);
}

bool CudaBackend::in_user_range(uint64_t va, uint64_t size) const {
    auto it = user_ranges_.upper_bound(va);
    if (it == user_ranges_.begin())
        return false;
    --it;
    return va >= it->first && va + size <= it->first + it->second;
}

// Host pages at a user address: the manager has mapped them there on the CPU;
// registered, they are reachable by every GPU at that same address (unified
// addressing), where the driver gives registered memory the device address
// of its host address (checked, else NOT_SUPPORTED).
uvm_status_t CudaBackend::map_host_user(uint32_t gpu, uint64_t va, uint64_t size) {
    std::lock_guard<std::mutex> guard(user_lock_);
    auto it = user_mappings_.find(va);
    if (it != user_mappings_.end()) {
        if (!it->second.host || it->second.size != size || (it->second.gpus >> gpu) & 1u)
            return UVM_ERR_ADDRESS_IN_USE;
        it->second.gpus |= 1u << gpu;  // registered portable: every context has it
        return UVM_OK;
    }
    const ContextGuard context = set_context(gpu);
    void *host = reinterpret_cast<void *>(static_cast<uintptr_t>(va));
    CUresult r = api_->cuMemHostRegister(host, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemHostRegister (user)");
    CUdeviceptr device = 0;
    r = api_->cuMemHostGetDevicePointer(&device, host, 0);
    if (r != CUDA_SUCCESS || device != va) {
        api_->cuMemHostUnregister(host);
        return r != CUDA_SUCCESS ? to_status(r, "cuMemHostGetDevicePointer (user)") : UVM_ERR_NOT_SUPPORTED;
    }
    user_mappings_[va] = UserMapping{size, 1u << gpu, true};
    return UVM_OK;
}

// Map the root chunks named by `ptes` (2M pages of `owner`'s vidmem) at `va`.
// Each must be its own handle (remappable): the driver maps handles whole.
uvm_status_t CudaBackend::map_root_chunks(uint32_t owner, uint64_t va, const mmu::Pte *ptes, size_t count) {
    Gpu &o = *gpus_[owner];
    std::lock_guard<std::mutex> guard(o.lock);
    for (size_t i = 0; i < count; ++i)
        if (!o.pool->own_handle(ptes[i].address))
            return UVM_ERR_NOT_SUPPORTED;
    for (size_t i = 0; i < count; ++i) {
        UVM_ASSERT(o.pool->is_given(ptes[i].address));
        const CUresult r =
            api_->cuMemMap(va + i * kRootChunkSize, kRootChunkSize, 0, o.pool->own_handle(ptes[i].address), 0);
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
    if (space != UVM_VA_SPACE_USER || in_some_window(va)) {
        // Placed views (the window, registered host pages): already reachable.
        return va >= gpus_[gpu]->kernel_va && va < gpus_[gpu]->kernel_va + gpus_[gpu]->kernel_va_size
                   ? UVM_ERR_NOT_SUPPORTED
                   : UVM_OK;
    }
    if (ptes[0].aperture == mmu::Aperture::Sys)
        return map_host_user(gpu, va, count * page_size);
    if (page_size != kRootChunkSize)
        return UVM_ERR_NOT_SUPPORTED;  // the driver maps device memory 2 MiB at a time
    const uint64_t size = count * page_size;
    const uint32_t owner = ptes[0].aperture == mmu::Aperture::Vid ? gpu : ptes[0].peer_gpu;
    const auto access = access_for(1u << gpu);
    const ContextGuard context = set_context(gpu);

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
    // Inside a range reserved for the caller the address is ours already;
    // elsewhere it is reserved from the driver for this mapping.
    const bool reserved = in_user_range(va, size);
    if (!reserved) {
        CUdeviceptr got = 0;
        const CUresult r = api_->cuMemAddressReserve(&got, size, kRootChunkSize, va, 0);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuMemAddressReserve (user)");
        if (got != va) {
            // The driver places GPU mappings inside its own VA heap only.
            api_->cuMemAddressFree(got, size);
            return UVM_ERR_ADDRESS_IN_USE;
        }
    }
    uvm_status_t status = map_root_chunks(owner, va, ptes, count);
    if (status == UVM_OK) {
        status = to_status(api_->cuMemSetAccess(va, size, access.data(), access.size()), "cuMemSetAccess (user)");
        if (status != UVM_OK)
            unmap_root_chunks(va, size);
    }
    if (status != UVM_OK) {
        if (!reserved)
            api_->cuMemAddressFree(va, size);
        return status;
    }
    user_mappings_[va] = UserMapping{size, 1u << gpu};
    return UVM_OK;
}

void CudaBackend::gpu_va_unmap(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va, uint64_t size) {
    if (space != UVM_VA_SPACE_USER)
        return;  // kernel mappings are placed views: nothing was mapped
    Gpu &g = *gpus_[gpu];
    const ContextGuard context = set_context(gpu);
    std::lock_guard<std::mutex> guard(user_lock_);
    auto it = user_mappings_.find(va);
    if (it == user_mappings_.end())
        return;  // a view of the window
    UVM_ASSERT(it->second.size == size && ((it->second.gpus >> gpu) & 1u));
    it->second.gpus &= ~(1u << gpu);
    if (it->second.host) {
        // Registered for every GPU at once: unregistered when the last goes.
        if (it->second.gpus == 0) {
            api_->cuMemHostUnregister(reinterpret_cast<void *>(static_cast<uintptr_t>(va)));
            user_mappings_.erase(it);
        }
        return;
    }
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
    if (!in_user_range(va, size))
        api_->cuMemAddressFree(va, size);
}

uvm_status_t CudaBackend::managed_alloc(uint32_t gpu, uint64_t size, uint64_t *address) {
    const ContextGuard context = set_context(gpu);
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
    const ContextGuard context = set_context(0);
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
    const ContextGuard context = set_context(processor == UVM_PROCESSOR_CPU ? 0 : static_cast<uint32_t>(processor));
    return to_status(api_->cuMemAdvise(address, size, a, location_of(processor)), "cuMemAdvise");
}

uvm_status_t CudaBackend::managed_prefetch(uint64_t address, uint64_t size, int32_t processor) {
    const uint32_t gpu = processor == UVM_PROCESSOR_CPU ? 0 : static_cast<uint32_t>(processor);
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.ce_lock);
    const ContextGuard context = set_context(gpu);
    CUresult r = api_->cuMemPrefetchAsync(address, size, location_of(processor), 0, g.stream);
    if (r == CUDA_SUCCESS)
        r = api_->cuStreamSynchronize(g.stream);
    return to_status(r, "cuMemPrefetchAsync");
}

CUdeviceptr CudaBackend::ce_pointer(uint32_t gpu, const backend::CeAddress &a) const {
    if (a.is_virtual || a.aperture == mmu::Aperture::Sys)
        return a.address;  // CUDA VAs, and registered host memory's device pointer
    const uint32_t owner = a.aperture == mmu::Aperture::Vid ? gpu : a.peer_gpu;
    return gpus_[owner]->pool->window() + a.address;
}

// Run one copy-engine operation on `gpu`'s stream and wait for it.
template <typename Enqueue>
uvm_status_t CudaBackend::run_on_stream(uint32_t gpu, uint64_t size, const char *what, Enqueue &&enqueue) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.ce_lock);
    const ContextGuard context = set_context(gpu);
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

uvm_status_t CudaBackend::stream_create(uint32_t gpu, void *native, void **out) {
    const ContextGuard context = set_context(gpu);
    auto s = std::make_unique<CudaStream>();
    s->gpu = gpu;
    if (native == CU_STREAM_LEGACY || native == CU_STREAM_PER_THREAD) {
        s->stream = static_cast<CUstream>(native);  // the default stream of the context current when used: the GPU's
    } else if (native) {
        CUcontext ctx = nullptr;
        s->stream = static_cast<CUstream>(native);
        if (api_->cuStreamGetCtx(s->stream, &ctx) != CUDA_SUCCESS || ctx != gpus_[gpu]->context)
            return UVM_ERR_INVALID_ARGUMENT;  // not a stream of this GPU's primary context
    } else {
        const CUresult r = api_->cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuStreamCreate");
        s->owned = true;
    }
    *out = s.release();
    return UVM_OK;
}

uvm_status_t CudaBackend::stream_synchronize(void *stream) {
    auto *s = static_cast<CudaStream *>(stream);
    const ContextGuard context = set_context(s->gpu);
    const CUresult r = api_->cuStreamSynchronize(s->stream);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuStreamSynchronize");
    for (const auto &p : s->pending)
        s->spare.push_back(p.second);
    s->pending.clear();
    s->completed = s->next;
    return UVM_OK;
}

uvm_status_t CudaBackend::stream_destroy(void *stream) {
    auto *s = static_cast<CudaStream *>(stream);
    const uvm_status_t status = stream_synchronize(stream);
    if (status != UVM_OK)
        return status;
    for (CUevent e : s->spare)
        api_->cuEventDestroy(e);
    if (s->owned)
        api_->cuStreamDestroy(s->stream);
    delete s;
    return UVM_OK;
}

uvm_status_t CudaBackend::stream_fence(void *stream, uint64_t *fence) {
    auto *s = static_cast<CudaStream *>(stream);
    const ContextGuard context = set_context(s->gpu);
    CUevent e = nullptr;
    if (!s->spare.empty()) {
        e = s->spare.back();
    } else {
        const CUresult r = api_->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuEventCreate");
        s->spare.push_back(e);
    }
    const CUresult r = api_->cuEventRecord(e, s->stream);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuEventRecord");
    s->spare.pop_back();
    s->pending.emplace_back(++s->next, e);
    *fence = s->next;
    return UVM_OK;
}

bool CudaBackend::fence_done(void *stream, uint64_t fence) {
    auto *s = static_cast<CudaStream *>(stream);
    while (fence > s->completed && !s->pending.empty()) {
        const CUresult r = api_->cuEventQuery(s->pending.front().second);
        if (r != CUDA_SUCCESS)
            break;  // CUDA_ERROR_NOT_READY; an error is reported by the next synchronize
        s->completed = s->pending.front().first;
        s->spare.push_back(s->pending.front().second);
        s->pending.pop_front();
    }
    return fence <= s->completed;
}

uvm_status_t CudaBackend::stream_wait(void *waiter, void *stream, uint64_t fence) {
    auto *s = static_cast<CudaStream *>(stream);
    if (fence_done(stream, fence))
        return UVM_OK;
    UVM_ASSERT(!s->pending.empty() && fence >= s->pending.front().first);
    const CUevent e = s->pending[fence - s->pending.front().first].second;
    const ContextGuard context = set_context(static_cast<CudaStream *>(waiter)->gpu);
    return to_status(api_->cuStreamWaitEvent(static_cast<CudaStream *>(waiter)->stream, e, 0), "cuStreamWaitEvent");
}

uvm_status_t CudaBackend::ce_copy_async(uint32_t gpu, void *stream, const backend::CeAddress &dst,
                                        const backend::CeAddress &src, uint64_t size) {
    const ContextGuard context = set_context(gpu);
    const CUresult r =
        api_->cuMemcpyAsync(ce_pointer(gpu, dst), ce_pointer(gpu, src), size, static_cast<CudaStream *>(stream)->stream);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemcpyAsync");
    gpus_[gpu]->ce_operations++;
    gpus_[gpu]->ce_bytes += size;
    return UVM_OK;
}

uvm_status_t CudaBackend::ce_memset_async(uint32_t gpu, void *stream, const backend::CeAddress &dst, uint8_t value,
                                          uint64_t size) {
    const ContextGuard context = set_context(gpu);
    const CUresult r =
        api_->cuMemsetD8Async(ce_pointer(gpu, dst), value, size, static_cast<CudaStream *>(stream)->stream);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemsetD8Async");
    gpus_[gpu]->ce_operations++;
    gpus_[gpu]->ce_bytes += size;
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
