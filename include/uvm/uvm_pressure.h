/*
 * uvm_pressure.h - memory under pressure: evictable objects, clients with
 * budgets, pressure notices.
 *
 * What a runtime uses to share a GPU between tenants and to run past its
 * memory. Included by uvm.h, whose conventions hold here.
 */
#ifndef UVM_UVM_PRESSURE_H
#define UVM_UVM_PRESSURE_H

#ifndef UVM_UVM_H
#include <uvm/uvm.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Residency: evictable vidmem (UVM_MEM_EVICTABLE) under memory pressure     */
/*                                                                          */
/* An evictable vidmem object is resident (its chunks in vidmem) or evicted  */
/* (its bytes in host memory the manager owns). An allocation or a restore  */
/* that finds its GPU full evicts objects before failing (and fails at once,*/
/* moving nothing, where even evicting all it could would not make room:    */
/* every object is one physically contiguous run, so a request of whole     */
/* 2 MiB roots (2M chunks, or 2 MiB or more of smaller ones) needs a free   */
/* run that long once all went, not only the bytes; a smaller one is judged */
/* by the bytes): least recently                                            */
/* used first (use = alloc, map, copy, memset, uvm_mem_touch), taking only  */
/* objects whose root chunks hold no pinned memory, so that what is evicted */
/* can become whole 2 MiB roots the request can use. Objects with work      */
/* queued on a stream, with CPU mappings, or mapped on a peer are never     */
/* evicted; nor, on CUDA, is one with a GPU user mapping unless its chunks  */
/* are remappable (2M, UVM_MEM_USER_MAPPABLE). Pinned objects never move.   */
/*                                                                          */
/* Any call that needs an evicted object's memory (a mapping, a copy or     */
/* memset, a physical or kernel address query) makes it resident first,    */
/* evicting others if it must (OUT_OF_MEMORY where it cannot). The owner's  */
/* user mapping comes back at the same user address (kept the object's      */
/* while it is out); the kernel mapping comes back at an address that may   */
/* differ (on CUDA it is the view of the object's new physical memory).     */
/* ------------------------------------------------------------------------ */

/* Evict now: copy the object's bytes to host memory on the owner's copy
 * engine (a discardable object's are dropped), remove its mappings, free its
 * vidmem. OK for an object already evicted. NOT_SUPPORTED: not evictable
 * vidmem, an object with CPU mappings or a peer mapping, or (CUDA) a user
 * mapping the driver could not make again at its address; BUSY: work on a stream still uses it;
 * OUT_OF_MEMORY / NO_HOST_MEMORY: no host memory for its bytes (above the
 * manager's limit, or none left); BACKEND. On failure the object is as it
 * was. Thread-safe. */
UVM_API uvm_status_t uvm_mem_evict(uvm_manager_t *mgr, uvm_mem_t *mem);
/* Bring an evicted object back (a no-op for a resident one). Errors:
 * OUT_OF_MEMORY (nothing more can be evicted for it; the object stays
 * evicted, intact), BACKEND. Thread-safe. */
UVM_API uvm_status_t uvm_mem_make_resident(uvm_manager_t *mgr, uvm_mem_t *mem);
/* Mark the object used now (for the least-recently-used order). Thread-safe. */
UVM_API uvm_status_t uvm_mem_touch(uvm_manager_t *mgr, uvm_mem_t *mem);

typedef struct uvm_residency_s {
    int      resident;   /* 1: in vidmem (always for objects that are not evictable vidmem) */
    uint64_t evictions;  /* times this object was evicted */
    uint64_t restores;   /* times it was brought back */
    uint64_t discards;   /* evictions that dropped its bytes (UVM_MEM_DISCARDABLE): its
                            contents were lost that many times */
} uvm_residency_t;

UVM_API uvm_status_t uvm_mem_residency(uvm_manager_t *mgr, uvm_mem_t *mem, uvm_residency_t *out);

typedef struct uvm_eviction_policy_s {
    int      disabled;          /* non-zero: a full GPU is OUT_OF_MEMORY, nothing is evicted
                                   under pressure (uvm_mem_evict still works) */
    uint64_t sysmem_limit;      /* the most bytes evicted objects may hold in host memory;
                                   0 = no limit. Beyond it, nothing more is evicted. */
} uvm_eviction_policy_t;

/* Set the manager's eviction policy (default: enabled, no limit). Thread-safe. */
UVM_API uvm_status_t uvm_manager_set_eviction_policy(uvm_manager_t *mgr, const uvm_eviction_policy_t *policy);

/* ------------------------------------------------------------------------ */
/* Compaction: live vidmem moves behind its addresses                       */
/*                                                                          */
/* Every object is one physically contiguous run, so free memory left among */
/* live objects may hold no run a request needs, and keeps its root chunks  */
/* and driver allocations held. Compaction moves live vidmem objects of a   */
/* GPU to other memory of that GPU, so that the free memory comes together  */
/* in whole 2 MiB root chunks (and whole driver allocations: on CUDA its    */
/* handles), which serve long runs or go back to the driver. A stitched     */
/* object (several runs under one kernel mapping, uvm.h) never moves: it is */
/* counted in objects_pinned, and no driver allocation of it shrinks.       */
/*                                                                          */
/* What moves is the memory under an object; its handle, size, bytes and    */
/* every address it has stay. The manager moves an object only where each   */
/* of its addresses is one it placed itself in the GPU's page tree, and     */
/* points that tree's entries at the new memory:                            */
/*  - GPU kernel and user mappings on its owner move with it where the       */
/*    manager placed them (the sim). On CUDA the kernel address, and a user  */
/*    address the manager picked, are views of the physical memory (the     */
/*    driver's window): such an object is pinned. Its driver allocation     */
/*    still shrinks around it under UVM_COMPACT_RELEASE: the root chunks    */
/*    live objects use are copied into allocations of their own at the same */
/*    addresses and the free rest goes back (bytes_rebacked), where every   */
/*    chunk there is a live object's that the call holds idle.              */
/*  - CPU mappings of vidmem (coherent platforms) and mappings on a peer GPU */
/*    pin it: the CPU's and the peer's page tables name its memory.          */
/*  - Exported or imported objects pin it: other processes map its memory.   */
/*  - Objects of remappable chunks and a sleepable client's are not moved:   */
/*    each of their roots is a driver allocation of its own already.         */
/*  - Its physical address (uvm_mem_gpu_phys_address) changes, as on         */
/*    eviction: a caller that keeps one must not compact.                    */
/* Stream safety: an object with work the library tracks (uvm_mem_record_use,*/
/* async copies and memsets, allocation on a stream) is moved only once that */
/* work is done: UVM_COMPACT_WAIT synchronizes those streams first, else    */
/* such objects are skipped (objects_busy). Work the library does not track */
/* (kernels the caller launched on the object's addresses without recording */
/* the use) is the caller's: it must be finished before the call, and none   */
/* may start on the GPU's objects until the call returns (for PyTorch,       */
/* torch.cuda.synchronize() before, as uvm.torch.compact does). Each move is */
/* one copy on the owner's copy engine, then the page-tree entries; a move   */
/* that fails at any step leaves its object where it was, bytes intact.     */
/* ------------------------------------------------------------------------ */

#define UVM_COMPACT_WAIT    0x1u /* synchronize the streams whose tracked work uses objects of the
                                    GPU first, rather than skip those objects */
#define UVM_COMPACT_RELEASE 0x2u /* afterwards give every whole free root chunk back to the driver
                                    (as uvm_gpu_trim), and shrink each driver allocation that
                                    live objects still hold part of to their root chunks (see
                                    below); without it, the release threshold
                                    (uvm_gpu_set_release_threshold) says what goes back */

typedef struct uvm_compact_result_s {
    uint64_t objects_moved;        /* objects moved, and their bytes (alloc_size) */
    uint64_t bytes_moved;
    uint64_t objects_pinned;       /* live objects of the GPU that cannot move (see above) */
    uint64_t objects_busy;         /* skipped: tracked stream work not done, or (on the
                                      out-of-memory path) locked by another thread */
    uint64_t objects_kept;         /* could move, but no place packs them better */
    uint64_t held_before;          /* bytes of root chunks the GPU's memory manager held before */
    uint64_t held_after;           /* and after */
    uint64_t free_whole_before;    /* of those, whole free root chunks, before and after */
    uint64_t free_whole_after;
    uint64_t largest_free_before;  /* the largest physically contiguous free block held */
    uint64_t largest_free_after;
    uint64_t bytes_released;       /* root chunks the memory manager gave back by this call (a
                                      driver allocation goes back whole: driver_held_* says) */
    uint64_t bytes_rebacked;       /* live root chunks copied into driver allocations of their own,
                                      at the same addresses, so that the free rest of theirs went
                                      back (UVM_COMPACT_RELEASE; on CUDA, handles) */
    uint64_t driver_held_before;   /* bytes this process held from the driver for the GPU, before */
    uint64_t driver_held_after;    /* and after (what cuMemGetInfo counts for it) */
} uvm_compact_result_t;

/* Compact GPU `gpu` (above). `flags`: UVM_COMPACT_*. *out (may be NULL)
 * gets what moved and what was given back, also where a move failed. Objects
 * go from the driver allocations with the least live memory into those with
 * the most; nothing new is taken from the driver for a move. A shrink
 * (UVM_COMPACT_RELEASE) makes the new allocations first, as large as the
 * live root chunks it copies, then gives the old ones back: where the driver
 * has not that much free, that allocation stays as it is (the sparsest go
 * first, so that each makes room for the next). Memory that streams have
 * finished with and the threads' cached chunks go back to the GPU's memory
 * manager first, as for uvm_gpu_trim.
 * Errors: INVALID_GPU; INVALID_ARGUMENT (unknown flags); BACKEND (a copy or
 * a mapping failed: that object is where it was, or that driver allocation
 * as it was, bytes intact; those moved or shrunk before stay so, nothing
 * else is tried); NO_HOST_MEMORY. Thread-safe: one compaction of a GPU at a
 * time (others wait); allocations and frees of other threads go on
 * meanwhile (but for the GPU's memory manager held across each shrink: its
 * copies and a few driver calls), and an object busy in another thread's
 * call is waited for to move; a driver allocation is shrunk only where none
 * of its objects is busy (else it is left as it is). */
UVM_API uvm_status_t uvm_gpu_compact(uvm_manager_t *mgr, uint32_t gpu, uint32_t flags, uvm_compact_result_t *out);

/* Whether an allocation (or a restore) that finds GPU `gpu` full compacts
 * before it evicts or fails: after it took back the memory streams finished
 * with and waited for, where the free memory held and the driver's would be
 * enough were it whole. That compaction is one with UVM_COMPACT_RELEASE: the
 * driver allocations live objects hold part of shrink too, so that objects
 * which cannot move (on CUDA, every one with a kernel mapping) no longer
 * keep the free memory beside them from the driver. That compaction skips objects with tracked work not
 * done and objects locked by other threads. Off by default: the library
 * cannot see work it does not track, so a caller turns it on only where all
 * GPU work on the GPU's vidmem objects is tracked or finished whenever it
 * allocates. The OOM report (uvm_oom_report) says what the compaction
 * found, or why it was not tried. Errors: INVALID_GPU. Thread-safe. */
UVM_API uvm_status_t uvm_gpu_set_compact_on_oom(uvm_manager_t *mgr, uint32_t gpu, int on);

/* ------------------------------------------------------------------------ */
/* Clients: named owners of objects, with budgets                            */
/*                                                                          */
/* A client owns the objects allocated with it (params.client) and has a    */
/* budget per GPU for vidmem and managed memory and one for sysmem (0 =     */
/* unlimited), changeable at any time. Budgets may add up to more than a GPU */
/* holds; the GPU's own limit still holds. An allocation or a restore that   */
/* would take a client over its budget first drops the client's cached      */
/* objects (uvm_client_info: vidmem_cached), then evicts its own evictable  */
/* objects (least recently used first, where eviction is on), then gives    */
/* OUT_OF_MEMORY; where even all of its objects that can be evicted would   */
/* not bring it within the budget, it evicts none and fails at once.        */
/* Usage never exceeds a budget, not even between two                       */
/* threads' calls. Evicted bytes count against no budget.                   */
/* ------------------------------------------------------------------------ */

#define UVM_CLIENT_SYSMEM UINT32_MAX /* in place of a GPU index: the sysmem budget */

/* `name`: 1 to 63 characters. Errors: INVALID_ARGUMENT. Thread-safe. */
UVM_API uvm_status_t uvm_client_create(uvm_manager_t *mgr, const char *name, uvm_client_t **out);
/* BUSY while the client owns objects (nothing changes). Thread-safe. */
UVM_API uvm_status_t uvm_client_destroy(uvm_manager_t *mgr, uvm_client_t *client);
/* The budget of `gpu` (or UVM_CLIENT_SYSMEM) in bytes, 0 = unlimited. A budget
 * below what the client uses now is allowed: its next allocations there
 * evict or fail until it is under. Errors: INVALID_ARGUMENT, INVALID_GPU,
 * INVALID_HANDLE. Thread-safe. */
UVM_API uvm_status_t uvm_client_set_budget(uvm_manager_t *mgr, uvm_client_t *client, uint32_t gpu,
                                           uint64_t bytes);

typedef struct uvm_client_info_s {
    char     name[64];
    uint64_t objects;
    uint64_t vidmem_used[UVM_MAX_GPUS];      /* charged to the budget, by GPU: resident vidmem and
                                                managed bytes, and vidmem_cached */
    uint64_t vidmem_evictable[UVM_MAX_GPUS]; /* of those, evictable */
    uint64_t vidmem_budget[UVM_MAX_GPUS];    /* 0 = unlimited */
    uint64_t sysmem_used;
    uint64_t sysmem_budget;
    /* Sleep and wake (below). */
    int      sleepable;                      /* created with uvm_client_create_sleepable */
    int      asleep;
    uint64_t vidmem_asleep[UVM_MAX_GPUS];    /* bytes of its objects given back by sleep, by GPU
                                                (not in vidmem_used while asleep) */
    uint64_t sleep_host_bytes;               /* of its backup, the bytes its sleep keeps there now
                                                (0 while awake) */
    /* Freed objects of one chunk that a thread keeps, still charged to the
     * client, for its next allocation of that size there: no handle names
     * them and `objects` leaves them out. They go back to the budget as soon
     * as anything else takes their memory, on trim, when the client's own
     * allocation would not fit its budget otherwise (before evicting), and
     * when it is destroyed. */
    uint64_t vidmem_cached[UVM_MAX_GPUS];
    /* Its backup (uvm_client_set_sleep_policy): the pinned host memory it
     * holds now, asleep or awake (its reserve, what is kept for the next
     * sleep, and sleep_host_bytes), and its policy. */
    uint64_t sleep_host_held;
    uint64_t sleep_host_reserve;
    uint32_t sleep_host_policy;              /* uvm_sleep_host_t */
} uvm_client_info_t;

UVM_API uvm_status_t uvm_client_info(uvm_manager_t *mgr, uvm_client_t *client, uvm_client_info_t *out);

/* ------------------------------------------------------------------------ */
/* Sleep and wake: a client gives its GPU memory back, and takes it again    */
/* at the same addresses                                                    */
/*                                                                          */
/* As vLLM's sleep mode and torch_memory_saver do for a model's weights and */
/* KV cache between phases. A client created sleepable takes the vidmem of  */
/* its objects from root chunks of its own, which hold no other client's    */
/* memory. uvm_client_sleep copies each of its vidmem objects' bytes to     */
/* host memory (UVM_SLEEP_KEEP) or drops them (UVM_SLEEP_DISCARD), then     */
/* gives every root chunk's memory back to the driver (cuMemGetInfo and     */
/* nvidia-smi count it free; another process may use it) while keeping its  */
/* address. uvm_client_wake takes memory again under the same addresses and */
/* puts the kept bytes back; discarded objects come back zeroed. Every GPU  */
/* address the caller was given stays valid across the two: kernel and user */
/* mappings, peers' mappings, uvm_mem_alloc_gpu's address, the physical     */
/* addresses. Nothing is re-mapped by the caller.                            */
/*                                                                          */
/* While the client sleeps its vidmem objects can be freed (their host copy */
/* goes with them), unmapped (CPU and GPU mappings alike: neither the wake  */
/* nor the restore of an object evicted before the sleep makes again what   */
/* was unmapped) and read about, but every call that needs                  */
/* their memory (a mapping made, a copy or memset, an address query,        */
/* eviction, export) and every vidmem allocation for the client gives       */
/* UVM_ERR_ASLEEP. CPU mappings of their vidmem (sim) read undefined bytes  */
/* until the wake. The client's sysmem objects are not touched. Its vidmem  */
/* leaves its budget while it sleeps (uvm_client_info: vidmem_asleep) and   */
/* is charged again by the wake.                                             */
/*                                                                          */
/* Work queued on streams that uses the client's objects is waited for by  */
/* the sleep (those streams are synchronized first), so a runtime may sleep */
/* right after its last launch. An object shared with another process       */
/* (exported or imported) cannot go: the sleep gives UVM_ERR_BUSY and moves */
/* nothing. On CUDA a sleepable client's vidmem is held in driver handles  */
/* of its own of up to 64 MiB, from its first allocation (a sleep gives     */
/* back few handles, and the driver's cost is per handle): it cannot be     */
/* mapped at a user address of the caller's choosing nor exported           */
/* (NOT_SUPPORTED: the driver maps and exports a handle only whole).        */
/* Addresses the manager picks are unaffected. Sleep and wake are           */
/* all or nothing: on any failure the client is as it was (a failed wake    */
/* leaves it asleep, every kept byte intact), and                           */
/* the call may be retried. Thread-safe; allocations for the client wait    */
/* while it goes to sleep or wakes.                                         */
/* ------------------------------------------------------------------------ */

/* Like uvm_client_create, for a client that can sleep. NOT_SUPPORTED where
 * the backend cannot give memory back under kept addresses (the sim and
 * CUDA both can). */
UVM_API uvm_status_t uvm_client_create_sleepable(uvm_manager_t *mgr, const char *name, uvm_client_t **out);

typedef enum uvm_sleep_mode_e {
    UVM_SLEEP_DEFAULT = 0, /* an object: as the sleep's params say; params: keep */
    UVM_SLEEP_KEEP,        /* the bytes are copied to host memory and back */
    UVM_SLEEP_DISCARD      /* the bytes are dropped; the object comes back zeroed */
} uvm_sleep_mode_t;

typedef struct uvm_sleep_params_s {
    uvm_sleep_mode_t   mode;       /* objects not named below (DEFAULT: keep) */
    const char *const *tags;       /* objects allocated with one of these tags ... */
    uint32_t           tag_count;
    uvm_sleep_mode_t   tags_mode;  /* ... go so (DEFAULT: as `mode`) */
} uvm_sleep_params_t;

/* An object's own mode, which wins over the sleep's params (DEFAULT: none).
 * INVALID_ARGUMENT for an unknown mode. Thread-safe. */
UVM_API uvm_status_t uvm_mem_set_sleep_mode(uvm_manager_t *mgr, uvm_mem_t *mem, uvm_sleep_mode_t mode);

/* Put `client` to sleep (params NULL: keep everything). OK for a client
 * asleep already (nothing changes). Errors: INVALID_ARGUMENT (bad params),
 * INVALID_HANDLE, NOT_SUPPORTED (not created sleepable), BUSY (an object is
 * shared with another process, or stream work cannot finish),
 * HOST_LIMIT (its backup would pass the manager's limit: "Host memory of a
 * sleep", below), OUT_OF_MEMORY / NO_HOST_MEMORY (no host memory for the
 * kept bytes), BACKEND. */
UVM_API uvm_status_t uvm_client_sleep(uvm_manager_t *mgr, uvm_client_t *client, const uvm_sleep_params_t *params);
/* Wake `client`. OK for a client awake (nothing changes). Before failing for
 * want of memory the wake takes back what streams have finished with and
 * the whole free root chunks every pool of the GPU keeps (uvm.h,
 * uvm_gpu_set_release_threshold), and evicts evictable objects of the GPU,
 * as an allocation does. Errors:
 * INVALID_HANDLE, OUT_OF_MEMORY (the GPU has not the memory, or the
 * client's budget no longer allows it; it stays asleep), BACKEND. */
UVM_API uvm_status_t uvm_client_wake(uvm_manager_t *mgr, uvm_client_t *client);

/* ------------------------------------------------------------------------ */
/* Host memory of a sleep                                                    */
/*                                                                          */
/* A sleepable client's kept bytes go to its backup: pinned host memory of   */
/* its own, which every GPU's copy engine reaches. A sleep needs exactly the */
/* bytes it keeps (the kept objects' allocated sizes, added; nothing is     */
/* rounded up), and its backup grows by exactly what it lacks of them.      */
/* Host memory is made ready (allocated and pinned) in pieces by several    */
/* threads at once, and the sleep copies into each piece as soon as it is   */
/* ready; a reserve, made ready when the policy is set, pins nothing during */
/* a sleep that fits it, which then runs at the copy engine's speed the     */
/* first time as every time.                                                */
/*                                                                          */
/* After the wake the backup is kept, pinned, for the next sleep            */
/* (UVM_SLEEP_HOST_KEEP, the default: it holds the most a sleep since the   */
/* policy was set needed, or the reserve where that is more), or goes back  */
/* to the system down to the reserve (UVM_SLEEP_HOST_RELEASE: the process's */
/* resident memory falls back by what the sleep took). A limit on the host  */
/* memory every client's backup holds (reserves included;                   */
/* uvm_manager_set_sleep_host_limit) refuses a sleep, or a reserve, that    */
/* would pass it: UVM_ERR_HOST_LIMIT, nothing changed. What a backup holds  */
/* is in uvm_client_info (sleep_host_held), all of them together in         */
/* uvm_manager_stats (sleep_host_bytes), the snapshot and the metrics.      */
/* A backup goes with its client (uvm_client_destroy) and its manager.      */
/* ------------------------------------------------------------------------ */

typedef enum uvm_sleep_host_e {
    UVM_SLEEP_HOST_KEEP = 0, /* kept pinned after the wake, for the next sleep */
    UVM_SLEEP_HOST_RELEASE   /* back to the system at the wake, down to the reserve */
} uvm_sleep_host_t;

typedef struct uvm_sleep_policy_s {
    uvm_sleep_host_t host;
    uint64_t         host_reserve; /* bytes held ready for its sleeps whatever the policy (rounded
                                      up to 4 KiB; 0: none) */
    uint32_t         pin_threads;  /* threads that make host memory ready (0: as many as the
                                      host has CPUs, at most 8; at most 64) */
} uvm_sleep_policy_t;

/* Set a sleepable client's policy for its backup (default: KEEP, no
 * reserve, pin_threads 0). Awake, the backup is made to hold exactly the
 * reserve before the call returns: what it holds beyond goes back to the
 * system, what it lacks is made ready. Asleep, it grows to the reserve now
 * where that is more, and is cut down to it at the wake (RELEASE; within
 * one piece of 64 MiB where the reserve grew while asleep) or kept (KEEP).
 * Errors: INVALID_ARGUMENT (policy NULL, an unknown `host`, pin_threads
 * above 64), INVALID_HANDLE, NOT_SUPPORTED (a client not created
 * sleepable), HOST_LIMIT (the reserve would pass the manager's limit),
 * OUT_OF_MEMORY (the host has not that much memory), BACKEND (the backend
 * could not pin it); on every error the policy and the backup are as they
 * were. Thread-safe (as a sleep: allocations for the client wait). */
UVM_API uvm_status_t uvm_client_set_sleep_policy(uvm_manager_t *mgr, uvm_client_t *client,
                                                 const uvm_sleep_policy_t *policy);

/* The most host memory every sleepable client's backup may hold together
 * (0: no limit, the default). A limit below what they hold now is allowed:
 * nothing is taken back, but no backup grows while it would pass it.
 * Thread-safe. */
UVM_API uvm_status_t uvm_manager_set_sleep_host_limit(uvm_manager_t *mgr, uint64_t bytes);

/* ------------------------------------------------------------------------ */
/* Pressure notices                                                          */
/*                                                                          */
/* Watermarks, in percent, on a GPU's held memory (what the manager holds   */
/* from the driver, against the GPU's total) or on a client's use of its    */
/* budget on a GPU (or UVM_CLIENT_SYSMEM). Each crossing queues one event:  */
/* upwards when usage reaches a watermark, downwards when it falls below it */
/* again. A watermark is reached or not from the moment it is set, by the   */
/* usage then, and setting it queues nothing: one set below the usage       */
/* starts reached, and its first event is the fall below it. A budget       */
/* change that moves a client's use past a watermark is a crossing too. The */
/* events of one watermark are one linearizable sequence, whatever the      */
/* threads: each change of the usage is judged and its events queued under  */
/* one lock, in the order the changes happened, so they alternate, each is  */
/* true of the `used` it carries, and the last one queued is true of the    */
/* usage now. The queue's eventfd is readable while events wait; a runtime  */
/* polls it and takes them, then trims, frees or evicts. Events are never   */
/* called back: usage changes where the manager holds locks. At most 4,096  */
/* wait; beyond that the oldest are dropped (and a sequence then has a      */
/* gap).                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct uvm_pressure_event_s {
    uint32_t      gpu;      /* the GPU, or UVM_CLIENT_SYSMEM for a client's sysmem budget */
    uvm_client_t *client;   /* NULL: the GPU's held memory */
    uint32_t      percent;  /* the watermark crossed */
    int           rising;   /* 1: reached; 0: fell below */
    uint64_t      used;     /* usage right after the crossing */
    uint64_t      limit;    /* the GPU's total, or the budget */
} uvm_pressure_event_t;

/* Set the watermarks (up to 16, each 1..100; count 0 removes them) of
 * GPU `gpu`'s held memory (client NULL) or of `client`'s budget there (or
 * UVM_CLIENT_SYSMEM). Each starts in the state the usage now gives, queueing
 * nothing; crossings are judged from the next change on. Errors:
 * INVALID_ARGUMENT, INVALID_GPU, INVALID_HANDLE. Thread-safe. */
UVM_API uvm_status_t uvm_pressure_watermarks(uvm_manager_t *mgr, uvm_client_t *client, uint32_t gpu,
                                             const uint32_t *percents, uint32_t count);
/* The eventfd (the manager's; do not close it), readable while events wait. */
UVM_API uvm_status_t uvm_pressure_fd(uvm_manager_t *mgr, int *fd);
/* Take up to `max` waiting events, oldest first; *count gets how many. */
UVM_API uvm_status_t uvm_pressure_events(uvm_manager_t *mgr, uvm_pressure_event_t *out, uint32_t max,
                                         uint32_t *count);

#ifdef __cplusplus
}
#endif

#endif /* UVM_UVM_PRESSURE_H */
