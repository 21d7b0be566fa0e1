// The CUDA driver API, loaded at run time: the library never links libcuda,
// so one binary runs on machines with and without a GPU. cuda.h gives the
// types and signatures; libcuda.so.1 is opened with dlopen and each entry
// point is resolved by the exact versioned symbol cuda.h names for it.
#pragma once

#include <cuda.h>

namespace uvm::cuda {

// X(name): the driver functions the backend calls.
#define UVM_CUDA_DRIVER_FUNCTIONS(X) \
    X(cuInit)                        \
    X(cuGetErrorString)              \
    X(cuDriverGetVersion)            \
    X(cuDeviceGetCount)              \
    X(cuDeviceGet)                   \
    X(cuDeviceGetName)               \
    X(cuDeviceTotalMem)              \
    X(cuDeviceGetAttribute)          \
    X(cuDeviceCanAccessPeer)         \
    X(cuDeviceGetPCIBusId)           \
    X(cuDevicePrimaryCtxRetain)      \
    X(cuDevicePrimaryCtxRelease)     \
    X(cuCtxSetCurrent)               \
    X(cuCtxSynchronize)              \
    X(cuMemGetInfo)                  \
    X(cuMemGetAllocationGranularity) \
    X(cuMemCreate)                   \
    X(cuMemRelease)                  \
    X(cuMemAddressReserve)           \
    X(cuMemAddressFree)              \
    X(cuMemMap)                      \
    X(cuMemUnmap)                    \
    X(cuMemSetAccess)                \
    X(cuMemHostRegister)             \
    X(cuMemHostUnregister)           \
    X(cuMemHostGetDevicePointer)     \
    X(cuMemAlloc)                    \
    X(cuMemFree)                     \
    X(cuMemAllocManaged)             \
    X(cuMemAllocAsync)               \
    X(cuMemFreeAsync)                \
    X(cuDeviceGetDefaultMemPool)     \
    X(cuMemPoolGetAttribute)         \
    X(cuMemPoolSetAttribute)         \
    X(cuMemAdvise)                   \
    X(cuMemPrefetchAsync)            \
    X(cuStreamCreate)                \
    X(cuStreamDestroy)               \
    X(cuStreamSynchronize)           \
    X(cuStreamGetCtx)                \
    X(cuStreamWaitEvent)             \
    X(cuEventCreate)                 \
    X(cuEventRecord)                 \
    X(cuEventQuery)                  \
    X(cuEventDestroy)                \
    X(cuMemcpyAsync)                 \
    X(cuMemsetD8Async)               \
    X(cuModuleLoadData)              \
    X(cuModuleUnload)                \
    X(cuModuleGetFunction)           \
    X(cuLaunchKernel)

struct DriverApi {
#define UVM_CUDA_DECLARE(name) decltype(&::name) name = nullptr;
    UVM_CUDA_DRIVER_FUNCTIONS(UVM_CUDA_DECLARE)
#undef UVM_CUDA_DECLARE
};

// The driver's entry points, loaded once; null where there is no driver
// (no libcuda.so.1, or one that lacks a function we need). Thread-safe.
const DriverApi *driver_api();

// A GPU virtual address range of `size` bytes aligned to `align` that the
// driver can reserve now on device 0 (reserved and released again), for
// callers that pick user addresses (tests, benchmarks). 0 where it cannot.
uint64_t reservable_gpu_address(uint64_t size, uint64_t align);

// Text for a driver error code.
const char *driver_error_string(CUresult result);

}  // namespace uvm::cuda
