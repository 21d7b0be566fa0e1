// Stand-in declarations, written for tests/python/check_torch_ext.py: the
// parts of PyTorch's C++ allocator interface (2.11) that
// python/uvm/_torch_ext.cpp uses, enough to compile that file's syntax and
// its own names for every feature set where PyTorch is not installed (CI).
// Not PyTorch's code; the real interface is checked where PyTorch is (the
// GPU machine: uvm.torch.enable() builds the extension against it).
#pragma once
#include "c10/cuda/CUDAFunctions.h"
namespace c10 { namespace cuda {
struct CUDAStream { operator cudaStream_t() const { return nullptr; } };
inline CUDAStream getCurrentCUDAStream(DeviceIndex = -1) { return {}; }
}}
