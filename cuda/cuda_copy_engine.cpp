// The synchronous copy engine on CUDA: one stream per GPU, work on CUDA
// virtual addresses (a physical address becomes its window address).
#include "cuda/cuda_backend_private.h"

namespace uvm::cuda {

CUdeviceptr CudaBackend::ce_pointer(uint32_t gpu, const backend::CeAddress &a) const {
    if (a.is_virtual || a.aperture == mmu::Aperture::Sys)
        return a.address;  // CUDA VAs, and registered host memory's device pointer
    const uint32_t owner = a.aperture == mmu::Aperture::Vid ? gpu : a.peer_gpu;
    UVM_ASSERT(is_open(owner));  // it gave this memory
    return gpus_[owner]->pool->window() + a.address;
}

// Run one copy-engine operation on `gpu`'s stream and wait for it. The
// stream is the backend's own, never captured: waiting for it disturbs no
// capture, so it is made under relaxed mode (cuda_streams.cpp says why).
template <typename Enqueue>
uvm_status_t CudaBackend::run_on_stream(uint32_t gpu, uint64_t size, const char *what, Enqueue &&enqueue) {
    const uvm_status_t status = open(gpu);
    if (status != UVM_OK)
        return status;
    Gpu &g = *gpus_[gpu];
    std::lock_guard<std::mutex> guard(g.ce_lock);
    const ContextGuard context = set_context(gpu);
    const RelaxedCaptureMode relaxed(*api_);
    CUresult r = enqueue(g.stream);
    if (r == CUDA_SUCCESS)
        r = api_->cuStreamSynchronize(g.stream);
    if (r != CUDA_SUCCESS)
        return to_status(r, what);
    g.ce_operations++;
    g.ce_bytes += size;
    return UVM_OK;
}

uvm_status_t CudaBackend::ce_copy(uint32_t gpu, const backend::CeAddress &dst, const backend::CeAddress &src,
                                  uint64_t size) {
    return run_on_stream(gpu, size, "cuMemcpyAsync", [&](CUstream stream) {
        return api_->cuMemcpyAsync(ce_pointer(gpu, dst), ce_pointer(gpu, src), size, stream);
    });
}

uvm_status_t CudaBackend::ce_memset(uint32_t gpu, const backend::CeAddress &dst, uint8_t value, uint64_t size) {
    return run_on_stream(gpu, size, "cuMemsetD8Async", [&](CUstream stream) {
        return api_->cuMemsetD8Async(ce_pointer(gpu, dst), value, size, stream);
    });
}

}  // namespace uvm::cuda
