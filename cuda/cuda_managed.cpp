// Managed memory on CUDA (ManagedCapability): cuMemAllocManaged, with advice
// and prefetch passed to the driver.
#include "cuda/cuda_backend_private.h"

namespace uvm::cuda {

uvm_status_t CudaBackend::managed_alloc(uint32_t gpu, uint64_t size, uint64_t *address) {
    const uvm_status_t status = open(gpu);
    if (status != UVM_OK)
        return status;
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

// Managed memory is the process's: freed, and advised for the CPU, under any
// open GPU's context (the allocation opened one).
void CudaBackend::managed_free(uint64_t address) {
    uint32_t gpu = 0;
    const uvm_status_t opened = any_open_gpu(&gpu);
    UVM_ASSERT(opened == UVM_OK);
    (void)opened;
    const ContextGuard context = set_context(gpu);
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
    uint32_t gpu = static_cast<uint32_t>(processor);
    const uvm_status_t status = processor == UVM_PROCESSOR_CPU ? any_open_gpu(&gpu) : open(gpu);
    if (status != UVM_OK)
        return status;
    const ContextGuard context = set_context(gpu);
    return to_status(api_->cuMemAdvise(address, size, a, location_of(processor)), "cuMemAdvise");
}

uvm_status_t CudaBackend::managed_prefetch(uint64_t address, uint64_t size, int32_t processor) {
    uint32_t gpu = static_cast<uint32_t>(processor);
    const uvm_status_t status = processor == UVM_PROCESSOR_CPU ? any_open_gpu(&gpu) : open(gpu);
    if (status != UVM_OK)
        return status;
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.ce_lock);
    const ContextGuard context = set_context(gpu);
    CUresult r = api_->cuMemPrefetchAsync(address, size, location_of(processor), 0, g.stream);
    if (r == CUDA_SUCCESS)
        r = api_->cuStreamSynchronize(g.stream);
    return to_status(r, "cuMemPrefetchAsync");
}

}  // namespace uvm::cuda
