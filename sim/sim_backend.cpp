#include "sim/sim_backend.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "backend/host_memory.h"
#include "common/assert.h"
#include "common/bitmap.h"
#include "common/sizes.h"
#include "mmu/range_allocator.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif

namespace uvm::sim {

namespace {

constexpr uint64_t kDefaultVidmem = 16ull << 30;
constexpr uint64_t kMaxVidmem = 1ull << 40;  // 1 TiB per simulated GPU
// The span of each GPU's kernel address space, and of its IOMMU's DMA addresses.
constexpr uint64_t kKernelVaBase = 1ull << 48;
constexpr uint64_t kKernelVaSize = 1ull << 46;
constexpr uint64_t kIovaBase = 1ull << 32;
constexpr uint64_t kIovaSize = 1ull << 46;

struct IommuEntry {
    uint8_t *host;
    uint64_t size;
};

struct SimGpu {
    backend::GpuInfo info;
    int fd = -1;
    // Vidmem; phys address = offset. A reservation of twice the GPU's memory:
    // the first half is the GPU's memfd, the second the import area, where
    // other processes' exported roots are mapped (PROT_NONE elsewhere).
    uint8_t *memory = nullptr;
    uint64_t size = 0;

    std::mutex lock;
    Bitmap free_roots;  // by root chunk index
    // Remappable roots (which can be exported) live in a memfd of their own
    // run (one per root_chunks_alloc), mapped over the GPU's memfd at their
    // slots, so that a root shared with another process keeps its pages when
    // this one frees it: the slot gets the GPU's memfd back and the memfd
    // lives on in the other process. One fd per run, not per root: a large
    // object costs one fd. Imported roots have an fd each. -1: the GPU's memfd.
    std::vector<int> root_fd;        // by root chunk index, over both halves
    std::vector<uint64_t> root_off;  // the root's offset in root_fd
    std::map<int, uint32_t> run_refs;  // roots still in each run's memfd
    Bitmap free_imports;       // by root chunk index of the import area

    std::mutex iommu_lock;
    std::map<uint64_t, IommuEntry> iommu;  // DMA address -> host pages
    mmu::RangeAllocator iova{kIovaBase, kIovaSize};

    std::atomic<uint64_t> ce_operations{0};
    std::atomic<uint64_t> ce_bytes{0};
    std::atomic<uint64_t> ce_translations{0};
};

// A simulated stream: a queue of copy-engine work that runs as soon as
// nothing before it holds it back (held work, or a wait for another stream's
// fence). Unheld streams therefore finish their work within the call that
// queues it; tests hold work to keep it in flight.
struct SimStream;

struct SimOp {
    enum class Kind { Copy, Memset, Hold, Wait } kind = Kind::Copy;
    struct Segment {
        uint8_t *to;
        const uint8_t *from;  // null: memset
        uint64_t size;
    };
    std::vector<Segment> segments;  // resolved when queued
    uint8_t value = 0;
    uint32_t gpu = 0;
    uint64_t bytes = 0;
    bool released = false;         // Hold: may finish
    SimStream *wait_on = nullptr;  // Wait: null once the stream is gone
    uint64_t wait_fence = 0;
};

struct SimStream {
    uint32_t gpu = 0;
    std::deque<SimOp> queue;
    uint64_t queued = 0;     // operations ever queued; a fence is this count
    uint64_t completed = 0;  // operations finished, in order
};

class SimBackend final : public backend::Backend {
public:
    explicit SimBackend(const uvm_sim_params_t &params) : params_(params) {}
    ~SimBackend() override;

    uvm_status_t init();

    uvm_backend_kind_t kind() const override { return UVM_BACKEND_SIM; }
    uint32_t gpu_count() const override { return static_cast<uint32_t>(gpus_.size()); }
    const backend::GpuInfo &gpu_info(uint32_t gpu) const override { return gpus_[gpu]->info; }
    uint64_t gpu_memory_free(uint32_t gpu) const override;
    void kernel_va_range(uint32_t, uint64_t *base, uint64_t *size) const override {
        *base = kKernelVaBase;
        *size = kKernelVaSize;
    }

    uvm_status_t root_chunks_alloc(uint32_t gpu, size_t count, bool remappable, uint64_t *phys) override;
    uvm_status_t root_chunk_export(uint32_t gpu, uint64_t phys, int *fd, uint64_t *offset) override;
    int export_handle_kind() const override { return 1; }  // a memfd
    uvm_status_t roots_import(uint32_t gpu, const int *fds, const uint64_t *offsets, size_t count,
                              uint64_t *phys) override;
    void roots_import_release(uint32_t gpu, uint64_t phys, size_t count) override;
    uvm_status_t sysmem_import(int fd, uint64_t size, uint64_t chunk_size, backend::HostAllocation *out) override {
        return backend::host_memory_adopt(fd, size, chunk_size, out);
    }
    void root_chunk_free(uint32_t gpu, uint64_t phys) override;
    uvm_status_t vidmem_cpu_map(uint32_t gpu, const uint64_t *chunks, size_t count,
                                uint64_t chunk_size, void *fixed, void **out) override;
    void vidmem_cpu_unmap(void *address, uint64_t size) override { munmap(address, size); }

    const topo::Topology &topology() const override { return topology_; }

    uvm_status_t sysmem_alloc(const backend::HostRequest &request,
                              backend::HostAllocation *out) override {
        return backend::host_memory_create(request, out);
    }
    void sysmem_free(backend::HostAllocation *alloc) override { backend::host_memory_destroy(alloc); }
    uvm_status_t sysmem_cpu_map(const backend::HostAllocation &alloc, void *fixed,
                                void **out) override {
        return backend::host_memory_map(alloc, fixed, out);
    }
    void sysmem_cpu_unmap(void *address, uint64_t size) override {
        backend::host_memory_unmap(address, size);
    }
    uvm_status_t sysmem_dma_map(uint32_t gpu, const backend::HostAllocation &alloc,
                                uint64_t *dma) override;
    void sysmem_dma_unmap(uint32_t gpu, const backend::HostAllocation &alloc, uint64_t dma) override;

    uvm_status_t peer_access(uint32_t gpu, uint32_t owner) override {
        return linked(gpu, owner) ? UVM_OK : UVM_ERR_NO_PEER_ACCESS;
    }
    uvm_status_t gpu_va_map(uint32_t gpu, uvm_va_space_kind_t, uint64_t, uint64_t,
                            const mmu::Pte *ptes, size_t count) override;
    void gpu_va_unmap(uint32_t, uvm_va_space_kind_t, uint64_t, uint64_t) override {}

    uvm_status_t ce_copy(uint32_t gpu, const backend::CeAddress &dst,
                         const backend::CeAddress &src, uint64_t size) override;
    uvm_status_t ce_memset(uint32_t gpu, const backend::CeAddress &dst, uint8_t value,
                           uint64_t size) override;
    backend::CeCounters ce_counters(uint32_t gpu) const override;

    uvm_status_t stream_create(uint32_t gpu, void *native, void **stream) override;
    uvm_status_t stream_destroy(void *stream) override;
    uvm_status_t stream_fence(void *stream, uint64_t *fence) override {
        std::lock_guard<std::mutex> guard(streams_lock_);
        *fence = static_cast<SimStream *>(stream)->queued;
        return UVM_OK;
    }
    bool fence_done(void *stream, uint64_t fence) override {
        std::lock_guard<std::mutex> guard(streams_lock_);
        return static_cast<SimStream *>(stream)->completed >= fence;
    }
    uvm_status_t stream_wait(void *waiter, void *stream, uint64_t fence) override;
    uvm_status_t stream_synchronize(void *stream) override {
        std::lock_guard<std::mutex> guard(streams_lock_);
        progress();
        return static_cast<SimStream *>(stream)->queue.empty() ? UVM_OK : UVM_ERR_BUSY;
    }
    uvm_status_t ce_copy_async(uint32_t gpu, void *stream, const backend::CeAddress &dst,
                               const backend::CeAddress &src, uint64_t size) override;
    uvm_status_t ce_memset_async(uint32_t gpu, void *stream, const backend::CeAddress &dst, uint8_t value,
                                 uint64_t size) override;
    uvm_status_t stream_hold(void *stream) override;
    uvm_status_t stream_release(void *stream) override;

private:
    // Host pointers for a copy (src non-null) or memset of `size` bytes, in
    // pieces contiguous on both sides. False: an MMU or IOMMU fault.
    bool segments(uint32_t gpu, const backend::CeAddress &dst, const backend::CeAddress *src, uint64_t size,
                  std::vector<SimOp::Segment> *out);
    // A copy (src non-null) or memset, resolved.
    uvm_status_t ce_op(uint32_t gpu, const backend::CeAddress &dst, const backend::CeAddress *src, uint8_t value,
                       uint64_t size, SimOp *op);
    void run(SimOp &op);
    bool runnable(const SimOp &op) const;
    void progress();  // streams_lock_ held
    uvm_status_t enqueue(void *stream, SimOp op);

    bool map_gpu_memfd(SimGpu &gpu, uint64_t phys, uint64_t bytes);
    void give_slot_back(SimGpu &gpu, uint64_t phys);
    void drop_import(SimGpu &gpu, size_t index);
    bool linked(uint32_t gpu, uint32_t owner) const {
        return gpu == owner || (gpus_[gpu]->info.peer_mask >> owner) & 1u;
    }
    // Host pointer for `address` of `aperture` as `gpu` sees it, and how many
    // bytes from there are contiguous in host memory (at most `want`).
    bool resolve_physical(uint32_t gpu, mmu::Aperture aperture, uint32_t peer, uint64_t address,
                          uint64_t want, uint8_t **host, uint64_t *len);
    bool resolve(uint32_t gpu, const backend::CeAddress &a, uint64_t offset, uint64_t want,
                 uint8_t **host, uint64_t *len);

    uvm_sim_params_t params_;
    topo::Topology topology_;
    std::vector<std::unique_ptr<SimGpu>> gpus_;

    std::mutex streams_lock_;  // every stream, and running their work
    std::vector<std::unique_ptr<SimStream>> streams_;
};

SimBackend::~SimBackend() {
    for (auto &gpu : gpus_) {
        if (gpu->memory)
            munmap(gpu->memory, 2 * gpu->size);
        for (size_t i = 0; i < gpu->root_fd.size(); ++i)
            if (gpu->root_fd[i] >= 0 && i >= gpu->size / kRootChunkSize)
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
        if (gpu->fd < 0 || ftruncate(gpu->fd, static_cast<off_t>(gpu->size)) != 0) {
            if (gpu->fd >= 0)
                close(gpu->fd);
            return UVM_ERR_NO_HOST_MEMORY;
        }
        void *memory = mmap(nullptr, 2 * gpu->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (memory == MAP_FAILED || mmap(memory, gpu->size, PROT_READ | PROT_WRITE,
                                         MAP_SHARED | MAP_NORESERVE | MAP_FIXED, gpu->fd, 0) == MAP_FAILED) {
            if (memory != MAP_FAILED)
                munmap(memory, 2 * gpu->size);
            close(gpu->fd);
            return UVM_ERR_NO_HOST_MEMORY;
        }
        gpu->memory = static_cast<uint8_t *>(memory);
        const uint32_t roots = static_cast<uint32_t>(gpu->size / kRootChunkSize);
        gpu->free_roots.resize(roots);
        gpu->free_roots.set_range(0, roots);
        gpu->free_imports.resize(roots);
        gpu->free_imports.set_range(0, roots);
        gpu->root_fd.assign(2 * roots, -1);
        gpu->root_off.assign(2 * roots, 0);

        char name[96];
        std::snprintf(name, sizeof(name), "Simulated GPU %u (%llu MiB%s)", g,
                      static_cast<unsigned long long>(gpu->size >> 20),
                      params_.cpu_coherent ? ", coherent" : "");
        gpu->info.name = name;
        gpu->info.memory_total = gpu->size;
        gpu->info.phys_space = 2 * gpu->size;  // the import area above the GPU's memory
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

uint64_t SimBackend::gpu_memory_free(uint32_t gpu) const {
    std::lock_guard<std::mutex> guard(gpus_[gpu]->lock);
    return gpus_[gpu]->free_roots.count() * kRootChunkSize;
}

// Every simulated root chunk can be mapped on its own; remappable ones get
// their own memfd (SimGpu::root_fd), so that they can be exported.
uvm_status_t SimBackend::root_chunks_alloc(uint32_t g, size_t count, bool remappable, uint64_t *phys) {
    SimGpu &gpu = *gpus_[g];
    std::lock_guard<std::mutex> guard(gpu.lock);
    const size_t at = count ? gpu.free_roots.find_run(count) : Bitmap::npos;
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
// memfd, if any, lives on wherever it was exported). gpu.lock held.
void SimBackend::give_slot_back(SimGpu &gpu, uint64_t phys) {
    const size_t index = phys / kRootChunkSize;
    if (gpu.root_fd[index] < 0)
        return;
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

void SimBackend::root_chunk_free(uint32_t g, uint64_t phys) {
    SimGpu &gpu = *gpus_[g];
    UVM_ASSERT(is_aligned(phys, kRootChunkSize) && phys < gpu.size);
    std::lock_guard<std::mutex> guard(gpu.lock);
    give_slot_back(gpu, phys);
    // Give the host pages back: a freed root chunk costs nothing until reused.
    fallocate(gpu.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(phys),
              static_cast<off_t>(kRootChunkSize));
    gpu.free_roots.set(phys / kRootChunkSize);
}

uvm_status_t SimBackend::root_chunk_export(uint32_t g, uint64_t phys, int *fd, uint64_t *offset) {
    SimGpu &gpu = *gpus_[g];
    std::lock_guard<std::mutex> guard(gpu.lock);
    const size_t index = phys / kRootChunkSize;
    if (!is_aligned(phys, kRootChunkSize) || index >= gpu.root_fd.size() || gpu.root_fd[index] < 0)
        return UVM_ERR_NOT_SUPPORTED;  // not a remappable (or imported) root
    const int copy = fcntl(gpu.root_fd[index], F_DUPFD_CLOEXEC, 0);
    if (copy < 0)
        return UVM_ERR_BACKEND;
    *fd = copy;
    *offset = gpu.root_off[index];
    return UVM_OK;
}

uvm_status_t SimBackend::roots_import(uint32_t g, const int *fds, const uint64_t *offsets, size_t count,
                                      uint64_t *phys) {
    SimGpu &gpu = *gpus_[g];
    for (size_t i = 0; i < count; ++i) {
        struct stat st;
        if (fstat(fds[i], &st) != 0 || !S_ISREG(st.st_mode) || !is_aligned(offsets[i], kRootChunkSize) ||
            static_cast<uint64_t>(st.st_size) < offsets[i] + kRootChunkSize)
            return UVM_ERR_INVALID_ARGUMENT;
    }
    std::lock_guard<std::mutex> guard(gpu.lock);
    const size_t at = count ? gpu.free_imports.find_run(count) : Bitmap::npos;
    if (at == Bitmap::npos)
        return UVM_ERR_OUT_OF_MEMORY;
    const size_t roots = gpu.size / kRootChunkSize;
    for (size_t i = 0; i < count; ++i) {
        const size_t index = roots + at + i;
        const int own = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        if (own < 0 || mmap(gpu.memory + index * kRootChunkSize, kRootChunkSize, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_FIXED, own, static_cast<off_t>(offsets[i])) == MAP_FAILED) {
            if (own >= 0)
                close(own);
            for (size_t j = 0; j < i; ++j)
                drop_import(gpu, roots + at + j);
            return UVM_ERR_NO_HOST_MEMORY;
        }
        gpu.root_fd[index] = own;
        gpu.root_off[index] = offsets[i];
    }
    gpu.free_imports.clear_range(at, count);
    *phys = (roots + at) * kRootChunkSize;
    return UVM_OK;
}

// An imported root's slot goes back to PROT_NONE. gpu.lock held.
void SimBackend::drop_import(SimGpu &gpu, size_t index) {
    void *got = mmap(gpu.memory + index * kRootChunkSize, kRootChunkSize, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    UVM_ASSERT(got != MAP_FAILED);
    (void)got;
    close(gpu.root_fd[index]);
    gpu.root_fd[index] = -1;
}

void SimBackend::roots_import_release(uint32_t g, uint64_t phys, size_t count) {
    SimGpu &gpu = *gpus_[g];
    std::lock_guard<std::mutex> guard(gpu.lock);
    const size_t roots = gpu.size / kRootChunkSize, first = phys / kRootChunkSize;
    UVM_ASSERT(first >= roots && first + count <= 2 * roots);
    for (size_t i = first; i < first + count; ++i)
        drop_import(gpu, i);
    gpu.free_imports.set_range(first - roots, count);
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

bool SimBackend::resolve_physical(uint32_t g, mmu::Aperture aperture, uint32_t peer,
                                  uint64_t address, uint64_t want, uint8_t **host, uint64_t *len) {
    if (aperture == mmu::Aperture::Vid || aperture == mmu::Aperture::Peer) {
        const uint32_t owner = aperture == mmu::Aperture::Vid ? g : peer;
        if (owner >= gpus_.size() || !linked(g, owner))
            return false;
        const SimGpu &gpu = *gpus_[owner];
        if (address < gpu.size) {
            *host = gpu.memory + address;
            *len = std::min(want, gpu.size - address);
            return true;
        }
        // The import area: only a root that is there now, one root at a time.
        if (address >= 2 * gpu.size)
            return false;
        std::lock_guard<std::mutex> guard(const_cast<SimGpu &>(gpu).lock);
        if (gpu.root_fd[address / kRootChunkSize] < 0)
            return false;
        *host = gpu.memory + address;
        *len = std::min(want, kRootChunkSize - address % kRootChunkSize);
        return true;
    }
    if (aperture != mmu::Aperture::Sys)
        return false;
    SimGpu &gpu = *gpus_[g];
    std::lock_guard<std::mutex> guard(gpu.iommu_lock);
    auto it = gpu.iommu.upper_bound(address);
    if (it == gpu.iommu.begin())
        return false;
    --it;
    const uint64_t offset = address - it->first;
    if (offset >= it->second.size)
        return false;  // an IOMMU fault
    *host = it->second.host + offset;
    *len = std::min(want, it->second.size - offset);
    return true;
}

bool SimBackend::resolve(uint32_t g, const backend::CeAddress &a, uint64_t offset, uint64_t want,
                         uint8_t **host, uint64_t *len) {
    if (!a.is_virtual)
        return resolve_physical(g, a.aperture, a.peer_gpu, a.address + offset, want, host, len);
    mmu::Translation t;
    gpus_[g]->ce_translations.fetch_add(1, std::memory_order_relaxed);
    if (!a.tree || !a.tree->translate(a.address + offset, &t))
        return false;  // an MMU fault
    const uint64_t in_page = t.page_size - t.page_offset;
    return resolve_physical(g, t.aperture, t.peer_gpu, t.address, std::min(want, in_page), host,
                            len);
}

bool SimBackend::segments(uint32_t g, const backend::CeAddress &dst, const backend::CeAddress *src, uint64_t size,
                          std::vector<SimOp::Segment> *out) {
    uint64_t done = 0;
    while (done < size) {
        uint8_t *to, *from = nullptr;
        uint64_t to_len, from_len = UINT64_MAX;
        if (!resolve(g, dst, done, size - done, &to, &to_len) ||
            (src && !resolve(g, *src, done, size - done, &from, &from_len)))
            return false;
        const uint64_t n = std::min(to_len, from_len);
        out->push_back({to, from, n});
        done += n;
    }
    return true;
}

void SimBackend::run(SimOp &op) {
    for (const SimOp::Segment &seg : op.segments) {
        if (seg.from)
            std::memmove(seg.to, seg.from, seg.size);
        else
            std::memset(seg.to, op.value, seg.size);
    }
    if (op.kind == SimOp::Kind::Copy || op.kind == SimOp::Kind::Memset) {
        gpus_[op.gpu]->ce_operations.fetch_add(1, std::memory_order_relaxed);
        gpus_[op.gpu]->ce_bytes.fetch_add(op.bytes, std::memory_order_relaxed);
    }
}

uvm_status_t SimBackend::ce_op(uint32_t g, const backend::CeAddress &dst, const backend::CeAddress *src,
                               uint8_t value, uint64_t size, SimOp *op) {
    op->kind = src ? SimOp::Kind::Copy : SimOp::Kind::Memset;
    op->gpu = g;
    op->bytes = size;
    op->value = value;
    try {
        return segments(g, dst, src, size, &op->segments) ? UVM_OK : UVM_ERR_BACKEND;
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;  // a backend call never throws
    }
}

uvm_status_t SimBackend::ce_copy(uint32_t g, const backend::CeAddress &dst,
                                 const backend::CeAddress &src, uint64_t size) {
    SimOp op;
    const uvm_status_t status = ce_op(g, dst, &src, 0, size, &op);
    if (status == UVM_OK)
        run(op);
    return status;
}

uvm_status_t SimBackend::ce_memset(uint32_t g, const backend::CeAddress &dst, uint8_t value,
                                   uint64_t size) {
    SimOp op;
    const uvm_status_t status = ce_op(g, dst, nullptr, value, size, &op);
    if (status == UVM_OK)
        run(op);
    return status;
}

uvm_status_t SimBackend::stream_create(uint32_t gpu, void *native, void **stream) {
    if (native && native != UVM_STREAM_LEGACY && native != UVM_STREAM_PER_THREAD)
        return UVM_ERR_INVALID_ARGUMENT;  // the sim has no native streams; a default one is a queue of its own
    auto s = std::make_unique<SimStream>();
    s->gpu = gpu;
    std::lock_guard<std::mutex> guard(streams_lock_);
    streams_.push_back(std::move(s));
    *stream = streams_.back().get();
    return UVM_OK;
}

uvm_status_t SimBackend::stream_destroy(void *stream) {
    std::lock_guard<std::mutex> guard(streams_lock_);
    progress();
    auto *target = static_cast<SimStream *>(stream);
    if (!target->queue.empty())
        return UVM_ERR_BUSY;
    for (const auto &s : streams_)
        for (SimOp &op : s->queue)
            if (op.wait_on == target)
                op.wait_on = nullptr;  // finished: nothing left to wait for
    for (auto it = streams_.begin(); it != streams_.end(); ++it)
        if (it->get() == target) {
            streams_.erase(it);
            break;
        }
    return UVM_OK;
}

bool SimBackend::runnable(const SimOp &op) const {
    switch (op.kind) {
        case SimOp::Kind::Hold: return op.released;
        case SimOp::Kind::Wait: return !op.wait_on || op.wait_on->completed >= op.wait_fence;
        default: return true;
    }
}

void SimBackend::progress() {
    for (bool moved = true; moved;) {
        moved = false;
        for (const auto &s : streams_) {
            while (!s->queue.empty() && runnable(s->queue.front())) {
                run(s->queue.front());
                s->queue.pop_front();
                s->completed++;
                moved = true;
            }
        }
    }
}

uvm_status_t SimBackend::enqueue(void *stream, SimOp op) {
    std::lock_guard<std::mutex> guard(streams_lock_);
    auto *s = static_cast<SimStream *>(stream);
    s->queue.push_back(std::move(op));
    s->queued++;
    progress();
    return UVM_OK;
}

uvm_status_t SimBackend::stream_wait(void *waiter, void *stream, uint64_t fence) {
    SimOp op;
    op.kind = SimOp::Kind::Wait;
    op.wait_on = static_cast<SimStream *>(stream);
    op.wait_fence = fence;
    return enqueue(waiter, std::move(op));
}

uvm_status_t SimBackend::ce_copy_async(uint32_t g, void *stream, const backend::CeAddress &dst,
                                       const backend::CeAddress &src, uint64_t size) {
    SimOp op;
    const uvm_status_t status = ce_op(g, dst, &src, 0, size, &op);
    return status == UVM_OK ? enqueue(stream, std::move(op)) : status;
}

uvm_status_t SimBackend::ce_memset_async(uint32_t g, void *stream, const backend::CeAddress &dst, uint8_t value,
                                         uint64_t size) {
    SimOp op;
    const uvm_status_t status = ce_op(g, dst, nullptr, value, size, &op);
    return status == UVM_OK ? enqueue(stream, std::move(op)) : status;
}

uvm_status_t SimBackend::stream_hold(void *stream) {
    SimOp op;
    op.kind = SimOp::Kind::Hold;
    return enqueue(stream, std::move(op));
}

uvm_status_t SimBackend::stream_release(void *stream) {
    std::lock_guard<std::mutex> guard(streams_lock_);
    for (SimOp &op : static_cast<SimStream *>(stream)->queue)
        if (op.kind == SimOp::Kind::Hold && !op.released) {
            op.released = true;
            progress();
            return UVM_OK;
        }
    return UVM_ERR_INVALID_ARGUMENT;  // nothing held
}

backend::CeCounters SimBackend::ce_counters(uint32_t g) const {
    const SimGpu &gpu = *gpus_[g];
    return {gpu.ce_operations.load(), gpu.ce_bytes.load(), gpu.ce_translations.load()};
}

}  // namespace

uvm_status_t resolve_params(const uvm_sim_params_t &params, uvm_sim_params_t *out) {
    uvm_sim_params_t p = params;
    if (p.gpu_count == 0)
        p.gpu_count = 2;
    if (p.vidmem_size == 0)
        p.vidmem_size = kDefaultVidmem;
    if (p.page_sizes == 0)
        p.page_sizes = kAllPageSizes;
    if (p.gpu_count > UVM_MAX_GPUS || p.vidmem_size > kMaxVidmem ||
        !is_aligned(p.vidmem_size, kRootChunkSize) || (p.page_sizes & ~kAllPageSizes) != 0 ||
        (p.page_sizes & kPageSize2M) == 0)
        return UVM_ERR_INVALID_ARGUMENT;
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
            return UVM_ERR_INVALID_ARGUMENT;  // a link to a GPU that does not exist
    }
    // NUMA: a configured node count, or the host's nodes; each GPU on one of them.
    if (p.numa_nodes > UVM_MAX_NUMA_NODES)
        return UVM_ERR_INVALID_ARGUMENT;
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
                return UVM_ERR_INVALID_ARGUMENT;
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
