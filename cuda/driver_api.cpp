#include "cuda/driver_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace uvm::cuda {

namespace {

// The exported symbol cuda.h's macros turn a name into (cuMemAlloc ->
// cuMemAlloc_v2): the ABI that decltype(&::name) describes. We resolve those
// exact symbols rather than asking cuGetProcAddress for a base name, which
// returns the newest ABI of that name whatever the header declares (it gives
// cuCtxSynchronize_v2(CUcontext) for cuCtxSynchronize(void), for instance).
#define UVM_CUDA_SYMBOL_TEXT(x) #x
#define UVM_CUDA_SYMBOL(x) UVM_CUDA_SYMBOL_TEXT(x)

DriverApi *load() {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return nullptr;
    auto *api = new DriverApi();
    bool complete = true;
#define UVM_CUDA_LOOKUP(name)                                                              \
    {                                                                                      \
        void *fn = dlsym(lib, UVM_CUDA_SYMBOL(name));                                      \
        if (!fn) {                                                                         \
            if (std::getenv("UVM_DEBUG"))                                                  \
                std::fprintf(stderr, "uvm: the CUDA driver lacks %s\n", UVM_CUDA_SYMBOL(name)); \
            complete = false;                                                              \
        }                                                                                  \
        api->name = reinterpret_cast<decltype(api->name)>(fn);                             \
    }
    UVM_CUDA_DRIVER_FUNCTIONS(UVM_CUDA_LOOKUP)
#undef UVM_CUDA_LOOKUP
    if (!complete) {
        delete api;
        return nullptr;  // a driver too old for the cuda.h we were built with
    }
    return api;
}

}  // namespace

const DriverApi *driver_api() {
    static std::once_flag once;
    static DriverApi *api = nullptr;
    std::call_once(once, [] { api = load(); });
    return api;
}

const char *driver_error_string(CUresult result) {
    const char *text = nullptr;
    const DriverApi *api = driver_api();
    if (api && api->cuGetErrorString(result, &text) == CUDA_SUCCESS && text)
        return text;
    return "unknown CUDA error";
}

uint64_t reservable_gpu_address(uint64_t size, uint64_t align) {
    const DriverApi *api = driver_api();
    CUdevice dev;
    CUcontext ctx;
    if (!api || api->cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        api->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
        return 0;
    api->cuCtxSetCurrent(ctx);
    // The driver reserves whole 2 MiB units.
    constexpr uint64_t k2M = 2ull << 20;
    const uint64_t span = (size + k2M - 1) & ~(k2M - 1);
    CUdeviceptr p = 0;
    if (api->cuMemAddressReserve(&p, span, align < k2M ? k2M : align, 0, 0) == CUDA_SUCCESS)
        api->cuMemAddressFree(p, span);
    else
        p = 0;
    api->cuDevicePrimaryCtxRelease(dev);
    return p;
}

}  // namespace uvm::cuda
