// A backend adaptor that fails chosen calls, for tests (after sqlite's
// out-of-memory injection): every call that can fail counts as one; the Nth
// such call returns UVM_ERR_BACKEND instead of reaching the backend below
// (or, after fail_one_in(k), each such call with probability 1/k).
// Teardown calls and queries that cannot fail pass through and are not
// counted.
//
// It forwards every capability of the backend below (backend.h) and no other:
// each accessor answers null exactly where the inner backend's does, and a
// capability's calls are counted as the core's are. A capability it did not
// forward would make the manager take the "absent" path (NOT_SUPPORTED, or
// the manager's own placement) under fault injection only, so the tests would
// miss the backend's failures there (FaultInjection.ForwardsEveryCapability).
//
// Thread safety: as the backend below it; the counters are atomic, so calls
// from many threads at once are each counted once and fail_one_in's choice
// holds under any interleaving (ConcurrentFaults).
#pragma once

#include <atomic>
#include <memory>

#include "backend/backend.h"
#include "backend/managed_capability.h"
#include "backend/offload_capability.h"
#include "backend/placement_capability.h"
#include "backend/sharing_capability.h"
#include "backend/stream_capability.h"

namespace uvm::backend {

class FaultInjectingBackend final : public Backend {
public:
    explicit FaultInjectingBackend(std::unique_ptr<Backend> inner);

    // Fail the Nth failable call from now on (1 = the next one); 0 = never.
    void fail_call(uint64_t n) {
        one_in_ = 0;
        calls_ = 0;
        fail_at_ = n;
    }
    // Fail each failable call with probability 1/k, from now on, under any
    // number of threads (0 = never; replaces fail_call's target). Which calls
    // fail is a hash of the call's index in the atomic counter and `seed`, so
    // each index is decided once however the threads interleave.
    void fail_one_in(uint64_t k, uint64_t seed) {
        fail_at_ = 0;
        seed_ = seed;
        calls_ = 0;
        failures_ = 0;
        one_in_ = k;
    }
    uint64_t calls() const { return calls_; }
    // Calls failed since fail_one_in.
    uint64_t failures() const { return failures_; }
    bool fired() const { return fail_at_ != 0 && calls_ >= fail_at_; }

    uvm_backend_kind_t kind() const override { return inner_->kind(); }
    uint32_t gpu_count() const override { return inner_->gpu_count(); }
    const GpuInfo &gpu_info(uint32_t gpu) const override { return inner_->gpu_info(gpu); }
    GpuMemory gpu_memory(uint32_t gpu) const override { return inner_->gpu_memory(gpu); }
    uint64_t gpu_memory_held(uint32_t gpu) const override { return inner_->gpu_memory_held(gpu); }
    uvm_status_t gpu_open(uint32_t gpu) override;
    const topo::Topology &topology() const override { return inner_->topology(); }
    void kernel_va_range(uint32_t gpu, uint64_t *base, uint64_t *size) const override {
        inner_->kernel_va_range(gpu, base, size);
    }

    uvm_status_t root_chunks_alloc(uint32_t gpu, size_t count, bool remappable, uint64_t *phys) override;
    void root_chunk_free(uint32_t gpu, uint64_t phys) override { inner_->root_chunk_free(gpu, phys); }
    void root_chunk_span(uint32_t gpu, uint64_t phys, uint64_t *first, size_t *count) const override {
        inner_->root_chunk_span(gpu, phys, first, count);
    }
    uint64_t largest_free_run(uint32_t gpu, const Bitmap &held_free) const override {
        return inner_->largest_free_run(gpu, held_free);  // a query: passes, not counted
    }
    void trim(uint32_t gpu) override { inner_->trim(gpu); }
    uvm_status_t vidmem_cpu_map(uint32_t gpu, const uint64_t *chunks, size_t count,
                                uint64_t chunk_size, void *fixed, void **out) override;
    void vidmem_cpu_unmap(void *address, uint64_t size) override {
        inner_->vidmem_cpu_unmap(address, size);
    }
    uvm_status_t sysmem_alloc(const HostRequest &request, HostAllocation *out) override;
    void sysmem_free(HostAllocation *alloc) override { inner_->sysmem_free(alloc); }
    uvm_status_t sysmem_cpu_map(const HostAllocation &alloc, void *fixed, void **out) override;
    void sysmem_cpu_unmap(void *address, uint64_t size) override {
        inner_->sysmem_cpu_unmap(address, size);
    }
    uvm_status_t sysmem_dma_map(uint32_t gpu, const HostAllocation &alloc, uint64_t *dma) override;
    void sysmem_dma_unmap(uint32_t gpu, const HostAllocation &alloc, uint64_t dma) override {
        inner_->sysmem_dma_unmap(gpu, alloc, dma);
    }
    uvm_status_t peer_access(uint32_t gpu, uint32_t owner) override;
    uvm_status_t gpu_va_map(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va, uint64_t page_size,
                            const mmu::Pte *ptes, size_t count) override;
    void gpu_va_unmap(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va, uint64_t size) override {
        inner_->gpu_va_unmap(gpu, space, va, size);
    }
    uvm_status_t ce_copy(uint32_t gpu, const CeAddress &dst, const CeAddress &src,
                         uint64_t size) override;
    uvm_status_t ce_memset(uint32_t gpu, const CeAddress &dst, uint8_t value, uint64_t size) override;
    CeCounters ce_counters(uint32_t gpu) const override { return inner_->ce_counters(gpu); }

    StreamCapability *streams() override { return inner_->streams() ? &streams_ : nullptr; }
    SharingCapability *sharing() override { return inner_->sharing() ? &sharing_ : nullptr; }
    ManagedCapability *managed() override { return inner_->managed() ? &managed_ : nullptr; }
    PlacementCapability *placement() override { return inner_->placement() ? &placement_ : nullptr; }
    OffloadCapability *offload() override { return inner_->offload() ? &offload_ : nullptr; }

private:
    // True when this call is the one to fail.
    bool should_fail() {
        const uint64_t n = ++calls_;
        const uint64_t k = one_in_.load(std::memory_order_relaxed);
        if (k == 0)
            return n == fail_at_;
        // splitmix64 of (index, seed): an even spread for any k.
        uint64_t z = n + seed_.load(std::memory_order_relaxed) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        if (z % k != 0)
            return false;
        failures_++;
        return true;
    }

    // One adaptor per capability, over the inner backend's (null where it
    // has none; then the accessor above answers null and it is never used).
    class Streams final : public StreamCapability {
    public:
        Streams(FaultInjectingBackend *outer, StreamCapability *inner) : outer_(outer), inner_(inner) {}
        uvm_status_t stream_create(uint32_t gpu, void *native, void **stream) override;
        uvm_status_t stream_destroy(void *stream) override { return inner_->stream_destroy(stream); }
        void *stream_native(void *stream) override { return inner_->stream_native(stream); }
        uvm_status_t stream_fence(void *stream, uint64_t *fence) override;
        bool fence_done(void *stream, uint64_t fence) override { return inner_->fence_done(stream, fence); }
        uvm_status_t stream_wait(void *waiter, void *stream, uint64_t fence) override;
        uvm_status_t stream_synchronize(void *stream) override;
        uvm_status_t ce_copy_async(uint32_t gpu, void *stream, const CeAddress &dst, const CeAddress &src,
                                   uint64_t size) override;
        uvm_status_t ce_memset_async(uint32_t gpu, void *stream, const CeAddress &dst, uint8_t value,
                                     uint64_t size) override;
        uvm_status_t stream_capture_info(void *stream, StreamCaptureInfo *out) override;
        CaptureMode exchange_capture_mode(CaptureMode mode) override { return inner_->exchange_capture_mode(mode); }
        uvm_status_t stream_hold(void *stream) override;
        // Releasing lets work go (teardown's way out of held work): never failed.
        uvm_status_t stream_release(void *stream) override { return inner_->stream_release(stream); }

    private:
        FaultInjectingBackend *outer_;
        StreamCapability *inner_;
    };
    class Sharing final : public SharingCapability {
    public:
        Sharing(FaultInjectingBackend *outer, SharingCapability *inner) : outer_(outer), inner_(inner) {}
        uvm_status_t root_chunk_export(uint32_t gpu, uint64_t phys, int *fd, uint64_t *offset) override;
        int export_handle_kind() const override { return inner_->export_handle_kind(); }
        uvm_status_t roots_import(uint32_t gpu, const int *fds, const uint64_t *offsets, size_t count,
                                  uint64_t *phys) override;
        void roots_import_release(uint32_t gpu, uint64_t phys, size_t count) override {
            inner_->roots_import_release(gpu, phys, count);
        }
        uvm_status_t sysmem_import(int fd, uint64_t size, uint64_t chunk_size, HostAllocation *out) override;

    private:
        FaultInjectingBackend *outer_;
        SharingCapability *inner_;
    };
    class Managed final : public ManagedCapability {
    public:
        Managed(FaultInjectingBackend *outer, ManagedCapability *inner) : outer_(outer), inner_(inner) {}
        uvm_status_t managed_alloc(uint32_t gpu, uint64_t size, uint64_t *address) override;
        void managed_free(uint64_t address) override { inner_->managed_free(address); }
        uvm_status_t managed_advise(uint64_t address, uint64_t size, uvm_managed_advice_t advice,
                                    int32_t processor) override;
        uvm_status_t managed_prefetch(uint64_t address, uint64_t size, int32_t processor) override;

    private:
        FaultInjectingBackend *outer_;
        ManagedCapability *inner_;
    };
    class Placement final : public PlacementCapability {
    public:
        Placement(FaultInjectingBackend *outer, PlacementCapability *inner) : outer_(outer), inner_(inner) {}
        uvm_status_t kernel_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes, size_t count,
                                         uint64_t *va) override;
        uvm_status_t user_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes, size_t count,
                                       uint64_t *va) override;
        uvm_status_t user_range_reserve(uint64_t size, uint64_t *va) override;
        void user_range_release(uint64_t va, uint64_t size) override { inner_->user_range_release(va, size); }
        bool gpu_user_sysmem_through_cpu() const override { return inner_->gpu_user_sysmem_through_cpu(); }
        bool gpu_user_survives_move(bool remappable) const override {
            return inner_->gpu_user_survives_move(remappable);
        }

    private:
        FaultInjectingBackend *outer_;
        PlacementCapability *inner_;
    };
    class Offload final : public OffloadCapability {
    public:
        Offload(FaultInjectingBackend *outer, OffloadCapability *inner) : outer_(outer), inner_(inner) {}
        uvm_status_t root_chunks_alloc_owned(uint32_t gpu, size_t count, uint64_t *phys) override;
        uvm_status_t root_chunks_offload(uint32_t gpu, const uint64_t *phys, size_t count) override;
        uvm_status_t root_chunks_restore(uint32_t gpu, const uint64_t *phys, size_t count) override;
        uvm_status_t root_span_shrink(uint32_t gpu, uint64_t first, size_t count, uint64_t *released,
                                      uint64_t *copied) override;

    private:
        FaultInjectingBackend *outer_;
        OffloadCapability *inner_;
    };

    std::unique_ptr<Backend> inner_;
    std::atomic<uint64_t> calls_{0};
    std::atomic<uint64_t> fail_at_{0};
    std::atomic<uint64_t> one_in_{0};  // fail_one_in's k; 0 = fail_call's mode
    std::atomic<uint64_t> seed_{0};
    std::atomic<uint64_t> failures_{0};
    Streams streams_;
    Sharing sharing_;
    Managed managed_;
    Placement placement_;
    Offload offload_;
};

}  // namespace uvm::backend
