/*
 * uvm-tool - look at what a manager sees.
 *   uvm-tool gpus    the GPUs, their memory, page sizes and peer links
 *   uvm-tool peers   the peer matrix
 *   uvm-tool topo    GPUs, PCI paths, peer access, CPU and NUMA affinity, and the
 *                    host's NUMA nodes, in the spirit of `nvidia-smi topo -m`
 *   uvm-tool stats   the JSON snapshot of a manager in this process
 *   uvm-tool metrics the same in the Prometheus text format
 *   uvm-tool top     a refreshing view per GPU and client of a runtime's
 *                    manager (--url) or of a demo workload (--demo); see top.cpp
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uvm/uvm.h>

#include "tools/top.h"

static const char *path_name(uvm_gpu_path_t p) {
    switch (p) {
        case UVM_GPU_PATH_SELF: return "X";
        case UVM_GPU_PATH_PIX: return "PIX";
        case UVM_GPU_PATH_PXB: return "PXB";
        case UVM_GPU_PATH_PHB: return "PHB";
        case UVM_GPU_PATH_NODE: return "NODE";
        case UVM_GPU_PATH_SYS: return "SYS";
        default: return "?";
    }
}

static void print_topology(uvm_manager_t *mgr, uint32_t count, const uvm_gpu_info_t *info) {
    static const char *thp[] = {"unknown", "never", "madvise", "always"};
    uvm_host_info_t host;
    printf("%-6s", "");
    for (uint32_t g = 0; g < count; ++g)
        printf(" GPU%-7u", g);
    printf(" %-20s %s\n", "CPU Affinity", "NUMA Affinity");
    for (uint32_t g = 0; g < count; ++g) {
        printf("GPU%-3u", g);
        for (uint32_t p = 0; p < count; ++p) {
            uvm_gpu_path_t path = UVM_GPU_PATH_UNKNOWN;
            char cell[16];
            uvm_gpu_path(mgr, g, p, &path);
            snprintf(cell, sizeof cell, "%s%s", path_name(path),
                     p != g && ((info[g].peer_mask >> p) & 1u) ? "+P2P" : "");
            printf(" %-10s", cell);
        }
        printf(" %-20s ", info[g].cpus[0] ? info[g].cpus : "N/A");
        if (info[g].host_numa_id >= 0)
            printf("%d\n", info[g].host_numa_id);
        else
            printf("N/A\n");
    }
    if (uvm_host_info(mgr, &host) != UVM_OK)
        return;
    printf("\nNUMA nodes (%s):\n", host.from_hwloc ? "hwloc" : "no hwloc, or configured");
    for (uint32_t i = 0; i < host.numa_node_count; ++i) {
        uvm_numa_node_info_t n;
        if (uvm_numa_node_info(mgr, i, &n) != UVM_OK)
            continue;
        printf("  node %-3d CPUs %-20s memory %llu MiB, %llu MiB free", n.id, n.cpus,
               (unsigned long long)(n.memory_total >> 20), (unsigned long long)(n.memory_free >> 20));
        if (n.host_node != n.id)
            printf(" (backed by host node %d)", n.host_node);
        printf("\n");
    }
    printf("transparent huge pages: %s (shmem: %s)\n", thp[host.thp], thp[host.shmem_thp]);
    printf("\nLegend:\n"
           "  X    = self\n"
           "  SYS  = through the SMP interconnect between NUMA nodes\n"
           "  NODE = between PCIe host bridges of one NUMA node\n"
           "  PHB  = through a PCIe host bridge\n"
           "  PXB  = through several PCIe bridges, not a host bridge\n"
           "  PIX  = through at most one PCIe switch\n"
           "  +P2P = the GPU can reach the other's memory directly (NVLink or PCIe peer access)\n");
}

static int usage(void) {
    fprintf(stderr, "usage: uvm-tool gpus|peers|topo|stats|metrics|top\n"
                    "  stats    the JSON snapshot of a manager in this process (the GPUs as the driver has them)\n"
                    "  metrics  the same in the Prometheus text format\n"
                    "  top      (--url http://HOST:PORT | --demo [--serve PORT]) [--interval S] [--count N] [--plain]\n"
                    "           a refreshing view per GPU and client of a runtime's /snapshot endpoint\n"
                    "           (uvm_metrics_serve), or of a demo workload on simulated GPUs\n");
    return 2;
}

/* Print one of the report calls' text. */
static int print_report(uvm_manager_t *mgr, uvm_status_t (*call)(uvm_manager_t *, char *, size_t, size_t *)) {
    size_t needed = 0;
    if (call(mgr, NULL, 0, &needed) != UVM_ERR_BUFFER_TOO_SMALL)
        return 1;
    char *buf = malloc(needed);
    if (!buf || call(mgr, buf, needed, &needed) != UVM_OK) {
        free(buf);
        return 1;
    }
    fputs(buf, stdout);
    if (needed > 1 && buf[needed - 2] != '\n')
        putchar('\n');
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    uvm_manager_t *mgr;
    uint32_t count;
    uvm_status_t s;
    if (argc >= 2 && strcmp(argv[1], "top") == 0)
        return uvm_tool_top(argc - 1, argv + 1);
    if (argc != 2)
        return usage();
    s = uvm_manager_create(NULL, &mgr);
    if (s != UVM_OK) {
        fprintf(stderr, "uvm-tool: %s\n", uvm_last_error_message());
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
    } else if (strcmp(argv[1], "topo") == 0) {
        print_topology(mgr, count, info);
    } else if (strcmp(argv[1], "stats") == 0 || strcmp(argv[1], "metrics") == 0) {
        if (print_report(mgr, strcmp(argv[1], "stats") == 0 ? uvm_manager_snapshot : uvm_manager_metrics) != 0) {
            uvm_manager_destroy(mgr);
            return 1;
        }
    } else {
        uvm_manager_destroy(mgr);
        return usage();
    }
    return uvm_manager_destroy(mgr) == UVM_OK ? 0 : 1;
}
