/*
 * host_pin: the ways to make pinned host memory ready for a GPU's copy
 * engine, timed against each other and against the copy itself (a sleep's
 * backup: uvm_pressure.h, "Host memory of a sleep"). For --gib G of host
 * memory in pieces of --piece-mib MiB, made by 1, 2, 4, 8 and 16 threads
 * (--threads), each way gives the seconds to make it ready, the seconds to
 * give it back, and the device-to-host copy rate into it (64 MiB copies):
 *
 *   populate  mmap, MADV_HUGEPAGE, MADV_POPULATE_WRITE (the CPU's share:
 *             page faults and zeroing; no driver call, runs anywhere)
 *   register  populate, then cuMemHostRegister of each piece (what the
 *             library does: backend sysmem_alloc + sysmem_dma_map)
 *   register_cold
 *             cuMemHostRegister of a piece never touched (the driver
 *             faults the pages in itself)
 *   host_alloc
 *             cuMemHostAlloc (PORTABLE | DEVICEMAP)
 *   create_host
 *             cuMemCreate with a host location (CU_MEM_LOCATION_TYPE_HOST,
 *             CUDA 12.2 and later), mapped with cuMemMap and opened to the
 *             device with cuMemSetAccess
 *
 * The driver is loaded at run time (UVM_CUDA_DRIVER_LIBRARY or
 * libcuda.so.1), as the library does; without one only "populate" runs.
 * Figures go to stdout as one table (and --csv FILE as CSV).
 *
 *   cc -O2 -I/usr/local/cuda/include bench/host_pin.c -o host_pin -ldl -lpthread
 *   ./host_pin --gib 10 --piece-mib 64 --threads 1,2,4,8,16
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define MIB (1ull << 20)

#include "driver_table.h"

static int have_cuda;
static CUcontext ctx;
static CUdevice dev;

static void load_driver(void) {
    const char *path = getenv("UVM_CUDA_DRIVER_LIBRARY");
    void *h = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "host_pin: no CUDA driver (%s): populate only\n", dlerror());
        return;
    }
    driver_table_load(h);
    if (!cu.Init || cu.Init(0) != CUDA_SUCCESS || cu.DeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cu.DevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) {
        fprintf(stderr, "host_pin: the driver has no GPU: populate only\n");
        return;
    }
    /* Current here too: the copy's source is allocated and the copies made
     * on this thread (the workers set it for themselves). */
    if (cu.CtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "host_pin: no context made current: populate only\n");
        return;
    }
    have_cuda = 1;
}

enum way { POPULATE, REGISTER, REGISTER_COLD, HOST_ALLOC, CREATE_HOST, WAYS };
static const char *way_names[WAYS] = {"populate", "register", "register_cold", "host_alloc", "create_host"};

struct piece {
    void *host;                          /* CPU address (none for create_host) */
    CUdeviceptr va;                      /* the device's address of it */
    CUmemGenericAllocationHandle handle; /* create_host */
    int ok;
};

static enum way g_way;
static struct piece *g_pieces;
static size_t g_count, g_piece;
static size_t g_next;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_release;  /* 1: the workers give pieces back instead */

/* Whether the driver has what a way calls (the stand-in driver has not all). */
static int way_available(enum way w) {
    switch (w) {
    case POPULATE:
        return 1;
    case REGISTER:
    case REGISTER_COLD:
        return have_cuda && cu.MemHostRegister && cu.MemHostUnregister && cu.MemHostGetDevicePointer;
    case HOST_ALLOC:
        return have_cuda && cu.MemHostAlloc && cu.MemFreeHost && cu.MemHostGetDevicePointer;
    case CREATE_HOST:
        return have_cuda && cu.MemCreate && cu.MemRelease && cu.MemAddressReserve && cu.MemAddressFree && cu.MemMap &&
               cu.MemUnmap && cu.MemSetAccess;
    default:
        return 0;
    }
}

static void *map_anon(size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    madvise(p, size, MADV_HUGEPAGE);
    return p;
}

static int make(struct piece *p) {
    size_t size = g_piece;
    switch (g_way) {
    case POPULATE:
    case REGISTER:
    case REGISTER_COLD:
        p->host = map_anon(size);
        if (!p->host)
            return 0;
        if (g_way != REGISTER_COLD && madvise(p->host, size, MADV_POPULATE_WRITE) != 0) {
            for (size_t off = 0; off < size; off += 4096)
                ((volatile char *)p->host)[off] = 0;
        }
        if (g_way == POPULATE)
            return 1;
        if (cu.MemHostRegister(p->host, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) != CUDA_SUCCESS)
            return 0;
        return cu.MemHostGetDevicePointer(&p->va, p->host, 0) == CUDA_SUCCESS;
    case HOST_ALLOC:
        if (cu.MemHostAlloc(&p->host, size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) != CUDA_SUCCESS)
            return 0;
        return cu.MemHostGetDevicePointer(&p->va, p->host, 0) == CUDA_SUCCESS;
    case CREATE_HOST: {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
        prop.location.id = 0;
        if (!cu.MemCreate || cu.MemCreate(&p->handle, size, &prop, 0) != CUDA_SUCCESS)
            return 0;
        if (cu.MemAddressReserve(&p->va, size, 2 * MIB, 0, 0) != CUDA_SUCCESS)
            return 0;
        if (cu.MemMap(p->va, size, 0, p->handle, 0) != CUDA_SUCCESS)
            return 0;
        CUmemAccessDesc d;
        memset(&d, 0, sizeof(d));
        d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        d.location.id = dev;
        d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        return cu.MemSetAccess(p->va, size, &d, 1) == CUDA_SUCCESS;
    }
    default:
        return 0;
    }
}

static void give_back(struct piece *p) {
    size_t size = g_piece;
    switch (g_way) {
    case POPULATE:
        munmap(p->host, size);
        break;
    case REGISTER:
    case REGISTER_COLD:
        cu.MemHostUnregister(p->host);
        munmap(p->host, size);
        break;
    case HOST_ALLOC:
        cu.MemFreeHost(p->host);
        break;
    case CREATE_HOST:
        cu.MemUnmap(p->va, size);
        cu.MemAddressFree(p->va, size);
        cu.MemRelease(p->handle);
        break;
    default:
        break;
    }
}

static void *worker(void *arg) {
    (void)arg;
    if (have_cuda)
        cu.CtxSetCurrent(ctx);
    for (;;) {
        pthread_mutex_lock(&g_lock);
        size_t i = g_next++;
        pthread_mutex_unlock(&g_lock);
        if (i >= g_count)
            return NULL;
        if (g_release)
            give_back(&g_pieces[i]);
        else
            g_pieces[i].ok = make(&g_pieces[i]);
    }
}

static double run_threads(int threads) {
    pthread_t t[64];
    g_next = 0;
    double start = now();
    for (int i = 0; i < threads; ++i)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads; ++i)
        pthread_join(t[i], NULL);
    return now() - start;
}

/* GB/s of 64 MiB device-to-host copies into the pieces (their device
 * addresses: a copy engine's read of vidmem and write to host memory). */
static double copy_rate(CUdeviceptr src) {
    const size_t chunk = 64 * MIB;
    size_t bytes = 0;
    double start = now();
    for (size_t i = 0; i < g_count; ++i)
        for (size_t off = 0; off + chunk <= g_piece; off += chunk) {
            if (cu.MemcpyDtoD(g_pieces[i].va + off, src, chunk) != CUDA_SUCCESS)
                return 0;
            bytes += chunk;
        }
    cu.CtxSynchronize();
    return (double)bytes / (now() - start) / 1e9;
}

int main(int argc, char **argv) {
    double gib = 10;
    size_t piece_mib = 64;
    int threads[16] = {1, 2, 4, 8, 16}, nthreads = 5;
    const char *csv = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--gib"))
            gib = strtod(argv[i + 1], NULL);
        else if (!strcmp(argv[i], "--piece-mib"))
            piece_mib = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--csv"))
            csv = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) {
            nthreads = 0;
            for (char *s = argv[i + 1]; *s && nthreads < 16;) {
                threads[nthreads++] = (int)strtol(s, &s, 10);
                if (*s == ',')
                    ++s;
            }
        } else {
            fprintf(stderr, "usage: host_pin [--gib G] [--piece-mib M] [--threads 1,2,4] [--csv FILE]\n");
            return 2;
        }
    }
    if (piece_mib == 0 || piece_mib % 64 || gib <= 0) {
        fprintf(stderr, "host_pin: --piece-mib is a multiple of 64, --gib above 0\n");
        return 2;
    }
    load_driver();
    g_piece = piece_mib * MIB;
    g_count = (size_t)(gib * 1024.0 / (double)piece_mib);
    g_pieces = calloc(g_count, sizeof(*g_pieces));
    CUdeviceptr src = 0;
    if (have_cuda && (!cu.MemAlloc || !cu.MemcpyDtoD || !cu.CtxSynchronize || cu.MemAlloc(&src, 64 * MIB) != CUDA_SUCCESS)) {
        fprintf(stderr, "host_pin: no 64 MiB source on the GPU: no copy rates\n");
        src = 0;
    }
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (out)
        fprintf(out, "way,threads,bytes,make_s,make_gbps,give_back_s,copy_d2h_gbps,copy_again_gbps\n");
    printf("%zu pieces of %zu MiB (%.2f GiB), %s\n\n", g_count, piece_mib, (double)(g_count * g_piece) / (1ull << 30),
           have_cuda ? "with the driver" : "no driver");
    printf("| way | threads | make ready s | GB/s | give back s | D2H copy into it GB/s | the copy again GB/s |\n"
           "| --- | --- | --- | --- | --- | --- | --- |\n");
    for (int w = 0; w < WAYS; ++w) {
        if (!way_available((enum way)w)) {
            if (have_cuda)
                printf("| %s | | not in this driver | | | | |\n", way_names[w]);
            continue;
        }
        g_way = (enum way)w;
        for (int k = 0; k < nthreads; ++k) {
            memset(g_pieces, 0, g_count * sizeof(*g_pieces));
            g_release = 0;
            const double make_s = run_threads(threads[k]);
            int ok = 1;
            for (size_t i = 0; i < g_count; ++i)
                ok &= g_pieces[i].ok;
            /* The first copy into new pinned memory, then the same again:
             * what a first sleep pays beyond the pinning shows as the gap. */
            const double rate = ok && src && w != POPULATE ? copy_rate(src) : 0;
            const double again = ok && src && w != POPULATE ? copy_rate(src) : 0;
            g_release = 1;
            /* Only what was made goes back (a failed way: those that were). */
            size_t made = g_count;
            if (!ok) {
                made = 0;
                for (size_t i = 0; i < g_count; ++i)
                    if (g_pieces[i].ok)
                        g_pieces[made++] = g_pieces[i];
            }
            const size_t all = g_count;
            g_count = made;
            const double back_s = run_threads(threads[k]);
            g_count = all;
            const double bytes = (double)(g_count * g_piece);
            if (!ok) {
                printf("| %s | %d | failed (not supported here?) | | | | |\n", way_names[w], threads[k]);
                break;
            }
            printf("| %s | %d | %.3f | %.2f | %.3f | %.2f | %.2f |\n", way_names[w], threads[k], make_s,
                   bytes / make_s / 1e9, back_s, rate, again);
            if (out)
                fprintf(out, "%s,%d,%.0f,%.4f,%.3f,%.4f,%.3f,%.3f\n", way_names[w], threads[k], bytes, make_s,
                        bytes / make_s / 1e9, back_s, rate, again);
            fflush(stdout);
        }
    }
    if (out)
        fclose(out);
    if (src && cu.MemFree)
        cu.MemFree(src);
    free(g_pieces);
    return 0;
}
