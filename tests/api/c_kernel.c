/* See c_kernel.h. The kernel is PTX, loaded with cuModuleLoadData. */
#include "c_kernel.h"

#include <dlfcn.h>
#include <stddef.h>

typedef int cu_result;
typedef void *cu_context;
typedef void *cu_module;
typedef void *cu_function;
typedef void *cu_stream;

static const char add_one_ptx[] =
    ".version 7.8\n"
    ".target sm_80\n"
    ".address_size 64\n"
    ".visible .entry add_one(.param .u64 dst, .param .u64 src, .param .u64 n)\n"
    "{\n"
    "    .reg .pred p;\n"
    "    .reg .b16 h<3>;\n"
    "    .reg .b32 r<5>;\n"
    "    .reg .b64 rd<8>;\n"
    "    ld.param.u64 rd1, [dst];\n"
    "    ld.param.u64 rd2, [src];\n"
    "    ld.param.u64 rd3, [n];\n"
    "    mov.u32 r1, %ctaid.x;\n"
    "    mov.u32 r2, %ntid.x;\n"
    "    mov.u32 r3, %tid.x;\n"
    "    mad.lo.s32 r4, r1, r2, r3;\n"
    "    cvt.u64.u32 rd4, r4;\n"
    "    setp.ge.u64 p, rd4, rd3;\n"
    "    @p bra DONE;\n"
    "    add.s64 rd5, rd2, rd4;\n"
    "    ld.global.u8 h1, [rd5];\n"
    "    add.s16 h2, h1, 1;\n"
    "    add.s64 rd6, rd1, rd4;\n"
    "    st.global.u8 [rd6], h2;\n"
    "DONE:\n"
    "    ret;\n"
    "}\n";

/* POSIX's way to take a function from dlsym without an object-to-function
 * pointer conversion, which ISO C leaves undefined. */
#define LOAD(lib, var, name) (*(void **)(&(var)) = dlsym((lib), (name)), (var) != NULL)

int c_kernel_add_one(int gpu, uint64_t dst, uint64_t src, uint64_t n) {
    cu_result (*device_get)(int *, int);
    cu_result (*retain)(cu_context *, int);
    cu_result (*release)(int);
    cu_result (*set_current)(cu_context);
    cu_result (*load)(cu_module *, const void *);
    cu_result (*unload)(cu_module);
    cu_result (*get_function)(cu_function *, cu_module, const char *);
    cu_result (*launch)(cu_function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        cu_stream, void **, void **);
    cu_result (*synchronize)(void);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    int device = 0, failed;
    cu_context ctx = NULL;
    cu_module mod = NULL;
    cu_function fn = NULL;
    void *args[3];
    if (!lib)
        return -1;
    if (!LOAD(lib, device_get, "cuDeviceGet") || !LOAD(lib, retain, "cuDevicePrimaryCtxRetain") ||
        !LOAD(lib, release, "cuDevicePrimaryCtxRelease_v2") || !LOAD(lib, set_current, "cuCtxSetCurrent") ||
        !LOAD(lib, load, "cuModuleLoadData") || !LOAD(lib, unload, "cuModuleUnload") ||
        !LOAD(lib, get_function, "cuModuleGetFunction") || !LOAD(lib, launch, "cuLaunchKernel") ||
        !LOAD(lib, synchronize, "cuCtxSynchronize")) {
        dlclose(lib);
        return -1;
    }
    /* The manager has initialised the driver and holds the primary context. */
    failed = device_get(&device, gpu) != 0 || retain(&ctx, device) != 0;
    if (!failed) {
        failed = set_current(ctx) != 0 || load(&mod, add_one_ptx) != 0 || get_function(&fn, mod, "add_one") != 0;
        if (!failed) {
            args[0] = &dst;
            args[1] = &src;
            args[2] = &n;
            failed = launch(fn, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL) != 0 ||
                     synchronize() != 0;
        }
        if (mod)
            unload(mod);
        release(device);
    }
    dlclose(lib);
    return failed ? 1 : 0;
}
