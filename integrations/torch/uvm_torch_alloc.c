/*
 * uvm_torch_alloc.c - the runtimes' allocator over the C API: PyTorch's
 * CUDAPluggableAllocator, CuPy's CFunctionAllocator and the Numba EMM plugin
 * (python/uvm/torch.py, cupy.py, numba.py) all allocate through here, from
 * one manager per process (CUDA backend), so one set of clients and budgets
 * covers every runtime in the process. docs/integrations.md says how to use it.
 *
 * Memory is stream-ordered: an allocation is uvm_mem_alloc_gpu on the
 * caller's stream (adopted once per CUstream; stream 0 is the driver's
 * legacy stream, UVM_STREAM_LEGACY), a free is uvm_mem_free_async on the
 * stream the block was allocated on, as cudaMallocAsync/cudaFreeAsync. A
 * pointer is found again by the manager's lock-free address lookup
 * (uvm_mem_lookup_gpu_kernel): no map of our own. Out of memory returns NULL
 * and leaves the library's OOM report for the calling thread
 * (uvm_oom_report), which the Python side raises as the runtime's
 * out-of-memory error. Any failure leaves its status for the thread
 * (uvm_runtime_last_status): a NULL alone cannot tell out of memory from a
 * stream that could not be adopted, and only the first is an OOM.
 *
 * Thread-safe. The CUDA current context of the calling thread is left as it
 * was (the library restores it after every driver call).
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <uvm/uvm.h>
#include <uvm/uvm_observe.h>

#if defined(__GNUC__)
#define EXPORT __attribute__((visibility("default")))
#else
#define EXPORT
#endif

typedef void *cudaStream_t; /* the runtime's type is a CUstream: a pointer */

static uvm_manager_t *g_mgr;
static uvm_status_t g_status = UVM_ERR_NO_DEVICE;
static uint32_t g_gpus;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void create_manager(void) {
    uvm_manager_params_t p;
    memset(&p, 0, sizeof(p));
    /* UVM_BACKEND=sim (for tests without a GPU) is honoured through AUTO;
     * else the CUDA backend, as the runtimes are on CUDA. */
    const char *forced = getenv("UVM_BACKEND");
    p.backend = forced && strcmp(forced, "sim") == 0 ? UVM_BACKEND_SIM : UVM_BACKEND_CUDA;
    g_status = uvm_manager_create(&p, &g_mgr);
    if (g_status != UVM_OK) {
        fprintf(stderr, "uvm_torch_alloc: no manager: %s\n", uvm_last_error_message());
        g_mgr = NULL;
        return;
    }
    uvm_gpu_count(g_mgr, &g_gpus);
}

/* The process's manager (made on first use), or NULL with the reason in
 * *status (may be NULL). Never destroyed: the runtimes free their memory
 * until the process ends. */
EXPORT uvm_manager_t *uvm_runtime_manager(uvm_status_t *status) {
    pthread_once(&g_once, create_manager);
    if (status)
        *status = g_status;
    return g_mgr;
}

/* ------------------------------------------------------------------------ */
/* Streams: each CUstream the runtime names, adopted once.                   */
/* ------------------------------------------------------------------------ */

#define MAX_ADOPTED 256

struct adopted {
    void *native;
    int device;
    uvm_stream_t *stream;
};

static struct adopted g_adopted[MAX_ADOPTED];
/* The calling thread's last allocation status (uvm_runtime_last_status). */
static __thread uvm_status_t t_status;
static int g_adopted_count;
static pthread_mutex_t g_adopted_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread struct adopted t_last; /* this thread's last stream: no lock on the hot path */

/* The stream of `device` that `native` names (NULL: the legacy stream);
 * NULL with the reason in *why (may be NULL) where it cannot be adopted. */
static uvm_stream_t *stream_of(int device, cudaStream_t native, uvm_status_t *why) {
    void *key = native ? native : UVM_STREAM_LEGACY;
    if (t_last.stream && t_last.native == key && t_last.device == device)
        return t_last.stream;
    uvm_stream_t *found = NULL;
    pthread_mutex_lock(&g_adopted_lock);
    for (int i = 0; i < g_adopted_count; ++i)
        if (g_adopted[i].native == key && g_adopted[i].device == device) {
            found = g_adopted[i].stream;
            break;
        }
    uvm_status_t status = found ? UVM_OK : UVM_ERR_NOT_SUPPORTED; /* the table full */
    if (!found && g_adopted_count < MAX_ADOPTED) {
        uvm_stream_t *s = NULL;
        status = uvm_stream_create(g_mgr, (uint32_t)device, key, &s);
        if (status == UVM_OK) {
            g_adopted[g_adopted_count].native = key;
            g_adopted[g_adopted_count].device = device;
            g_adopted[g_adopted_count].stream = s;
            g_adopted_count++;
            found = s;
        } else {
            fprintf(stderr, "uvm_torch_alloc: stream %p of GPU %d not adopted: %s\n", key, device,
                    uvm_last_error_message());
        }
    }
    pthread_mutex_unlock(&g_adopted_lock);
    if (!found && why)
        *why = status;
    if (found) {
        t_last.native = key;
        t_last.device = device;
        t_last.stream = found;
    }
    return found;
}

/* ------------------------------------------------------------------------ */
/* Clients: the calling thread's (uvm.torch.client, MemPools).               */
/* ------------------------------------------------------------------------ */

static __thread uvm_client_t *t_client;

/* The client this thread's allocations are charged to from now (NULL: the
 * manager's default client); returns the one it replaces. */
EXPORT uvm_client_t *uvm_runtime_set_client(uvm_client_t *client) {
    uvm_client_t *old = t_client;
    t_client = client;
    return old;
}

/* ------------------------------------------------------------------------ */
/* Memory statistics, per GPU, as PyTorch's caching allocator keeps them     */
/* ------------------------------------------------------------------------ */

/* One figure: now, its most since the last reset of peaks, and the totals
 * added and taken away since the last reset of the accumulated ones
 * (PyTorch's Stat). */
typedef struct uvm_runtime_stat_s {
    int64_t current;
    int64_t peak;
    int64_t allocated;
    int64_t freed;
} uvm_runtime_stat_t;

/* What went through these functions on one GPU, in the library's terms:
 *  - allocations: objects handed out and not yet freed;
 *  - allocated_bytes: their sizes as the library made them (uvm_mem_info's
 *    alloc_size: the request rounded up to the object's chunk size), what
 *    PyTorch calls allocated (its blocks are rounded too);
 *  - requested_bytes: the sizes asked for;
 *  - reserved_bytes: GPU memory the library holds from the driver for this
 *    GPU (uvm_gpu_stats' held_bytes: every runtime and client of the
 *    process's manager), read when asked; its peak is the most read at a
 *    new peak of allocated_bytes (uvm_runtime_sample_reserved, where the
 *    caller is not capturing a graph), at an out-of-memory, or when the
 *    figures are read: the library holds more only when an allocation
 *    grows it, so this misses only growth at allocations below the peak of
 *    allocated bytes (memory freed and then grown for a request no free run
 *    fits);
 *  - num_ooms: allocations refused for lack of memory. */
typedef struct uvm_runtime_memory_stats_s {
    uvm_runtime_stat_t allocations;
    uvm_runtime_stat_t allocated_bytes;
    uvm_runtime_stat_t requested_bytes;
    uvm_runtime_stat_t reserved_bytes;
    uint64_t num_ooms;
} uvm_runtime_memory_stats_t;

static uvm_runtime_memory_stats_t g_stats[UVM_MAX_GPUS];
/* Held for a few dozen instructions, twice a pair: a spinlock, where a
 * mutex's lock and unlock were ~60 of the pair's instructions. A waiter
 * yields after a short spin, so a holder that was preempted runs. */
static int g_stats_lock;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void stats_lock(void) {
    for (unsigned spins = 0; __atomic_exchange_n(&g_stats_lock, 1, __ATOMIC_ACQUIRE); ++spins) {
        while (__atomic_load_n(&g_stats_lock, __ATOMIC_RELAXED)) {
            if (++spins > 64)
                sched_yield();
            else
                cpu_relax();
        }
    }
}

static void stats_unlock(void) { __atomic_store_n(&g_stats_lock, 0, __ATOMIC_RELEASE); }

static void stat_add(uvm_runtime_stat_t *s, int64_t amount) {
    s->current += amount;
    s->allocated += amount;
    if (s->current > s->peak)
        s->peak = s->current;
}

static void stat_sub(uvm_runtime_stat_t *s, int64_t amount) {
    s->current -= amount;
    s->freed += amount;
}

/* The library's held bytes for `device` now (0 where it cannot say). */
static int64_t held_now(int device) {
    uvm_gpu_stats_t g;
    if (!g_mgr || uvm_gpu_stats(g_mgr, (uint32_t)device, &g) != UVM_OK)
        return 0;
    return (int64_t)g.held_bytes;
}

/* Reserved bytes read now, their peak raised to them. Lock held. */
static void sample_reserved_locked(int device, int64_t held) {
    uvm_runtime_stat_t *r = &g_stats[device].reserved_bytes;
    if (held > r->current)
        r->allocated += held - r->current;
    else
        r->freed += r->current - held;
    r->current = held;
    if (held > r->peak)
        r->peak = held;
}

/* The most allocated bytes a GPU's runtimes may hold (0: no limit):
 * uvm_runtime_set_memory_limit. Read without the lock as an allocation
 * begins (with none set, the allocation pays nothing more), and under it
 * when that allocation is counted. */
static uint64_t g_limit[UVM_MAX_GPUS];
static __thread int t_over_limit; /* the thread's last refusal was the limit's, not the library's */
static __thread uint64_t t_over_limit_asked, t_over_limit_held, t_over_limit_limit;

/* Whether `bytes` more would take GPU `device`'s allocated bytes over its
 * limit; *held gets the bytes allocated now. Lock held. */
static int over_limit_locked(int device, uint64_t bytes, uint64_t *held) {
    const uint64_t limit = __atomic_load_n(&g_limit[device], __ATOMIC_RELAXED);
    if (!limit)
        return 0;
    *held = (uint64_t)g_stats[device].allocated_bytes.current;
    return *held + bytes > limit;
}

/* An allocation of `alloc_size` bytes counted on `st`: whether it made a
 * new peak of allocated bytes. Lock held. */
static int count_alloc_locked(uvm_runtime_memory_stats_t *st, uint64_t size, uint64_t alloc_size) {
    const int64_t peak = st->allocated_bytes.peak;
    stat_add(&st->allocations, 1);
    stat_add(&st->allocated_bytes, (int64_t)alloc_size);
    stat_add(&st->requested_bytes, (int64_t)size);
    return st->allocated_bytes.current > peak;
}

/* Whether an allocation of `alloc_size` bytes on `device` made a new peak
 * of allocated bytes. */
static int count_alloc(int device, uint64_t size, uint64_t alloc_size) {
    stats_lock();
    const int new_peak = count_alloc_locked(&g_stats[device], size, alloc_size);
    stats_unlock();
    return new_peak;
}

/* As count_alloc, under the GPU's limit: -1, counting nothing, where the
 * allocation would take its allocated bytes over it (*held gets them). */
static int count_alloc_limited(int device, uint64_t size, uint64_t alloc_size, uint64_t *held) {
    stats_lock();
    const int new_peak =
        over_limit_locked(device, alloc_size, held) ? -1 : count_alloc_locked(&g_stats[device], size, alloc_size);
    stats_unlock();
    return new_peak;
}

static void count_free(int device, uint64_t size, uint64_t alloc_size) {
    stats_lock();
    uvm_runtime_memory_stats_t *st = &g_stats[device];
    stat_sub(&st->allocations, 1);
    stat_sub(&st->allocated_bytes, (int64_t)alloc_size);
    stat_sub(&st->requested_bytes, (int64_t)size);
    stats_unlock();
}

/* Read the library's held bytes for `device` into the reserved figure and
 * its peak: the caller says when (after an allocation that made a new peak
 * of allocated bytes, outside graph capture: reading makes a driver query).
 * Thread-safe. */
EXPORT void uvm_runtime_sample_reserved(int device) {
    if (!g_mgr || device < 0 || (uint32_t)device >= g_gpus)
        return;
    const int64_t held = held_now(device);
    stats_lock();
    sample_reserved_locked(device, held);
    stats_unlock();
}

/* GPU `device`'s figures into *out (reserved bytes read now). 0 on success,
 * -1 for a bad device or a NULL out, or before the manager is made (then
 * *out is zeroed where given). Thread-safe. */
EXPORT int uvm_runtime_memory_stats(int device, uvm_runtime_memory_stats_t *out) {
    if (!out)
        return -1;
    memset(out, 0, sizeof(*out));
    if (!g_mgr || device < 0 || (uint32_t)device >= g_gpus)
        return -1;
    const int64_t held = held_now(device);
    stats_lock();
    sample_reserved_locked(device, held);
    *out = g_stats[device];
    stats_unlock();
    return 0;
}

/* Peaks back to the current figures (torch.cuda.reset_peak_memory_stats). */
EXPORT void uvm_runtime_reset_peak_stats(int device) {
    if (!g_mgr || device < 0 || (uint32_t)device >= g_gpus)
        return;
    const int64_t held = held_now(device);
    stats_lock();
    uvm_runtime_memory_stats_t *st = &g_stats[device];
    sample_reserved_locked(device, held);
    st->allocations.peak = st->allocations.current;
    st->allocated_bytes.peak = st->allocated_bytes.current;
    st->requested_bytes.peak = st->requested_bytes.current;
    st->reserved_bytes.peak = st->reserved_bytes.current;
    stats_unlock();
}

/* Totals added and taken away, and the OOM count, back to 0
 * (torch.cuda.reset_accumulated_memory_stats). */
EXPORT void uvm_runtime_reset_accumulated_stats(int device) {
    if (device < 0 || device >= UVM_MAX_GPUS)
        return;
    stats_lock();
    uvm_runtime_memory_stats_t *st = &g_stats[device];
    uvm_runtime_stat_t *all[4] = {&st->allocations, &st->allocated_bytes, &st->requested_bytes, &st->reserved_bytes};
    for (int i = 0; i < 4; ++i)
        all[i]->allocated = all[i]->freed = 0;
    st->num_ooms = 0;
    stats_unlock();
}

/* The most bytes the runtimes may have allocated on GPU `device` at once
 * (allocated_bytes: objects' sizes as the library made them), 0 for no
 * limit: PyTorch's set_per_process_memory_fraction, its fraction of the
 * GPU's memory. An allocation begun after it is set that would go over it
 * is refused as out of memory (uvm_runtime_last_status, with its own
 * uvm_runtime_oom_message), without asking the library, also where threads
 * race for the last bytes; what is allocated already stays. Clients'
 * budgets and the GPU's own limit still hold besides. 0 on success, -1 for
 * a bad device. Thread-safe. */
EXPORT int uvm_runtime_set_memory_limit(int device, uint64_t bytes) {
    if (device < 0 || device >= UVM_MAX_GPUS || (g_mgr && (uint32_t)device >= g_gpus))
        return -1;
    stats_lock();
    __atomic_store_n(&g_limit[device], bytes, __ATOMIC_RELAXED);
    stats_unlock();
    return 0;
}

/* GPU `device`'s limit (uvm_runtime_set_memory_limit), 0 for none or a bad device. */
EXPORT uint64_t uvm_runtime_memory_limit(int device) {
    if (device < 0 || device >= UVM_MAX_GPUS)
        return 0;
    return __atomic_load_n(&g_limit[device], __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------ */
/* Allocation                                                               */
/* ------------------------------------------------------------------------ */

static uint64_t g_ooms; /* allocations refused for lack of memory, all threads */
static __thread int t_new_peak; /* the thread's last allocation made a new peak of allocated bytes */

/* An allocation refused for lack of memory, in the figures. */
static void count_oom(int device) {
    __atomic_fetch_add(&g_ooms, 1, __ATOMIC_RELAXED);
    const int64_t held = held_now(device);
    stats_lock();
    g_stats[device].num_ooms++;
    sample_reserved_locked(device, held); /* the library at its fullest */
    stats_unlock();
}

/* An allocation of `size` bytes refused by the GPU's limit, `held` bytes
 * allocated: out of memory for the caller, with its own report
 * (uvm_runtime_oom_message). */
static void refuse_over_limit(int device, uint64_t size, uint64_t held) {
    t_status = UVM_ERR_OUT_OF_MEMORY;
    t_over_limit = 1;
    t_new_peak = 0;
    t_over_limit_asked = size;
    t_over_limit_held = held;
    t_over_limit_limit = __atomic_load_n(&g_limit[device], __ATOMIC_RELAXED);
    count_oom(device);
}

/* A new object at `address` counted under the GPU's limit (set when the
 * allocation began): its address, or NULL where it would take the GPU over
 * the limit, by the object's own rounding or by another thread's
 * allocation since alloc_on's check; it is then given back at once (nothing
 * was queued on it). */
static __attribute__((noinline)) void *count_within_limit(int device, uint64_t size, uint64_t alloc_size,
                                                          uint64_t address, uvm_stream_t *stream) {
    uint64_t held = 0;
    const int counted = count_alloc_limited(device, size, alloc_size, &held);
    if (counted < 0) {
        (void)uvm_gpu_free_async(g_mgr, (uint32_t)device, address, stream, NULL, NULL);
        refuse_over_limit(device, size, held);
        return NULL;
    }
    t_new_peak = counted;
    return (void *)(uintptr_t)address;
}

/* One stream-ordered allocation of GPU `device`, mapped in its kernel
 * address space, to the private pool `pool` where given; NULL for size 0 (as
 * cudaMalloc(0)) and on failure, the reason in t_status either way. */
static void *alloc_on(size_t size, int device, cudaStream_t native, const char *tag, uvm_pool_t *pool) {
    uvm_status_t status = UVM_OK;
    if (!uvm_runtime_manager(&status)) {
        t_status = status;
        return NULL;
    }
    t_status = UVM_OK;
    if (size == 0)
        return NULL;
    if (device < 0 || (uint32_t)device >= g_gpus) {
        t_status = UVM_ERR_INVALID_GPU;
        return NULL;
    }
    const uint64_t limit = __atomic_load_n(&g_limit[device], __ATOMIC_RELAXED);
    if (limit) {
        /* Over the limit already by the request: not asked of the library
         * (which might grow for it). Checked again, exactly, once counted. */
        uint64_t held = 0;
        stats_lock();
        const int over = over_limit_locked(device, size, &held);
        stats_unlock();
        if (over) {
            refuse_over_limit(device, size, held);
            return NULL;
        }
    }
    uvm_stream_t *stream = stream_of(device, native, &t_status);
    if (!stream)
        return NULL;
    uvm_mem_alloc_params_t p;
    memset(&p, 0, sizeof(p));
    p.size = size;
    p.backing = UVM_BACKING_VIDMEM;
    p.gpu = (uint32_t)device;
    p.client = t_client;
    p.tag = tag;
    p.pool = pool;
    uint64_t address = 0, alloc_size = 0;
    status = uvm_gpu_malloc_async(g_mgr, &p, stream, &address, &alloc_size);
    t_status = status;
    t_new_peak = 0;
    if (status != UVM_OK) {
        if (status == UVM_ERR_OUT_OF_MEMORY) {
            t_over_limit = 0; /* the thread's last report is the library's */
            count_oom(device);
        }
        else
            fprintf(stderr, "uvm_torch_alloc: %zu bytes on GPU %d: %s\n", size, device, uvm_last_error_message());
        return NULL;
    }
    if (__builtin_expect(limit != 0, 0))
        return count_within_limit(device, size, alloc_size, address, stream);
    t_new_peak = count_alloc(device, size, alloc_size);
    return (void *)(uintptr_t)address;
}

/* Free by pointer, ordered on `native` (the stream it was allocated on),
 * counted in the figures where `counted`. */
static void free_on(void *ptr, int device, cudaStream_t native, int counted) {
    if (!ptr || !g_mgr || device < 0 || (uint32_t)device >= g_gpus)
        return;
    /* An address inside an object, not its start, is NOT_FOUND: nothing freed. */
    uvm_stream_t *stream = stream_of(device, native, NULL);
    uint64_t size = 0, alloc_size = 0;
    const uvm_status_t status =
        uvm_gpu_free_async(g_mgr, (uint32_t)device, (uint64_t)(uintptr_t)ptr, stream, &size, &alloc_size);
    if (status == UVM_OK && counted)
        count_free(device, size, alloc_size);
    if (status != UVM_OK)
        fprintf(stderr, "uvm_torch_alloc: free of %p on GPU %d: %s\n", ptr, device, uvm_status_string(status));
}

/* PyTorch: torch.cuda.memory.CUDAPluggableAllocator(path, "uvm_torch_malloc", "uvm_torch_free"). */
EXPORT void *uvm_torch_malloc(ssize_t size, int device, cudaStream_t stream) {
    if (size < 0) {
        t_status = UVM_ERR_INVALID_ARGUMENT;
        return NULL;
    }
    return alloc_on((size_t)size, device, stream, NULL, NULL);
}

/* uvm_torch_malloc to the private pool `pool` (uvm_runtime_pool_create): a
 * CUDA graph's memory, kept for the graph's life (uvm.h, Private pools). */
EXPORT void *uvm_torch_malloc_to_pool(ssize_t size, int device, cudaStream_t stream, uvm_pool_t *pool) {
    if (size < 0) {
        t_status = UVM_ERR_INVALID_ARGUMENT;
        return NULL;
    }
    return alloc_on((size_t)size, device, stream, NULL, pool);
}

/* A private pool of GPU `device` for a runtime's graph pool (PyTorch's
 * beginAllocateToPool); NULL with the reason in uvm_runtime_last_status.
 * The caller destroys it (uvm_runtime_pool_destroy) when the runtime
 * releases its pool. Thread-safe. */
EXPORT uvm_pool_t *uvm_runtime_pool_create(int device) {
    uvm_status_t status = UVM_OK;
    uvm_pool_t *pool = NULL;
    if (!uvm_runtime_manager(&status)) {
        t_status = status;
        return NULL;
    }
    if (device < 0 || (uint32_t)device >= g_gpus) {
        t_status = UVM_ERR_INVALID_GPU;
        return NULL;
    }
    t_status = uvm_pool_create(g_mgr, (uint32_t)device, &pool);
    return t_status == UVM_OK ? pool : NULL;
}

/* uvm_pool_destroy: its free memory goes back once the work queued on the
 * GPU's streams is done; blocks still handed out are anyone's when freed.
 * Returns the status. Thread-safe. */
EXPORT int uvm_runtime_pool_destroy(uvm_pool_t *pool) {
    if (!g_mgr)
        return (int)UVM_ERR_INVALID_ARGUMENT;
    return (int)uvm_pool_destroy(g_mgr, pool);
}

EXPORT void uvm_torch_free(void *ptr, size_t size, int device, cudaStream_t stream) {
    (void)size; /* the object knows its size */
    free_on(ptr, device, stream, 1);
}

/* A block of a graph's pool that the runtime keeps allocated for a
 * checkpoint of the pool (PyTorch's graph trees) though its tensor is gone:
 * out of the figures as a freed block (`keep` 1), or back into them as an
 * allocated one when the checkpoint hands it out again (`keep` 0). 0 on
 * success, -1 where `ptr` is no object's start on `device`. Thread-safe. */
EXPORT int uvm_runtime_keep(void *ptr, int device, int keep) {
    if (!ptr || !g_mgr || device < 0 || (uint32_t)device >= g_gpus)
        return -1;
    uvm_mem_t *mem = NULL;
    uint64_t offset = 0;
    uvm_mem_info_t info;
    if (uvm_mem_lookup_gpu_kernel(g_mgr, (uint32_t)device, (uint64_t)(uintptr_t)ptr, &mem, &offset) != UVM_OK ||
        offset != 0 || uvm_mem_info(g_mgr, mem, &info) != UVM_OK)
        return -1;
    if (keep)
        count_free(device, info.size, info.alloc_size);
    else
        (void)count_alloc(device, info.size, info.alloc_size); /* a kept block was never given up: no limit */
    return 0;
}

/* A kept block (uvm_runtime_keep) freed for good, ordered on `stream`: out
 * of the figures already, so not counted again. */
EXPORT void uvm_runtime_free_kept(void *ptr, int device, cudaStream_t stream) { free_on(ptr, device, stream, 0); }

/* Tensor.record_stream: the block's memory outlives work queued on `stream`
 * so far (the pluggable allocator's record_stream hook, set by the C++ side
 * of uvm.torch). 0 on success. */
EXPORT int uvm_torch_record_stream(void *ptr, cudaStream_t native) {
    if (!ptr || !g_mgr)
        return -1;
    for (uint32_t gpu = 0; gpu < g_gpus; ++gpu) {
        uvm_mem_t *mem = NULL;
        if (uvm_mem_lookup_gpu_kernel(g_mgr, gpu, (uint64_t)(uintptr_t)ptr, &mem, NULL) != UVM_OK)
            continue;
        uvm_stream_t *stream = stream_of((int)gpu, native, NULL);
        return stream && uvm_mem_record_use(g_mgr, mem, stream) == UVM_OK ? 0 : -1;
    }
    return -1;
}

/* torch.cuda.empty_cache(): what the GPUs' pools and streams hold free goes
 * back to the driver. Returns the bytes given back. */
EXPORT uint64_t uvm_torch_empty_cache(void) {
    uint64_t total = 0;
    if (!g_mgr)
        return 0;
    /* As PyTorch's own empty_cache waits for the events of its freed blocks:
     * the adopted streams' work first, so that what was freed on them is back
     * in the PMM and trim can give it back (uvm_gpu_trim never waits). */
    pthread_mutex_lock(&g_adopted_lock);
    for (int i = 0; i < g_adopted_count; ++i)
        uvm_stream_synchronize(g_mgr, g_adopted[i].stream);
    pthread_mutex_unlock(&g_adopted_lock);
    for (uint32_t gpu = 0; gpu < g_gpus; ++gpu) {
        uint64_t released = 0;
        if (uvm_gpu_trim(g_mgr, gpu, &released) == UVM_OK)
            total += released;
    }
    return total;
}

/* CuPy: cupy.cuda.memory.CFunctionAllocator(0, uvm_cupy_malloc, uvm_cupy_free, owner).
 * CuPy gives no stream and no size at free: ordered on the legacy stream,
 * which every blocking stream (CuPy's default) synchronises with. */
EXPORT void *uvm_cupy_malloc(void *param, size_t size, int device) {
    (void)param;
    return alloc_on(size, device, NULL, "cupy", NULL);
}

EXPORT void uvm_cupy_free(void *param, void *ptr, int device) {
    (void)param;
    free_on(ptr, device, NULL, 1);
}

/* Numba's EMM plugin (uvm.numba): as CuPy, tagged for reports. */
EXPORT void *uvm_numba_malloc(size_t size, int device) { return alloc_on(size, device, NULL, "numba", NULL); }
EXPORT void uvm_numba_free(void *ptr, int device) { free_on(ptr, device, NULL, 1); }

/* Why the calling thread's last allocation through these symbols returned
 * what it did: UVM_OK (a pointer, or NULL for size 0), UVM_ERR_OUT_OF_MEMORY
 * (the report is in uvm_runtime_oom_message), or any other status (no
 * manager, a bad GPU, a stream not adopted). What a runtime's allocator
 * needs to raise the right error for a NULL: the uvm.torch extension raises
 * torch.cuda.OutOfMemoryError only for OUT_OF_MEMORY. */
EXPORT int uvm_runtime_last_status(void) { return (int)t_status; }

/* GPU `device` gains access to GPU `owner`'s memory, made before and after
 * (uvm_gpu_enable_peer_access): the runtime's own call where it enables peer
 * access (PyTorch's allocator's enablePeerAccess(dev, dev_to_access), before
 * a copy between GPUs). The library's status: 0 (UVM_OK) on success. */
EXPORT int uvm_runtime_enable_peer_access(int device, int owner) {
    uvm_status_t status = UVM_ERR_INVALID_GPU;
    uvm_manager_t *mgr = uvm_runtime_manager(&status);
    if (!mgr)
        return (int)status;
    if (device < 0 || owner < 0)
        return (int)UVM_ERR_INVALID_GPU;
    return (int)uvm_gpu_enable_peer_access(mgr, (uint32_t)device, (uint32_t)owner);
}

/* GPU `device`'s memory as an out-of-memory message gives it: its total,
 * what the driver has free, and the largest run the library could hand out
 * now without growing (its largest free block). 0 on success, -1 for a bad
 * device or before the manager is made. Thread-safe. */
EXPORT int uvm_runtime_gpu_memory(int device, uint64_t *total, uint64_t *free_bytes, uint64_t *largest_free) {
    uvm_gpu_info_t info;
    uvm_gpu_stats_t g;
    if (!g_mgr || device < 0 || (uint32_t)device >= g_gpus || uvm_gpu_info(g_mgr, (uint32_t)device, &info) != UVM_OK ||
        uvm_gpu_stats(g_mgr, (uint32_t)device, &g) != UVM_OK)
        return -1;
    if (total)
        *total = info.memory_total;
    if (free_bytes)
        *free_bytes = info.memory_free;
    if (largest_free)
        *largest_free = g.largest_free_block;
    return 0;
}

/* Whether the calling thread's last allocation through these symbols made
 * a new peak of allocated bytes on its GPU: where the caller is not
 * capturing a graph, it may then call uvm_runtime_sample_reserved. */
EXPORT int uvm_runtime_last_new_peak(void) { return t_new_peak; }

/* Allocations refused for lack of memory so far, every thread. */
EXPORT uint64_t uvm_runtime_oom_count(void) { return __atomic_load_n(&g_ooms, __ATOMIC_RELAXED); }

/* The calling thread's last out-of-memory report (uvm_oom_report, text)
 * into buf; returns the bytes it needs with its NUL (0: no report). What
 * the runtimes' out-of-memory errors carry. */
EXPORT size_t uvm_runtime_oom_message(char *buf, size_t size) {
    size_t needed = 0;
    if (!g_mgr)
        return 0;
    if (t_over_limit) {
        char text[256];
        const int n = snprintf(text, sizeof(text),
                               "refused by the runtimes' limit on this GPU (uvm_runtime_set_memory_limit, "
                               "PyTorch's set_per_process_memory_fraction): %llu bytes allocated through them, "
                               "%llu asked, limit %llu\n",
                               (unsigned long long)t_over_limit_held, (unsigned long long)t_over_limit_asked,
                               (unsigned long long)t_over_limit_limit);
        if (buf && size)
            snprintf(buf, size, "%s", text);
        return (size_t)n + 1;
    }
    const uvm_status_t status = uvm_oom_report(g_mgr, UVM_REPORT_TEXT, buf, size, &needed);
    if (status != UVM_OK && status != UVM_ERR_BUFFER_TOO_SMALL)
        return 0;
    return needed;
}
