// Placement on CUDA (PlacementCapability): kernel and picked user mappings
// are views of the physical window; caller user ranges are reserved from
// the driver.
#include "cuda/cuda_backend_private.h"

namespace uvm::cuda {

// The range of the owner's physical window that holds these pages, where they
// are physically contiguous (the PMM places every object so).
uvm_status_t CudaBackend::window_view(uint32_t gpu, uint64_t page_size, const mmu::Pte *ptes, size_t count,
                                      uint64_t *va) {
    for (size_t i = 1; i < count; ++i)
        if (ptes[i].address != ptes[0].address + i * page_size)
            return UVM_ERR_NOT_SUPPORTED;
    const uint32_t owner = ptes[0].aperture == mmu::Aperture::Vid ? gpu : ptes[0].peer_gpu;
    UVM_ASSERT(is_open(owner));  // it gave these pages
    *va = gpus_[owner]->pool->window() + ptes[0].address;
    return UVM_OK;
}

bool CudaBackend::in_some_window(uint64_t va) const {
    for (uint32_t g = 0; g < gpus_.size(); ++g)
        if (is_open(g) && gpus_[g]->pool->in_window(va))  // a GPU not open has no window
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

// A user range is the process's, on no GPU in particular: reserved under any
// open GPU's context (any_open_gpu), as the release is.
uvm_status_t CudaBackend::user_range_reserve(uint64_t size, uint64_t *va) {
    uint32_t gpu = 0;
    const uvm_status_t status = any_open_gpu(&gpu);
    if (status != UVM_OK)
        return status;
    const ContextGuard context = set_context(gpu);
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
    uint32_t gpu = 0;
    const uvm_status_t opened = any_open_gpu(&gpu);  // one is: the reservation opened it
    UVM_ASSERT(opened == UVM_OK);
    (void)opened;
    const ContextGuard context = set_context(gpu);
    api_->cuMemAddressFree(va, size);
}

bool CudaBackend::in_user_range(uint64_t va, uint64_t size) const {
    auto it = user_ranges_.upper_bound(va);
    if (it == user_ranges_.begin())
        return false;
    --it;
    return va >= it->first && va + size <= it->first + it->second;
}

}  // namespace uvm::cuda
