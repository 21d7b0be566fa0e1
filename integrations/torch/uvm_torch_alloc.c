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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <uvm/uvm.h>

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
/* Allocation                                                               */
/* ------------------------------------------------------------------------ */

static uint64_t g_ooms; /* allocations refused for lack of memory, all threads */

/* One stream-ordered allocation of GPU `device`, mapped in its kernel
 * address space; NULL for size 0 (as cudaMalloc(0)) and on failure, the
 * reason in t_status either way. */
static void *alloc_on(size_t size, int device, cudaStream_t native, const char *tag) {
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
    uvm_mem_t *mem = NULL;
    uint64_t address = 0;
    status = uvm_mem_alloc_gpu(g_mgr, &p, stream, &mem, &address);
    t_status = status;
    if (status != UVM_OK) {
        if (status == UVM_ERR_OUT_OF_MEMORY)
            __atomic_fetch_add(&g_ooms, 1, __ATOMIC_RELAXED);
        else
            fprintf(stderr, "uvm_torch_alloc: %zu bytes on GPU %d: %s\n", size, device, uvm_last_error_message());
        return NULL;
    }
    return (void *)(uintptr_t)address;
}

/* Free by pointer, ordered on `native` (the stream it was allocated on). */
static void free_on(void *ptr, int device, cudaStream_t native) {
    if (!ptr || !g_mgr || device < 0 || (uint32_t)device >= g_gpus)
        return;
    uvm_mem_t *mem = NULL;
    uint64_t offset = 0;
    uvm_status_t status = uvm_mem_lookup_gpu_kernel(g_mgr, (uint32_t)device, (uint64_t)(uintptr_t)ptr, &mem, &offset);
    if (status == UVM_OK && offset != 0)
        status = UVM_ERR_INVALID_ARGUMENT; /* inside an object, not its start */
    uvm_stream_t *stream = status == UVM_OK ? stream_of(device, native, NULL) : NULL;
    if (status == UVM_OK)
        status = stream ? uvm_mem_free_async(g_mgr, mem, stream) : uvm_mem_free(g_mgr, mem);
    if (status != UVM_OK)
        fprintf(stderr, "uvm_torch_alloc: free of %p on GPU %d: %s\n", ptr, device, uvm_status_string(status));
}

/* PyTorch: torch.cuda.memory.CUDAPluggableAllocator(path, "uvm_torch_malloc", "uvm_torch_free"). */
EXPORT void *uvm_torch_malloc(ssize_t size, int device, cudaStream_t stream) {
    if (size < 0) {
        t_status = UVM_ERR_INVALID_ARGUMENT;
        return NULL;
    }
    return alloc_on((size_t)size, device, stream, NULL);
}

EXPORT void uvm_torch_free(void *ptr, size_t size, int device, cudaStream_t stream) {
    (void)size; /* the object knows its size */
    free_on(ptr, device, stream);
}

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
    return alloc_on(size, device, NULL, "cupy");
}

EXPORT void uvm_cupy_free(void *param, void *ptr, int device) {
    (void)param;
    free_on(ptr, device, NULL);
}

/* Numba's EMM plugin (uvm.numba): as CuPy, tagged for reports. */
EXPORT void *uvm_numba_malloc(size_t size, int device) { return alloc_on(size, device, NULL, "numba"); }
EXPORT void uvm_numba_free(void *ptr, int device) { free_on(ptr, device, NULL); }

/* Why the calling thread's last allocation through these symbols returned
 * what it did: UVM_OK (a pointer, or NULL for size 0), UVM_ERR_OUT_OF_MEMORY
 * (the report is in uvm_runtime_oom_message), or any other status (no
 * manager, a bad GPU, a stream not adopted). What a runtime's allocator
 * needs to raise the right error for a NULL: the uvm.torch extension raises
 * torch.cuda.OutOfMemoryError only for OUT_OF_MEMORY. */
EXPORT int uvm_runtime_last_status(void) { return (int)t_status; }

/* Allocations refused for lack of memory so far, every thread. */
EXPORT uint64_t uvm_runtime_oom_count(void) { return __atomic_load_n(&g_ooms, __ATOMIC_RELAXED); }

/* The calling thread's last out-of-memory report (uvm_oom_report, text)
 * into buf; returns the bytes it needs with its NUL (0: no report). What
 * the runtimes' out-of-memory errors carry. */
EXPORT size_t uvm_runtime_oom_message(char *buf, size_t size) {
    size_t needed = 0;
    if (!g_mgr)
        return 0;
    const uvm_status_t status = uvm_oom_report(g_mgr, UVM_REPORT_TEXT, buf, size, &needed);
    if (status != UVM_OK && status != UVM_ERR_BUFFER_TOO_SMALL)
        return 0;
    return needed;
}
