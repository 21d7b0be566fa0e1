// The CUDA backend: real GPUs through the driver's virtual memory management
// API (cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess), with the
// driver loaded at run time (driver_api.h). See docs/cuda_backend.md.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace uvm::cuda {

// A backend over every GPU the driver shows. NO_DEVICE where there is no
// driver or no GPU.
uvm_status_t create_cuda_backend(std::unique_ptr<backend::Backend> *out);

}  // namespace uvm::cuda
