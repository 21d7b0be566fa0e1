// The CUDA backend's private parts, for the files of cuda/ only (cuda_backend.h
// is the way in): a GPU's context, root pool and copy stream, a stream's
// fences, and the CudaBackend class, whose methods live in a file per idea:
// cuda_backend.cpp (the core: creation, root chunks, sysmem, peers; its
// header comment is the design), cuda_mappings.cpp, cuda_copy_engine.cpp,
// and one file per capability: cuda_streams.cpp, cuda_sharing.cpp,
// cuda_managed.cpp, cuda_placement.cpp, cuda_offload.cpp.
#pragma once

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
#include "backend/managed_capability.h"
#include "backend/offload_capability.h"
#include "backend/placement_capability.h"
#include "backend/sharing_capability.h"
#include "backend/stream_capability.h"
#include "common/assert.h"
#include "common/sizes.h"
#include "cuda/relaxed_capture_mode.h"
#include "cuda/context_guard.h"
#include "cuda/driver_api.h"
#include "cuda/root_pool.h"

namespace uvm::cuda {

// A user-space mapping: one per address in the process, shared by the GPUs
// that map it.
struct UserMapping {
    uint64_t size;
    uint32_t gpus;      // GPUs granted access
    bool host = false;  // host pages registered at their CPU address (not handles mapped here)
    uint32_t owner = 0;           // vidmem: the GPU whose root chunks these are
    std::vector<uint64_t> roots{};  // vidmem: their phys, whose own handles are mapped here
};

// A stitched object's kernel view: its runs' handles mapped side by side in a
// range reserved for it (cuda_placement.cpp).
struct StitchedView {
    uint32_t gpu = 0;
    uint64_t size = 0;
    std::vector<std::pair<CUmemGenericAllocationHandle, uint64_t>> handles;  // in order, with their bytes
    std::vector<uint64_t> roots;  // their root chunks' phys: these cannot be offloaded nor shrunk meanwhile
};

// A GPU is described at creation with calls that need no context, and
// opened (its primary context retained, its copy stream made, its root pool's
// window reserved) by the first call that uses it (CudaBackend::open): a
// process that uses one GPU of several holds nothing on the others, as a
// runtime makes a context on a device only when it is first used.
struct Gpu {
    CUdevice device = 0;
    backend::GpuInfo info;

    // Set once by open, under open_lock, and published by `opened`: read
    // them only after is_open (or open) said yes.
    std::mutex open_lock;
    std::atomic<bool> opened{false};
    CUcontext context = nullptr;
    CUstream stream = nullptr;
    std::unique_ptr<RootPool> pool;

    std::mutex lock;  // the root pool and the peers granted (after CudaBackend::user_lock_ where both)
    uint32_t peers_granted = 0;       // GPUs granted access to every root chunk

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

// CUDA has every capability.
class CudaBackend final : public backend::Backend,
                          public backend::StreamCapability,
                          public backend::SharingCapability,
                          public backend::ManagedCapability,
                          public backend::PlacementCapability,
                          public backend::OffloadCapability {
public:
    explicit CudaBackend(const DriverApi *api) : api_(api) {}
    ~CudaBackend() override;
    uvm_status_t init();

    uvm_backend_kind_t kind() const override { return UVM_BACKEND_CUDA; }
    uint32_t gpu_count() const override { return static_cast<uint32_t>(gpus_.size()); }
    const backend::GpuInfo &gpu_info(uint32_t gpu) const override { return gpus_[gpu]->info; }
    backend::GpuMemory gpu_memory(uint32_t gpu) const override;
    uint64_t gpu_memory_held(uint32_t gpu) const override;
    const topo::Topology &topology() const override { return topo::host_topology(); }
    // Every kernel mapping on CUDA is a view the backend places (the window,
    // registered host pages), so the manager never allocates in this span:
    // it needs only to be a range no device pointer can fall in (the top half
    // of the 64-bit space, never a user address), and costs no driver call.
    static constexpr uint64_t kKernelVaBase = uint64_t{1} << 63;
    void kernel_va_range(uint32_t gpu, uint64_t *base, uint64_t *size) const override {
        *base = kKernelVaBase + gpu * kRootChunkSize;
        *size = kRootChunkSize;
    }
    uvm_status_t gpu_open(uint32_t gpu) override { return open(gpu); }

    backend::StreamCapability *streams() override { return this; }
    backend::SharingCapability *sharing() override { return this; }
    backend::ManagedCapability *managed() override { return this; }
    backend::PlacementCapability *placement() override { return this; }
    backend::OffloadCapability *offload() override { return this; }

    uvm_status_t root_chunks_alloc(uint32_t gpu, size_t count, bool remappable, uint64_t *phys) override;
    uint64_t largest_free_run(uint32_t gpu, const Bitmap &held_free) const override;
    void root_chunk_free(uint32_t gpu, uint64_t phys) override;
    void root_chunk_span(uint32_t gpu, uint64_t phys, uint64_t *first, size_t *count) const override;
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
    uvm_status_t stream_capture_info(void *stream, backend::StreamCaptureInfo *out) override;
    backend::CaptureMode exchange_capture_mode(backend::CaptureMode mode) override;
    uvm_status_t root_chunks_alloc_owned(uint32_t gpu, size_t count, uint64_t *phys) override;
    uvm_status_t root_chunks_offload(uint32_t gpu, const uint64_t *phys, size_t count) override;
    uvm_status_t root_chunks_restore(uint32_t gpu, const uint64_t *phys, size_t count) override;
    uvm_status_t root_span_shrink(uint32_t gpu, uint64_t first, size_t count, uint64_t *released,
                                  uint64_t *copied) override;

    // Held work is a sim test hook (uvm_sim.h): a real GPU has none.
    uvm_status_t stream_hold(void *) override { return UVM_ERR_NOT_SUPPORTED; }
    uvm_status_t stream_release(void *) override { return UVM_ERR_NOT_SUPPORTED; }

private:
    // Open `gpu` if no call has yet (Gpu above): once however many threads
    // ask at once; a failure leaves nothing behind and the next call tries
    // again. Every call that uses a GPU opens it first; a call that walks
    // every GPU skips those not open, which hold nothing.
    uvm_status_t open(uint32_t gpu) const;
    bool is_open(uint32_t gpu) const { return gpus_[gpu]->opened.load(std::memory_order_acquire); }
    // A context for calls that belong to no one GPU (process-wide VA
    // reservations, managed memory): the first open GPU's, opening GPU 0
    // only where none is.
    uvm_status_t any_open_gpu(uint32_t *gpu) const;
    // The GPU's context current until the guard's scope ends (context_guard.h); the GPU is open.
    ContextGuard set_context(uint32_t gpu) const {
        UVM_ASSERT(is_open(gpu));
        return ContextGuard(*api_, gpus_[gpu]->context);
    }
    std::vector<CUmemAccessDesc> access_for(uint32_t owner_mask) const;
    // `grow(pool, access)` on GPU `gpu`'s root pool: the GPU opened, its lock
    // held, its context current, the owner and every peer granted so far in
    // `access`. Growth may come while a stream captures (an allocation on it,
    // or on another thread during a global capture): allowed
    // (relaxed_capture_mode.h); a failed growth's roll-back unmaps, which
    // this does not make safe.
    template <typename Grow>
    uvm_status_t grow_roots(uint32_t gpu, Grow &&grow) {
        Gpu &g = *gpus_[gpu];
        const uvm_status_t status = open(gpu);
        if (status != UVM_OK)
            return status;
        std::lock_guard<std::mutex> guard(g.lock);
        const ContextGuard context = set_context(gpu);
        const RelaxedCaptureMode relaxed(*api_);
        return grow(*g.pool, access_for((1u << gpu) | g.peers_granted));
    }
    uvm_status_t window_view(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes, size_t count, uint64_t *va);
    bool in_some_window(uint64_t va) const;
    CUdeviceptr ce_pointer(uint32_t gpu, const backend::CeAddress &a) const;
    template <typename Enqueue>
    uvm_status_t run_on_stream(uint32_t gpu, uint64_t size, const char *what, Enqueue &&enqueue);
    CUmemLocation location_of(int32_t processor) const;
    uvm_status_t map_root_chunks(uint32_t owner, uint64_t va, const mmu::Pte *ptes, size_t count);
    void unmap_root_chunks(uint64_t va, uint64_t size);
    // Whether a stream made by stream_create captures now. No handle goes
    // back to the driver meanwhile: cuMemUnmap conflicts with every capture
    // (docs/cuda_backend.md, "Stream capture").
    bool capture_under_way();

    const DriverApi *api_;
    std::vector<std::unique_ptr<Gpu>> gpus_;
    std::mutex streams_lock_;
    std::vector<CudaStream *> streams_;  // every stream made and not destroyed
    bool in_user_range(uint64_t va, uint64_t size) const;  // user_lock_ held
    uvm_status_t map_host_user(uint32_t gpu, uint64_t va, uint64_t size);

    uvm_status_t stitched_view(uint32_t gpu, const mmu::Pte *ptes, size_t count, uint64_t *va);
    void drop_stitched_view(uint64_t va);
    void unmap_stitched(uint64_t va, const StitchedView &v);
    uint32_t unmap_stitched_later();  // user_lock_ held
    void release_kept_after(uint32_t gpus);  // user_lock_ held
    void release_kept(uint32_t gpu, bool views);
    bool stitched_roots(uint32_t gpu, uint64_t first, uint64_t size) const;  // user_lock_ held

    std::mutex user_lock_;
    std::map<uint64_t, UserMapping> user_mappings_;
    // Stitched kernel views by address, and those a capture kept mapped
    // (unmapping would break it) until the next view made or dropped.
    std::map<uint64_t, StitchedView> stitched_;
    std::vector<std::pair<uint64_t, StitchedView>> stitched_later_;
    // Views in stitched_ and stitched_later_, read without the lock where
    // none is the common case (gpu_va_unmap, root_chunk_free, trim).
    std::atomic<size_t> stitched_views_{0};
    std::map<uint64_t, uint64_t> user_ranges_;  // reserved for callers: start -> size
};

}  // namespace uvm::cuda
