/*
 * handle_release: what giving back many small driver handles costs, and
 * what could make it cheaper (issue 44: a sleepable client's first sleep
 * gives back the 2 MiB handles its roots grew in, one each, where later
 * sleeps give back the few long handles the wake made). For --count N
 * handles of --mib M MiB mapped side by side in one reservation (with
 * access granted, as the library's roots are), each way is timed from the
 * first call to the last:
 *
 *   each      cuMemUnmap then cuMemRelease, handle by handle (the library now)
 *   one_unmap one cuMemUnmap over the whole range, then each cuMemRelease
 *   threads   one cuMemUnmap, then the releases from --threads T threads
 *
 * and, for the same memory as handles of --long-mib MiB, the "each" way
 * (what a later sleep pays). The driver is loaded at run time
 * (UVM_CUDA_DRIVER_LIBRARY or libcuda.so.1).
 *
 *   cc -O2 -I/usr/local/cuda/include bench/handle_release.c -o handle_release -ldl -lpthread
 *   ./handle_release --count 5120 --mib 2 --threads 8 --long-mib 64
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

#include "driver_table.h"

static CUcontext ctx;
static CUdevice dev;

static int load_driver(void) {
    const char *path = getenv("UVM_CUDA_DRIVER_LIBRARY");
    void *h = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "handle_release: no CUDA driver (%s)\n", dlerror());
        return 0;
    }
    driver_table_load(h);
    return cu.Init && cu.Init(0) == CUDA_SUCCESS && cu.DeviceGet(&dev, 0) == CUDA_SUCCESS &&
           cu.DevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && cu.CtxSetCurrent(ctx) == CUDA_SUCCESS &&
           cu.MemCreate && cu.MemRelease && cu.MemAddressReserve && cu.MemAddressFree && cu.MemMap && cu.MemUnmap &&
           cu.MemSetAccess;
}

static CUmemGenericAllocationHandle *g_handles;
static size_t g_next, g_n;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_failed;

static void *releaser(void *arg) {
    (void)arg;
    cu.CtxSetCurrent(ctx);
    for (;;) {
        pthread_mutex_lock(&g_lock);
        const size_t i = g_next++;
        pthread_mutex_unlock(&g_lock);
        if (i >= g_n)
            return NULL;
        if (cu.MemRelease(g_handles[i]) != CUDA_SUCCESS)
            g_failed = 1;
    }
}

/* `n` handles of `size` bytes mapped side by side at `base`, access granted
 * over the whole range (one call). 0 on failure (what was made is released). */
static int make(CUdeviceptr base, size_t n, size_t size) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    for (size_t i = 0; i < n; ++i) {
        if (cu.MemCreate(&g_handles[i], size, &prop, 0) != CUDA_SUCCESS ||
            cu.MemMap(base + i * size, size, 0, g_handles[i], 0) != CUDA_SUCCESS) {
            fprintf(stderr, "handle_release: handle %zu of %zu not made\n", i, n);
            return 0;
        }
    }
    CUmemAccessDesc access;
    memset(&access, 0, sizeof(access));
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = dev;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return cu.MemSetAccess(base, n * size, &access, 1) == CUDA_SUCCESS;
}

enum way { EACH, ONE_UNMAP, THREADS };
static const char *names[] = {"each", "one_unmap", "threads"};

/* Seconds to give the `n` handles back the way `w`; negative on failure. */
static double give_back(enum way w, CUdeviceptr base, size_t n, size_t size, int threads) {
    const double start = now();
    if (w == EACH) {
        for (size_t i = 0; i < n; ++i)
            if (cu.MemUnmap(base + i * size, size) != CUDA_SUCCESS || cu.MemRelease(g_handles[i]) != CUDA_SUCCESS)
                return -1;
        return now() - start;
    }
    if (cu.MemUnmap(base, n * size) != CUDA_SUCCESS) {
        fprintf(stderr, "handle_release: one cuMemUnmap over %zu mappings refused\n", n);
        for (size_t i = 0; i < n; ++i) {  /* back the usual way, so that the run goes on */
            cu.MemUnmap(base + i * size, size);
            cu.MemRelease(g_handles[i]);
        }
        return -1;
    }
    if (w == ONE_UNMAP) {
        for (size_t i = 0; i < n; ++i)
            if (cu.MemRelease(g_handles[i]) != CUDA_SUCCESS)
                return -1;
        return now() - start;
    }
    pthread_t t[64];
    g_next = 0;
    g_n = n;
    g_failed = 0;
    for (int i = 0; i < threads; ++i)
        pthread_create(&t[i], NULL, releaser, NULL);
    for (int i = 0; i < threads; ++i)
        pthread_join(t[i], NULL);
    return g_failed ? -1 : now() - start;
}

int main(int argc, char **argv) {
    size_t count = 5120, mib = 2, long_mib = 64;
    int threads = 8, rounds = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--count"))
            count = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--mib"))
            mib = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--long-mib"))
            long_mib = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: handle_release [--count N] [--mib M] [--long-mib L] [--threads T] [--rounds R]\n");
            return 2;
        }
    }
    if (!count || !mib || !long_mib || (count * mib) % long_mib || threads < 1 || threads > 64) {
        fprintf(stderr, "handle_release: --count * --mib a multiple of --long-mib, --threads 1 to 64\n");
        return 2;
    }
    if (!load_driver()) {
        fprintf(stderr, "handle_release: the driver has no GPU or lacks a call\n");
        return 77;
    }
    const size_t bytes = count * mib * MIB;
    g_handles = calloc(count, sizeof(*g_handles));
    CUdeviceptr base = 0;
    if (!g_handles || cu.MemAddressReserve(&base, bytes, 2 * MIB, 0, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "handle_release: no reservation of %zu MiB\n", bytes / MIB);
        return 1;
    }
    printf("%zu handles of %zu MiB (%zu MiB); the same as %zu handles of %zu MiB\n\n", count, mib, bytes / MIB,
           bytes / (long_mib * MIB), long_mib);
    printf("| round | way | handles | seconds | us a handle |\n| --- | --- | --- | --- | --- |\n");
    int rc = 0;
    for (int r = 1; r <= rounds; ++r) {
        for (int w = EACH; w <= THREADS; ++w) {
            if (!make(base, count, mib * MIB)) {
                rc = 1;
                break;
            }
            const double s = give_back((enum way)w, base, count, mib * MIB, threads);
            if (s < 0)
                printf("| %d | %s | %zu | failed | |\n", r, names[w], count);
            else
                printf("| %d | %s%s | %zu | %.4f | %.1f |\n", r, names[w], w == THREADS ? " (threads)" : "", count, s,
                       s * 1e6 / (double)count);
        }
        const size_t n = bytes / (long_mib * MIB);
        if (!make(base, n, long_mib * MIB)) {
            rc = 1;
            break;
        }
        const double s = give_back(EACH, base, n, long_mib * MIB, 1);
        printf("| %d | each, %zu MiB handles | %zu | %.4f | %.1f |\n", r, long_mib, n, s, s * 1e6 / (double)n);
        fflush(stdout);
    }
    cu.MemAddressFree(base, bytes);
    free(g_handles);
    return rc;
}
