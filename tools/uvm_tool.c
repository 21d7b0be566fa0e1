/*
 * uvm-tool - look at what a manager sees.
 *   uvm-tool gpus    the GPUs, their memory, page sizes and peer links
 *   uvm-tool peers   the peer matrix, in the spirit of `nvidia-smi topo -m`
 */
#include <stdio.h>
#include <string.h>

#include <uvm/uvm.h>

static int usage(void) {
    fprintf(stderr, "usage: uvm-tool gpus|peers\n");
    return 2;
}

int main(int argc, char **argv) {
    uvm_manager_t *mgr;
    uint32_t count;
    uvm_status_t s;
    if (argc != 2)
        return usage();
    s = uvm_manager_create(NULL, &mgr);
    if (s != UVM_OK) {
        fprintf(stderr, "uvm-tool: %s\n", uvm_status_string(s));
        return 1;
    }
    uvm_gpu_count(mgr, &count);
    uvm_gpu_info_t info[UVM_MAX_GPUS];
    for (uint32_t g = 0; g < count; ++g)
        uvm_gpu_info(mgr, g, &info[g]);
    if (strcmp(argv[1], "gpus") == 0) {
        for (uint32_t g = 0; g < count; ++g)
            printf("GPU %u: %s | %llu MiB total, %llu MiB free | pages%s%s%s | granularity %llu KiB | "
                   "host NUMA %d%s%s%s\n",
                   g, info[g].name, (unsigned long long)(info[g].memory_total >> 20),
                   (unsigned long long)(info[g].memory_free >> 20),
                   (info[g].page_sizes & UVM_PAGE_SIZE_4K) ? " 4K" : "",
                   (info[g].page_sizes & UVM_PAGE_SIZE_64K) ? " 64K" : "",
                   (info[g].page_sizes & UVM_PAGE_SIZE_2M) ? " 2M" : "",
                   (unsigned long long)(info[g].granularity >> 10), info[g].host_numa_id,
                   info[g].pci_bus_id[0] ? " | PCI " : "", info[g].pci_bus_id,
                   info[g].cpu_coherent ? " | CPU-coherent" : "");
    } else if (strcmp(argv[1], "peers") == 0) {
        printf("      ");
        for (uint32_t g = 0; g < count; ++g)
            printf(" GPU%-2u", g);
        printf("\n");
        for (uint32_t g = 0; g < count; ++g) {
            printf("GPU%-2u ", g);
            for (uint32_t p = 0; p < count; ++p)
                printf(" %-5s", p == g ? "X" : ((info[g].peer_mask >> p) & 1u) ? "P2P" : "-");
            printf("\n");
        }
    } else {
        uvm_manager_destroy(mgr);
        return usage();
    }
    return uvm_manager_destroy(mgr) == UVM_OK ? 0 : 1;
}
