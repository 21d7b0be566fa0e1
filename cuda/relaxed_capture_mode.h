// The calling thread's stream-capture mode set to relaxed for a scope, the
// caller's own put back when it ends (cuThreadExchangeStreamCaptureMode, used
// push-pop as cuda.h advises).
//
// Making device memory (cuMemCreate, cuMemMap, cuMemSetAccess) is a
// "potentially unsafe" call: a capture in global or thread-local mode on this
// thread, or a global one on any thread, refuses it and is invalidated
// (backend/stream_capability.h). It is no stream work a graph records: the
// memory is the library's, held until it is given back, so growing while a
// stream captures is safe, as PyTorch's allocator calls cudaMalloc in relaxed
// mode while capturing. Giving memory back (cuMemUnmap) stays out of such a
// scope: it synchronizes, which no capture allows.
#pragma once

#include "cuda/driver_api.h"

namespace uvm::cuda {

class [[nodiscard]] RelaxedCaptureMode {
public:
    explicit RelaxedCaptureMode(const DriverApi &api) : api_(api) {
        changed_ = api_.cuThreadExchangeStreamCaptureMode(&saved_) == CUDA_SUCCESS;
    }
    ~RelaxedCaptureMode() {
        if (changed_)
            api_.cuThreadExchangeStreamCaptureMode(&saved_);
    }
    RelaxedCaptureMode(const RelaxedCaptureMode &) = delete;
    RelaxedCaptureMode &operator=(const RelaxedCaptureMode &) = delete;

private:
    const DriverApi &api_;
    CUstreamCaptureMode saved_ = CU_STREAM_CAPTURE_MODE_RELAXED;  // what is set; then what was
    bool changed_ = false;
};

}  // namespace uvm::cuda
