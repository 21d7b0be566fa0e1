// Sharing on CUDA (SharingCapability): a remappable root's handle exported
// as a POSIX fd, imported handles mapped into the GPU's window.
#include "cuda/cuda_backend_private.h"

namespace uvm::cuda {

uvm_status_t CudaBackend::root_chunk_export(uint32_t gpu, uint64_t phys, int *fd, uint64_t *offset) {
    Gpu &g = *gpus_[gpu];  // open: it gave this root
    std::lock_guard<std::mutex> guard(g.lock);
    const ContextGuard context = set_context(gpu);
    *offset = 0;  // a handle of its own
    return g.pool->export_root(phys, fd);
}

uvm_status_t CudaBackend::roots_import(uint32_t gpu, const int *fds, const uint64_t *offsets, size_t count,
                                       uint64_t *phys) {
    for (size_t i = 0; i < count; ++i)
        if (offsets[i] != 0)
            return UVM_ERR_INVALID_ARGUMENT;  // a driver handle is imported whole
    const uvm_status_t status = open(gpu);
    if (status != UVM_OK)
        return status;
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    const ContextGuard context = set_context(gpu);
    return g.pool->import(fds, count, access_for((1u << gpu) | g.peers_granted), phys);
}

void CudaBackend::roots_import_release(uint32_t gpu, uint64_t phys, size_t count) {
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.lock);
    const ContextGuard context = set_context(gpu);
    g.pool->release_import(phys, count);
}

uvm_status_t CudaBackend::sysmem_import(int fd, uint64_t size, uint64_t chunk_size, backend::HostAllocation *out) {
    uvm_status_t status = backend::host_memory_adopt(fd, size, chunk_size, out);
    if (status == UVM_OK)
        out->backend_data = new HostRegistration();
    return status;
}

}  // namespace uvm::cuda
