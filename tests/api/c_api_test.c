/* The public header compiles as C11 (-pedantic) and the C API works from C:
 * zero-initialised params, every status has text, a full object cycle. */
#include <stdio.h>
#include <string.h>

#include <uvm/uvm.h>

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
    mp.backend = UVM_BACKEND_SIM; /* everything else zero: the defaults */
    REQUIRE(uvm_manager_create(&mp, &mgr) == UVM_OK);
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
    printf("c_api_test: ok\n");
    return 0;
}
