// Streams on CUDA (StreamCapability): a CUstream and fences as events
// recorded on it, numbered in order and reused once complete.
#include "cuda/cuda_backend_private.h"

namespace uvm::cuda {

// The capability's modes are the driver's values (exchange_capture_mode casts).
static_assert(static_cast<int>(backend::CaptureMode::Global) == CU_STREAM_CAPTURE_MODE_GLOBAL);
static_assert(static_cast<int>(backend::CaptureMode::ThreadLocal) == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
static_assert(static_cast<int>(backend::CaptureMode::Relaxed) == CU_STREAM_CAPTURE_MODE_RELAXED);

uvm_status_t CudaBackend::stream_create(uint32_t gpu, void *native, void **out) {
    const uvm_status_t status = open(gpu);
    if (status != UVM_OK)
        return status;
    const ContextGuard context = set_context(gpu);
    auto s = std::make_unique<CudaStream>();
    s->gpu = gpu;
    if (native == CU_STREAM_LEGACY || native == CU_STREAM_PER_THREAD) {
        s->stream = static_cast<CUstream>(native);  // the default stream of the context current when used: the GPU's
    } else if (native) {
        CUcontext ctx = nullptr;
        s->stream = static_cast<CUstream>(native);
        if (api_->cuStreamGetCtx(s->stream, &ctx) != CUDA_SUCCESS || ctx != gpus_[gpu]->context)
            return UVM_ERR_INVALID_ARGUMENT;  // not a stream of this GPU's primary context
    } else {
        const CUresult r = api_->cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuStreamCreate");
        s->owned = true;
    }
    {
        std::lock_guard<std::mutex> guard(streams_lock_);
        streams_.push_back(s.get());
    }
    *out = s.release();
    return UVM_OK;
}

// Waiting for a stream that does not capture is a "potentially unsafe" call
// that another thread's global capture would refuse; it disturbs no capture,
// so it is made under relaxed mode (as are the event queries of fence_done).
// The manager never synchronizes a stream that captures (stream/stream.h).
uvm_status_t CudaBackend::stream_synchronize(void *stream) {
    auto *s = static_cast<CudaStream *>(stream);
    const ContextGuard context = set_context(s->gpu);
    const RelaxedCaptureMode relaxed(*api_);
    const CUresult r = api_->cuStreamSynchronize(s->stream);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuStreamSynchronize");
    for (const auto &p : s->pending)
        s->spare.push_back(p.second);
    s->pending.clear();
    s->completed = s->next;
    return UVM_OK;
}

uvm_status_t CudaBackend::stream_destroy(void *stream) {
    auto *s = static_cast<CudaStream *>(stream);
    const uvm_status_t status = stream_synchronize(stream);
    if (status != UVM_OK)
        return status;
    for (CUevent e : s->spare)
        api_->cuEventDestroy(e);
    if (s->owned)
        api_->cuStreamDestroy(s->stream);
    {
        std::lock_guard<std::mutex> guard(streams_lock_);
        streams_.erase(std::find(streams_.begin(), streams_.end(), s));
    }
    delete s;
    return UVM_OK;
}

uvm_status_t CudaBackend::stream_fence(void *stream, uint64_t *fence) {
    auto *s = static_cast<CudaStream *>(stream);
    const ContextGuard context = set_context(s->gpu);
    CUevent e = nullptr;
    if (!s->spare.empty()) {
        e = s->spare.back();
    } else {
        const CUresult r = api_->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
        if (r != CUDA_SUCCESS)
            return to_status(r, "cuEventCreate");
        s->spare.push_back(e);
    }
    const CUresult r = api_->cuEventRecord(e, s->stream);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuEventRecord");
    s->spare.pop_back();
    s->pending.emplace_back(++s->next, e);
    *fence = s->next;
    return UVM_OK;
}

// The events queried here were recorded outside any capture (the manager
// takes no fence on a capturing stream): querying them breaks none, so it is
// made under relaxed mode, which another thread's global capture (or this
// thread's own) would otherwise refuse, as PyTorch's NCCL watchdog queries.
bool CudaBackend::fence_done(void *stream, uint64_t fence) {
    auto *s = static_cast<CudaStream *>(stream);
    if (fence <= s->completed || s->pending.empty())
        return fence <= s->completed;
    const RelaxedCaptureMode relaxed(*api_);
    while (fence > s->completed && !s->pending.empty()) {
        const CUresult r = api_->cuEventQuery(s->pending.front().second);
        if (r != CUDA_SUCCESS)
            break;  // CUDA_ERROR_NOT_READY; an error is reported by the next synchronize
        s->completed = s->pending.front().first;
        s->spare.push_back(s->pending.front().second);
        s->pending.pop_front();
    }
    return fence <= s->completed;
}

uvm_status_t CudaBackend::stream_wait(void *waiter, void *stream, uint64_t fence) {
    auto *s = static_cast<CudaStream *>(stream);
    if (fence_done(stream, fence))
        return UVM_OK;
    UVM_ASSERT(!s->pending.empty() && fence >= s->pending.front().first);
    const CUevent e = s->pending[fence - s->pending.front().first].second;
    const ContextGuard context = set_context(static_cast<CudaStream *>(waiter)->gpu);
    return to_status(api_->cuStreamWaitEvent(static_cast<CudaStream *>(waiter)->stream, e, 0), "cuStreamWaitEvent");
}

uvm_status_t CudaBackend::stream_capture_info(void *stream, backend::StreamCaptureInfo *out) {
    auto *s = static_cast<CudaStream *>(stream);
    const ContextGuard context = set_context(s->gpu);  // the legacy stream is the current context's
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    const CUresult r = api_->cuStreamGetCaptureInfo(s->stream, &status, &id, nullptr, nullptr, nullptr, nullptr);
    *out = backend::StreamCaptureInfo{};
    if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) {
        // The legacy stream while a blocking stream captures: the query is
        // answered so and breaks nothing; any use of the stream would.
        out->status = backend::CaptureStatus::Active;
        out->implicit = true;
        return UVM_OK;
    }
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuStreamGetCaptureInfo");
    out->status = status == CU_STREAM_CAPTURE_STATUS_ACTIVE        ? backend::CaptureStatus::Active
                  : status == CU_STREAM_CAPTURE_STATUS_INVALIDATED ? backend::CaptureStatus::Invalidated
                                                                   : backend::CaptureStatus::None;
    out->id = status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? id : 0;  // valid only while active
    return UVM_OK;
}

backend::CaptureMode CudaBackend::exchange_capture_mode(backend::CaptureMode mode) {
    auto m = static_cast<CUstreamCaptureMode>(mode);
    if (api_->cuThreadExchangeStreamCaptureMode(&m) != CUDA_SUCCESS)
        return mode;  // nothing was changed (a driver torn down): nothing to restore either
    return static_cast<backend::CaptureMode>(m);
}

uvm_status_t CudaBackend::ce_copy_async(uint32_t gpu, void *stream, const backend::CeAddress &dst,
                                        const backend::CeAddress &src, uint64_t size) {
    const uvm_status_t status = open(gpu);
    if (status != UVM_OK)
        return status;
    const ContextGuard context = set_context(gpu);
    const CUresult r =
        api_->cuMemcpyAsync(ce_pointer(gpu, dst), ce_pointer(gpu, src), size, static_cast<CudaStream *>(stream)->stream);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemcpyAsync");
    gpus_[gpu]->ce_operations++;
    gpus_[gpu]->ce_bytes += size;
    return UVM_OK;
}

uvm_status_t CudaBackend::ce_memset_async(uint32_t gpu, void *stream, const backend::CeAddress &dst, uint8_t value,
                                          uint64_t size) {
    const uvm_status_t status = open(gpu);
    if (status != UVM_OK)
        return status;
    const ContextGuard context = set_context(gpu);
    const CUresult r =
        api_->cuMemsetD8Async(ce_pointer(gpu, dst), value, size, static_cast<CudaStream *>(stream)->stream);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemsetD8Async");
    gpus_[gpu]->ce_operations++;
    gpus_[gpu]->ce_bytes += size;
    return UVM_OK;
}

}  // namespace uvm::cuda
