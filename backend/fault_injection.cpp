// FaultInjectingBackend (fault_injection.h): the core's failable calls and
// every capability's, each counted and failed in turn.
#include "backend/fault_injection.h"

namespace uvm::backend {

FaultInjectingBackend::FaultInjectingBackend(std::unique_ptr<Backend> inner)
    : inner_(std::move(inner)),
      streams_(this, inner_->streams()),
      sharing_(this, inner_->sharing()),
      managed_(this, inner_->managed()),
      placement_(this, inner_->placement()),
      offload_(this, inner_->offload()) {}

uvm_status_t FaultInjectingBackend::gpu_open(uint32_t gpu) {
    return should_fail() ? UVM_ERR_BACKEND : inner_->gpu_open(gpu);
}
uvm_status_t FaultInjectingBackend::root_chunks_alloc(uint32_t gpu, size_t count, bool remappable,
                                                      uint64_t *phys) {
    return should_fail() ? UVM_ERR_BACKEND : inner_->root_chunks_alloc(gpu, count, remappable, phys);
}
uvm_status_t FaultInjectingBackend::vidmem_cpu_map(uint32_t gpu, const uint64_t *chunks,
                                                   size_t count, uint64_t chunk_size, void *fixed,
                                                   void **out) {
    return should_fail() ? UVM_ERR_BACKEND
                         : inner_->vidmem_cpu_map(gpu, chunks, count, chunk_size, fixed, out);
}
uvm_status_t FaultInjectingBackend::sysmem_alloc(const HostRequest &request, HostAllocation *out) {
    return should_fail() ? UVM_ERR_BACKEND : inner_->sysmem_alloc(request, out);
}
uvm_status_t FaultInjectingBackend::sysmem_cpu_map(const HostAllocation &alloc, void *fixed,
                                                   void **out) {
    return should_fail() ? UVM_ERR_BACKEND : inner_->sysmem_cpu_map(alloc, fixed, out);
}
uvm_status_t FaultInjectingBackend::sysmem_dma_map(uint32_t gpu, const HostAllocation &alloc,
                                                   uint64_t *dma) {
    return should_fail() ? UVM_ERR_BACKEND : inner_->sysmem_dma_map(gpu, alloc, dma);
}
uvm_status_t FaultInjectingBackend::peer_access(uint32_t gpu, uint32_t owner) {
    return should_fail() ? UVM_ERR_BACKEND : inner_->peer_access(gpu, owner);
}
uvm_status_t FaultInjectingBackend::gpu_va_map(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va,
                                               uint64_t page_size, const mmu::Pte *ptes,
                                               size_t count) {
    return should_fail() ? UVM_ERR_BACKEND
                         : inner_->gpu_va_map(gpu, space, va, page_size, ptes, count);
}
uvm_status_t FaultInjectingBackend::ce_copy(uint32_t gpu, const CeAddress &dst,
                                            const CeAddress &src, uint64_t size) {
    return should_fail() ? UVM_ERR_BACKEND : inner_->ce_copy(gpu, dst, src, size);
}
uvm_status_t FaultInjectingBackend::ce_memset(uint32_t gpu, const CeAddress &dst, uint8_t value,
                                              uint64_t size) {
    return should_fail() ? UVM_ERR_BACKEND : inner_->ce_memset(gpu, dst, value, size);
}


// Streams.
uvm_status_t FaultInjectingBackend::Streams::stream_create(uint32_t gpu, void *native, void **stream) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->stream_create(gpu, native, stream);
}
uvm_status_t FaultInjectingBackend::Streams::stream_fence(void *stream, uint64_t *fence) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->stream_fence(stream, fence);
}
uvm_status_t FaultInjectingBackend::Streams::stream_wait(void *waiter, void *stream, uint64_t fence) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->stream_wait(waiter, stream, fence);
}
uvm_status_t FaultInjectingBackend::Streams::stream_synchronize(void *stream) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->stream_synchronize(stream);
}
uvm_status_t FaultInjectingBackend::Streams::ce_copy_async(uint32_t gpu, void *stream, const CeAddress &dst,
                                                           const CeAddress &src, uint64_t size) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->ce_copy_async(gpu, stream, dst, src, size);
}
uvm_status_t FaultInjectingBackend::Streams::ce_memset_async(uint32_t gpu, void *stream, const CeAddress &dst,
                                                             uint8_t value, uint64_t size) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->ce_memset_async(gpu, stream, dst, value, size);
}
uvm_status_t FaultInjectingBackend::Streams::stream_capture_info(void *stream, StreamCaptureInfo *out) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->stream_capture_info(stream, out);
}
uvm_status_t FaultInjectingBackend::Streams::stream_hold(void *stream) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->stream_hold(stream);
}

// Sharing.
uvm_status_t FaultInjectingBackend::Sharing::root_chunk_export(uint32_t gpu, uint64_t phys, int *fd,
                                                               uint64_t *offset) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->root_chunk_export(gpu, phys, fd, offset);
}
uvm_status_t FaultInjectingBackend::Sharing::roots_import(uint32_t gpu, const int *fds, const uint64_t *offsets,
                                                          size_t count, uint64_t *phys) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->roots_import(gpu, fds, offsets, count, phys);
}
uvm_status_t FaultInjectingBackend::Sharing::sysmem_import(int fd, uint64_t size, uint64_t chunk_size,
                                                           HostAllocation *out) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->sysmem_import(fd, size, chunk_size, out);
}

// Managed memory.
uvm_status_t FaultInjectingBackend::Managed::managed_alloc(uint32_t gpu, uint64_t size, uint64_t *address) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->managed_alloc(gpu, size, address);
}
uvm_status_t FaultInjectingBackend::Managed::managed_advise(uint64_t address, uint64_t size,
                                                            uvm_managed_advice_t advice, int32_t processor) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->managed_advise(address, size, advice, processor);
}
uvm_status_t FaultInjectingBackend::Managed::managed_prefetch(uint64_t address, uint64_t size, int32_t processor) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->managed_prefetch(address, size, processor);
}

// Placement. The two placements can fail (NOT_SUPPORTED on CUDA), so they
// count as the reservation does.
uvm_status_t FaultInjectingBackend::Placement::kernel_va_placement(uint32_t gpu, uint64_t page_size,
                                                                   const mmu::Pte *ptes, size_t count,
                                                                   uint64_t *va) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->kernel_va_placement(gpu, page_size, ptes, count, va);
}
uvm_status_t FaultInjectingBackend::Placement::user_va_placement(uint32_t gpu, uint64_t page_size,
                                                                 const mmu::Pte *ptes, size_t count, uint64_t *va) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->user_va_placement(gpu, page_size, ptes, count, va);
}
uvm_status_t FaultInjectingBackend::Placement::user_range_reserve(uint64_t size, uint64_t *va) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->user_range_reserve(size, va);
}

// Offload.
uvm_status_t FaultInjectingBackend::Offload::root_chunks_alloc_owned(uint32_t gpu, size_t count, uint64_t *phys) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->root_chunks_alloc_owned(gpu, count, phys);
}
uvm_status_t FaultInjectingBackend::Offload::root_chunks_offload(uint32_t gpu, const uint64_t *phys, size_t count) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->root_chunks_offload(gpu, phys, count);
}
uvm_status_t FaultInjectingBackend::Offload::root_chunks_restore(uint32_t gpu, const uint64_t *phys, size_t count) {
    return outer_->should_fail() ? UVM_ERR_BACKEND : inner_->root_chunks_restore(gpu, phys, count);
}
uvm_status_t FaultInjectingBackend::Offload::root_span_shrink(uint32_t gpu, uint64_t first, size_t count,
                                                              uint64_t *released, uint64_t *copied) {
    if (outer_->should_fail()) {
        *released = *copied = 0;
        return UVM_ERR_BACKEND;
    }
    return inner_->root_span_shrink(gpu, first, count, released, copied);
}

}  // namespace uvm::backend
