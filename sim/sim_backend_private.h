// The simulated GPUs' private parts, for the files of sim/ only (sim_backend.h
// is the way in): a GPU's memory, root slots and IOMMU, a stream's queue,
// and the SimBackend class, whose methods live in a file per idea:
// sim_backend.cpp (the core: root chunks, mappings, creation),
// sim_copy_engine.cpp, sim_streams.cpp (StreamCapability),
// sim_sharing.cpp (SharingCapability) and sim_offload.cpp
// (OffloadCapability).
#pragma once

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
#include "backend/offload_capability.h"
#include "backend/os.h"
#include "backend/sharing_capability.h"
#include "backend/stream_capability.h"
#include "common/assert.h"
#include "common/bitmap.h"
#include "common/sizes.h"
#include "mmu/range_allocator.h"

namespace uvm::sim {

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
    // Vidmem; phys address = offset. A reservation of three times the GPU's
    // memory: the root slots, twice the memory, in the GPU's memfd (sparse:
    // only backed roots' touched pages cost host memory), then the import
    // area, where other processes' exported roots are mapped (PROT_NONE
    // elsewhere). Twice, as CUDA's physical window is twice the GPU's memory:
    // an offloaded root (sim_offload.cpp) keeps its slot while its memory is
    // given back, so the memory it gave can be handed out again at other
    // slots. What bounds allocation is the memory, counted in `backed`; the
    // slots past the memory serve only the offloaded roots (window()).
    uint8_t *memory = nullptr;
    uint64_t size = 0;  // the memory, in bytes (GpuInfo::memory_total)

    size_t roots() const { return size / kRootChunkSize; }  // root chunks of memory
    size_t slots() const { return 2 * roots(); }            // root slots; the import area follows
    // New roots take slots below this: the memory's roots, and one more per
    // offloaded root. Nothing offloaded, the sim gives the addresses and
    // meets the fragmentation a GPU of its memory's size meets; each
    // offloaded root lets one root of the memory it gave back sit above.
    // gpu.lock held.
    size_t window() const { return roots() + offloaded.count(); }

    std::mutex lock;
    Bitmap free_roots;  // by root slot, over slots()
    size_t backed = 0;  // roots given and holding memory (not offloaded): at most roots()
    // Given roots whose memory went back (root_chunks_offload): their slots
    // stay taken and PROT_NONE, their pages punched out of their memfd.
    Bitmap offloaded;   // by root slot
    // Roots handed to another process by root_chunk_export (until freed):
    // the sim cannot tell when the other process lets go of its fd, so an
    // exported root is never offloaded (the pages are the other's too).
    Bitmap exported;    // by root slot
    // Remappable roots (which can be exported) live in a memfd of their own
    // run (one per root_chunks_alloc), mapped over the GPU's memfd at their
    // slots, so that a root shared with another process keeps its pages when
    // this one frees it: the slot gets the GPU's memfd back and the memfd
    // lives on in the other process. One fd per run, not per root: a large
    // object costs one fd. Imported roots have an fd each. -1: the GPU's memfd.
    std::vector<int> root_fd;        // by root chunk index, over the slots and the import area
    std::vector<uint64_t> root_off;  // the root's offset in root_fd
    std::map<int, uint32_t> run_refs;  // roots still in each run's memfd
    Bitmap free_imports;       // by root chunk index of the import area (roots() of them)

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

// The sim has streams, sharing and offload; it has no managed memory, and
// the manager places every mapping itself (no placement).
class SimBackend final : public backend::Backend,
                         public backend::StreamCapability,
                         public backend::SharingCapability,
                         public backend::OffloadCapability {
public:
    explicit SimBackend(const uvm_sim_params_t &params) : params_(params) {}
    ~SimBackend() override;

    uvm_status_t init();

    uvm_backend_kind_t kind() const override { return UVM_BACKEND_SIM; }
    uint32_t gpu_count() const override { return static_cast<uint32_t>(gpus_.size()); }
    const backend::GpuInfo &gpu_info(uint32_t gpu) const override { return gpus_[gpu]->info; }
    backend::GpuMemory gpu_memory(uint32_t gpu) const override;
    void kernel_va_range(uint32_t, uint64_t *base, uint64_t *size) const override {
        *base = kKernelVaBase;
        *size = kKernelVaSize;
    }

    backend::StreamCapability *streams() override { return this; }
    backend::SharingCapability *sharing() override { return this; }
    backend::OffloadCapability *offload() override { return this; }

    uvm_status_t root_chunks_alloc(uint32_t gpu, size_t count, bool remappable, uint64_t *phys) override;
    uint64_t largest_free_run(uint32_t gpu, const Bitmap &held_free) const override;
    void trim(uint32_t) override {}  // nothing cached: each root chunk goes back when freed
    uvm_status_t root_chunk_export(uint32_t gpu, uint64_t phys, int *fd, uint64_t *offset) override;
    int export_handle_kind() const override { return 1; }  // a memfd
    uvm_status_t roots_import(uint32_t gpu, const int *fds, const uint64_t *offsets, size_t count,
                              uint64_t *phys) override;
    void roots_import_release(uint32_t gpu, uint64_t phys, size_t count) override;
    uvm_status_t sysmem_import(int fd, uint64_t size, uint64_t chunk_size, backend::HostAllocation *out) override {
        return backend::host_memory_adopt(fd, size, chunk_size, out);
    }
    void root_chunk_free(uint32_t gpu, uint64_t phys) override;
    uvm_status_t root_chunks_alloc_owned(uint32_t gpu, size_t count, uint64_t *phys) override;
    uvm_status_t root_chunks_offload(uint32_t gpu, const uint64_t *phys, size_t count) override;
    uvm_status_t root_chunks_restore(uint32_t gpu, const uint64_t *phys, size_t count) override;
    uvm_status_t root_span_shrink(uint32_t gpu, uint64_t first, size_t count, uint64_t *released,
                                  uint64_t *copied) override;
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
    void *stream_native(void *) override { return nullptr; }  // a simulated queue: no driver stream
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
    uvm_status_t stream_capture_info(void *stream, backend::StreamCaptureInfo *out) override;
    backend::CaptureMode exchange_capture_mode(backend::CaptureMode mode) override;
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

}  // namespace uvm::sim
