/*
 * uvm_observe.h - observability: page trees and statistics, reports and
 * metrics, the event trace.
 *
 * Reading any of these never changes what the manager holds. Included by
 * uvm.h, whose conventions hold here.
 */
#ifndef UVM_UVM_OBSERVE_H
#define UVM_UVM_OBSERVE_H

#ifndef UVM_UVM_H
#include <uvm/uvm.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Page trees and statistics                                                */
/* ------------------------------------------------------------------------ */

typedef enum uvm_va_space_kind {
    UVM_VA_SPACE_KERNEL = 0,
    UVM_VA_SPACE_USER
} uvm_va_space_kind_t;

#define UVM_PAGE_TREE_MAX_LEVELS 8

typedef struct uvm_page_tree_level_s {
    char     name[16];   /* "PDE3", "PDE0", "PT_4K", ... */
    uint32_t va_bit_hi;  /* the VA bits this level indexes */
    uint32_t va_bit_lo;
    uint64_t tables;     /* tables of this level that exist */
    uint64_t bytes;      /* memory they take, as on the GPU */
} uvm_page_tree_level_t;

typedef struct uvm_page_tree_info_s {
    uint32_t level_count;
    uvm_page_tree_level_t levels[UVM_PAGE_TREE_MAX_LEVELS];
    uint64_t table_bytes;                        /* all levels */
    uint64_t mapped_bytes[UVM_CHUNK_SIZE_COUNT]; /* by page size */
} uvm_page_tree_info_t;

UVM_API uvm_status_t uvm_gpu_page_tree_info(uvm_manager_t *mgr, uint32_t gpu,
                                            uvm_va_space_kind_t space, uvm_page_tree_info_t *out);

typedef struct uvm_gpu_stats_s {
    uint64_t root_chunks;                            /* 2 MiB root chunks held from the backend */
    uint64_t bytes_free[UVM_CHUNK_SIZE_COUNT];       /* free chunks, by chunk size */
    uint64_t bytes_pinned[UVM_CHUNK_SIZE_COUNT];     /* allocated, pinned */
    uint64_t bytes_evictable[UVM_CHUNK_SIZE_COUNT];  /* allocated, evictable */
    uint64_t chunks_split[UVM_CHUNK_SIZE_COUNT];     /* split chunks (2M and 64K) */
    uint64_t largest_free_block;                     /* bytes, physically contiguous, among held chunks */
    uint64_t vidmem_objects;                         /* live vidmem objects owned */
    uint64_t phys_mappings;                          /* objects physically mapped on this GPU */
    uint64_t kernel_mappings;                        /* objects in the kernel address space */
    uint64_t user_mappings;                          /* objects in the user address space */
    uint64_t peer_mappings;                          /* of those, other GPUs' vidmem */
    uint64_t page_table_bytes;                       /* kernel + user page trees */
    uint64_t ce_operations;                          /* copies and memsets run */
    uint64_t ce_bytes;                               /* bytes they wrote */
    uint64_t ce_translations;                        /* page-tree walks they made (sim) */
    uint64_t evictions;                              /* objects evicted from this GPU */
    uint64_t restores;                               /* objects brought back */
    uint64_t bytes_evicted;                          /* bytes copied out on eviction */
    uint64_t bytes_restored;                         /* bytes copied back on restore */
    uint64_t evicted_objects;                        /* objects of this GPU evicted now */
    uint64_t evicted_bytes;                          /* host bytes they hold */
    /* GPU memory this process holds from the driver for this GPU (whole
     * driver allocations: on CUDA, its cuMemCreate handles, not other
     * processes' memory imported; what cuMemGetInfo counts as used by it
     * beyond the context), and how it splits; the seven parts add up to it: */
    uint64_t held_bytes;
    uint64_t held_live_bytes;      /* chunks of live objects */
    uint64_t held_cached_bytes;    /* free chunks: the PMM's and the threads' caches */
    uint64_t held_pooled_bytes;    /* freed on streams, waiting for the stream's work or kept for its
                                      next allocation (stream pools) */
    uint64_t held_retiring_bytes;  /* freed objects waiting for GPU work */
    uint64_t held_private_bytes;   /* freed into private pools, kept for their graphs
                                      (uvm.h, Private pools) */
    uint64_t held_unused_bytes;    /* in driver allocations but never handed out (parts of handles) */
    uint64_t held_other_bytes;     /* everything else: other processes' roots exported from here
                                      and still held for them, and the moments a chunk moves
                                      between the counters read */
    uint64_t driver_free_bytes;    /* what the driver has free for every process (cuMemGetInfo) */
    /* Growth, ever: root chunks taken from the backend, and whole free ones
     * given back to grow elsewhere rather than beside them (a run that no
     * free memory could hold: every object is physically contiguous). */
    uint64_t root_chunks_grown;
    uint64_t root_chunks_moved;
    /* Compaction (uvm_gpu_compact, and before an OOM), ever: runs, objects and
     * bytes moved, bytes given back to the driver by them (how far what the
     * process holds from the driver for the GPU fell across each); the runs
     * an allocation made before evicting or failing, and of those, the ones
     * after which it was served; live root chunks copied to shrink driver
     * allocations around them (uvm_compact_result_t's bytes_rebacked). */
    uint64_t compactions;
    uint64_t compact_objects_moved;
    uint64_t compact_bytes_moved;
    uint64_t compact_bytes_released;
    uint64_t compactions_on_oom;
    uint64_t compactions_on_oom_served;
    uint64_t compact_bytes_rebacked;
} uvm_gpu_stats_t;

UVM_API uvm_status_t uvm_gpu_stats(uvm_manager_t *mgr, uint32_t gpu, uvm_gpu_stats_t *out);

typedef struct uvm_manager_stats_s {
    uint64_t objects;            /* live objects of every backing (retiring ones included) */
    uint64_t sysmem_objects;
    uint64_t sysmem_bytes;       /* alloc_size of sysmem objects */
    uint64_t cpu_kernel_mappings;
    uint64_t cpu_user_mappings;
    uint64_t managed_objects;
    uint64_t managed_bytes;
    uint64_t prefetches;         /* uvm_mem_prefetch calls that ran */
    uint64_t prefetched_bytes;
    uint64_t streams;            /* live streams */
    uint64_t retiring_objects;   /* freed objects waiting for GPU work before release */
    uint64_t retiring_bytes;
    uint64_t stream_pool_bytes;  /* vidmem freed on streams, not yet back in the PMM (kept
                                    objects too: uvm.h, Streams) */
    uint64_t sleep_host_bytes;   /* pinned host memory the sleepable clients' backups hold
                                    (uvm_pressure.h, "Host memory of a sleep") */
    uint64_t sleep_host_limit;   /* its limit (0: none) */
} uvm_manager_stats_t;

UVM_API uvm_status_t uvm_manager_stats(uvm_manager_t *mgr, uvm_manager_stats_t *out);

/* ------------------------------------------------------------------------ */
/* Reports and metrics: who holds what                                       */
/*                                                                          */
/* Each writes NUL-terminated text into buf (size bytes) and the size it    */
/* needs, NUL included, into *needed (may be NULL); BUFFER_TOO_SMALL, with  */
/* *needed set and buf untouched, where size is less. buf may be NULL with   */
/* size 0 to ask for the size. Thread-safe; none takes an object's lock for  */
/* long (objects busy in other threads are reported from what never changes).*/
/* ------------------------------------------------------------------------ */

typedef enum uvm_report_format {
    UVM_REPORT_TEXT = 0, /* for people */
    UVM_REPORT_JSON      /* one JSON object */
} uvm_report_format_t;

/* The report of the calling thread's last OUT_OF_MEMORY from this manager
 * (an allocation, a restore, an eviction over the host limit): what was
 * asked; the GPU's total, free (in the driver) and held bytes; pinned and
 * evictable bytes by client; fragmentation (the largest free block against
 * the free bytes held); the largest objects; and the largest request that
 * would fit, as the manager stood when the call failed. NOT_FOUND where this
 * thread has had none.
 *
 * The largest request that would fit is four sizes, each a multiple of
 * 2 MiB: the largest vidmem object of 2M chunks (chunk_size 2M, or 0 for
 * sizes from 2 MiB up; not UVM_MEM_USER_MAPPABLE, whose root chunks are kept
 * apart) that uvm_mem_alloc on the report's GPU would then give; 2 MiB more
 * would not fit (without evicting, for the "now" figures). Objects of 4K or
 * 64K chunks may fit where these do not (in the free part of a root chunk).
 *  - GPU, now: without evicting anything, in the default client: adjacent
 *    free 2 MiB root chunks the manager holds (those threads keep cached
 *    included) and the driver still has (on CUDA, its free memory and the
 *    room left in the window of physical addresses).
 *  - GPU, with eviction: evicting what the manager's own eviction would
 *    (uvm_manager_set_eviction_policy): UVM_MEM_EVICTABLE objects no stream,
 *    CPU or peer mapping holds, from root chunks without pinned memory,
 *    within the host limit. The same as "now" while eviction is off.
 *  - Client, now and with eviction: the same in the client of the request
 *    (of the object, for a restore or an eviction), also bounded by its
 *    budget on that GPU less its use, plus, with eviction, the objects of
 *    its own it would evict. The GPU's for the default client or a client
 *    without a budget.
 * Not counted: memory freed on streams and not yet released (retiring_bytes
 * and stream_pool_bytes of uvm_manager_stats), which an allocation takes
 * back first. JSON: "fits": {"chunk_size", "eviction" (on or off), "gpu":
 * {"now", "with_eviction"}, "client": {"name", "budget", "now",
 * "with_eviction"}}; "gpu"."largest_request_that_fits" is fits.gpu.now. */
UVM_API uvm_status_t uvm_oom_report(uvm_manager_t *mgr, uvm_report_format_t format, char *buf, size_t size,
                                    size_t *needed);

/* A JSON snapshot of the whole manager: its statistics, every GPU's (memory,
 * chunks by size and state, mappings, evictions, copy engine, and "fits":
 * the GPU's two largest requests that would fit, as in uvm_oom_report),
 * and objects by backing in power-of-two size classes. */
UVM_API uvm_status_t uvm_manager_snapshot(uvm_manager_t *mgr, char *buf, size_t size, size_t *needed);

/* The same numbers in the Prometheus text exposition format (version 0.0.4),
 * metric names after its conventions: `uvm_` prefix, units in names,
 * `_total` for counters, labels `gpu` and `chunk_size`. For a runtime's own
 * /metrics endpoint. */
UVM_API uvm_status_t uvm_manager_metrics(uvm_manager_t *mgr, char *buf, size_t size, size_t *needed);

typedef struct uvm_metrics_server uvm_metrics_server_t; /* opaque */

/* Serve this manager's metrics over HTTP from a thread of its own:
 * GET /metrics gives uvm_manager_metrics (text/plain; version=0.0.4), GET
 * /snapshot gives uvm_manager_snapshot (application/json). `address` is an
 * IP address to listen on, in numeric form ("127.0.0.1", "0.0.0.0", "::1";
 * no name is looked up); port 0 lets the system pick one, given back in
 * *bound_port (may be NULL). Errors: INVALID_ARGUMENT (among others, an
 * address that is not an IPv4 or IPv6 address), ADDRESS_IN_USE (cannot listen there:
 * among others, a port another socket listens on, of this process or another; the
 * port is never shared, as SO_REUSEPORT would), NOT_SUPPORTED (a build without
 * cpp-httplib). uvm_manager_destroy stops servers left.
 * Thread-safe. */
UVM_API uvm_status_t uvm_metrics_serve(uvm_manager_t *mgr, const char *address, uint16_t port,
                                       uvm_metrics_server_t **out, uint16_t *bound_port);
UVM_API uvm_status_t uvm_metrics_stop(uvm_manager_t *mgr, uvm_metrics_server_t *server);

/* Every live object, largest first: client, size, backing, GPU, tag, age,
 * whether it is evicted; and totals by client and tag. What a leak report
 * lists, asked for before teardown. */
UVM_API uvm_status_t uvm_objects_report(uvm_manager_t *mgr, uvm_report_format_t format, char *buf,
                                        size_t size, size_t *needed);
/* The report of the objects the calling thread's last uvm_manager_destroy
 * found alive (the manager is gone: no manager argument). NOT_FOUND where
 * that teardown found none, or this thread has made none. */
UVM_API uvm_status_t uvm_leak_report(uvm_report_format_t format, char *buf, size_t size, size_t *needed);

/* ------------------------------------------------------------------------ */
/* Event trace                                                               */
/*                                                                          */
/* Off by default. On, the manager records allocs, frees, maps, unmaps,     */
/* evictions, restores and OUT_OF_MEMORYs, with timestamps, in a ring of    */
/* 64-byte records: when it is full the oldest go. An export replays the   */
/* ring over the objects that were live when it began, so memory over time  */
/* is whole even when the oldest records are gone.                          */
/* ------------------------------------------------------------------------ */

typedef enum uvm_trace_format {
    UVM_TRACE_CHROME_JSON = 0, /* Chrome Trace Event JSON: opens in Perfetto (ui.perfetto.dev)
                                  and chrome://tracing. A process per GPU and one for the host,
                                  a thread per client; objects, mappings and evictions are async
                                  spans, each with both ends; OOMs are instants; memory per
                                  client and held bytes are counters. */
    UVM_TRACE_SVG              /* memory over time per GPU (and host), stacked by client,
                                  with the bytes held from each GPU and the OOMs marked */
} uvm_trace_format_t;

typedef struct uvm_trace_info_s {
    int      enabled;
    uint64_t ring_bytes;   /* the ring's size (0 before the first start) */
    uint64_t capacity;     /* records it holds */
    uint64_t recorded;     /* records made since the last start */
    uint64_t overwritten;  /* of those, lost to newer ones */
} uvm_trace_info_t;

/* Start a new trace (the previous one's records go) in a ring of
 * `ring_bytes` bytes: 0 = 16 MiB; 64 KiB to 4 GiB. Errors: INVALID_ARGUMENT,
 * BUSY (it is on), NO_HOST_MEMORY. Thread-safe. */
UVM_API uvm_status_t uvm_trace_start(uvm_manager_t *mgr, uint64_t ring_bytes);
/* Stop recording; the records stay for export. NOT_FOUND when it is off. Thread-safe. */
UVM_API uvm_status_t uvm_trace_stop(uvm_manager_t *mgr);
UVM_API uvm_status_t uvm_trace_info(uvm_manager_t *mgr, uvm_trace_info_t *out);
/* The trace as text (see Reports and metrics for buf, size and *needed),
 * on or off. While it is on, the text grows between calls: on
 * BUFFER_TOO_SMALL, ask again with room to spare. NOT_FOUND where it has
 * never been started. Thread-safe. */
UVM_API uvm_status_t uvm_trace_export(uvm_manager_t *mgr, uvm_trace_format_t format, char *buf, size_t size,
                                      size_t *needed);

#ifdef __cplusplus
}
#endif

#endif /* UVM_UVM_OBSERVE_H */
