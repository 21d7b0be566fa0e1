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
    const uvm_status_t status = window_view(gpu, page_size, ptes, count, va);
    if (status == UVM_ERR_NOT_SUPPORTED && page_size == kRootChunkSize)
        return stitched_view(gpu, ptes, count, va);  // several runs: a stitched object (chunk/pmm.h)
    return status;
}

// A stitched object's kernel view: the handles of each of its runs mapped
// side by side in a range reserved for it, granted to the owner and the
// peers granted so far (as every handle is). The PMM stitches only runs of
// whole handles, the driver mapping a handle only whole (root_pool.h);
// NOT_SUPPORTED otherwise, and for pages of another GPU (a peer's view).
uvm_status_t CudaBackend::stitched_view(uint32_t gpu, const mmu::Pte *ptes, size_t count, uint64_t *va) {
    Gpu &g = *gpus_[gpu];
    StitchedView v;
    v.gpu = gpu;
    v.size = count * kRootChunkSize;
    std::vector<CUmemAccessDesc> access;
    std::lock_guard<std::mutex> users(user_lock_);  // before the GPU's, as everywhere
    release_kept_after(unmap_stitched_later());
    {
        std::lock_guard<std::mutex> guard(g.lock);
        for (size_t i = 0; i < count;) {
            if (ptes[i].aperture != mmu::Aperture::Vid)
                return UVM_ERR_NOT_SUPPORTED;
            size_t j = i + 1;
            while (j < count && ptes[j].aperture == mmu::Aperture::Vid &&
                   ptes[j].address == ptes[j - 1].address + kRootChunkSize)
                ++j;
            const uvm_status_t status = g.pool->whole_handles(ptes[i].address, j - i, &v.handles);
            if (status != UVM_OK)
                return status;
            i = j;
        }
        access = access_for((1u << gpu) | g.peers_granted);
    }
    v.roots.reserve(count);
    for (size_t i = 0; i < count; ++i)
        v.roots.push_back(ptes[i].address);
    const ContextGuard context = set_context(gpu);
    const RelaxedCaptureMode relaxed(*api_);  // another thread's capture of a stream not ours, as for growth
    CUdeviceptr at = 0;
    CUresult r = api_->cuMemAddressReserve(&at, v.size, kRootChunkSize, 0, 0);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemAddressReserve (stitched)");
    uint64_t off = 0;
    size_t mapped = 0;
    for (; mapped < v.handles.size() && r == CUDA_SUCCESS; ++mapped) {
        r = api_->cuMemMap(at + off, v.handles[mapped].second, 0, v.handles[mapped].first, 0);
        if (r != CUDA_SUCCESS)
            break;
        off += v.handles[mapped].second;
    }
    if (r == CUDA_SUCCESS)
        r = api_->cuMemSetAccess(at, v.size, access.data(), access.size());
    if (r != CUDA_SUCCESS) {
        for (size_t k = 0, o = 0; k < mapped; o += v.handles[k].second, ++k)
            api_->cuMemUnmap(at + o, v.handles[k].second);
        api_->cuMemAddressFree(at, v.size);
        return to_status(r, "cuMemMap (stitched)");
    }
    stitched_[at] = std::move(v);
    stitched_views_.fetch_add(1, std::memory_order_relaxed);
    *va = at;
    return UVM_OK;
}

// User_lock_ held, the view out of stitched_ and stitched_later_.
void CudaBackend::unmap_stitched(uint64_t va, const StitchedView &v) {
    const ContextGuard context = set_context(v.gpu);
    const RelaxedCaptureMode relaxed(*api_);
    uint64_t off = 0;
    for (const auto &h : v.handles) {
        api_->cuMemUnmap(va + off, h.second);
        off += h.second;
    }
    api_->cuMemAddressFree(va, v.size);
    stitched_views_.fetch_sub(1, std::memory_order_relaxed);
}

// User_lock_ held, the views of `gpus` (a mask) unmapped: the handles kept
// for them (root_chunk_free) go back where no view left maps them.
void CudaBackend::release_kept_after(uint32_t gpus) {
    for (uint32_t g = 0; g < gpus_.size(); ++g) {
        if (!((gpus >> g) & 1u) || !is_open(g))
            continue;
        std::lock_guard<std::mutex> guard(gpus_[g]->lock);
        if (gpus_[g]->pool->kept_empty() && !capture_under_way()) {
            const ContextGuard context = set_context(g);
            release_kept(g, true);
        }
    }
}

// The views a capture kept mapped, unmapped where none is under way now
// (user_lock_ held); returns the GPUs they were of.
uint32_t CudaBackend::unmap_stitched_later() {
    if (stitched_later_.empty() || capture_under_way())
        return 0;
    uint32_t gpus = 0;
    for (const auto &entry : stitched_later_) {
        unmap_stitched(entry.first, entry.second);
        gpus |= 1u << entry.second.gpu;
    }
    stitched_later_.clear();
    return gpus;
}

// The kernel view at `va` goes, where it is a stitched one. Unmapping
// conflicts with every capture under way (docs/cuda_backend.md, "Stream
// capture"): then the view stays mapped, nobody's, until a later call.
void CudaBackend::drop_stitched_view(uint64_t va) {
    std::lock_guard<std::mutex> users(user_lock_);
    const auto it = stitched_.find(va);
    if (it == stitched_.end())
        return;
    StitchedView v = std::move(it->second);
    stitched_.erase(it);
    if (capture_under_way()) {
        stitched_later_.emplace_back(va, std::move(v));
        return;
    }
    const uint32_t gpus = unmap_stitched_later() | (1u << v.gpu);
    unmap_stitched(va, v);
    release_kept_after(gpus);
}

// Whether a root chunk of [first, first + size) on `gpu` is in a stitched view.
bool CudaBackend::stitched_roots(uint32_t gpu, uint64_t first, uint64_t size) const {
    auto in = [&](const StitchedView &v) {
        if (v.gpu != gpu)
            return false;
        for (uint64_t r : v.roots)
            if (r >= first && r < first + size)
                return true;
        return false;
    };
    for (const auto &entry : stitched_)
        if (in(entry.second))
            return true;
    for (const auto &entry : stitched_later_)
        if (in(entry.second))
            return true;
    return false;
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
