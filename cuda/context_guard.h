// The caller's current CUDA context, put back when a backend call is done.
//
// The driver keeps one current context per thread, and a runtime on the same
// thread (PyTorch, CuPy, Numba) relies on the one it set: a library that
// sets its own and leaves it there makes the runtime's next call run on the
// wrong device. Every backend call that needs a GPU's context takes one of
// these for its scope: the context is set only where it differs, and the
// caller's (possibly none) is restored when the scope ends.
#pragma once

#include "cuda/driver_api.h"

namespace uvm::cuda {

class [[nodiscard]] ContextGuard {
public:
    ContextGuard(const DriverApi &api, CUcontext want) : api_(api) {
        if (api_.cuCtxGetCurrent(&saved_) != CUDA_SUCCESS)
            saved_ = nullptr;  // nothing readable to restore: leave none current after
        if (saved_ != want) {
            api_.cuCtxSetCurrent(want);
            restore_ = true;
        }
    }
    ~ContextGuard() {
        if (restore_)
            api_.cuCtxSetCurrent(saved_);
    }
    ContextGuard(const ContextGuard &) = delete;
    ContextGuard &operator=(const ContextGuard &) = delete;

private:
    const DriverApi &api_;
    CUcontext saved_ = nullptr;
    bool restore_ = false;
};

}  // namespace uvm::cuda
