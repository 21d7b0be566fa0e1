#include "cuda/driver_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace uvm::cuda {

namespace {

// Ask for the entry points in the versions of the cuda.h we were built with,
// so that each pointer has the signature decltype() gave it (cuda.h maps some
// names to _v2 variants, cuMemAdvise and cuMemPrefetchAsync among them).
constexpr int kDriverAbiVersion = CUDA_VERSION;

using GetProcAddress = CUresult (*)(const char *, void **, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult *);

DriverApi *load() {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return nullptr;
    auto get = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
    if (!get)
        return nullptr;  // a driver older than CUDA 12
    auto *api = new DriverApi();
    bool complete = true;
#define UVM_CUDA_LOOKUP(name)                                                                    \
    {                                                                                            \
        void *fn = nullptr;                                                                      \
        CUdriverProcAddressQueryResult found;                                                    \
        if (get(#name, &fn, kDriverAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || \
            !fn) {                                                                               \
            if (std::getenv("UVM_DEBUG"))                                                        \
                std::fprintf(stderr, "uvm: the CUDA driver lacks %s\n", #name);                  \
            complete = false;                                                                    \
        }                                                                                        \
        api->name = reinterpret_cast<decltype(api->name)>(fn);                                   \
    }
    UVM_CUDA_DRIVER_FUNCTIONS(UVM_CUDA_LOOKUP)
#undef UVM_CUDA_LOOKUP
    if (!complete) {
        delete api;
        return nullptr;
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

}  // namespace uvm::cuda
