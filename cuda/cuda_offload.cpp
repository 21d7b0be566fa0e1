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

}  // namespace uvm::cuda
