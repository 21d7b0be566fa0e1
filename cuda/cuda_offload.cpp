// Offloading root chunks on CUDA (OffloadCapability, for client sleep and
// wake): the pool releases whole handles and keeps the window ranges, then
// backs the ranges again with a handle per run (cuda/root_pool.h). Here the
// checks only the backend can make: a root mapped at a caller's user address
// (its own handle mapped there too) cannot go.
#include "cuda/cuda_backend_private.h"

#include <unordered_set>

namespace uvm::cuda {

uvm_status_t CudaBackend::root_chunks_alloc_owned(uint32_t gpu, size_t count, uint64_t *phys) {
    return grow_roots(gpu, [&](RootPool &pool, const std::vector<CUmemAccessDesc> &access) {
        return pool.alloc_owned(count, access, phys);
    });
}

// Both on roots the GPU gave: open already.
uvm_status_t CudaBackend::root_chunks_offload(uint32_t gpu, const uint64_t *phys, size_t count) {
    Gpu &g = *gpus_[gpu];
    // The user mappings' lock before the GPU's, in gpu_va_map's order.
    std::lock_guard<std::mutex> users(user_lock_);
    std::unordered_set<uint64_t> user_mapped;
    for (const auto &entry : user_mappings_)
        if (!entry.second.host && entry.second.owner == gpu)
            user_mapped.insert(entry.second.roots.begin(), entry.second.roots.end());
    for (const auto &entry : stitched_)  // a stitched object's view maps its handles too
        if (entry.second.gpu == gpu)
            user_mapped.insert(entry.second.roots.begin(), entry.second.roots.end());
    std::lock_guard<std::mutex> guard(g.lock);
    const ContextGuard context = set_context(gpu);
    return g.pool->offload(phys, count, [&](uint64_t p) { return user_mapped.count(p) != 0; });
}

uvm_status_t CudaBackend::root_chunks_restore(uint32_t gpu, const uint64_t *phys, size_t count) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    const ContextGuard context = set_context(gpu);
    // The owner and every peer granted so far, as each new handle gets.
    return g.pool->restore(phys, count, access_for((1u << gpu) | g.peers_granted));
}

// The copies run on the GPU's copy-engine stream under the pool's lock: the
// roots' window range is unmapped only between the copies and the new
// mappings, with no one else in the pool.
uvm_status_t CudaBackend::root_span_shrink(uint32_t gpu, uint64_t first, size_t count, uint64_t *released,
                                          uint64_t *copied) {
    *released = *copied = 0;
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> users(user_lock_);  // before the GPU's, as everywhere
    // A stitched view maps the handle itself: swapped in the window, the view
    // would keep the old memory.
    if (stitched_roots(gpu, first, count * kRootChunkSize))
        return UVM_ERR_NOT_SUPPORTED;
    std::lock_guard<std::mutex> guard(g.lock);
    if (capture_under_way())
        return UVM_ERR_NOT_SUPPORTED;
    const ContextGuard context = set_context(gpu);
    // Another thread's capture of a stream the backend does not know would
    // otherwise make the mapping calls fail (and break it), as for growth.
    const RelaxedCaptureMode relaxed(*api_);
    return g.pool->shrink(
        first, count, access_for((1u << gpu) | g.peers_granted),
        [&](CUdeviceptr dst, CUdeviceptr src, uint64_t size) {
            backend::CeAddress to, from;  // window addresses: CUDA VAs as they are
            to.is_virtual = from.is_virtual = true;
            to.address = dst;
            from.address = src;
            return ce_copy(gpu, to, from, size);
        },
        released, copied);
}

}  // namespace uvm::cuda
