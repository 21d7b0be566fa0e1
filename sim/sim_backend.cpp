// The sim backend's core (sim_backend.h): its GPUs made from the params,
// root chunks in each GPU's memfd (slots twice its memory, the roots that
// hold memory counted against it: SimGpu), CPU and DMA mappings of them.
#include "sim/sim_backend_private.h"

#include "common/last_error.h"

namespace uvm::sim {

SimBackend::~SimBackend() {
    for (auto &gpu : gpus_) {
        if (gpu->memory)
            munmap(gpu->memory, 3 * gpu->size);
        for (size_t i = gpu->slots(); i < gpu->root_fd.size(); ++i)
            if (gpu->root_fd[i] >= 0)
                close(gpu->root_fd[i]);  // imports: an fd each
        for (const auto &run : gpu->run_refs)
            close(run.first);
        if (gpu->fd >= 0)
            close(gpu->fd);
    }
}

uvm_status_t SimBackend::init() {
    const topo::Topology &host = topo::host_topology();
    topology_ = params_.numa_nodes ? topo::configured_topology(host, params_.numa_nodes) : host;
    const uint32_t count = params_.gpu_count;
    for (uint32_t g = 0; g < count; ++g) {
        auto gpu = std::make_unique<SimGpu>();
        gpu->size = params_.vidmem_size;
        gpu->fd = static_cast<int>(syscall(SYS_memfd_create, "uvm-sim-vidmem", MFD_CLOEXEC));
        // The slots, twice the memory (SimGpu): sparse, as is all of it.
        if (gpu->fd < 0 || ftruncate(gpu->fd, static_cast<off_t>(2 * gpu->size)) != 0) {
            if (gpu->fd >= 0)
                close(gpu->fd);
            return UVM_ERR_NO_HOST_MEMORY;
        }
        void *memory = mmap(nullptr, 3 * gpu->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (memory == MAP_FAILED || mmap(memory, 2 * gpu->size, PROT_READ | PROT_WRITE,
                                         MAP_SHARED | MAP_NORESERVE | MAP_FIXED, gpu->fd, 0) == MAP_FAILED) {
            if (memory != MAP_FAILED)
                munmap(memory, 3 * gpu->size);
            close(gpu->fd);
            return UVM_ERR_NO_HOST_MEMORY;
        }
        gpu->memory = static_cast<uint8_t *>(memory);
        const size_t roots = gpu->roots(), slots = gpu->slots();
        gpu->free_roots.resize(slots);
        gpu->free_roots.set_range(0, slots);
        gpu->offloaded.resize(slots);
        gpu->exported.resize(slots);
        gpu->free_imports.resize(roots);
        gpu->free_imports.set_range(0, roots);
        gpu->root_fd.assign(slots + roots, -1);
        gpu->root_off.assign(slots + roots, 0);

        char name[96];
        std::snprintf(name, sizeof(name), "Simulated GPU %u (%llu MiB%s)", g,
                      static_cast<unsigned long long>(gpu->size >> 20),
                      params_.cpu_coherent ? ", coherent" : "");
        gpu->info.name = name;
        gpu->info.memory_total = gpu->size;
        gpu->info.phys_space = 3 * gpu->size;  // the slots, then the import area
        char bus[16];
        std::snprintf(bus, sizeof(bus), "0000:%02x:00.0", 0x10 + g);  // a made-up PCI bus id per simulated GPU
        gpu->info.pci_bus_id = bus;
        std::snprintf(reinterpret_cast<char *>(gpu->info.uuid), sizeof(gpu->info.uuid), "uvm-sim-gpu-%u", g % 1000);
        gpu->info.page_sizes = params_.page_sizes;
        gpu->info.peer_mask = params_.peer_rows[g] & ~(1u << g);
        gpu->info.cpu_coherent = params_.cpu_coherent != 0;
        gpu->info.granularity = kRootChunkSize;
        // resolve_params left every GPU's node valid for the topology.
        const topo::NumaNode *node = topology_.node(params_.gpu_numa_node[g]);
        UVM_ASSERT(node);
        gpu->info.place.numa_node = node->id;
        gpu->info.place.cpus = node->cpus;
        gpus_.push_back(std::move(gpu));
    }
    return UVM_OK;
}

// Every simulated root chunk is its own allocation: nothing held is unused.
// An offloaded root holds none of the memory.
backend::GpuMemory SimBackend::gpu_memory(uint32_t gpu) const {
    SimGpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    backend::GpuMemory m;
    m.held = g.backed * kRootChunkSize;
    m.free = g.size - m.held;
    return m;
}

namespace {

// The lowest run of `count` set bits of `free`, where it ends in the first
// `window` bits, or npos: where the lowest ends past the window, every other
// run does.
size_t run_in_window(const Bitmap &free, size_t count, size_t window) {
    const size_t at = free.find_run(count);
    return at != Bitmap::npos && at + count <= window ? at : Bitmap::npos;
}

}  // namespace

// A root chunk given back is free in the bitmap at once, and the free ones
// are all there is: the longest run of both bitmaps together that
// root_chunks_alloc would take (in the window, and no longer than the memory
// left). The roots in `held_free` would give their memory back (those
// backed), and their slots (an offloaded one would narrow the window).
uint64_t SimBackend::largest_free_run(uint32_t gpu, const Bitmap &held_free) const {
    const SimGpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(gpus_[gpu]->lock);
    size_t backed = g.backed, window = g.window();
    for (size_t i = held_free.find_first(); i < g.slots(); i = held_free.find_next(i + 1)) {
        if (g.free_roots.test(i))
            continue;  // not given: nothing to give back
        if (g.offloaded.test(i))
            --window;
        else
            --backed;
    }
    Bitmap free(std::max(held_free.size(), g.free_roots.size()));
    free.merge(held_free);
    free.merge(g.free_roots);
    // A run of n in the window means one of every shorter length: halve
    // toward the longest.
    size_t lo = 0, hi = std::min(g.roots() - backed, window);
    while (lo < hi) {
        const size_t mid = lo + (hi - lo + 1) / 2;
        if (run_in_window(free, mid, window) != Bitmap::npos)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// Every simulated root chunk can be mapped on its own; remappable ones get
// their own memfd (SimGpu::root_fd), so that they can be exported. The
// lowest free run in the window (SimGpu::window), of the memory left.
uvm_status_t SimBackend::root_chunks_alloc(uint32_t g, size_t count, bool remappable, uint64_t *phys) {
    SimGpu &gpu = *gpus_[g];
    std::lock_guard<std::mutex> guard(gpu.lock);
    if (count == 0 || count > gpu.roots() - gpu.backed)
        return UVM_ERR_OUT_OF_MEMORY;
    const size_t at = run_in_window(gpu.free_roots, count, gpu.window());
    if (at == Bitmap::npos)
        return UVM_ERR_OUT_OF_MEMORY;
    if (remappable) {
        const uint64_t bytes = count * kRootChunkSize;
        const int fd = static_cast<int>(syscall(SYS_memfd_create, "uvm-sim-roots", MFD_CLOEXEC));
        const bool ok = fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0 &&
                        mmap(gpu.memory + at * kRootChunkSize, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                             fd, 0) != MAP_FAILED;
        // On failure the slots may hold the run's pages: the GPU's memfd goes
        // back first (best effort, as the failure being reported already is).
        const auto undo = [&] {
            map_gpu_memfd(gpu, at * kRootChunkSize, bytes);
            close(fd);
            return UVM_ERR_NO_HOST_MEMORY;
        };
        if (!ok)
            return fd >= 0 ? undo() : UVM_ERR_NO_HOST_MEMORY;
        try {
            gpu.run_refs[fd] = static_cast<uint32_t>(count);
        } catch (const std::bad_alloc &) {
            return undo();
        }
        for (size_t i = 0; i < count; ++i) {
            gpu.root_fd[at + i] = fd;
            gpu.root_off[at + i] = i * kRootChunkSize;
        }
    }
    gpu.free_roots.clear_range(at, count);
    gpu.backed += count;
    *phys = static_cast<uint64_t>(at) * kRootChunkSize;
    return UVM_OK;
}

// `bytes` of the GPU's memory from `phys` mapped from the GPU's own memfd
// again, over whatever was there. False where mmap failed.
bool SimBackend::map_gpu_memfd(SimGpu &gpu, uint64_t phys, uint64_t bytes) {
    return mmap(gpu.memory + phys, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, gpu.fd,
                static_cast<off_t>(phys)) != MAP_FAILED;
}

// A root's slot of the GPU's own memory gets the GPU's memfd back (its own
// memfd, if any, lives on wherever it was exported; an offloaded root's slot
// was PROT_NONE). gpu.lock held.
void SimBackend::give_slot_back(SimGpu &gpu, uint64_t phys) {
    const size_t index = phys / kRootChunkSize;
    if (gpu.root_fd[index] < 0) {
        if (gpu.offloaded.test(index)) {
            const bool mapped = map_gpu_memfd(gpu, phys, kRootChunkSize);
            UVM_ASSERT(mapped);
            (void)mapped;
        }
        return;
    }
    const bool mapped = map_gpu_memfd(gpu, phys, kRootChunkSize);
    UVM_ASSERT(mapped);
    (void)mapped;
    const int fd = gpu.root_fd[index];
    auto run = gpu.run_refs.find(fd);
    UVM_ASSERT(run != gpu.run_refs.end() && run->second > 0);
    if (--run->second == 0) {
        gpu.run_refs.erase(run);
        close(fd);
    }
    gpu.root_fd[index] = -1;
}

// An offloaded root gives only its slot back: its pages went at the offload,
// and it held none of the memory.
void SimBackend::root_chunk_free(uint32_t g, uint64_t phys) {
    SimGpu &gpu = *gpus_[g];
    const size_t index = phys / kRootChunkSize;
    UVM_ASSERT(is_aligned(phys, kRootChunkSize) && index < gpu.slots());
    std::lock_guard<std::mutex> guard(gpu.lock);
    UVM_ASSERT(!gpu.free_roots.test(index));
    const bool offloaded = gpu.offloaded.test(index);
    give_slot_back(gpu, phys);
    if (offloaded) {
        gpu.offloaded.clear(index);
    } else {
        // Give the host pages back: a freed root chunk costs nothing until reused.
        fallocate(gpu.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(phys),
                  static_cast<off_t>(kRootChunkSize));
        --gpu.backed;
    }
    if (gpu.exported.test(index))
        gpu.exported.clear(index);
    gpu.free_roots.set(index);
}

uvm_status_t SimBackend::vidmem_cpu_map(uint32_t g, const uint64_t *chunks, size_t count,
                                        uint64_t chunk_size, void *fixed, void **out) {
    SimGpu &gpu = *gpus_[g];
    if (!gpu.info.cpu_coherent)
        return UVM_ERR_NOT_SUPPORTED;
    const uint64_t size = count * chunk_size;
    // Reserve the whole range first (at `fixed` without replacing anything),
    // then place each run of chunks in it.
    const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (fixed ? MAP_FIXED_NOREPLACE : 0);
    void *base = mmap(fixed, size, PROT_NONE, flags, -1, 0);
    if (base == MAP_FAILED)
        return errno == EEXIST ? UVM_ERR_ADDRESS_IN_USE : UVM_ERR_NO_HOST_MEMORY;
    if (fixed && base != fixed) {
        munmap(base, size);
        return UVM_ERR_ADDRESS_IN_USE;
    }
    // One mmap per physically contiguous run of chunks in the GPU's memfd,
    // and one per chunk in a root of its own (remappable or imported).
    std::lock_guard<std::mutex> guard(gpu.lock);
    const auto own_fd = [&gpu](uint64_t phys) { return gpu.root_fd[phys / kRootChunkSize]; };
    size_t i = 0;
    while (i < count) {
        const int fd = own_fd(chunks[i]);
        size_t j = i + 1;
        while (fd < 0 && j < count && chunks[j] == chunks[j - 1] + chunk_size && own_fd(chunks[j]) < 0)
            ++j;
        void *at = static_cast<uint8_t *>(base) + i * chunk_size;
        const off_t offset = static_cast<off_t>(
            fd < 0 ? chunks[i] : gpu.root_off[chunks[i] / kRootChunkSize] + chunks[i] % kRootChunkSize);
        if (mmap(at, (j - i) * chunk_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd < 0 ? gpu.fd : fd,
                 offset) == MAP_FAILED) {
            munmap(base, size);
            return UVM_ERR_NO_HOST_MEMORY;
        }
        i = j;
    }
    *out = base;
    return UVM_OK;
}

uvm_status_t SimBackend::sysmem_dma_map(uint32_t g, const backend::HostAllocation &alloc,
                                        uint64_t *dma) {
    SimGpu &gpu = *gpus_[g];
    uint64_t address = 0;
    const uvm_status_t status = gpu.iova.alloc(alloc.size, alloc.chunk_size, &address);
    if (status != UVM_OK)
        return status;
    try {
        std::lock_guard<std::mutex> guard(gpu.iommu_lock);
        gpu.iommu.emplace(address, IommuEntry{static_cast<uint8_t *>(alloc.linear), alloc.size});
    } catch (const std::bad_alloc &) {
        gpu.iova.free(address, alloc.size);
        return UVM_ERR_NO_HOST_MEMORY;
    }
    *dma = address;
    return UVM_OK;
}

void SimBackend::sysmem_dma_unmap(uint32_t g, const backend::HostAllocation &alloc, uint64_t dma) {
    SimGpu &gpu = *gpus_[g];
    {
        std::lock_guard<std::mutex> guard(gpu.iommu_lock);
        const size_t erased = gpu.iommu.erase(dma);
        UVM_ASSERT(erased == 1);
        (void)erased;
    }
    gpu.iova.free(dma, alloc.size);
}

uvm_status_t SimBackend::gpu_va_map(uint32_t gpu, uvm_va_space_kind_t, uint64_t, uint64_t,
                                    const mmu::Pte *ptes, size_t count) {
    // The page tree is the simulated GPU's MMU: nothing to program, but a PTE
    // must name memory the GPU can reach.
    for (size_t i = 0; i < count; ++i)
        if (ptes[i].aperture == mmu::Aperture::Peer && !linked(gpu, ptes[i].peer_gpu))
            return UVM_ERR_NO_PEER_ACCESS;
    return UVM_OK;
}

uvm_status_t resolve_params(const uvm_sim_params_t &params, uvm_sim_params_t *out) {
    uvm_sim_params_t p = params;
    if (p.gpu_count == 0)
        p.gpu_count = 2;
    if (p.vidmem_size == 0)
        p.vidmem_size = kDefaultVidmem;
    if (p.page_sizes == 0)
        p.page_sizes = kAllPageSizes;
    if (p.gpu_count > UVM_MAX_GPUS)
        return fail(UVM_ERR_INVALID_ARGUMENT, "sim.gpu_count %u is over the limit of %d GPUs (UVM_MAX_GPUS)",
                    p.gpu_count, UVM_MAX_GPUS);
    if (p.vidmem_size > kMaxVidmem)
        return fail(UVM_ERR_INVALID_ARGUMENT, "sim.vidmem_size %s is over the limit of %s per simulated GPU",
                    byte_text(p.vidmem_size).text, byte_text(kMaxVidmem).text);
    if (!is_aligned(p.vidmem_size, kRootChunkSize))
        return fail(UVM_ERR_INVALID_ARGUMENT, "sim.vidmem_size %s is not a multiple of 2 MiB",
                    byte_text(p.vidmem_size).text);
    if ((p.page_sizes & ~kAllPageSizes) != 0 || (p.page_sizes & kPageSize2M) == 0)
        return fail(UVM_ERR_INVALID_ARGUMENT,
                    "sim.page_sizes 0x%llx: a mask of UVM_PAGE_SIZE_4K, _64K and _2M that holds _2M",
                    static_cast<unsigned long long>(p.page_sizes));
    bool any_row = false;
    for (uint32_t g = 0; g < UVM_MAX_GPUS; ++g)
        any_row |= p.peer_rows[g] != 0;
    const uint32_t all = p.gpu_count == 32 ? 0xFFFFFFFFu : (1u << p.gpu_count) - 1;
    for (uint32_t g = 0; g < UVM_MAX_GPUS; ++g) {
        if (g >= p.gpu_count || p.no_peers)
            p.peer_rows[g] = 0;
        else if (!any_row)
            p.peer_rows[g] = all;
        else if (p.peer_rows[g] & ~all)
            return fail(UVM_ERR_INVALID_ARGUMENT, "sim.peer_rows[%u] 0x%x links to a GPU beyond sim.gpu_count %u", g,
                        p.peer_rows[g], p.gpu_count);
    }
    // NUMA: a configured node count, or the host's nodes; each GPU on one of them.
    if (p.numa_nodes > UVM_MAX_NUMA_NODES)
        return fail(UVM_ERR_INVALID_ARGUMENT, "sim.numa_nodes %u is over the limit of %d (UVM_MAX_NUMA_NODES)",
                    p.numa_nodes, UVM_MAX_NUMA_NODES);
    const topo::Topology &host = topo::host_topology();
    bool any_node = false;
    for (uint32_t g = 0; g < UVM_MAX_GPUS; ++g)
        any_node |= p.gpu_numa_node[g] != 0;
    for (uint32_t g = 0; g < UVM_MAX_GPUS; ++g) {
        if (g >= p.gpu_count) {
            p.gpu_numa_node[g] = 0;
        } else if (!any_node) {
            p.gpu_numa_node[g] = p.numa_nodes ? static_cast<int32_t>(g % p.numa_nodes)
                                              : host.nodes[g % host.nodes.size()].id;
        } else {
            const int32_t n = p.gpu_numa_node[g];
            const bool known = p.numa_nodes ? n >= 0 && static_cast<uint32_t>(n) < p.numa_nodes
                                            : host.node(n) != nullptr;
            if (!known)
                return fail(UVM_ERR_INVALID_ARGUMENT, "sim.gpu_numa_node[%u] %d: no such NUMA node %s", g, n,
                            p.numa_nodes ? "among sim.numa_nodes" : "on this host");
        }
    }
    *out = p;
    return UVM_OK;
}

uvm_status_t create_sim_backend(const uvm_sim_params_t &params,
                                std::unique_ptr<backend::Backend> *out) {
    uvm_sim_params_t resolved;
    uvm_status_t status = resolve_params(params, &resolved);
    if (status != UVM_OK)
        return status;
    auto backend = std::make_unique<SimBackend>(resolved);
    status = backend->init();
    if (status != UVM_OK)
        return status;
    *out = std::move(backend);
    return UVM_OK;
}

}  // namespace uvm::sim
