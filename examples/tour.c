/*
 * tour.c - the main job: a tour of the API on the default backend (the GPU
 * where there is one, the simulator otherwise).
 *
 * It allocates objects of several sizes and backings, prints the chunk size
 * picked for each, maps them every way the backend allows, checks data
 * written through one mapping and read back through another (CPU kernel vs
 * CPU user, CPU vs the copy engine through GPU virtual mappings, a peer's
 * mapping), prints what the page tables cost and the statistics, and frees
 * everything. Exit status 0 only when every check passed.
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <uvm/uvm.h>

static int failures = 0;

#define CHECK(call)                                                                    \
    do {                                                                               \
        uvm_status_t s_ = (call);                                                      \
        if (s_ != UVM_OK) {                                                            \
            fprintf(stderr, "FAILED: %s -> %s (line %d)\n", #call, uvm_last_error_message(), \
                    __LINE__);                                                         \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

/* Text for a byte count; a ring of buffers lets one printf take several. */
static const char *size_text(uint64_t bytes) {
    static char ring[8][32];
    static unsigned next = 0;
    char *buf = ring[next++ % 8];
    const size_t len = sizeof ring[0];
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
        snprintf(buf, len, "%llu MiB", (unsigned long long)(bytes >> 20));
    else if (bytes >= 1024 && bytes % 1024 == 0)
        snprintf(buf, len, "%llu KiB", (unsigned long long)(bytes >> 10));
    else
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    return buf;
}

/* An address range no one uses now, for the user mappings. */
static void *free_user_range(uint64_t size) {
    void *p = mmap(NULL, size + (2u << 20), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    munmap(p, size + (2u << 20));
    return (void *)(((uintptr_t)p + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
}

static void expect(int ok, const char *what) {
    printf("  check %-58s %s\n", what, ok ? "ok" : "FAILED");
    if (!ok)
        failures++;
}

int main(void) {
    uvm_manager_t *mgr;
    uvm_backend_kind_t kind;
    uint32_t gpu_count, g;

    CHECK(uvm_manager_create(NULL, &mgr));
    CHECK(uvm_manager_backend(mgr, &kind));
    CHECK(uvm_gpu_count(mgr, &gpu_count));
    printf("backend: %s (set UVM_BACKEND=sim|cuda to force one)\n",
           kind == UVM_BACKEND_CUDA ? "cuda" : "sim");
    for (g = 0; g < gpu_count; ++g) {
        uvm_gpu_info_t info;
        CHECK(uvm_gpu_info(mgr, g, &info));
        printf("GPU %u: %s, %s total, page sizes%s%s%s, peers 0x%x%s\n", g, info.name,
               size_text(info.memory_total),
               (info.page_sizes & UVM_PAGE_SIZE_4K) ? " 4K" : "",
               (info.page_sizes & UVM_PAGE_SIZE_64K) ? " 64K" : "",
               (info.page_sizes & UVM_PAGE_SIZE_2M) ? " 2M" : "", info.peer_mask,
               info.cpu_coherent ? ", CPU-coherent" : "");
    }

    /* The host: NUMA nodes, and where sysmem for GPU 0 lands. */
    {
        uvm_host_info_t host;
        uvm_numa_node_info_t node;
        uvm_mem_alloc_params_t p;
        uvm_mem_info_t mi;
        uvm_host_pages_t pages;
        uvm_mem_t *staging;
        static const char *thp[] = {"unknown", "never", "madvise", "always"};
        CHECK(uvm_host_info(mgr, &host));
        printf("\nhost: %u NUMA node(s)%s, transparent huge pages: %s (shmem: %s)\n",
               host.numa_node_count, host.from_hwloc ? " (hwloc)" : "", thp[host.thp],
               thp[host.shmem_thp]);
        for (uint32_t n = 0; n < host.numa_node_count; ++n) {
            CHECK(uvm_numa_node_info(mgr, n, &node));
            printf("  node %d: CPUs %s, %s\n", node.id, node.cpus, size_text(node.memory_total));
        }
        memset(&p, 0, sizeof p);
        p.size = 8u << 20;
        p.backing = UVM_BACKING_SYSMEM; /* placement 0: local to p.gpu, GPU 0 */
        CHECK(uvm_mem_alloc(mgr, &p, &staging));
        CHECK(uvm_mem_info(mgr, staging, &mi));
        CHECK(uvm_mem_host_pages(mgr, staging, &pages));
        printf("  8 MiB staging sysmem for GPU 0: %s chunks, placed on node %d, %s of it on huge pages\n",
               size_text(mi.chunk_size), mi.numa_node, size_text(pages.huge_bytes));
        CHECK(uvm_mem_free(mgr, staging));
    }

    /* Objects of several sizes: the adaptive rule picks their chunk size. */
    static const uint64_t sizes[] = {1, 12u << 10, 100u << 10, 6u << 20};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    uvm_mem_t *sys[N], *vid[N];
    printf("\nobjects (chunk size picked adaptively):\n");
    for (int i = 0; i < N; ++i) {
        uvm_mem_alloc_params_t p;
        uvm_mem_info_t si, vi;
        memset(&p, 0, sizeof p);
        p.size = sizes[i];
        p.backing = UVM_BACKING_SYSMEM;
        p.flags = UVM_MEM_USER_MAPPABLE; /* mapped at a second CPU address below */
        CHECK(uvm_mem_alloc(mgr, &p, &sys[i]));
        p.flags = 0;
        p.backing = UVM_BACKING_VIDMEM;
        p.gpu = 0;
        CHECK(uvm_mem_alloc(mgr, &p, &vid[i]));
        CHECK(uvm_mem_info(mgr, sys[i], &si));
        CHECK(uvm_mem_info(mgr, vid[i], &vi));
        printf("  %8s: sysmem %3llu x %-7s  vidmem %3llu x %s\n", size_text(sizes[i]),
               (unsigned long long)si.chunk_count, size_text(si.chunk_size),
               (unsigned long long)vi.chunk_count, size_text(vi.chunk_size));
    }

    /* Map every way, then move data between the mappings. */
    printf("\nmappings and data checks:\n");
    const uint32_t peer = gpu_count > 1 ? 1 : 0;
    for (int i = 0; i < N; ++i) {
        uvm_mem_info_t si;
        uint8_t *kernel, *user;
        CHECK(uvm_mem_info(mgr, sys[i], &si));
        const uint64_t n = si.alloc_size;

        CHECK(uvm_mem_map_cpu_kernel(mgr, sys[i]));
        CHECK(uvm_mem_map_cpu_user(mgr, sys[i], free_user_range(n)));
        CHECK(uvm_mem_cpu_kernel_address(mgr, sys[i], 0, (void **)&kernel));
        CHECK(uvm_mem_cpu_user_address(mgr, sys[i], 0, (void **)&user));
        for (uint64_t k = 0; k < n; ++k)
            kernel[k] = (uint8_t)(k * 7 + i);
        int same = kernel != user;
        for (uint64_t k = 0; k < n; ++k)
            same &= user[k] == (uint8_t)(k * 7 + i);
        printf("  %s sysmem:\n", size_text(sizes[i]));
        expect(same, "CPU kernel write, CPU user read (two addresses)");

        for (g = 0; g < gpu_count; ++g) {
            CHECK(uvm_mem_map_gpu_kernel(mgr, sys[i], g));
            CHECK(uvm_mem_map_gpu_kernel(mgr, vid[i], g == 0 || g == peer ? g : 0));
        }
        /* GPU user mapping at the CPU user address (unified addressing). A
           backend that cannot place host pages at a chosen GPU address says
           so; the copies below then use the kernel view. */
        uvm_status_t us = uvm_mem_map_gpu_user(mgr, sys[i], 0, 0);
        if (us != UVM_OK && us != UVM_ERR_NOT_SUPPORTED)
            CHECK(us);
        const uvm_gpu_view_t sys_view = us == UVM_OK ? UVM_VIEW_USER : UVM_VIEW_KERNEL;
        if (us != UVM_OK && i == 0)
            printf("  (GPU user mappings of sysmem: %s on this backend)\n", uvm_status_string(us));

        /* GPU 0's copy engine: sysmem -> vidmem through both kernel mappings. */
        uvm_mem_span_t to_vid = {vid[i], 0, UVM_VIEW_KERNEL};
        uvm_mem_span_t from_sys = {sys[i], 0, UVM_VIEW_KERNEL};
        CHECK(uvm_mem_copy(mgr, 0, &to_vid, &from_sys, n));
        /* Clear sysmem, then bring the data back through the peer's mapping of
           the vidmem (or GPU 0's where there is no peer), into the user view. */
        memset(kernel, 0, n);
        uvm_mem_span_t from_vid = {vid[i], 0, UVM_VIEW_KERNEL};
        uvm_mem_span_t to_sys_user = {sys[i], 0, sys_view};
        if (peer != 0) {
            if (sys_view == UVM_VIEW_USER)
                CHECK(uvm_mem_map_gpu_user(mgr, sys[i], peer, 0));
            CHECK(uvm_mem_copy(mgr, peer, &to_sys_user, &from_vid, n));
        } else {
            CHECK(uvm_mem_copy(mgr, 0, &to_sys_user, &from_vid, n));
        }
        same = 1;
        for (uint64_t k = 0; k < n; ++k)
            same &= kernel[k] == (uint8_t)(k * 7 + i);
        expect(same, peer ? "CPU -> GPU0 copy -> vidmem -> GPU1 (peer) copy -> CPU"
                          : "CPU -> GPU0 copy -> vidmem -> GPU0 copy -> CPU");

        uvm_gpu_phys_address_t pa;
        CHECK(uvm_mem_gpu_phys_address(mgr, sys[i], 0, 0, n, &pa));
        printf("  %-64s 0x%llx (%s)\n", "  sysmem DMA address on GPU 0", (unsigned long long)pa.address,
               pa.contiguous ? "contiguous" : "not contiguous");
        CHECK(uvm_mem_gpu_phys_address(mgr, vid[i], 0, 0, n, &pa));
        printf("  %-64s 0x%llx (%s)\n", "  vidmem physical address on GPU 0",
               (unsigned long long)pa.address, pa.contiguous ? "contiguous" : "not contiguous");
    }

    /* What the page tables cost, and the statistics. */
    printf("\npage tables:\n");
    for (g = 0; g < gpu_count && g < 2; ++g) {
        uvm_page_tree_info_t t;
        CHECK(uvm_gpu_page_tree_info(mgr, g, UVM_VA_SPACE_KERNEL, &t));
        printf("  GPU %u kernel space: %s of tables mapping %s (4K) + %s (64K) + %s (2M)\n", g,
               size_text(t.table_bytes), size_text(t.mapped_bytes[0]),
               size_text(t.mapped_bytes[1]), size_text(t.mapped_bytes[2]));
        for (uint32_t l = 0; l < t.level_count; ++l)
            printf("    %-7s VA %2u:%-2u  %3llu tables  %s\n", t.levels[l].name, t.levels[l].va_bit_hi,
                   t.levels[l].va_bit_lo, (unsigned long long)t.levels[l].tables,
                   size_text(t.levels[l].bytes));
    }
    printf("\nstatistics:\n");
    for (g = 0; g < gpu_count && g < 2; ++g) {
        uvm_gpu_stats_t s;
        CHECK(uvm_gpu_stats(mgr, g, &s));
        printf("  GPU %u: %llu root chunks; pinned 4K/64K/2M %s/%s/", g,
               (unsigned long long)s.root_chunks, size_text(s.bytes_pinned[0]),
               size_text(s.bytes_pinned[1]));
        printf("%s; free %s; largest free block %s\n", size_text(s.bytes_pinned[2]),
               size_text(s.bytes_free[0] + s.bytes_free[1] + s.bytes_free[2]),
               size_text(s.largest_free_block));
        printf("         mappings: %llu physical, %llu kernel, %llu user (%llu of a peer's vidmem); "
               "copy engine: %llu ops, %s, %llu translations\n",
               (unsigned long long)s.phys_mappings, (unsigned long long)s.kernel_mappings,
               (unsigned long long)s.user_mappings, (unsigned long long)s.peer_mappings,
               (unsigned long long)s.ce_operations, size_text(s.ce_bytes),
               (unsigned long long)s.ce_translations);
    }

    for (int i = 0; i < N; ++i) {
        CHECK(uvm_mem_free(mgr, sys[i]));
        CHECK(uvm_mem_free(mgr, vid[i]));
    }
    CHECK(uvm_manager_destroy(mgr));
    printf("\n%s\n", failures ? "SOME CHECKS FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
