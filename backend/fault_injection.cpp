#include "backend/fault_injection.h"

namespace uvm::backend {

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

}  // namespace uvm::backend
