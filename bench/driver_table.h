/*
 * The CUDA driver for the bench programs that load it at run time as the
 * library does (host_pin.c, handle_release.c): its calls as a table of
 * function pointers, looked up from a dlopen handle, and a monotonic clock.
 * Each program includes it once (its definitions are static).
 */
#ifndef UVM_BENCH_DRIVER_TABLE_H
#define UVM_BENCH_DRIVER_TABLE_H

#include <stddef.h>

#include <cuda.h>
#include <dlfcn.h>
#include <time.h>

static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*MemHostRegister)(void *, size_t, unsigned);
    CUresult (*MemHostUnregister)(void *);
    CUresult (*MemHostAlloc)(void **, size_t, unsigned);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
    CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle);
    CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*MemAddressFree)(CUdeviceptr, size_t);
    CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*MemUnmap)(CUdeviceptr, size_t);
    CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*CtxSynchronize)(void);
} cu;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The driver's entry points from `h` (dlopen of libcuda.so.1 or
 * UVM_CUDA_DRIVER_LIBRARY) into `cu`; a missing one stays NULL. */
static void driver_table_load(void *h) {
#define SYM(field, name) *(void **)&cu.field = dlsym(h, name)
    SYM(Init, "cuInit");
    SYM(DeviceGet, "cuDeviceGet");
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(CtxSetCurrent, "cuCtxSetCurrent");
    SYM(MemHostRegister, "cuMemHostRegister_v2");
    SYM(MemHostUnregister, "cuMemHostUnregister");
    SYM(MemHostAlloc, "cuMemHostAlloc");
    SYM(MemFreeHost, "cuMemFreeHost");
    SYM(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
    SYM(MemCreate, "cuMemCreate");
    SYM(MemRelease, "cuMemRelease");
    SYM(MemAddressReserve, "cuMemAddressReserve");
    SYM(MemAddressFree, "cuMemAddressFree");
    SYM(MemMap, "cuMemMap");
    SYM(MemUnmap, "cuMemUnmap");
    SYM(MemSetAccess, "cuMemSetAccess");
    SYM(MemAlloc, "cuMemAlloc_v2");
    SYM(MemFree, "cuMemFree_v2");
    SYM(MemcpyDtoH, "cuMemcpyDtoH_v2");
    SYM(MemcpyDtoD, "cuMemcpyDtoD_v2");
    SYM(CtxSynchronize, "cuCtxSynchronize");
#undef SYM
}

#endif
