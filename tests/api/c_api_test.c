/* The public header compiles as C11 (-pedantic) and the C API works from C:
 * zero-initialised params, every status has text, a full object cycle; and on
 * the default backend (the GPU where there is one), vidmem allocated mapped in
 * one call, at a user address the manager picks, written by the GPU's copy
 * engine through that address and read back on the CPU; on a GPU, also read
 * by a GPU kernel through the user address into host memory the CPU reads;
 * and shareable host memory at a manager-picked user address, written there
 * by the GPU (a kernel on a GPU, the copy engine on sim) and read there by
 * the CPU. */
#include <stdio.h>
#include <string.h>

#include <uvm/uvm.h>
#include <uvm/uvm_lab.h> /* the lab's header compiles as C11 too */

#include "c_kernel.h"

#define REQUIRE(cond)                                                  \
    do {                                                               \
        if (!(cond)) {                                                 \
            fprintf(stderr, "c_api_test: %s failed (line %d)\n", #cond, __LINE__); \
            return 1;                                                  \
        }                                                              \
    } while (0)

int main(void) {
    uvm_manager_params_t mp = {0};
    uvm_mem_alloc_params_t ap = {0};
    uvm_manager_t *mgr = NULL;
    uvm_mem_t *mem = NULL;
    uvm_mem_info_t info;
    unsigned char *p;
    int s;

    for (s = UVM_OK; s <= UVM_ERR_LEAKED_OBJECTS; ++s)
        REQUIRE(strcmp(uvm_status_string((uvm_status_t)s), "unknown status") != 0);
    /* Why a call failed, in C too: the field and the limit. */
    mp.backend = UVM_BACKEND_SIM;
    mp.sim.gpu_count = 100;
    REQUIRE(uvm_manager_create(&mp, &mgr) == UVM_ERR_INVALID_ARGUMENT);
    REQUIRE(strcmp(uvm_last_error_message(), "sim.gpu_count 100 is over the limit of 32 GPUs (UVM_MAX_GPUS)") == 0);
    mp.sim.gpu_count = 0; /* everything else zero: the defaults */
    REQUIRE(uvm_manager_create(&mp, &mgr) == UVM_OK);
    REQUIRE(strcmp(uvm_last_error_message(), "success") == 0);
    ap.size = 10000; /* sysmem, adaptive chunk size */
    REQUIRE(uvm_mem_alloc(mgr, &ap, &mem) == UVM_OK);
    REQUIRE(uvm_mem_info(mgr, mem, &info) == UVM_OK);
    REQUIRE(info.chunk_size == UVM_PAGE_SIZE_4K && info.chunk_count == 3 && info.alloc_size == 12288);
    REQUIRE(uvm_mem_map_cpu_kernel(mgr, mem) == UVM_OK);
    REQUIRE(uvm_mem_cpu_kernel_address(mgr, mem, 0, (void **)&p) == UVM_OK);
    memset(p, 0x42, 10000);
    REQUIRE(uvm_mem_free(mgr, mem) == UVM_OK);
    REQUIRE(uvm_mem_free(mgr, mem) == UVM_ERR_INVALID_HANDLE);
    REQUIRE(uvm_manager_destroy(mgr) == UVM_OK);

    {
        uvm_mem_t *vid = NULL, *host = NULL;
        uvm_mem_span_t dst = {0}, src = {0};
        uvm_backend_kind_t kind;
        uint64_t user;
        unsigned char *bytes;
        memset(&mp, 0, sizeof(mp)); /* auto backend */
        REQUIRE(uvm_manager_create(&mp, &mgr) == UVM_OK);
        REQUIRE(uvm_manager_backend(mgr, &kind) == UVM_OK);
        memset(&ap, 0, sizeof(ap));
        ap.size = 100000; /* 64K chunks */
        ap.backing = UVM_BACKING_VIDMEM;
        ap.flags = UVM_MEM_GPU_MAPPED;
        REQUIRE(uvm_mem_alloc(mgr, &ap, &vid) == UVM_OK);
        REQUIRE(uvm_mem_info(mgr, vid, &info) == UVM_OK);
        REQUIRE(info.gpu_kernel_address != 0 && info.gpu_kernel_mask == 1u);
        REQUIRE(uvm_mem_map_gpu_user(mgr, vid, 0, 0) == UVM_OK); /* the manager picks */
        REQUIRE(uvm_mem_gpu_user_address(mgr, vid, 0, 0, &user) == UVM_OK && user != 0);
        dst.mem = vid;
        dst.view = UVM_VIEW_USER;
        REQUIRE(uvm_mem_memset(mgr, 0, &dst, 0x6B, ap.size) == UVM_OK);
        memset(&ap, 0, sizeof(ap));
        ap.size = 100000;
        REQUIRE(uvm_mem_alloc(mgr, &ap, &host) == UVM_OK);
        REQUIRE(uvm_mem_map_gpu_kernel(mgr, host, 0) == UVM_OK);
        dst.mem = host;
        dst.view = UVM_VIEW_KERNEL;
        src.mem = vid;
        src.view = UVM_VIEW_USER;
        REQUIRE(uvm_mem_copy(mgr, 0, &dst, &src, ap.size) == UVM_OK);
        REQUIRE(uvm_mem_map_cpu_kernel(mgr, host) == UVM_OK);
        REQUIRE(uvm_mem_cpu_kernel_address(mgr, host, 0, (void **)&bytes) == UVM_OK);
        REQUIRE(bytes[0] == 0x6B && bytes[99999] == 0x6B);
        if (kind == UVM_BACKEND_CUDA) {
            /* A GPU kernel reads the vidmem through its user address and
             * writes host memory through its GPU kernel address. */
            uvm_mem_info_t hinfo;
            REQUIRE(uvm_mem_map_gpu_kernel(mgr, host, 0) == UVM_ERR_ALREADY_MAPPED);
            REQUIRE(uvm_mem_info(mgr, host, &hinfo) == UVM_OK && hinfo.gpu_kernel_address != 0);
            memset(bytes, 0, 100000);
            REQUIRE(c_kernel_add_one(0, hinfo.gpu_kernel_address, user, 100000) == 0);
            REQUIRE(bytes[0] == 0x6C && bytes[50000] == 0x6C && bytes[99999] == 0x6C);
        }
        {
            uvm_mem_t *shared = NULL;
            uint64_t at = 0;
            unsigned char *cpu_view;
            memset(&ap, 0, sizeof(ap));
            ap.size = 100000;
            ap.flags = UVM_MEM_USER_MAPPABLE;
            REQUIRE(uvm_mem_alloc(mgr, &ap, &shared) == UVM_OK);
            REQUIRE(uvm_mem_map_gpu_user(mgr, shared, 0, 0) == UVM_OK);
            REQUIRE(uvm_mem_gpu_user_address(mgr, shared, 0, 0, &at) == UVM_OK && at != 0);
            cpu_view = (unsigned char *)(uintptr_t)at;
            REQUIRE(uvm_mem_map_cpu_user(mgr, shared, cpu_view) == UVM_OK); /* one address for both */
            if (kind == UVM_BACKEND_CUDA) {
                REQUIRE(c_kernel_add_one(0, at, user, 100000) == 0);
            } else {
                dst.mem = shared;
                dst.view = UVM_VIEW_USER;
                src.mem = vid;
                src.view = UVM_VIEW_USER;
                REQUIRE(uvm_mem_copy(mgr, 0, &dst, &src, 100000) == UVM_OK);
            }
            REQUIRE(cpu_view[0] == (kind == UVM_BACKEND_CUDA ? 0x6C : 0x6B) && cpu_view[99999] == cpu_view[0]);
            REQUIRE(uvm_mem_free(mgr, shared) == UVM_OK);
        }
        REQUIRE(uvm_mem_free(mgr, vid) == UVM_OK);
        REQUIRE(uvm_mem_free(mgr, host) == UVM_OK);
        REQUIRE(uvm_manager_destroy(mgr) == UVM_OK);
        printf("c_api_test: %s backend, user address 0x%llx\n", kind == UVM_BACKEND_CUDA ? "cuda" : "sim",
               (unsigned long long)user);
    }
    printf("c_api_test: ok\n");
    return 0;
}
