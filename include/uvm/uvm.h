/*
 * uvm.h - the public C API of the user-space unified memory manager.
 *
 * The model follows nvidia-uvm's memory layer (uvm_mem, uvm_pmm_gpu,
 * uvm_page_tree): a manager owns a set of GPUs; memory objects are backed by
 * sysmem (host memory every GPU can reach) or vidmem (one GPU's memory); each
 * object is a list of physical chunks of one size (4K, 64K or 2M) and can be
 * mapped on the CPU (kernel and user mappings) and on GPUs (physical/DMA,
 * kernel virtual and user virtual, on the owning GPU and on peers).
 *
 * Conventions
 *  - Every function returns uvm_status_t; results come back through
 *    out-parameters, which are written only on UVM_OK. After a failure,
 *    uvm_last_error_message says why, in words that name the argument,
 *    limit or environment variable at fault.
 *  - Parameter structs are zero-initialisable: zero means the sensible
 *    default, named beside each field.
 *  - Handles are opaque. An object handle is checked on every call: a freed
 *    handle, or one from another manager, gives UVM_ERR_INVALID_HANDLE and
 *    touches nothing.
 *  - A failed call leaves the manager and every object as they were, with
 *    one exception: an allocation or a restore that fails for want of GPU
 *    memory may first have given cached free memory (free root chunks the
 *    manager held, free chunks threads kept cached, finished stream pools)
 *    back to the driver, as uvm_gpu_trim would. Nothing live changes: no
 *    object, mapping, byte, budget or count of live memory.
 *  - Thread safety: unless a function says otherwise, it may be called
 *    concurrently from any number of threads, on the same or different
 *    objects. Calls on one object are serialised; calls on different objects
 *    run in parallel. uvm_manager_destroy is the exception.
 *  - fork(): a child process cannot use its parent's managers (their
 *    threads, locks and driver state stay with the parent). Every call on
 *    one of them in the child gives UVM_ERR_FORKED and touches nothing,
 *    uvm_manager_destroy included; managers the child creates work.
 *
 * Compiles as C11 and as C++.
 */
#ifndef UVM_UVM_H
#define UVM_UVM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define UVM_API
#else
#define UVM_API __attribute__((visibility("default")))
#endif

#define UVM_VERSION_MAJOR 0
#define UVM_VERSION_MINOR 7

/* The most GPUs one manager drives. */
#define UVM_MAX_GPUS 32
/* NUMA node ids are below this (node masks are 64 bits). */
#define UVM_MAX_NUMA_NODES 64

/* Page and chunk sizes. A mask of them (bitwise or) describes what a GPU
 * supports. */
#define UVM_PAGE_SIZE_4K  (UINT64_C(1) << 12)
#define UVM_PAGE_SIZE_64K (UINT64_C(1) << 16)
#define UVM_PAGE_SIZE_2M  (UINT64_C(1) << 21)

/* Index of a chunk size in the per-size arrays of the statistics. */
#define UVM_CHUNK_INDEX_4K  0
#define UVM_CHUNK_INDEX_64K 1
#define UVM_CHUNK_INDEX_2M  2
#define UVM_CHUNK_SIZE_COUNT 3

typedef enum uvm_status {
    UVM_OK = 0,
    UVM_ERR_INVALID_ARGUMENT,        /* null pointer, zero or absurd size, unknown flag */
    UVM_ERR_INVALID_HANDLE,          /* freed object, or an object of another manager */
    UVM_ERR_INVALID_GPU,             /* GPU index out of range */
    UVM_ERR_PAGE_SIZE_NOT_SUPPORTED, /* a forced chunk size the backing does not support */
    UVM_ERR_MISALIGNED,              /* an address not aligned as the call requires */
    UVM_ERR_OUT_OF_RANGE,            /* offset/size beyond the object */
    UVM_ERR_OUT_OF_MEMORY,           /* the GPU's memory (or host memory for sysmem) is exhausted */
    UVM_ERR_NO_HOST_MEMORY,          /* the manager's own bookkeeping could not be allocated */
    UVM_ERR_NOT_SUPPORTED,           /* the backend or platform cannot do this */
    UVM_ERR_NOT_MAPPED,              /* unmap or address query of a mapping that does not exist */
    UVM_ERR_ALREADY_MAPPED,          /* the mapping exists already */
    UVM_ERR_ADDRESS_IN_USE,          /* a caller-chosen address overlaps another mapping, or a
                                        port another socket listens on (uvm_metrics_serve) */
    UVM_ERR_NO_PEER_ACCESS,          /* the GPU cannot reach the owning GPU's memory */
    UVM_ERR_NO_DEVICE,               /* the CUDA backend was asked for and no GPU/driver is present */
    UVM_ERR_BACKEND,                 /* the backend (driver) failed a call */
    UVM_ERR_LEAKED_OBJECTS,          /* uvm_manager_destroy found live objects (they were freed) */
    UVM_ERR_BUSY,                    /* work queued on a stream cannot finish (sim: held work) */
    UVM_ERR_NOT_FOUND,               /* nothing of the kind asked for exists (no report yet) */
    UVM_ERR_BUFFER_TOO_SMALL,        /* an output buffer is too small (the size needed is given) */
    UVM_ERR_FORKED,                  /* the manager belongs to the parent of this forked process */
    UVM_ERR_ASLEEP,                  /* the object's client is asleep (uvm_client_sleep): wake it first */
    UVM_ERR_HOST_LIMIT               /* host memory for sleeps would pass the manager's limit
                                        (uvm_manager_set_sleep_host_limit); nothing changed */
} uvm_status_t;

/* Static English text for a status; never NULL (unknown values give
 * "unknown status"). Thread-safe. */
UVM_API const char *uvm_status_string(uvm_status_t status);

/* Why the calling thread's last call failed, in English, as sqlite3_errmsg
 * and dlerror say it: the argument, limit or environment variable at fault
 * where the library knows it ("sim.gpu_count 100 is over the limit of 32
 * GPUs (UVM_MAX_GPUS)", "UVM_BACKEND=bogus: no such backend; sim or cuda"),
 * else the status's own text (uvm_status_string). After a call that
 * succeeded: "success". Per thread: another thread's calls never change it.
 * Every function of this header and of the headers it includes sets it
 * (uvm_status_string and this function excepted); the lab's calls
 * (uvm_lab.h), which give their own error text, leave it. Never NULL; the
 * text is valid until the thread's next call into the library (copy it to
 * keep it). Thread-safe. */
UVM_API const char *uvm_last_error_message(void);

/* ------------------------------------------------------------------------ */
/* Manager                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct uvm_manager uvm_manager_t; /* opaque */
typedef struct uvm_mem uvm_mem_t;         /* opaque object handle */
typedef struct uvm_stream uvm_stream_t;   /* opaque stream handle (see Streams) */
typedef struct uvm_client uvm_client_t;   /* opaque client handle (see Clients) */
typedef struct uvm_pool uvm_pool_t;       /* opaque private pool handle (see Private pools) */

typedef enum uvm_backend_kind {
    UVM_BACKEND_AUTO = 0, /* CUDA where a driver and a GPU are found, else sim.
                             The environment variable UVM_BACKEND=sim|cuda forces one. */
    UVM_BACKEND_SIM,      /* simulated GPUs in host memory */
    UVM_BACKEND_CUDA      /* real GPUs through the CUDA driver, loaded at run time */
} uvm_backend_kind_t;

/* Configuration of the simulated GPUs. */
typedef struct uvm_sim_params_s {
    uint32_t gpu_count;     /* 0 = 2 */
    uint64_t vidmem_size;   /* bytes per GPU, a multiple of 2 MiB; 0 = 16 GiB.
                               Reserved lazily: only touched pages cost host memory. */
    uint64_t page_sizes;    /* mask of UVM_PAGE_SIZE_*; 0 = 4K|64K|2M. Must hold 2M. */
    uint32_t peer_rows[UVM_MAX_GPUS]; /* bit j of row i: GPU i can reach GPU j's vidmem.
                                         All rows zero = every pair is linked. */
    int      no_peers;      /* non-zero: no GPU can reach another's vidmem */
    int      cpu_coherent;  /* non-zero: the CPU can address vidmem (a coherent
                               platform); 0 = a PCIe platform, where it cannot */
    uint32_t numa_nodes;    /* host NUMA nodes to simulate, <= UVM_MAX_NUMA_NODES;
                               0 = the host's own topology. Simulated node n is
                               backed by the host's node (n mod host node count). */
    int32_t  gpu_numa_node[UVM_MAX_GPUS]; /* with numa_nodes set: the node GPU i
                               hangs off. All zero = GPU i on node (i mod numa_nodes);
                               with the host's topology, GPU i is on its node (i mod count). */
} uvm_sim_params_t;

typedef struct uvm_manager_params_s {
    uvm_backend_kind_t backend; /* 0 = auto */
    uvm_sim_params_t sim;       /* used by the sim backend only */
} uvm_manager_params_t;

/* Create a manager. params may be NULL (all defaults). On success *out owns
 * the manager until uvm_manager_destroy.
 * Errors: INVALID_ARGUMENT (out NULL, bad sim configuration), NO_DEVICE
 * (CUDA asked for, none present), NOT_SUPPORTED (CUDA asked for, not built in),
 * NO_HOST_MEMORY, BACKEND. Thread-safe. */
UVM_API uvm_status_t uvm_manager_create(const uvm_manager_params_t *params, uvm_manager_t **out);

/* Free every object still alive (removing its mappings), give all memory back
 * to the backend and destroy the manager. Live objects are leaks: they give
 * UVM_ERR_LEAKED_OBJECTS, their report (as uvm_objects_report: client, size,
 * backing, tag, age) goes to stderr and stays for the calling thread
 * (uvm_leak_report); the manager is destroyed either way. Where the
 * environment names UVM_TRACE=<prefix> (which also starts the trace when the
 * manager is created, with the default ring, and says on stderr where the
 * files will go) and the manager was traced, the trace is written to
 * <prefix>.json and <prefix>.svg first, and stderr says where (the prefix
 * made absolute). NOT thread-safe: no
 * other call on this manager may be in flight or follow. */
UVM_API uvm_status_t uvm_manager_destroy(uvm_manager_t *mgr);

/* The backend the manager runs on (never AUTO). */
UVM_API uvm_status_t uvm_manager_backend(uvm_manager_t *mgr, uvm_backend_kind_t *out);

/* ------------------------------------------------------------------------ */
/* GPUs                                                                     */
/* ------------------------------------------------------------------------ */

/* A GPU index (every `gpu` argument, 0 <= gpu < uvm_gpu_count) is, on the
 * CUDA backend, the CUDA driver's device ordinal as the process sees it
 * (cuDeviceGet(&dev, gpu): the order CUDA_VISIBLE_DEVICES leaves, the same
 * number cudaSetDevice, torch.device("cuda", gpu) and cupy.cuda.Device(gpu)
 * take), for the first UVM_MAX_GPUS devices. On sim it is the simulated
 * GPU's number. */
UVM_API uvm_status_t uvm_gpu_count(uvm_manager_t *mgr, uint32_t *out);

typedef struct uvm_gpu_info_s {
    char     name[96];
    uint64_t memory_total;  /* bytes of vidmem */
    uint64_t memory_free;   /* bytes the backend can still give (not counting
                               chunks the manager holds free); see below */
    uint64_t page_sizes;    /* mask of UVM_PAGE_SIZE_* */
    uint32_t peer_mask;     /* bit j: this GPU can reach GPU j's vidmem */
    int      cpu_coherent;  /* the CPU can address this GPU's vidmem */
    uint64_t granularity;   /* the backend's mapping granularity (2 MiB on H100/H200) */
    int32_t  host_numa_id;  /* the host NUMA node the GPU hangs off (hwloc, by PCI
                               bus id; else the driver's answer; on sim, the
                               configured node); -1 if unknown */
    char     pci_bus_id[32]; /* "0000:3b:00.0"; made up on sim ("0000:10:00.0" for GPU 0) */
    char     cpus[256];     /* the CPUs local to the GPU, as a list ("0-15,32-47");
                               empty if unknown */
    uint8_t  uuid[16];      /* the GPU's UUID (cuDeviceGetUuid; made up on sim) */
} uvm_gpu_info_t;

/* On the CUDA backend the manager opens a GPU (retains its primary context,
 * makes its copy stream, reserves its physical window) at the first call that
 * uses it, not at creation: a process that uses one GPU of several holds
 * nothing on the others. The driver counts a GPU's free memory only through
 * a context, so this call opens the GPU if nothing has yet (as
 * torch.cuda.mem_get_info makes a context on the device it asks about);
 * uvm_gpu_stats, the OOM report and the snapshot open nothing and count
 * nothing held on a GPU not open. Thread-safe.
 * Errors: INVALID_ARGUMENT, INVALID_GPU; where the GPU could not be opened,
 * the driver's failure (OUT_OF_MEMORY, BACKEND), and a later call tries again. */
UVM_API uvm_status_t uvm_gpu_info(uvm_manager_t *mgr, uint32_t gpu, uvm_gpu_info_t *out);

/* Give fully free 2 MiB root chunks held by the GPU's physical memory manager
 * back to the backend. *released (may be NULL) gets the bytes given back.
 * Free chunks that threads keep cached for one-chunk objects go back to the
 * PMM first (as they do for uvm_gpu_stats, and when the PMM runs out). */
UVM_API uvm_status_t uvm_gpu_trim(uvm_manager_t *mgr, uint32_t gpu, uint64_t *released);

/* The release policy of GPU `gpu` (cudaMallocAsync's release threshold,
 * PyTorch's garbage-collection threshold): the manager keeps at most `bytes`
 * of whole free 2 MiB root chunks cached; a root chunk that comes free beyond
 * that goes back to the driver at once, and setting the threshold gives back
 * what is above it now. UINT64_MAX (the default) keeps them until
 * uvm_gpu_trim; 0 gives every root chunk back as soon as nothing is in it,
 * for a long-running process that must hold no idle memory. Under any
 * threshold but UINT64_MAX, an allocation that finds no room among the
 * chunks held also gives the whole free root chunks back before it takes new
 * memory from the driver, so that free memory held is never kept beside new
 * memory (the peak held is then about the peak live, at the price of driver
 * calls where the cached memory would have been reused later); with
 * UINT64_MAX, only once the driver has no more. Free chunks inside root
 * chunks that hold live ones, the few chunks each thread keeps cached (at
 * most 4 of 2 MiB, 16 of 64 KiB and 16 of 4 KiB a thread), and memory
 * waiting for GPU work, stay. A GPU's memory is held in pools: its PMM, the
 * root chunks of user-mappable objects of 2M chunks, and each sleepable
 * client's own. Once the driver has no more for a request of any of them
 * (an allocation, a restore, a wake), the threads' cached chunks and every
 * pool's whole free root chunks go back to it and the request is tried
 * again, before memory waiting for GPU work is waited for and objects are
 * evicted (uvm_pressure.h), and before OUT_OF_MEMORY.
 * Errors: INVALID_GPU. */
UVM_API uvm_status_t uvm_gpu_set_release_threshold(uvm_manager_t *mgr, uint32_t gpu, uint64_t bytes);

/* The growth policy of GPU `gpu`. An object's chunks are physically
 * contiguous (but a stitched one's, uvm_mem_map_gpu_kernel, which first takes
 * whole free driver allocations wherever they are), so an allocation may
 * find no free run long enough among the free memory held, and take new
 * memory from the driver. Before it does,
 * the manager gives back whole free root chunks that no such run could use
 * (the shortest free runs first, and only those whose driver allocation
 * goes back whole), as many as it would otherwise hold above its peak need
 * (the most it ever needed at once since the last trim) plus `bytes`. So
 * what it holds follows what it needs rather than what fragmentation left.
 * It moves at most half its peak need until that need rises again: a
 * workload whose every step has a request that fits no free run at its
 * peak then settles rather than moving memory each step. 0 holds the least,
 * at the price of more driver calls (uvm_gpu_stats_t::root_chunks_moved
 * counts the roots moved); UINT64_MAX never gives free memory back to grow
 * (no driver call in a steady state, and the most held). The default,
 * UVM_GROWTH_SLACK_DEFAULT (256 MiB), is sized so that training holds about
 * what 0 holds without its driver calls at every step (figures:
 * docs/pmm.md). A release threshold other than UINT64_MAX gives every whole
 * free root chunk back before any growth.
 * Errors: INVALID_GPU. */
#define UVM_GROWTH_SLACK_DEFAULT (256ull << 20)
UVM_API uvm_status_t uvm_gpu_set_growth_slack(uvm_manager_t *mgr, uint32_t gpu, uint64_t bytes);

/* ------------------------------------------------------------------------ */
/* Host topology: NUMA nodes and where the GPUs sit (hwloc on real          */
/* machines; configured on sim).                                            */
/* ------------------------------------------------------------------------ */

typedef enum uvm_thp_mode {
    UVM_THP_UNKNOWN = 0,
    UVM_THP_NEVER,    /* no transparent huge pages: 2M chunks fall back to 4 KiB pages */
    UVM_THP_MADVISE,  /* for ranges that ask (the manager asks for 2M chunks) */
    UVM_THP_ALWAYS
} uvm_thp_mode_t;

typedef struct uvm_host_info_s {
    uint32_t       numa_node_count; /* nodes of the manager's topology */
    int            from_hwloc;      /* read with hwloc (else one node from sysconf, or configured) */
    uvm_thp_mode_t thp;             /* for private sysmem (transparent_hugepage/enabled) */
    uvm_thp_mode_t shmem_thp;       /* for UVM_MEM_USER_MAPPABLE sysmem (shmem_enabled) */
} uvm_host_info_t;

UVM_API uvm_status_t uvm_host_info(uvm_manager_t *mgr, uvm_host_info_t *out);

typedef struct uvm_numa_node_info_s {
    int32_t  id;            /* the id placements and GPU info use */
    int32_t  host_node;     /* the host node backing it (== id except on configured sim topologies) */
    uint64_t memory_total;  /* bytes */
    uint64_t memory_free;   /* bytes, now (0 if unknown) */
    char     cpus[256];     /* CPU list, "0-15,32-47" */
} uvm_numa_node_info_t;

/* `index` < numa_node_count; nodes come in ascending id. Errors:
 * INVALID_ARGUMENT (NULL, index out of range). */
UVM_API uvm_status_t uvm_numa_node_info(uvm_manager_t *mgr, uint32_t index, uvm_numa_node_info_t *out);

/* How two GPUs are connected, in the terms of `nvidia-smi topo -m`. */
typedef enum uvm_gpu_path {
    UVM_GPU_PATH_UNKNOWN = 0,
    UVM_GPU_PATH_SELF,  /* the same GPU */
    UVM_GPU_PATH_PIX,   /* through at most one PCIe switch */
    UVM_GPU_PATH_PXB,   /* through several PCIe bridges, not the host bridge */
    UVM_GPU_PATH_PHB,   /* through a PCIe host bridge */
    UVM_GPU_PATH_NODE,  /* between host bridges of one NUMA node */
    UVM_GPU_PATH_SYS    /* across NUMA nodes */
} uvm_gpu_path_t;

/* The PCI path between GPUs a and b (peer links such as NVLink show in
 * uvm_gpu_info's peer_mask). Errors: INVALID_ARGUMENT, INVALID_GPU. */
UVM_API uvm_status_t uvm_gpu_path(uvm_manager_t *mgr, uint32_t a, uint32_t b, uvm_gpu_path_t *out);

/* GPU `gpu` gains access to all of GPU `owner`'s vidmem, what it has now and
 * what it is given later, as cudaDeviceEnablePeerAccess gives for cudaMalloc
 * memory: a runtime calls this where it enables peer access (PyTorch's
 * allocator does for a copy between GPUs), so that pointers of either GPU
 * reach the other's objects without a per-object uvm_mem_map_gpu_phys. Costs
 * milliseconds once per pair (every driver handle the owner has is granted);
 * later calls for the pair do nothing. Thread-safe. Errors: INVALID_ARGUMENT
 * (`gpu` == `owner`), INVALID_GPU, NO_PEER_ACCESS (no peer link: bit `owner`
 * of `gpu`'s uvm_gpu_info peer_mask is clear), or the driver's failure, after
 * which no access was granted and a later call tries again. */
UVM_API uvm_status_t uvm_gpu_enable_peer_access(uvm_manager_t *mgr, uint32_t gpu, uint32_t owner);

/* ------------------------------------------------------------------------ */
/* Memory objects                                                           */
/* ------------------------------------------------------------------------ */

typedef enum uvm_backing {
    UVM_BACKING_SYSMEM = 0, /* host memory */
    UVM_BACKING_VIDMEM,     /* memory of one GPU */
    UVM_BACKING_MANAGED     /* cuMemAllocManaged memory (CUDA backend only) */
} uvm_backing_t;

/* Allocation flags. */
#define UVM_MEM_ZERO      (1u << 0) /* zero the object's memory before returning */
#define UVM_MEM_EVICTABLE (1u << 1) /* vidmem that may be evicted to sysmem under pressure
                                       and brought back on use (see Residency); only
                                       vidmem is ever evicted: on sysmem or managed
                                       memory, INVALID_ARGUMENT (as UVM_MEM_DISCARDABLE) */
#define UVM_MEM_USER_MAPPABLE (1u << 2) /* sysmem: shareable pages (a memfd), which a CPU user
                                           mapping needs. Without it sysmem is private
                                           anonymous memory: 2M chunks are backed by
                                           transparent huge pages and pin about twice as
                                           fast, and uvm_mem_map_cpu_user is NOT_SUPPORTED.
                                           Vidmem of 2M chunks: chunks the backend can map
                                           again at a user address of the caller's choosing
                                           (on CUDA a driver handle per 2 MiB; without the
                                           flag the pool grows in handles of up to 1 GiB,
                                           which the driver maps only whole). */
#define UVM_MEM_GPU_MAPPED (1u << 3) /* also map the object in the kernel address space of
                                        its GPU (the owner; for sysmem params.gpu), as
                                        uvm_mem_map_gpu_kernel does; the address is in
                                        uvm_mem_info's gpu_kernel_address. Memory and a
                                        pointer a kernel can use, in one call. */

#define UVM_MEM_DISCARDABLE (1u << 4) /* vidmem holding a cache its owner can rebuild: evictable,
                                         and evicting it drops its bytes instead of copying
                                         them out (uvm_residency_t.discards counts it; back
                                         in vidmem, it reads as zeroes) */

/* Where a sysmem object's pages live among the host's NUMA nodes. */
typedef enum uvm_placement_kind {
    UVM_PLACEMENT_GPU_LOCAL = 0, /* default: the node of params.gpu, the GPU that uses the
                                    object; where that node is unknown, or the build has
                                    no libnuma (and strict is 0), like ANY */
    UVM_PLACEMENT_NODE,          /* on `node` */
    UVM_PLACEMENT_INTERLEAVE,    /* page by page over `node_mask` (0 = every node); never strict */
    UVM_PLACEMENT_ANY            /* no binding: the process's memory policy (first touch) */
} uvm_placement_kind_t;

typedef struct uvm_placement_s {
    uvm_placement_kind_t kind;
    uint32_t node;      /* UVM_PLACEMENT_NODE: a node id of the topology */
    uint64_t node_mask; /* UVM_PLACEMENT_INTERLEAVE: bit n = node id n */
    int      strict;    /* non-zero: pages only from that node (the kernel's MPOL_BIND;
                           exhaustion there is OUT_OF_MEMORY or the kernel's OOM
                           handling). 0: preferred, other nodes when it is full. */
} uvm_placement_t;

typedef struct uvm_mem_alloc_params_s {
    uint64_t      size;       /* bytes; 0 gives no object (see uvm_mem_alloc) */
    uvm_backing_t backing;    /* 0 = sysmem */
    uint32_t      gpu;        /* owning GPU of vidmem; for sysmem, the GPU that uses
                                 it (its default placement is local to that GPU) */
    uint64_t      chunk_size; /* 0 = adaptive (see docs/design.md): sysmem 4K, or
                                 2M from 2 MiB up; vidmem 4K below 64 KiB, 64K below
                                 2 MiB, 2M from there. A forced size the backing does
                                 not support is PAGE_SIZE_NOT_SUPPORTED. */
    uint32_t      flags;      /* UVM_MEM_* */
    uvm_placement_t placement; /* sysmem only (must stay zero for other backings);
                                  zero = local to `gpu` */
    uvm_client_t *client;     /* the client that owns the object and whose budget it
                                 counts against; NULL = the manager's default client
                                 (no budget) */
    const char   *tag;        /* a label for reports and the trace ("kv-cache"), at
                                 most 63 characters, copied; NULL = none. The manager
                                 keeps up to 4,096 distinct tags; later new ones read
                                 "(other)". */
    uvm_pool_t   *pool;       /* the private pool the object goes to (see Private
                                 pools), as cudaMallocFromPoolAsync: on a stream only
                                 (uvm_mem_alloc_async, uvm_mem_alloc_gpu), vidmem of
                                 the pool's GPU, neither evictable, discardable nor
                                 user-mappable, nor a sleepable client's (else
                                 INVALID_ARGUMENT; a bad handle is INVALID_HANDLE);
                                 NULL = the stream's pool where it has one */
} uvm_mem_alloc_params_t;

/* Allocate an object. Its size is rounded up to a whole number of chunks.
 * Sysmem pages are allocated and placed before the call returns: 2M chunks
 * on 2 MiB-aligned transparent huge pages where the host allows them (see
 * uvm_host_info, uvm_mem_host_pages), 4K and 64K chunks on normal pages.
 * Size 0 succeeds as cudaMalloc(0) does: the other arguments are checked as
 * for any size, no memory is taken and *out is NULL, a handle that
 * uvm_mem_free and uvm_mem_free_async accept (and do nothing with) and every
 * other call refuses as INVALID_ARGUMENT.
 * Errors: INVALID_ARGUMENT (NULL, sysmem of a size over 2^48, unknown flags,
 * a placement naming an unknown node or kind, a placement on vidmem),
 * INVALID_GPU, PAGE_SIZE_NOT_SUPPORTED, OUT_OF_MEMORY (also for vidmem or
 * managed memory larger than its GPU's, of any size, as cudaMalloc says
 * cudaErrorMemoryAllocation: then at once, moving and waiting for nothing;
 * noted for the OOM report), NOT_SUPPORTED (managed memory on sim; a NUMA
 * placement in a build without libnuma), BACKEND. */
UVM_API uvm_status_t uvm_mem_alloc(uvm_manager_t *mgr, const uvm_mem_alloc_params_t *params,
                                   uvm_mem_t **out);

/* Remove every remaining mapping of the object, then free it. The handle is
 * dead afterwards; a second free gives INVALID_HANDLE. A NULL handle (what a
 * size-0 allocation gives) is freed by doing nothing: UVM_OK. An object whose
 * tracked stream work is not done is released later, when it is (see
 * Streams); the call still returns at once, and gives BACKEND (the object
 * still alive) only where a stream's fence could not be queued. */
UVM_API uvm_status_t uvm_mem_free(uvm_manager_t *mgr, uvm_mem_t *mem);

typedef struct uvm_mem_info_s {
    uint64_t      size;         /* as asked for */
    uint64_t      alloc_size;   /* rounded up to whole chunks */
    uvm_backing_t backing;
    uint32_t      gpu;          /* owner of vidmem and managed memory; for sysmem,
                                   params.gpu, the GPU it was allocated for */
    uint64_t      chunk_size;
    uint64_t      chunk_count;
    int           cpu_kernel_mapped;
    int           cpu_user_mapped;
    uint64_t      user_address; /* the object's one user address, 0 if none */
    uint32_t      gpu_phys_mask;   /* bit g: physically mapped on GPU g */
    uint32_t      gpu_kernel_mask; /* bit g: in GPU g's kernel address space */
    uint32_t      gpu_user_mask;   /* bit g: in GPU g's user address space */
    int32_t       numa_node;       /* sysmem: the node its placement resolved to;
                                      -1 for interleave, ANY or an unknown GPU node */
    uint64_t      numa_node_mask;  /* sysmem: the nodes its pages are bound to; 0 = unbound */
    uint32_t      flags;           /* as allocated */
    uint64_t      gpu_kernel_address; /* the object's address in the kernel address space
                                         of `gpu`; 0 where it is not mapped there */
} uvm_mem_info_t;

UVM_API uvm_status_t uvm_mem_info(uvm_manager_t *mgr, uvm_mem_t *mem, uvm_mem_info_t *out);

/* Allocate an object mapped in the kernel address space of its GPU (as
 * UVM_MEM_GPU_MAPPED, which is implied) and hand back that address with it,
 * in one call: what a runtime's allocator needs. `stream` NULL: as
 * uvm_mem_alloc; else as uvm_mem_alloc_async on it. *gpu_address gets the
 * object's kernel address on params->gpu (the owner of vidmem; for sysmem
 * the GPU that uses it). Size 0: *out NULL and *gpu_address 0, as
 * uvm_mem_alloc. Errors: those of uvm_mem_alloc(_async), and
 * INVALID_ARGUMENT for a NULL gpu_address; nothing is written on failure.
 * Thread-safe. */
UVM_API uvm_status_t uvm_mem_alloc_gpu(uvm_manager_t *mgr, const uvm_mem_alloc_params_t *params,
                                       uvm_stream_t *stream, uvm_mem_t **out, uint64_t *gpu_address);

/* The runtimes' pair by address, as cudaMallocAsync and cudaFreeAsync: what
 * uvm_mem_alloc_gpu, uvm_mem_lookup_gpu_kernel, uvm_mem_info and
 * uvm_mem_free(_async) do for a runtime's allocator, in one call each way.
 * uvm_gpu_malloc_async allocates as uvm_mem_alloc_gpu (the same rules,
 * errors and stream parking) and hands back the object's kernel address on
 * params->gpu in *gpu_address and the bytes it holds (whole chunks) in
 * *alloc_size (may be NULL); the object is found by that address from then
 * on (uvm_mem_lookup_gpu_kernel gives its handle). uvm_gpu_free_async frees
 * the object that starts at `gpu_address` in GPU `gpu`'s kernel space,
 * ordered on `stream` (NULL: as uvm_mem_free), and says what it held in
 * *size (bytes asked for) and *alloc_size (each may be NULL). Address 0 is
 * freed as cudaFree(NULL): nothing, UVM_OK, sizes 0. Errors: those of
 * uvm_mem_alloc_gpu and uvm_mem_free(_async); INVALID_GPU; NOT_FOUND where
 * no object starts at `gpu_address` (an address inside one is NOT_FOUND too:
 * nothing is freed). Nothing is written on failure. Thread-safe. */
UVM_API uvm_status_t uvm_gpu_malloc_async(uvm_manager_t *mgr, const uvm_mem_alloc_params_t *params,
                                          uvm_stream_t *stream, uint64_t *gpu_address, uint64_t *alloc_size);
UVM_API uvm_status_t uvm_gpu_free_async(uvm_manager_t *mgr, uint32_t gpu, uint64_t gpu_address,
                                        uvm_stream_t *stream, uint64_t *size, uint64_t *alloc_size);

/* Which object holds `address` in the kernel address space of GPU `gpu`,
 * and where: *mem gets its handle and *offset (may be NULL) the byte offset
 * of `address` in it (< alloc_size). Every object kernel-mapped on that GPU
 * is found (UVM_MEM_GPU_MAPPED, uvm_mem_map_gpu_kernel, uvm_mem_alloc_gpu),
 * by any address inside it, not only its start: what a runtime that frees
 * by pointer needs. Lock-free and allocation-free: a walk of a radix table
 * of the GPU's kernel addresses (2 MiB slots, split into 64 KiB and 4 KiB
 * slots only where objects share one), at most five loads deep; mapping and
 * unmapping keep it. An object being freed by another thread at the same
 * time may still be found: its handle then gives INVALID_HANDLE. Addresses
 * from 2^52 up are never found. Errors: INVALID_ARGUMENT (mem NULL),
 * INVALID_GPU, NOT_FOUND (no object's kernel mapping on `gpu` holds it).
 * Thread-safe. */
UVM_API uvm_status_t uvm_mem_lookup_gpu_kernel(uvm_manager_t *mgr, uint32_t gpu, uint64_t address,
                                               uvm_mem_t **mem, uint64_t *offset);

/* ------------------------------------------------------------------------ */
/* Mappings. Each is made and removed explicitly; map of an existing mapping */
/* gives ALREADY_MAPPED, unmap of a missing one NOT_MAPPED.                  */
/* ------------------------------------------------------------------------ */

/* CPU kernel mapping: the manager's own CPU address for the object. Sysmem
 * always; vidmem only where the CPU can address it (cpu_coherent), else
 * NOT_SUPPORTED. */
UVM_API uvm_status_t uvm_mem_map_cpu_kernel(uvm_manager_t *mgr, uvm_mem_t *mem);
UVM_API uvm_status_t uvm_mem_unmap_cpu_kernel(uvm_manager_t *mgr, uvm_mem_t *mem);

/* CPU user mapping: the same pages at `address`, chosen by the caller
 * (4 KiB aligned, else MISALIGNED). Sysmem needs UVM_MEM_USER_MAPPABLE (else
 * NOT_SUPPORTED): private pages cannot be mapped twice. An object has one user address, shared by
 * its CPU user mapping and every GPU user mapping (unified addressing): the
 * first user mapping sets it, later ones must give the same address or 0, and
 * it is released when the last user mapping goes. A range that overlaps
 * another object's user range or anything already mapped on the CPU gives
 * ADDRESS_IN_USE; nothing the caller had there is replaced. */
UVM_API uvm_status_t uvm_mem_map_cpu_user(uvm_manager_t *mgr, uvm_mem_t *mem, void *address);
UVM_API uvm_status_t uvm_mem_unmap_cpu_user(uvm_manager_t *mgr, uvm_mem_t *mem);

/* GPU physical mapping. Sysmem: DMA-maps the object's chunks for the GPU.
 * Vidmem: always present on the owning GPU (mapping it again is
 * ALREADY_MAPPED, unmapping it NOT_SUPPORTED); on a peer it needs peer access
 * (else NO_PEER_ACCESS). Unmapping removes that GPU's virtual mappings of the
 * object first. */
UVM_API uvm_status_t uvm_mem_map_gpu_phys(uvm_manager_t *mgr, uvm_mem_t *mem, uint32_t gpu);
UVM_API uvm_status_t uvm_mem_unmap_gpu_phys(uvm_manager_t *mgr, uvm_mem_t *mem, uint32_t gpu);

/* GPU virtual mapping in the GPU's kernel address space, at an address the
 * manager picks. Makes the physical mapping first where it is missing (that
 * physical mapping then stays until unmapped or freed). Page size = chunk size.
 * A vidmem object of one physically contiguous run (every one but a stitched
 * one, below) has on CUDA its range of the GPU's physical window: no driver
 * call, any chunk size. A stitched object (a long kernel-mapped runtime
 * object, UVM_MEM_GPU_MAPPED and nothing else asked, made of several runs
 * rather than growing the GPU's memory beside free ones: docs/design.md;
 * none where the manager was made with UVM_STITCH=0 in the environment) is
 * mapped at allocation, on CUDA each run's driver allocations side by side in
 * a range of its own; on another GPU it is NOT_SUPPORTED there. */
UVM_API uvm_status_t uvm_mem_map_gpu_kernel(uvm_manager_t *mgr, uvm_mem_t *mem, uint32_t gpu);
UVM_API uvm_status_t uvm_mem_unmap_gpu_kernel(uvm_manager_t *mgr, uvm_mem_t *mem, uint32_t gpu);

/* GPU virtual mapping in the user address space at the object's user address
 * (see uvm_mem_map_cpu_user). `address` 0: the address already set, or where
 * none is, one the manager picks that every GPU and the CPU can use (on CUDA,
 * vidmem's range of the GPU's physical window, inside the driver's own
 * reservation: any chunk size, no driver call). An address must be aligned to
 * the object's chunk size (else MISALIGNED). On CUDA a caller's address takes
 * vidmem of 2M chunks allocated with UVM_MEM_USER_MAPPABLE only (the driver
 * maps its own handles, whole and 2 MiB at a time); host memory needs
 * UVM_MEM_USER_MAPPABLE, and the GPUs reach it through its CPU mapping at the
 * user address (made here where the CPU user mapping is not there yet, and
 * kept while either needs it); else NOT_SUPPORTED (docs/cuda_backend.md). */
UVM_API uvm_status_t uvm_mem_map_gpu_user(uvm_manager_t *mgr, uvm_mem_t *mem, uint32_t gpu,
                                          uint64_t address);
UVM_API uvm_status_t uvm_mem_unmap_gpu_user(uvm_manager_t *mgr, uvm_mem_t *mem, uint32_t gpu);

/* User address ranges for callers that place objects themselves. The
 * manager picks no address inside a reserved range, and a user mapping lies
 * wholly inside one or outside all (else ADDRESS_IN_USE). On CUDA the range is
 * the driver's own reservation: GPU user mappings (remappable vidmem) go
 * anywhere inside it, and the CPU cannot map there (uvm_mem_map_cpu_user
 * inside is NOT_SUPPORTED). On sim the CPU and every GPU can map inside. */

/* Reserve `size` bytes (a non-zero multiple of 2 MiB); *address gets its
 * 2 MiB-aligned start. Errors: INVALID_ARGUMENT (NULL, bad size),
 * OUT_OF_MEMORY (no such range), BACKEND. */
UVM_API uvm_status_t uvm_user_range_reserve(uvm_manager_t *mgr, uint64_t size, uint64_t *address);
/* Give a reserved range back, by its start. Errors: INVALID_ARGUMENT (no
 * range starts there), ADDRESS_IN_USE (an object is still mapped inside).
 * uvm_manager_destroy gives back what is left. */
UVM_API uvm_status_t uvm_user_range_release(uvm_manager_t *mgr, uint64_t address);

/* ------------------------------------------------------------------------ */
/* Addresses. Offsets are bytes into the object, < alloc_size.              */
/* ------------------------------------------------------------------------ */

UVM_API uvm_status_t uvm_mem_cpu_kernel_address(uvm_manager_t *mgr, uvm_mem_t *mem,
                                                uint64_t offset, void **out);
UVM_API uvm_status_t uvm_mem_cpu_user_address(uvm_manager_t *mgr, uvm_mem_t *mem,
                                              uint64_t offset, void **out);

typedef enum uvm_aperture {
    UVM_APERTURE_VID = 0, /* the GPU's own vidmem */
    UVM_APERTURE_PEER,    /* another GPU's vidmem, over the peer link */
    UVM_APERTURE_SYS      /* host memory through a DMA address */
} uvm_aperture_t;

typedef struct uvm_gpu_phys_address_s {
    uint64_t       address;
    uvm_aperture_t aperture;
    uint32_t       peer_gpu;   /* owner GPU, for UVM_APERTURE_PEER */
    int            contiguous; /* the whole asked-for range is physically contiguous */
} uvm_gpu_phys_address_t;

/* Physical (vidmem) or DMA (sysmem) address of [offset, offset+size) as GPU
 * `gpu` sees it. Needs the physical mapping on that GPU (NOT_MAPPED). */
UVM_API uvm_status_t uvm_mem_gpu_phys_address(uvm_manager_t *mgr, uvm_mem_t *mem, uint32_t gpu,
                                              uint64_t offset, uint64_t size,
                                              uvm_gpu_phys_address_t *out);
UVM_API uvm_status_t uvm_mem_gpu_kernel_address(uvm_manager_t *mgr, uvm_mem_t *mem, uint32_t gpu,
                                                uint64_t offset, uint64_t *out);
UVM_API uvm_status_t uvm_mem_gpu_user_address(uvm_manager_t *mgr, uvm_mem_t *mem, uint32_t gpu,
                                              uint64_t offset, uint64_t *out);

/* ------------------------------------------------------------------------ */
/* Copy engine                                                              */
/* ------------------------------------------------------------------------ */

/* How the copy engine reaches one side of a copy. */
typedef enum uvm_gpu_view {
    UVM_VIEW_KERNEL = 0, /* through the object's GPU kernel mapping (translated by the page tree) */
    UVM_VIEW_USER,       /* through the object's GPU user mapping */
    UVM_VIEW_PHYSICAL    /* through its physical/DMA addresses, chunk by chunk */
} uvm_gpu_view_t;

typedef struct uvm_mem_span_s {
    uvm_mem_t     *mem;
    uint64_t       offset;
    uvm_gpu_view_t view; /* 0 = kernel mapping */
} uvm_mem_span_t;

/* Copy `size` bytes on the copy engine of GPU `gpu`. Each side needs the
 * mapping its view names on that GPU (NOT_MAPPED). Synchronous: the data has
 * landed when the call returns (it does not wait for streams: see
 * uvm_mem_copy_async). Overlapping ranges of one object are
 * INVALID_ARGUMENT. */
UVM_API uvm_status_t uvm_mem_copy(uvm_manager_t *mgr, uint32_t gpu, const uvm_mem_span_t *dst,
                                  const uvm_mem_span_t *src, uint64_t size);
UVM_API uvm_status_t uvm_mem_memset(uvm_manager_t *mgr, uint32_t gpu, const uvm_mem_span_t *dst,
                                    uint8_t value, uint64_t size);

/* ------------------------------------------------------------------------ */
/* Streams: GPU work and object lifetime                                    */
/*                                                                          */
/* A stream is an ordered queue of one GPU's work: a CUstream on CUDA, a    */
/* simulated queue on sim. An object remembers the streams whose work uses  */
/* it (its tracker): uvm_mem_record_use, async copies and memsets, and      */
/* allocation on a stream add to it. Lifetime rules:                        */
/*  - uvm_mem_free of an object with tracked work returns at once; the      */
/*    handle is invalid from then on, and the object's memory (and its       */
/*    mappings) are released only when the work queued on those streams up  */
/*    to the free is done. It never waits for the GPU.                      */
/*  - uvm_mem_free_async(S): the same, ordered on stream S: work queued on   */
/*    S after the free runs after everything that used the object (other    */
/*    tracked streams included: S waits for them on the GPU). A vidmem      */
/*    object mapped only on its owner (physical and kernel mappings) leaves */
/*    its memory in S's pool: uvm_mem_alloc_async on S may take it at once,  */
/*    since S orders the work, as cudaFreeAsync/cudaMallocAsync do; other    */
/*    streams and plain allocations get it once S's work up to the free is   */
/*    done. An object from uvm_mem_alloc_async(S) may therefore hold memory  */
/*    that earlier work on S still writes: use it in S's order (on S, or    */
/*    after uvm_stream_synchronize(S)).                                     */
/*  - An object of uvm_mem_alloc_gpu(S), with no flags, tag, client or     */
/*    placement, freed with uvm_mem_free_async(S) is kept                   */
/*    whole by S, mapped, as PyTorch's caching allocator keeps a block: the */
/*    next uvm_mem_alloc_gpu(S) of the same size (same chunk size and       */
/*    count) is that memory again, at the same kernel address. While kept   */
/*    it is no object (its handle is dead, its address found by no lookup)  */
/*    and counts as pooled memory. It goes back before the GPU's memory     */
/*    would grow, on uvm_gpu_trim and on the OOM path, with                 */
/*    uvm_stream_synchronize and uvm_stream_destroy, and under a release    */
/*    threshold (nothing is kept then). Other requests on S of its size     */
/*    get its memory as any of S's pooled memory. One over 8 MiB also goes  */
/*    back to S's pooled memory when a request over 8 MiB of another size   */
/*    comes on S, which may then take it.                                   */
/*  - A stream that captures a CUDA graph: see Private pools below.         */
/*  - Work the manager is not told of is not tracked: a kernel launched on   */
/*    a stream that uses an object must be recorded (uvm_mem_record_use)    */
/*    before the object is freed, or synchronized by the caller.            */
/*  - Memory waiting for work is never given back by uvm_gpu_trim. An       */
/*    allocation that finds the GPU full first takes back what streams have */
/*    finished with, then waits for the work that the rest of the memory    */
/*    freed on the GPU's streams waits for, and takes that back (as         */
/*    PyTorch's caching allocator synchronizes before freeing its cache on  */
/*    OOM): the call blocks on the GPU there. Only then does it evict, or   */
/*    fail with OUT_OF_MEMORY. Sim: held work cannot finish; not waited for.*/
/* Callers that never use streams see none of this.                         */
/* ------------------------------------------------------------------------ */

/* The runtime's default streams, for uvm_stream_create's `native`: the
 * values of the CUDA driver's CU_STREAM_LEGACY and CU_STREAM_PER_THREAD
 * (stream 0 of PyTorch and CuPy is the legacy stream; code built with
 * --default-stream per-thread uses the per-thread one). */
#define UVM_STREAM_LEGACY     ((void *)0x1)
#define UVM_STREAM_PER_THREAD ((void *)0x2)

/* A stream of GPU `gpu`. `native`: CUDA: a CUstream of the GPU's primary
 * context that the caller keeps owning (the manager never destroys it; a
 * stream of another context is INVALID_ARGUMENT), or NULL for a new
 * non-blocking stream that the manager owns, or UVM_STREAM_LEGACY /
 * UVM_STREAM_PER_THREAD: that default stream of the GPU's primary context
 * (work is queued on it with that context current, so it orders against
 * what the runtime queues on its stream 0; uvm_stream_native gives the
 * constant back). Sim: NULL, or either constant, which gives a simulated
 * queue of its own, as NULL does (the sim has no default queue that other
 * code shares); any other value is INVALID_ARGUMENT. Errors:
 * INVALID_ARGUMENT, INVALID_GPU, NOT_SUPPORTED, BACKEND. Thread-safe. */
UVM_API uvm_status_t uvm_stream_create(uvm_manager_t *mgr, uint32_t gpu, void *native, uvm_stream_t **out);
/* Wait for the stream's work, then release what waited for it and forget the
 * stream (destroying it if the manager made it). Objects that tracked it no
 * longer wait for it. BUSY (sim: work held with uvm_sim_stream_hold; the
 * stream captures a CUDA graph) leaves it as it was. uvm_manager_destroy destroys streams left. Thread-safe, but
 * the handle must not be used after (INVALID_HANDLE). */
UVM_API uvm_status_t uvm_stream_destroy(uvm_manager_t *mgr, uvm_stream_t *stream);
/* The CUstream (CUDA) to launch kernels on; NULL on sim. */
UVM_API uvm_status_t uvm_stream_native(uvm_manager_t *mgr, uvm_stream_t *stream, void **out);
/* Wait for all work queued on the stream, then release what waited for it.
 * BUSY on sim while work is held, and while the stream captures a CUDA graph
 * (the driver would refuse it and break the capture): nothing is done then.
 * Thread-safe. */
UVM_API uvm_status_t uvm_stream_synchronize(uvm_manager_t *mgr, uvm_stream_t *stream);

/* Work queued on `stream` so far (and until the object is freed) uses `mem`:
 * the object's memory outlives it. No driver call. Thread-safe. */
UVM_API uvm_status_t uvm_mem_record_use(uvm_manager_t *mgr, uvm_mem_t *mem, uvm_stream_t *stream);

/* uvm_mem_alloc ordered on `stream`: vidmem may come from memory freed on
 * that stream with uvm_mem_free_async (UVM_MEM_ZERO then zeroes it on the
 * stream). The object tracks the stream. Errors: those of uvm_mem_alloc, and
 * INVALID_HANDLE for a bad stream. Thread-safe. */
UVM_API uvm_status_t uvm_mem_alloc_async(uvm_manager_t *mgr, const uvm_mem_alloc_params_t *params,
                                         uvm_stream_t *stream, uvm_mem_t **out);
/* Free ordered on `stream` (see the rules above). Returns at once. A NULL
 * handle (a size-0 allocation's) is freed by doing nothing: UVM_OK, once the
 * stream is checked. Errors: INVALID_HANDLE (object or stream), BACKEND (a
 * fence or wait could not be queued: the object is then still alive).
 * Thread-safe. */
UVM_API uvm_status_t uvm_mem_free_async(uvm_manager_t *mgr, uvm_mem_t *mem, uvm_stream_t *stream);

/* uvm_mem_copy and uvm_mem_memset queued on `stream`, a stream of `gpu`
 * (else INVALID_ARGUMENT); they return once queued and the objects track the
 * stream. Addresses are resolved when the call is made. The arguments are
 * checked as for the synchronous calls before anything is queued; a BACKEND
 * failure may leave part of the operation queued. */
UVM_API uvm_status_t uvm_mem_copy_async(uvm_manager_t *mgr, uint32_t gpu, const uvm_mem_span_t *dst,
                                        const uvm_mem_span_t *src, uint64_t size, uvm_stream_t *stream);
UVM_API uvm_status_t uvm_mem_memset_async(uvm_manager_t *mgr, uint32_t gpu, const uvm_mem_span_t *dst,
                                          uint8_t value, uint64_t size, uvm_stream_t *stream);


/* ------------------------------------------------------------------------ */
/* Private pools: GPU memory kept for CUDA graphs                           */
/*                                                                          */
/* A CUDA graph captured on a stream (cuStreamBeginCapture to               */
/* cuStreamEndCapture; PyTorch's torch.cuda.graph) runs its work, at each   */
/* launch, at the addresses its capture's allocations had: that memory must */
/* stay the graph's for its life. A private pool keeps it, as PyTorch keeps */
/* a graph's private memory pool. A stream's allocations go to a pool while */
/* it is set to one (uvm_stream_set_pool), a request's where it names one   */
/* (params.pool): the pool's objects, vidmem of its GPU (the stream's pool  */
/* leaves other requests as usual: sysmem, another GPU's, evictable,        */
/* discardable, user-mappable, a sleepable client's):                       */
/*   - they take the pool's free memory first, then new memory (the GPU's   */
/*     free memory, or growth), never memory freed outside the pool         */
/*     (streams' pools, kept objects), which work queued before the capture */
/*     may use;                                                             */
/*   - freed, their memory stays the pool's: freed on a stream              */
/*     (uvm_mem_free_async), for the pool's later allocations on that       */
/*     stream (it orders them, within a capture too) and, once that stream  */
/*     is synchronized or destroyed, on any; freed with uvm_mem_free, once  */
/*     their work is done, on any. Nothing else takes it: uvm_gpu_trim, the */
/*     OOM path and a release threshold leave it (uvm_gpu_stats'            */
/*     held_private_bytes counts it);                                       */
/*   - graphs captured into one pool, one after another (PyTorch's pool=    */
/*     argument), share it: each reuses what the earlier ones freed, so     */
/*     launch them in the order they were captured;                         */
/*   - destroyed, its free memory goes back to the GPU once the work queued */
/*     so far on each stream of the GPU that the manager knows is done (the */
/*     graphs' launches among it); its live objects' memory goes back as    */
/*     anyone's when they are freed. Destroy it after the graphs that use   */
/*     it.                                                                  */
/* Whatever the pool, an allocation or stream-ordered free on a stream that */
/* captures, in any capture mode, makes no call the capture forbids: no     */
/* fence is taken on that stream nor any event of the capture queried, it   */
/* is not synchronized nor made to wait on work outside the capture (a free */
/* of an object that other streams used retires it until the capture has    */
/* ended), no memory goes back to the driver while a stream of the manager  */
/* captures, and waits for other streams' work are made in relaxed capture  */
/* mode (docs/cuda_backend.md, "Stream capture"). UVM_MEM_ZERO memory is    */
/* then zeroed on the stream: at each launch of the graph.                  */
/* ------------------------------------------------------------------------ */

/* A private pool of GPU `gpu`'s memory, empty. The caller owns it until
 * uvm_pool_destroy (uvm_manager_destroy destroys pools left). Errors:
 * INVALID_ARGUMENT (out NULL), INVALID_GPU, NOT_SUPPORTED (a backend without
 * streams). Thread-safe. */
UVM_API uvm_status_t uvm_pool_create(uvm_manager_t *mgr, uint32_t gpu, uvm_pool_t **out);
/* Forget the pool; its free memory goes back (see above). BUSY, nothing
 * done, while a stream is set to it. Errors: INVALID_ARGUMENT (NULL),
 * INVALID_HANDLE (destroyed, or another manager's). Thread-safe; the handle
 * is dead afterwards. */
UVM_API uvm_status_t uvm_pool_destroy(uvm_manager_t *mgr, uvm_pool_t *pool);
/* Allocations on `stream` go to `pool` from now until it is set again (NULL:
 * to no pool). A stream is set to one pool at a time; a pool may have
 * several (a capture's forked streams, captures that share it). Set it
 * before a capture begins and back after it ends; an allocation another
 * thread makes on the stream meanwhile goes to the pool or not. The pool's
 * GPU must be the stream's. uvm_stream_destroy unsets it. Errors:
 * INVALID_ARGUMENT (stream NULL, a pool of another GPU), INVALID_HANDLE
 * (stream or pool), nothing changed then. Thread-safe. */
UVM_API uvm_status_t uvm_stream_set_pool(uvm_manager_t *mgr, uvm_stream_t *stream, uvm_pool_t *pool);

typedef struct uvm_pool_info_s {
    uint32_t gpu;
    uint32_t streams;     /* streams set to it now */
    uint64_t objects;     /* its live objects */
    uint64_t live_bytes;  /* their chunks (each object's alloc_size) */
    uint64_t free_bytes;  /* freed by its objects, kept for its next allocations */
    uint64_t held_bytes;  /* live_bytes + free_bytes: the GPU memory it holds */
} uvm_pool_info_t;

/* The pool's figures, read at once. Errors: INVALID_ARGUMENT (NULL),
 * INVALID_HANDLE. Thread-safe. */
UVM_API uvm_status_t uvm_pool_info(uvm_manager_t *mgr, uvm_pool_t *pool, uvm_pool_info_t *out);

/* ------------------------------------------------------------------------ */
/* Managed objects (UVM_BACKING_MANAGED): one cuMemAllocManaged allocation   */
/* that the driver migrates between the CPU and GPUs on demand. Never more   */
/* is asked for than the named GPU has free (OUT_OF_MEMORY otherwise): the   */
/* manager does not overcommit managed memory. Their CPU kernel and GPU      */
/* kernel addresses are the one managed address (the driver's own page       */
/* tables map it); CPU user, GPU physical and GPU user mappings are          */
/* NOT_SUPPORTED. On sim, allocating one is NOT_SUPPORTED.                   */
/* ------------------------------------------------------------------------ */

/* The CPU, where a call takes a processor (else a GPU index). */
#define UVM_PROCESSOR_CPU (-1)

typedef enum uvm_managed_advice {
    UVM_ADVISE_SET_READ_MOSTLY = 1,
    UVM_ADVISE_UNSET_READ_MOSTLY,
    UVM_ADVISE_SET_PREFERRED_LOCATION,   /* processor: where the data should live */
    UVM_ADVISE_UNSET_PREFERRED_LOCATION,
    UVM_ADVISE_SET_ACCESSED_BY,          /* processor: keep it mapped there */
    UVM_ADVISE_UNSET_ACCESSED_BY
} uvm_managed_advice_t;

/* Advise the driver about a managed object (cuMemAdvise). NOT_SUPPORTED for
 * other backings; INVALID_ARGUMENT for an unknown advice; INVALID_GPU for a
 * bad processor. */
UVM_API uvm_status_t uvm_mem_advise(uvm_manager_t *mgr, uvm_mem_t *mem, uvm_managed_advice_t advice,
                                    int32_t processor);

/* Migrate [offset, offset+size) of a managed object to `processor` (a GPU or
 * UVM_PROCESSOR_CPU) and wait for it (cuMemPrefetchAsync). */
UVM_API uvm_status_t uvm_mem_prefetch(uvm_manager_t *mgr, uvm_mem_t *mem, uint64_t offset,
                                      uint64_t size, int32_t processor);

#ifdef __cplusplus
}
#endif

/* The topics beyond the core, each in a header of its own. */
#include <uvm/uvm_share.h>
#include <uvm/uvm_pressure.h>
#include <uvm/uvm_observe.h>
#include <uvm/uvm_sim.h>

#endif /* UVM_UVM_H */
