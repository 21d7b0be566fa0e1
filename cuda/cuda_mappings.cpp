// GPU virtual mappings on CUDA: the physical window's views need no driver
// call; user mappings at a caller's address map remappable root chunks (or
// registered host pages) there.
#include "cuda/cuda_backend_private.h"

namespace uvm::cuda {

// Host pages at a user address: the manager has mapped them there on the CPU;
// registered, they are reachable by every GPU at that same address (unified
// addressing), where the driver gives registered memory the device address
// of its host address (checked, else NOT_SUPPORTED).
uvm_status_t CudaBackend::map_host_user(uint32_t gpu, uint64_t va, uint64_t size) {
    std::lock_guard<std::mutex> guard(user_lock_);
    auto it = user_mappings_.find(va);
    if (it != user_mappings_.end()) {
        if (!it->second.host || it->second.size != size || (it->second.gpus >> gpu) & 1u)
            return UVM_ERR_ADDRESS_IN_USE;
        it->second.gpus |= 1u << gpu;  // registered portable: every context has it
        return UVM_OK;
    }
    const ContextGuard context = set_context(gpu);
    void *host = reinterpret_cast<void *>(static_cast<uintptr_t>(va));
    CUresult r = api_->cuMemHostRegister(host, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemHostRegister (user)");
    CUdeviceptr device = 0;
    r = api_->cuMemHostGetDevicePointer(&device, host, 0);
    if (r != CUDA_SUCCESS || device != va) {
        api_->cuMemHostUnregister(host);
        return r != CUDA_SUCCESS ? to_status(r, "cuMemHostGetDevicePointer (user)") : UVM_ERR_NOT_SUPPORTED;
    }
    user_mappings_[va] = UserMapping{size, 1u << gpu, true};
    return UVM_OK;
}

// Map the root chunks named by `ptes` (2M pages of `owner`'s vidmem) at `va`.
// Each must be its own handle (remappable): the driver maps handles whole.
uvm_status_t CudaBackend::map_root_chunks(uint32_t owner, uint64_t va, const mmu::Pte *ptes, size_t count) {
    Gpu &o = *gpus_[owner];
    std::lock_guard<std::mutex> guard(o.lock);
    for (size_t i = 0; i < count; ++i)
        if (!o.pool->own_handle(ptes[i].address))
            return UVM_ERR_NOT_SUPPORTED;
    for (size_t i = 0; i < count; ++i) {
        UVM_ASSERT(o.pool->is_given(ptes[i].address));
        const CUresult r =
            api_->cuMemMap(va + i * kRootChunkSize, kRootChunkSize, 0, o.pool->own_handle(ptes[i].address), 0);
        if (r != CUDA_SUCCESS) {
            for (size_t j = 0; j < i; ++j)
                api_->cuMemUnmap(va + j * kRootChunkSize, kRootChunkSize);
            return to_status(r, "cuMemMap");
        }
    }
    return UVM_OK;
}

void CudaBackend::unmap_root_chunks(uint64_t va, uint64_t size) {
    for (uint64_t off = 0; off < size; off += kRootChunkSize)
        api_->cuMemUnmap(va + off, kRootChunkSize);
}

uvm_status_t CudaBackend::gpu_va_map(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va, uint64_t page_size,
                                     const mmu::Pte *ptes, size_t count) {
    // A mapping is a use of the GPU, even where it needs no driver call:
    // what the GPU reaches through it, it reaches with its context.
    const uvm_status_t opened = open(gpu);
    if (opened != UVM_OK)
        return opened;
    if (space != UVM_VA_SPACE_USER || in_some_window(va)) {
        // Placed views (the window, registered host pages): already reachable.
        // The kernel span (kernel_va_range) is never mapped.
        return va >= kKernelVaBase ? UVM_ERR_NOT_SUPPORTED : UVM_OK;
    }
    if (ptes[0].aperture == mmu::Aperture::Sys)
        return map_host_user(gpu, va, count * page_size);
    if (page_size != kRootChunkSize)
        return UVM_ERR_NOT_SUPPORTED;  // the driver maps device memory 2 MiB at a time
    const uint64_t size = count * page_size;
    const uint32_t owner = ptes[0].aperture == mmu::Aperture::Vid ? gpu : ptes[0].peer_gpu;
    const auto access = access_for(1u << gpu);
    const ContextGuard context = set_context(gpu);

    // The user address space is the process's one unified space: a user
    // address is reserved and mapped once, and every further GPU that maps
    // the object there is granted access to that one mapping.
    std::lock_guard<std::mutex> guard(user_lock_);
    auto it = user_mappings_.find(va);
    if (it != user_mappings_.end()) {
        if (it->second.size != size || (it->second.gpus >> gpu) & 1u)
            return UVM_ERR_ADDRESS_IN_USE;
        const uvm_status_t status =
            to_status(api_->cuMemSetAccess(va, size, access.data(), access.size()), "cuMemSetAccess (user)");
        if (status == UVM_OK)
            it->second.gpus |= 1u << gpu;
        return status;
    }
    // Inside a range reserved for the caller the address is ours already;
    // elsewhere it is reserved from the driver for this mapping.
    const bool reserved = in_user_range(va, size);
    if (!reserved) {
        CUdeviceptr got = 0;
        const CUresult r = api_->cuMemAddressReserve(&got, size, kRootChunkSize, va, 0);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuMemAddressReserve (user)");
        if (got != va) {
            // The driver places GPU mappings inside its own VA heap only.
            api_->cuMemAddressFree(got, size);
            return UVM_ERR_ADDRESS_IN_USE;
        }
    }
    uvm_status_t status = map_root_chunks(owner, va, ptes, count);
    if (status == UVM_OK) {
        status = to_status(api_->cuMemSetAccess(va, size, access.data(), access.size()), "cuMemSetAccess (user)");
        if (status != UVM_OK)
            unmap_root_chunks(va, size);
    }
    if (status != UVM_OK) {
        if (!reserved)
            api_->cuMemAddressFree(va, size);
        return status;
    }
    UserMapping &m = user_mappings_[va];
    m = UserMapping{size, 1u << gpu};
    m.owner = owner;
    for (size_t i = 0; i < count; ++i)
        m.roots.push_back(ptes[i].address);  // these cannot be offloaded while mapped here
    return UVM_OK;
}

void CudaBackend::gpu_va_unmap(uint32_t gpu, uvm_va_space_kind_t space, uint64_t va, uint64_t size) {
    if (space != UVM_VA_SPACE_USER) {
        // Kernel mappings are placed views: nothing was mapped but for a
        // stitched object's (cuda_placement.cpp).
        if (stitched_views_.load(std::memory_order_relaxed) != 0 && !in_some_window(va))
            drop_stitched_view(va);
        return;
    }
    Gpu &g = *gpus_[gpu];  // open: gpu_va_map opened it
    const ContextGuard context = set_context(gpu);
    std::lock_guard<std::mutex> guard(user_lock_);
    auto it = user_mappings_.find(va);
    if (it == user_mappings_.end())
        return;  // a view of the window
    UVM_ASSERT(it->second.size == size && ((it->second.gpus >> gpu) & 1u));
    it->second.gpus &= ~(1u << gpu);
    if (it->second.host) {
        // Registered for every GPU at once: unregistered when the last goes.
        if (it->second.gpus == 0) {
            api_->cuMemHostUnregister(reinterpret_cast<void *>(static_cast<uintptr_t>(va)));
            user_mappings_.erase(it);
        }
        return;
    }
    if (it->second.gpus != 0) {
        // Others still map it: take this GPU's access away only.
        CUmemAccessDesc none{};
        none.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        none.location.id = g.device;
        none.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        api_->cuMemSetAccess(va, size, &none, 1);
        return;
    }
    user_mappings_.erase(it);
    unmap_root_chunks(va, size);
    if (!in_user_range(va, size))
        api_->cuMemAddressFree(va, size);
}

}  // namespace uvm::cuda
