// A backend adaptor that fails chosen calls, for tests (after sqlite's
// out-of-memory injection): every call that can fail counts as one; the Nth
// such call returns UVM_ERR_BACKEND instead of reaching the backend below.
// Teardown calls pass through and are not counted.
//
// Thread safety: as the backend below it; the counter is atomic.
#pragma once

#include <atomic>
#include <memory>

#include "backend/backend.h"

namespace uvm::backend {

class FaultInjectingBackend final : public Backend {
public:
    explicit FaultInjectingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

    // Fail the Nth failable call from now on (1 = the next one); 0 = never.
    void fail_call(uint64_t n) {
        calls_ = 0;
        fail_at_ = n;
    }
    uint64_t calls() const { return calls_; }
    bool fired() const { return fail_at_ != 0 && calls_ >= fail_at_; }

    uvm_backend_kind_t kind() const override { return inner_->kind(); }
    uint32_t gpu_count() const override { return inner_->gpu_count(); }
    const GpuInfo &gpu_info(uint32_t gpu) const override { return inner_->gpu_info(gpu); }
    uint64_t gpu_memory_free(uint32_t gpu) const override { return inner_->gpu_memory_free(gpu); }
    const topo::Topology &topology() const override { return inner_->topology(); }
    void kernel_va_range(uint32_t gpu, uint64_t *base, uint64_t *size) const override {
        inner_->kernel_va_range(gpu, base, size);
    }

    uvm_status_t root_chunks_alloc(uint32_t gpu, size_t count, bool remappable, uint64_t *phys) override;
    void root_chunk_free(uint32_t gpu, uint64_t phys) override { inner_->root_chunk_free(gpu, phys); }
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
    uvm_status_t kernel_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes,
                                     size_t count, uint64_t *va) override {
        return inner_->kernel_va_placement(gpu, page_size, ptes, count, va);
    }
    bool gpu_user_sysmem_through_cpu() const override { return inner_->gpu_user_sysmem_through_cpu(); }
    bool gpu_user_survives_move(bool remappable) const override {
        return inner_->gpu_user_survives_move(remappable);
    }
    uvm_status_t user_range_reserve(uint64_t size, uint64_t *va) override {
        return should_fail() ? UVM_ERR_BACKEND : inner_->user_range_reserve(size, va);
    }
    void user_range_release(uint64_t va, uint64_t size) override { inner_->user_range_release(va, size); }
    uvm_status_t user_va_placement(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes,
                                   size_t count, uint64_t *va) override {
        return inner_->user_va_placement(gpu, page_size, ptes, count, va);
    }
    uvm_status_t gpu_va_map(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va, uint64_t page_size,
                            const mmu::Pte *ptes, size_t count) override;
    void gpu_va_unmap(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va, uint64_t size) override {
        inner_->gpu_va_unmap(gpu, space, va, size);
    }
    uvm_status_t managed_alloc(uint32_t gpu, uint64_t size, uint64_t *address) override {
        return should_fail() ? UVM_ERR_BACKEND : inner_->managed_alloc(gpu, size, address);
    }
    void managed_free(uint64_t address) override { inner_->managed_free(address); }
    uvm_status_t managed_advise(uint64_t address, uint64_t size, uvm_managed_advice_t advice,
                                int32_t processor) override {
        return should_fail() ? UVM_ERR_BACKEND : inner_->managed_advise(address, size, advice, processor);
    }
    uvm_status_t managed_prefetch(uint64_t address, uint64_t size, int32_t processor) override {
        return should_fail() ? UVM_ERR_BACKEND : inner_->managed_prefetch(address, size, processor);
    }
    uvm_status_t ce_copy(uint32_t gpu, const CeAddress &dst, const CeAddress &src,
                         uint64_t size) override;
    uvm_status_t ce_memset(uint32_t gpu, const CeAddress &dst, uint8_t value, uint64_t size) override;
    CeCounters ce_counters(uint32_t gpu) const override { return inner_->ce_counters(gpu); }

    uvm_status_t stream_create(uint32_t gpu, void *native, void **stream) override {
        return should_fail() ? UVM_ERR_BACKEND : inner_->stream_create(gpu, native, stream);
    }
    uvm_status_t stream_destroy(void *stream) override { return inner_->stream_destroy(stream); }
    void *stream_native(void *stream) override { return inner_->stream_native(stream); }
    uvm_status_t stream_fence(void *stream, uint64_t *fence) override {
        return should_fail() ? UVM_ERR_BACKEND : inner_->stream_fence(stream, fence);
    }
    bool fence_done(void *stream, uint64_t fence) override { return inner_->fence_done(stream, fence); }
    uvm_status_t stream_wait(void *waiter, void *stream, uint64_t fence) override {
        return should_fail() ? UVM_ERR_BACKEND : inner_->stream_wait(waiter, stream, fence);
    }
    uvm_status_t stream_synchronize(void *stream) override {
        return should_fail() ? UVM_ERR_BACKEND : inner_->stream_synchronize(stream);
    }
    uvm_status_t ce_copy_async(uint32_t gpu, void *stream, const CeAddress &dst, const CeAddress &src,
                               uint64_t size) override {
        return should_fail() ? UVM_ERR_BACKEND : inner_->ce_copy_async(gpu, stream, dst, src, size);
    }
    uvm_status_t ce_memset_async(uint32_t gpu, void *stream, const CeAddress &dst, uint8_t value,
                                 uint64_t size) override {
        return should_fail() ? UVM_ERR_BACKEND : inner_->ce_memset_async(gpu, stream, dst, value, size);
    }
    uvm_status_t stream_hold(void *stream) override {
        return should_fail() ? UVM_ERR_BACKEND : inner_->stream_hold(stream);
    }
    uvm_status_t stream_release(void *stream) override { return inner_->stream_release(stream); }

private:
    // True when this call is the one to fail.
    bool should_fail() { return ++calls_ == fail_at_; }

    std::unique_ptr<Backend> inner_;
    std::atomic<uint64_t> calls_{0};
    std::atomic<uint64_t> fail_at_{0};
};

}  // namespace uvm::backend
