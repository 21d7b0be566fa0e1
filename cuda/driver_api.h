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
    X(cuDeviceGetUuid)               \
    X(cuDevicePrimaryCtxRetain)      \
    X(cuDevicePrimaryCtxRelease)     \
    X(cuCtxSetCurrent)               \
    X(cuCtxGetCurrent)               \
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
    X(cuMemExportToShareableHandle)  \
    X(cuMemImportFromShareableHandle) \
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
    X(cuStreamGetCaptureInfo)        \
    X(cuThreadExchangeStreamCaptureMode) \
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

// Driver audit and failure injection, for tests (after sqlite's malloc
// failure tests): every entry point goes through a thin layer that counts the
// driver objects made and released, and can fail the Nth *failable* call
// (every call but teardown: release, free, unmap, unregister, destroy,
// unload, and the context switches and error strings that cannot fail) with
// a chosen result instead of reaching the driver. It costs an atomic load per
// call when nothing is armed. Works the same on the real driver and on the
// stand-in one the tests load (tests/cuda/fake_driver.cpp).
//
// Thread safety: every function here is safe to call concurrently; a test
// arms one failure at a time.
struct DriverAudit {
    int64_t handles = 0;        // cuMemCreate - cuMemRelease
    int64_t reservations = 0;   // cuMemAddressReserve - cuMemAddressFree
    int64_t mappings = 0;       // cuMemMap - cuMemUnmap
    int64_t registrations = 0;  // cuMemHostRegister - cuMemHostUnregister
    int64_t allocations = 0;    // cuMemAlloc, cuMemAllocManaged, cuMemAllocAsync - frees
    int64_t streams = 0;        // cuStreamCreate - cuStreamDestroy
    int64_t events = 0;         // cuEventCreate - cuEventDestroy
    int64_t modules = 0;        // cuModuleLoadData - cuModuleUnload
    int64_t contexts = 0;       // cuDevicePrimaryCtxRetain - cuDevicePrimaryCtxRelease
    uint64_t failable_calls = 0;  // counted while a failure is armed

    bool balanced_with(const DriverAudit &o) const {
        return handles == o.handles && reservations == o.reservations && mappings == o.mappings &&
               registrations == o.registrations && allocations == o.allocations && streams == o.streams &&
               events == o.events && modules == o.modules && contexts == o.contexts;
    }
};

// The live counts since the process started.
DriverAudit driver_audit();
// Fail the Nth failable call from now on (1 = the next) with `result`; 0 =
// never. Persistent: that call and every failable one after it fail (a driver
// out of memory for good, so that retries fail too).
void driver_fail_call(uint64_t n, CUresult result, bool persistent = false);
// Whether the armed failure has been returned.
bool driver_fault_fired();

// The driver library: libcuda.so.1, or the file UVM_CUDA_DRIVER_LIBRARY
// names (a stand-in driver for tests). Read once, at the first driver_api().
const char *driver_library_name();

// A GPU virtual address range of `size` bytes aligned to `align` that the
// driver can reserve now on device 0 (reserved and released again), for
// callers that pick user addresses (tests, benchmarks). 0 where it cannot.
uint64_t reservable_gpu_address(uint64_t size, uint64_t align);

// Text for a driver error code.
const char *driver_error_string(CUresult result);

}  // namespace uvm::cuda
