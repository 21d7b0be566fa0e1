/*
 * The runtimes' allocator (integrations/torch/uvm_torch_alloc.c) from C, as
 * PyTorch, CuPy and Numba call it, on the CUDA backend: in CI over the
 * stand-in driver (UVM_CUDA_DRIVER_LIBRARY), on a GPU machine over the real
 * one. Streams (a runtime's own, and stream 0, the legacy stream), size 0,
 * free by pointer through the address lookup, record_stream, out of memory
 * with its report, the thread's last status (what tells an OOM from any
 * other NULL), empty_cache, a graph's private pool and the blocks kept for
 * its checkpoints, and the caller's
 * current context left as it was after every call. Exits 77 where no driver
 * with a GPU is found.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <uvm/uvm.h>

uvm_manager_t *uvm_runtime_manager(uvm_status_t *status);
uvm_client_t *uvm_runtime_set_client(uvm_client_t *client);
void *uvm_torch_malloc(ssize_t size, int device, void *stream);
void uvm_torch_free(void *ptr, size_t size, int device, void *stream);
int uvm_torch_record_stream(void *ptr, void *stream);
uint64_t uvm_torch_empty_cache(void);
void *uvm_cupy_malloc(void *param, size_t size, int device);
void uvm_cupy_free(void *param, void *ptr, int device);
void *uvm_numba_malloc(size_t size, int device);
void uvm_numba_free(void *ptr, int device);
uint64_t uvm_runtime_oom_count(void);
int uvm_runtime_last_status(void);
typedef struct {
    int64_t current, peak, allocated, freed;
} stat_t;
typedef struct {
    stat_t allocations, allocated_bytes, requested_bytes, reserved_bytes;
    uint64_t num_ooms;
} memory_stats_t; /* uvm_runtime_memory_stats_t, as the runtimes' bindings read it */
int uvm_runtime_memory_stats(int device, memory_stats_t *out);
void uvm_runtime_reset_peak_stats(int device);
void uvm_runtime_reset_accumulated_stats(int device);
void uvm_runtime_sample_reserved(int device);
int uvm_runtime_last_new_peak(void);
void *uvm_torch_malloc_to_pool(ssize_t size, int device, void *stream, uvm_pool_t *pool);
uvm_pool_t *uvm_runtime_pool_create(int device);
int uvm_runtime_pool_destroy(uvm_pool_t *pool);
int uvm_runtime_keep(void *ptr, int device, int keep);
void uvm_runtime_free_kept(void *ptr, int device, void *stream);
int uvm_runtime_set_memory_limit(int device, uint64_t bytes);
uint64_t uvm_runtime_memory_limit(int device);
size_t uvm_runtime_oom_message(char *buf, size_t size);

static int failures;
#define CHECK(cond)                                                             \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                         \
        }                                                                       \
    } while (0)

static CUresult (*ctx_get)(CUcontext *);
static CUresult (*ctx_set)(CUcontext);
static CUresult (*stream_create)(CUstream *, unsigned int);
static CUresult (*stream_destroy)(CUstream);
static CUresult (*primary_retain)(CUcontext *, CUdevice);
static CUresult (*primary_release)(CUdevice);

static CUcontext current(void) {
    CUcontext c = (CUcontext)(uintptr_t)0xbad;
    CHECK(ctx_get(&c) == CUDA_SUCCESS);
    return c;
}

/* The object a pointer of GPU `gpu` names, and its offset (NULL: none). */
static uvm_mem_t *object_at(uvm_manager_t *mgr, uint32_t gpu, void *p, uint64_t *offset) {
    uvm_mem_t *m = NULL;
    return uvm_mem_lookup_gpu_kernel(mgr, gpu, (uint64_t)(uintptr_t)p, &m, offset) == UVM_OK ? m : NULL;
}

/* Every call, made with `mine` current, leaves it current. */
static void run_with_context(uvm_manager_t *mgr, uint32_t gpus, CUcontext mine, CUstream own) {
    CHECK(ctx_set(mine) == CUDA_SUCCESS);
    const size_t M = 1u << 20;

    /* Size 0: NULL, as cudaMalloc(0), and no failure; its free does nothing. */
    CHECK(uvm_torch_malloc(0, 0, NULL) == NULL);
    CHECK(uvm_runtime_last_status() == UVM_OK);
    uvm_torch_free(NULL, 0, 0, NULL);
    CHECK(uvm_cupy_malloc(NULL, 0, 0) == NULL);

    /* Stream 0 (the legacy stream) and a stream of the runtime's own. */
    void *streams[2] = {NULL, own};
    for (int s = 0; s < 2; ++s)
        for (uint32_t gpu = 0; gpu < gpus; ++gpu) {
            void *a = uvm_torch_malloc(3 * M, (int)gpu, streams[s]);
            void *b = uvm_torch_malloc(100 * 1024, (int)gpu, streams[s]);
            CHECK(a && b && a != b);
            CHECK(uvm_runtime_last_status() == UVM_OK);
            CHECK(current() == mine);
            uint64_t offset = 1;
            uvm_mem_t *obj = object_at(mgr, gpu, a, &offset);
            CHECK(obj && offset == 0);
            uvm_mem_info_t info;
            CHECK(obj && uvm_mem_info(mgr, obj, &info) == UVM_OK && info.size == 3 * M && info.gpu == gpu &&
                  info.backing == UVM_BACKING_VIDMEM);
            CHECK(object_at(mgr, gpu, (char *)b + 100 * 1024 - 1, &offset) && offset == 100 * 1024 - 1);
            CHECK(uvm_torch_record_stream(a, streams[1 - s]) == 0);  /* used on the other stream too */
            CHECK(uvm_torch_record_stream((void *)(uintptr_t)0x1000, streams[s]) == -1);
            /* A pointer inside a block is not a block: refused, the block stays. */
            uvm_torch_free((char *)a + 4096, 3 * M, (int)gpu, streams[s]);
            CHECK(object_at(mgr, gpu, a, NULL) == obj);
            uvm_torch_free(a, 3 * M, (int)gpu, streams[s]);
            uvm_torch_free(b, 100 * 1024, (int)gpu, streams[s]);
            CHECK(object_at(mgr, gpu, a, NULL) == NULL);
            CHECK(current() == mine);
            /* Freed on a stream, taken again on it at once (stream order). */
            void *again = uvm_torch_malloc(3 * M, (int)gpu, streams[s]);
            CHECK(again != NULL);
            uvm_torch_free(again, 3 * M, (int)gpu, streams[s]);
        }
    /* Bad devices: NULL, nothing taken. */
    CHECK(uvm_torch_malloc((ssize_t)M, UVM_MAX_GPUS, NULL) == NULL);
    CHECK(uvm_runtime_last_status() == UVM_ERR_INVALID_GPU);
    CHECK(uvm_torch_malloc((ssize_t)M, -1, NULL) == NULL);
    CHECK(uvm_runtime_last_status() == UVM_ERR_INVALID_GPU);
    CHECK(uvm_torch_malloc(-5, 0, NULL) == NULL);
    CHECK(uvm_runtime_last_status() == UVM_ERR_INVALID_ARGUMENT);

    /* CuPy and Numba: no stream, no size at free. */
    void *c = uvm_cupy_malloc(NULL, 5 * M, (int)(gpus - 1));
    void *n = uvm_numba_malloc(64 * 1024, 0);
    CHECK(c && n);
    uvm_mem_t *cobj = object_at(mgr, gpus - 1, c, NULL);
    uvm_mem_info_t ci;
    CHECK(cobj && uvm_mem_info(mgr, cobj, &ci) == UVM_OK && ci.size == 5 * M);
    uvm_cupy_free(NULL, c, (int)(gpus - 1));
    uvm_numba_free(n, 0);
    CHECK(object_at(mgr, gpus - 1, c, NULL) == NULL && object_at(mgr, 0, n, NULL) == NULL);

    /* Out of memory under a client's budget: NULL, counted, and the
     * thread's report says who holds what. */
    uvm_client_t *client = NULL;
    CHECK(uvm_client_create(mgr, "kv-cache", &client) == UVM_OK);
    CHECK(uvm_client_set_budget(mgr, client, 0, 8 * M) == UVM_OK);
    CHECK(uvm_runtime_set_client(client) == NULL);
    void *held = uvm_torch_malloc(6 * M, 0, NULL);
    CHECK(held != NULL);
    const uint64_t ooms = uvm_runtime_oom_count();
    CHECK(uvm_torch_malloc(4 * M, 0, NULL) == NULL);
    CHECK(uvm_runtime_last_status() == UVM_ERR_OUT_OF_MEMORY);
    CHECK(uvm_runtime_oom_count() == ooms + 1);
    char report[8192];
    size_t needed = 0;
    CHECK(uvm_oom_report(mgr, UVM_REPORT_TEXT, report, sizeof(report), &needed) == UVM_OK);
    CHECK(strstr(report, "kv-cache") != NULL);
    uvm_client_info_t info;
    CHECK(uvm_client_info(mgr, client, &info) == UVM_OK && info.objects == 1);
    CHECK(uvm_runtime_set_client(NULL) == client);
    uvm_torch_free(held, 6 * M, 0, NULL);
    CHECK(uvm_client_destroy(mgr, client) == UVM_OK);
    CHECK(current() == mine);

    /* empty_cache: what the pools hold goes back to the driver. */
    uvm_gpu_stats_t before, after;
    CHECK(uvm_gpu_stats(mgr, 0, &before) == UVM_OK);
    const uint64_t released = uvm_torch_empty_cache();
    CHECK(uvm_gpu_stats(mgr, 0, &after) == UVM_OK);
    CHECK(after.root_chunks == 0);
    CHECK(before.root_chunks == 0 || released > 0);
    CHECK(current() == mine);
}

/* Eight threads' pairs at once, each on the legacy stream: the figures,
 * kept under one lock for every thread, add up to every pair (a lost
 * update under a broken lock leaves allocations or bytes behind). */
enum { kStatThreads = 8, kStatPairs = 2000 };
static void *stats_pairs(void *arg) {
    const size_t sizes[4] = {512, 64 * 1024, 1u << 20, 3u << 20};
    long bad = 0;
    for (int i = 0; i < kStatPairs; ++i) {
        const size_t size = sizes[(i + (int)(intptr_t)arg) % 4];
        void *p = uvm_torch_malloc((ssize_t)size, 0, NULL);
        bad += p == NULL;
        uvm_torch_free(p, size, 0, NULL);
    }
    return (void *)(intptr_t)bad;
}

static void stats_from_threads(void) {
    memory_stats_t before, after;
    uvm_runtime_reset_accumulated_stats(0);
    CHECK(uvm_runtime_memory_stats(0, &before) == 0);
    pthread_t threads[kStatThreads];
    for (int t = 0; t < kStatThreads; ++t)
        CHECK(pthread_create(&threads[t], NULL, stats_pairs, (void *)(intptr_t)t) == 0);
    for (int t = 0; t < kStatThreads; ++t) {
        void *bad = NULL;
        CHECK(pthread_join(threads[t], &bad) == 0 && bad == NULL);
    }
    CHECK(uvm_runtime_memory_stats(0, &after) == 0);
    CHECK(after.allocations.current == before.allocations.current);
    CHECK(after.allocated_bytes.current == before.allocated_bytes.current);
    CHECK(after.requested_bytes.current == before.requested_bytes.current);
    CHECK(after.allocations.allocated == (int64_t)kStatThreads * kStatPairs);
    CHECK(after.allocations.freed == (int64_t)kStatThreads * kStatPairs);
    CHECK(after.allocated_bytes.allocated == after.allocated_bytes.freed);
    CHECK(after.requested_bytes.allocated == (int64_t)kStatThreads * kStatPairs / 4 * (512 + 64 * 1024 + (1 << 20) + (3 << 20)));
}

/* The figures PyTorch's memory statistics are made of (torch.cuda.memory_stats
 * under uvm.torch): counts and bytes of what went through the allocator,
 * their peaks and totals, the resets, and the library's held bytes. */
static void memory_stats(uvm_manager_t *mgr) {
    const size_t M = 1u << 20;
    memory_stats_t a, b;
    CHECK(uvm_runtime_memory_stats(-1, &a) == -1);
    CHECK(uvm_runtime_memory_stats(UVM_MAX_GPUS, &a) == -1);
    CHECK(uvm_runtime_memory_stats(0, NULL) == -1);
    uvm_runtime_reset_peak_stats(0);
    uvm_runtime_reset_accumulated_stats(0);
    CHECK(uvm_runtime_memory_stats(0, &a) == 0);
    CHECK(a.allocated_bytes.allocated == 0 && a.allocated_bytes.freed == 0 && a.num_ooms == 0);
    CHECK(a.allocated_bytes.peak == a.allocated_bytes.current);
    void *p[3];
    const size_t sizes[3] = {3 * M + 5, 100 * 1024, 20 * M};
    for (int i = 0; i < 3; ++i) {
        p[i] = uvm_torch_malloc((ssize_t)sizes[i], 0, NULL);
        CHECK(p[i] != NULL);
        CHECK(uvm_runtime_last_new_peak() == 1);  /* each raised the peak: nothing was freed */
        uvm_runtime_sample_reserved(0);
    }
    CHECK(uvm_runtime_memory_stats(0, &b) == 0);
    CHECK(b.allocations.current == a.allocations.current + 3);
    CHECK(b.allocations.allocated == 3);
    CHECK(b.requested_bytes.current - a.requested_bytes.current == (int64_t)(sizes[0] + sizes[1] + sizes[2]));
    /* Each object's size as the library made it: rounded up, never less. */
    int64_t made = 0;
    for (int i = 0; i < 3; ++i) {
        uvm_mem_t *m = object_at(mgr, 0, p[i], NULL);
        uvm_mem_info_t info;
        CHECK(m && uvm_mem_info(mgr, m, &info) == UVM_OK);
        made += m ? (int64_t)info.alloc_size : 0;
    }
    CHECK(b.allocated_bytes.current - a.allocated_bytes.current == made);
    CHECK(b.allocated_bytes.peak == b.allocated_bytes.current);
    uvm_gpu_stats_t g;
    CHECK(uvm_gpu_stats(mgr, 0, &g) == UVM_OK);
    CHECK(b.reserved_bytes.current == (int64_t)g.held_bytes);
    CHECK(b.reserved_bytes.current >= b.allocated_bytes.current);
    CHECK(b.reserved_bytes.peak >= b.reserved_bytes.current);
    for (int i = 0; i < 3; ++i)
        uvm_torch_free(p[i], sizes[i], 0, NULL);
    memory_stats_t c;
    CHECK(uvm_runtime_memory_stats(0, &c) == 0);
    CHECK(c.allocations.current == a.allocations.current);
    CHECK(c.allocated_bytes.current == a.allocated_bytes.current);
    CHECK(c.allocated_bytes.freed == made);
    CHECK(c.allocated_bytes.peak == b.allocated_bytes.peak);  /* kept after the frees */
    CHECK(c.reserved_bytes.peak >= b.reserved_bytes.current);
    uvm_runtime_reset_peak_stats(0);
    CHECK(uvm_runtime_memory_stats(0, &c) == 0);
    CHECK(c.allocated_bytes.peak == c.allocated_bytes.current);
    CHECK(c.reserved_bytes.peak == c.reserved_bytes.current);
    CHECK(c.allocated_bytes.allocated == made);  /* a peak reset keeps the totals */
    uvm_runtime_reset_accumulated_stats(0);
    CHECK(uvm_runtime_memory_stats(0, &c) == 0);
    CHECK(c.allocated_bytes.allocated == 0 && c.allocated_bytes.freed == 0 && c.allocations.allocated == 0);
    /* A refusal counts as an OOM. */
    uvm_gpu_info_t gi;
    CHECK(uvm_gpu_info(mgr, 0, &gi) == UVM_OK);
    CHECK(uvm_torch_malloc((ssize_t)(gi.memory_total * 2), 0, NULL) == NULL);
    CHECK(uvm_runtime_memory_stats(0, &c) == 0);
    if (uvm_runtime_last_status() == UVM_ERR_OUT_OF_MEMORY)
        CHECK(c.num_ooms == 1);
}

/* The GPU itself full, with `mine` current: blocks of an eighth of it until
 * one is refused, with the status and the report; everything given back
 * after, and `mine` still current. */
static void device_full(uvm_manager_t *mgr, CUcontext mine) {
    CHECK(ctx_set(mine) == CUDA_SUCCESS);
    uvm_gpu_info_t gi;
    CHECK(uvm_gpu_info(mgr, 0, &gi) == UVM_OK);
    const size_t block = (size_t)(gi.memory_total / 8) & ~(size_t)((2u << 20) - 1);
    void *held[16];
    int n = 0;
    const uint64_t ooms = uvm_runtime_oom_count();
    while (n < 16 && (held[n] = uvm_torch_malloc((ssize_t)block, 0, NULL)) != NULL)
        n++;
    CHECK(n >= 4 && n < 16);
    CHECK(uvm_runtime_last_status() == UVM_ERR_OUT_OF_MEMORY);
    CHECK(uvm_runtime_oom_count() == ooms + 1);
    CHECK(current() == mine);
    char report[8192];
    size_t needed = 0;
    CHECK(uvm_oom_report(mgr, UVM_REPORT_TEXT, report, sizeof(report), &needed) == UVM_OK);
    CHECK(strstr(report, "the largest request that would fit") != NULL);
    for (int i = 0; i < n; ++i)
        uvm_torch_free(held[i], block, 0, NULL);
    void *again = uvm_torch_malloc((ssize_t)block, 0, NULL);  /* the memory is back */
    CHECK(again != NULL);
    uvm_torch_free(again, block, 0, NULL);
    uvm_torch_empty_cache();
    CHECK(current() == mine);
}

/* A graph's private pool (PyTorch's beginAllocateToPool, through the C++
 * side): blocks to it are its, their memory its again when freed and
 * nobody else's, and back once it is destroyed. */
static void graph_pool(uvm_manager_t *mgr, CUcontext mine, CUstream own) {
    CHECK(ctx_set(mine) == CUDA_SUCCESS);
    const size_t M = 1u << 20;
    uvm_pool_t *pool = uvm_runtime_pool_create(0);
    CHECK(pool != NULL);
    CHECK(uvm_runtime_pool_create(-1) == NULL && uvm_runtime_last_status() == UVM_ERR_INVALID_GPU);
    if (!pool)
        return;
    void *a = uvm_torch_malloc_to_pool((ssize_t)(4 * M), 0, own, pool);
    CHECK(a != NULL && current() == mine);
    uvm_pool_info_t info;
    CHECK(uvm_pool_info(mgr, pool, &info) == UVM_OK && info.objects == 1 && info.live_bytes == 4 * M);
    uvm_torch_free(a, 4 * M, 0, own);
    CHECK(uvm_pool_info(mgr, pool, &info) == UVM_OK && info.objects == 0 && info.free_bytes == 4 * M);
    void *other = uvm_torch_malloc((ssize_t)(4 * M), 0, own); /* not to the pool: not its memory */
    void *again = uvm_torch_malloc_to_pool((ssize_t)(4 * M), 0, own, pool);
    CHECK(other != NULL && other != a);
    CHECK(again == a);
    CHECK(uvm_torch_malloc_to_pool(-1, 0, own, pool) == NULL && uvm_runtime_last_status() == UVM_ERR_INVALID_ARGUMENT);
    uvm_torch_free(again, 4 * M, 0, own);
    uvm_torch_free(other, 4 * M, 0, own);
    CHECK(uvm_runtime_pool_destroy(pool) == UVM_OK);
    CHECK(uvm_runtime_pool_destroy(pool) == UVM_ERR_INVALID_HANDLE);
    uvm_torch_empty_cache();
    uvm_gpu_stats_t g;
    CHECK(uvm_gpu_stats(mgr, 0, &g) == UVM_OK && g.held_private_bytes == 0);
    CHECK(current() == mine);
}

/* A block of a graph's pool kept for a checkpoint (uvm.torch's graph
 * trees): out of the figures while kept, back in when handed out again, its
 * object alive and its address the same throughout; freed for good without
 * a second count; bad pointers refused, changing nothing. */
static void kept_blocks(uvm_manager_t *mgr, CUcontext mine, CUstream own) {
    CHECK(ctx_set(mine) == CUDA_SUCCESS);
    const size_t M = 1u << 20;
    uvm_pool_t *pool = uvm_runtime_pool_create(0);
    CHECK(pool != NULL);
    if (!pool)
        return;
    memory_stats_t a, b;
    CHECK(uvm_runtime_memory_stats(0, &a) == 0);
    void *p = uvm_torch_malloc_to_pool((ssize_t)(3 * M + 7), 0, own, pool);
    CHECK(p != NULL);
    uvm_mem_t *m = object_at(mgr, 0, p, NULL);
    uvm_mem_info_t info;
    CHECK(m && uvm_mem_info(mgr, m, &info) == UVM_OK);
    CHECK(uvm_runtime_keep(p, 0, 1) == 0);
    CHECK(uvm_runtime_memory_stats(0, &b) == 0);
    CHECK(b.allocations.current == a.allocations.current);
    CHECK(b.allocated_bytes.current == a.allocated_bytes.current);
    CHECK(b.requested_bytes.current == a.requested_bytes.current);
    CHECK(object_at(mgr, 0, p, NULL) == m);  /* still the pool's object, at its address */
    uvm_pool_info_t pi;
    CHECK(uvm_pool_info(mgr, pool, &pi) == UVM_OK && pi.objects == 1);
    CHECK(uvm_runtime_keep(p, 0, 0) == 0);  /* handed out again */
    CHECK(uvm_runtime_memory_stats(0, &b) == 0);
    CHECK(b.allocations.current == a.allocations.current + 1);
    CHECK(b.allocated_bytes.current == a.allocated_bytes.current + (int64_t)info.alloc_size);
    CHECK(b.requested_bytes.current == a.requested_bytes.current + (int64_t)(3 * M + 7));
    /* Bad input: no object there, an address inside it, a bad GPU. */
    CHECK(uvm_runtime_keep(NULL, 0, 1) == -1);
    CHECK(uvm_runtime_keep((char *)p + 4096, 0, 1) == -1);
    CHECK(uvm_runtime_keep(p, -1, 1) == -1 && uvm_runtime_keep(p, UVM_MAX_GPUS, 1) == -1);
    CHECK(uvm_runtime_memory_stats(0, &b) == 0 && b.allocations.current == a.allocations.current + 1);
    CHECK(uvm_runtime_keep(p, 0, 1) == 0);
    uvm_runtime_free_kept(p, 0, own);  /* for good, counted once (at the keep) */
    CHECK(uvm_runtime_memory_stats(0, &b) == 0);
    CHECK(b.allocations.current == a.allocations.current);
    CHECK(b.allocated_bytes.current == a.allocated_bytes.current);
    CHECK(object_at(mgr, 0, p, NULL) == NULL);
    CHECK(uvm_pool_info(mgr, pool, &pi) == UVM_OK && pi.objects == 0);
    CHECK(uvm_runtime_pool_destroy(pool) == UVM_OK);
    uvm_torch_empty_cache();
    CHECK(current() == mine);
}

/* The runtimes' limit on a GPU (PyTorch's set_per_process_memory_fraction):
 * allocations over it are out of memory with their own report, what is
 * allocated stays, and threads racing for the last bytes never take the
 * GPU's allocated bytes over it. */
static int limit_threads_over;
static void *limit_pairs(void *arg) {
    (void)arg;
    for (int i = 0; i < 400; ++i) {
        void *p = uvm_torch_malloc((ssize_t)(1u << 20), 0, NULL);
        memory_stats_t st;
        if (uvm_runtime_memory_stats(0, &st) == 0 && (uint64_t)st.allocated_bytes.current > uvm_runtime_memory_limit(0))
            __atomic_fetch_add(&limit_threads_over, 1, __ATOMIC_RELAXED);
        if (!p && uvm_runtime_last_status() != UVM_ERR_OUT_OF_MEMORY)
            __atomic_fetch_add(&limit_threads_over, 1000, __ATOMIC_RELAXED);
        uvm_torch_free(p, 1u << 20, 0, NULL);
    }
    return NULL;
}

static void memory_limit(CUcontext mine) {
    CHECK(ctx_set(mine) == CUDA_SUCCESS);
    const size_t M = 1u << 20;
    memory_stats_t a, b;
    CHECK(uvm_runtime_memory_limit(0) == 0);
    CHECK(uvm_runtime_memory_stats(0, &a) == 0);
    const uint64_t limit = (uint64_t)a.allocated_bytes.current + 6 * M;
    CHECK(uvm_runtime_set_memory_limit(0, limit) == 0 && uvm_runtime_memory_limit(0) == limit);
    uvm_runtime_reset_peak_stats(0);
    void *x = uvm_torch_malloc((ssize_t)(4 * M), 0, NULL);
    CHECK(x != NULL && uvm_runtime_last_status() == UVM_OK);
    CHECK(uvm_runtime_last_new_peak() == 1);
    const uint64_t ooms = uvm_runtime_oom_count();
    CHECK(uvm_torch_malloc((ssize_t)(4 * M), 0, NULL) == NULL); /* 8 MiB > 6 */
    CHECK(uvm_runtime_last_status() == UVM_ERR_OUT_OF_MEMORY);
    CHECK(uvm_runtime_last_new_peak() == 0); /* the refused one made none */
    CHECK(uvm_runtime_oom_count() == ooms + 1);
    char text[512];
    const size_t needed = uvm_runtime_oom_message(text, sizeof(text));
    CHECK(needed > 0 && needed <= sizeof(text) && strstr(text, "limit") != NULL);
    CHECK(uvm_torch_malloc((ssize_t)(100 * M), 0, NULL) == NULL); /* over it alone */
    CHECK(uvm_runtime_last_status() == UVM_ERR_OUT_OF_MEMORY);
    CHECK(uvm_runtime_memory_stats(0, &b) == 0 && b.allocations.current == a.allocations.current + 1);
    void *y = uvm_torch_malloc((ssize_t)(2 * M), 0, NULL); /* exactly up to it */
    CHECK(y != NULL);
    uvm_torch_free(y, 2 * M, 0, NULL);
    uvm_torch_free(x, 4 * M, 0, NULL);
    /* A limit under what is allocated: the next allocation fails, nothing is taken away. */
    x = uvm_torch_malloc((ssize_t)(2 * M), 0, NULL);
    CHECK(x != NULL);
    CHECK(uvm_runtime_set_memory_limit(0, (uint64_t)a.allocated_bytes.current + M) == 0);
    CHECK(uvm_torch_malloc(512, 0, NULL) == NULL && uvm_runtime_last_status() == UVM_ERR_OUT_OF_MEMORY);
    CHECK(object_at(uvm_runtime_manager(NULL), 0, x, NULL) != NULL);
    uvm_torch_free(x, 2 * M, 0, NULL);
    /* Threads racing for the last bytes. */
    CHECK(uvm_runtime_set_memory_limit(0, (uint64_t)a.allocated_bytes.current + 3 * M) == 0);
    pthread_t threads[4];
    for (int t = 0; t < 4; ++t)
        CHECK(pthread_create(&threads[t], NULL, limit_pairs, NULL) == 0);
    for (int t = 0; t < 4; ++t)
        CHECK(pthread_join(threads[t], NULL) == 0);
    CHECK(limit_threads_over == 0);
    CHECK(uvm_runtime_memory_stats(0, &b) == 0 && b.allocated_bytes.current == a.allocated_bytes.current);
    /* A forked child: the limit is plain state it may read and set, and an
     * allocation under it reaches the parent's manager, which refuses a
     * child (UVM_ERR_FORKED) and touches nothing. */
    {
        const pid_t child = fork();
        if (child == 0) {
            int bad = uvm_runtime_memory_limit(0) != (uint64_t)a.allocated_bytes.current + 3 * M;
            bad |= uvm_runtime_set_memory_limit(0, 0) != 0 || uvm_runtime_memory_limit(0) != 0;
            bad |= uvm_torch_malloc((ssize_t)M, 0, NULL) != NULL || uvm_runtime_last_status() != UVM_ERR_FORKED;
            _exit(bad);
        }
        int wstatus = 0;
        CHECK(child > 0 && waitpid(child, &wstatus, 0) == child);
        CHECK(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
        CHECK(uvm_runtime_memory_limit(0) == (uint64_t)a.allocated_bytes.current + 3 * M); /* the parent's unchanged */
    }
    /* Bad input; then no limit again. */
    CHECK(uvm_runtime_set_memory_limit(-1, M) == -1 && uvm_runtime_set_memory_limit(UVM_MAX_GPUS, M) == -1);
    CHECK(uvm_runtime_memory_limit(-1) == 0 && uvm_runtime_memory_limit(UVM_MAX_GPUS) == 0);
    CHECK(uvm_runtime_set_memory_limit(0, 0) == 0 && uvm_runtime_memory_limit(0) == 0);
    x = uvm_torch_malloc((ssize_t)(100 * M), 0, NULL);
    CHECK(x != NULL);
    uvm_torch_free(x, 100 * M, 0, NULL);
    uvm_torch_empty_cache();
    CHECK(current() == mine);
}

int main(void) {
    const char *path = getenv("UVM_CUDA_DRIVER_LIBRARY");
    void *driver = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!driver) {
        printf("torch_alloc: skipped: no CUDA driver (%s)\n", dlerror());
        return 77;
    }
    ctx_get = (CUresult(*)(CUcontext *))dlsym(driver, "cuCtxGetCurrent");
    ctx_set = (CUresult(*)(CUcontext))dlsym(driver, "cuCtxSetCurrent");
    stream_create = (CUresult(*)(CUstream *, unsigned int))dlsym(driver, "cuStreamCreate");
    stream_destroy = (CUresult(*)(CUstream))dlsym(driver, "cuStreamDestroy_v2");
    if (!stream_destroy)
        stream_destroy = (CUresult(*)(CUstream))dlsym(driver, "cuStreamDestroy");
    primary_retain = (CUresult(*)(CUcontext *, CUdevice))dlsym(driver, "cuDevicePrimaryCtxRetain");
    primary_release = (CUresult(*)(CUdevice))dlsym(driver, "cuDevicePrimaryCtxRelease_v2");
    if (!primary_release)
        primary_release = (CUresult(*)(CUdevice))dlsym(driver, "cuDevicePrimaryCtxRelease");
    if (!ctx_get || !ctx_set || !stream_create || !stream_destroy || !primary_retain || !primary_release) {
        fprintf(stderr, "torch_alloc: the driver lacks a function this test calls\n");
        return 1;
    }
    uvm_status_t status = UVM_OK;
    uvm_manager_t *mgr = uvm_runtime_manager(&status);
    if (!mgr && (status == UVM_ERR_NO_DEVICE || status == UVM_ERR_NOT_SUPPORTED)) {
        printf("torch_alloc: skipped: %s\n", uvm_status_string(status));
        return 77;
    }
    CHECK(mgr != NULL && uvm_runtime_manager(NULL) == mgr);  /* one manager per process */
    if (!mgr)
        return 1;
    uint32_t gpus = 0;
    CHECK(uvm_gpu_count(mgr, &gpus) == UVM_OK && gpus >= 1);
    CHECK(current() == NULL);  /* making the manager set no context for good */

    /* A stream of the runtime's own, made on GPU 0's primary context. */
    CUcontext gpu0 = NULL, last = NULL;
    CHECK(primary_retain(&gpu0, 0) == CUDA_SUCCESS);
    CHECK(ctx_set(gpu0) == CUDA_SUCCESS);
    CUstream own = NULL;
    CHECK(stream_create(&own, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    /* ... but allocations on GPU 1 need a stream of GPU 1: only GPU 0 gets `own`. */
    const uint32_t gpus_for_own = 1;

    /* With no context current, then with another GPU's current (as a
     * runtime working on device gpus-1 has it). */
    if (gpus > 1)
        CHECK(primary_retain(&last, (CUdevice)(gpus - 1)) == CUDA_SUCCESS);
    run_with_context(mgr, gpus_for_own, NULL, own);
    run_with_context(mgr, gpus, NULL, NULL);
    if (last)
        run_with_context(mgr, gpus, last, NULL);
    run_with_context(mgr, gpus_for_own, gpu0, own);

    /* The GPU itself full, with no context current and with GPU 0's primary
     * context current (as PyTorch has it when it allocates). */
    device_full(mgr, NULL);
    device_full(mgr, gpu0);
    memory_stats(mgr);
    stats_from_threads();
    graph_pool(mgr, gpu0, own);
    kept_blocks(mgr, gpu0, own);
    memory_limit(gpu0);

    CHECK(ctx_set(gpu0) == CUDA_SUCCESS);
    CHECK(stream_destroy(own) == CUDA_SUCCESS);
    CHECK(ctx_set(NULL) == CUDA_SUCCESS);
    primary_release(0);
    if (last)
        primary_release((CUdevice)(gpus - 1));
    if (failures) {
        fprintf(stderr, "torch_alloc: %d checks failed\n", failures);
        return 1;
    }
    printf("torch_alloc: every check passed (%u GPUs)\n", gpus);
    return 0;
}
