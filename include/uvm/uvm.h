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
 *    out-parameters, which are written only on UVM_OK.
 *  - Parameter structs are zero-initialisable: zero means the sensible
 *    default, named beside each field.
 *  - Handles are opaque. An object handle is checked on every call: a freed
 *    handle, or one from another manager, gives UVM_ERR_INVALID_HANDLE and
 *    touches nothing.
 *  - A failed call leaves the manager and every object as they were.
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
    UVM_ERR_ADDRESS_IN_USE,          /* a caller-chosen address overlaps another mapping */
    UVM_ERR_NO_PEER_ACCESS,          /* the GPU cannot reach the owning GPU's memory */
    UVM_ERR_NO_DEVICE,               /* the CUDA backend was asked for and no GPU/driver is present */
    UVM_ERR_BACKEND,                 /* the backend (driver) failed a call */
    UVM_ERR_LEAKED_OBJECTS,          /* uvm_manager_destroy found live objects (they were freed) */
    UVM_ERR_BUSY,                    /* work queued on a stream cannot finish (sim: held work) */
    UVM_ERR_NOT_FOUND,               /* nothing of the kind asked for exists (no report yet) */
    UVM_ERR_BUFFER_TOO_SMALL,        /* an output buffer is too small (the size needed is given) */
    UVM_ERR_FORKED                   /* the manager belongs to the parent of this forked process */
} uvm_status_t;

/* Static English text for a status; never NULL (unknown values give
 * "unknown status"). Thread-safe. */
UVM_API const char *uvm_status_string(uvm_status_t status);

/* ------------------------------------------------------------------------ */
/* Manager                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct uvm_manager uvm_manager_t; /* opaque */
typedef struct uvm_mem uvm_mem_t;         /* opaque object handle */
typedef struct uvm_stream uvm_stream_t;   /* opaque stream handle (see Streams) */
typedef struct uvm_client uvm_client_t;   /* opaque client handle (see Clients) */

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
 * manager is created, with the default ring) and the manager was traced, the
 * trace is written to <prefix>.json and <prefix>.svg first. NOT thread-safe: no
 * other call on this manager may be in flight or follow. */
UVM_API uvm_status_t uvm_manager_destroy(uvm_manager_t *mgr);

/* The backend the manager runs on (never AUTO). */
UVM_API uvm_status_t uvm_manager_backend(uvm_manager_t *mgr, uvm_backend_kind_t *out);

/* ------------------------------------------------------------------------ */
/* GPUs                                                                     */
/* ------------------------------------------------------------------------ */

UVM_API uvm_status_t uvm_gpu_count(uvm_manager_t *mgr, uint32_t *out);

typedef struct uvm_gpu_info_s {
    char     name[96];
    uint64_t memory_total;  /* bytes of vidmem */
    uint64_t memory_free;   /* bytes the backend can still give (not counting
                               chunks the manager holds free) */
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

/* Errors: INVALID_ARGUMENT, INVALID_GPU. */
UVM_API uvm_status_t uvm_gpu_info(uvm_manager_t *mgr, uint32_t gpu, uvm_gpu_info_t *out);

/* Give fully free 2 MiB root chunks held by the GPU's physical memory manager
 * back to the backend. *released (may be NULL) gets the bytes given back.
 * Free chunks that threads keep cached for one-chunk objects go back to the
 * PMM first (as they do for uvm_gpu_stats, and when the PMM runs out). */
UVM_API uvm_status_t uvm_gpu_trim(uvm_manager_t *mgr, uint32_t gpu, uint64_t *released);

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
                                       and brought back on use (see Residency) */
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
    uint64_t      size;       /* bytes, > 0 */
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
} uvm_mem_alloc_params_t;

/* Allocate an object. Its size is rounded up to a whole number of chunks.
 * Sysmem pages are allocated and placed before the call returns: 2M chunks
 * on 2 MiB-aligned transparent huge pages where the host allows them (see
 * uvm_host_info, uvm_mem_host_pages), 4K and 64K chunks on normal pages.
 * Errors: INVALID_ARGUMENT (NULL, size 0 or beyond any GPU's memory, unknown
 * flags, a placement naming an unknown node or kind, a placement on vidmem),
 * INVALID_GPU, PAGE_SIZE_NOT_SUPPORTED, OUT_OF_MEMORY, NOT_SUPPORTED (managed
 * memory on sim; a NUMA placement in a build without libnuma), BACKEND. */
UVM_API uvm_status_t uvm_mem_alloc(uvm_manager_t *mgr, const uvm_mem_alloc_params_t *params,
                                   uvm_mem_t **out);

/* Remove every remaining mapping of the object, then free it. The handle is
 * dead afterwards; a second free gives INVALID_HANDLE. An object whose
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

/* ------------------------------------------------------------------------ */
/* Sharing with other processes (docs/sharing.md).                           */
/* ------------------------------------------------------------------------ */

/* Send the object over `socket`, a connected Unix domain socket of type
 * SOCK_SEQPACKET: a versioned message naming its size, chunk size, backing
 * and owner GPU (by UUID and PCI bus id), with its memory as file descriptors
 * (SCM_RIGHTS). Another manager, usually in another process, makes an object
 * of the same memory with uvm_mem_import. The memory lives until the
 * exporter and every importer have freed it (or exited): a vidmem object
 * once exported goes back to the driver when freed here, never to this
 * manager's pools. What can be exported: sysmem allocated with
 * UVM_MEM_USER_MAPPABLE (its memfd), and vidmem of 2M chunks allocated with
 * UVM_MEM_USER_MAPPABLE and not evictable (a root chunk of its own per 2 MiB,
 * sent as an fd each: a memfd on sim, a driver handle's POSIX fd on CUDA);
 * else NOT_SUPPORTED. BACKEND where the socket fails. A process may hold
 * about 1,000 fds at once by default (ulimit -n): the importer holds one per
 * 2 MiB while it imports. It blocks until the message is sent, without
 * holding the object: other calls on it go on meanwhile. Thread-safe. */
UVM_API uvm_status_t uvm_mem_export(uvm_manager_t *mgr, uvm_mem_t *mem, int socket);

/* Receive one exported object from `socket` and make it an object of this
 * manager, charged to `client` (NULL: the default client). It maps as its
 * backing allows here: sysmem on the CPU (kernel and user) and every GPU;
 * vidmem on the GPU with the exporter's UUID, else its PCI bus id (physical, kernel and user
 * mappings, a user address of the caller's included) and on that GPU's peers.
 * It is never evicted. uvm_mem_info gives the exporter's size, chunk size and
 * backing, and the flag UVM_MEM_USER_MAPPABLE. INVALID_ARGUMENT for a
 * malformed, truncated or inconsistent message, or fds of the wrong kind or
 * size; NOT_SUPPORTED for another message version or a handle this backend
 * cannot import (a CUDA handle into sim, or the reverse); INVALID_GPU where
 * no GPU here has the owner's UUID or PCI bus id; NOT_FOUND where the peer closed
 * the socket first. On any error nothing is mapped and no fd stays open.
 * Thread-safe. */
UVM_API uvm_status_t uvm_mem_import(uvm_manager_t *mgr, int socket, uvm_client_t *client, uvm_mem_t **out);

/* Where a sysmem object's pages really are, as the kernel reports it. */
typedef struct uvm_host_pages_s {
    uint64_t resident_bytes;  /* pages present */
    uint64_t huge_bytes;      /* of those, in 2 MiB transparent huge pages (/proc/self/smaps) */
    uint64_t node_bytes[UVM_MAX_NUMA_NODES]; /* by host NUMA node (move_pages); all zero
                                                in a build without libnuma */
} uvm_host_pages_t;

/* A diagnostic, not for hot paths: reads /proc/self/smaps and asks the kernel
 * for every page's node. NOT_SUPPORTED for vidmem and managed objects. */
UVM_API uvm_status_t uvm_mem_host_pages(uvm_manager_t *mgr, uvm_mem_t *mem, uvm_host_pages_t *out);

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
 * Every vidmem object is physically contiguous, so on CUDA this is its range
 * of the GPU's physical window: no driver call, any chunk size. */
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
/* Residency: evictable vidmem (UVM_MEM_EVICTABLE) under memory pressure     */
/*                                                                          */
/* An evictable vidmem object is resident (its chunks in vidmem) or evicted  */
/* (its bytes in host memory the manager owns). An allocation or a restore  */
/* that finds its GPU full evicts objects before failing (and fails at once,*/
/* moving nothing, where even evicting all it could would not make room):   */
/* least recently                                                           */
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
/*  - Work the manager is not told of is not tracked: a kernel launched on   */
/*    a stream that uses an object must be recorded (uvm_mem_record_use)    */
/*    before the object is freed, or synchronized by the caller.            */
/*  - Memory waiting for work is never given back by uvm_gpu_trim. An       */
/*    allocation that finds the GPU full first takes back what streams have */
/*    finished with, then fails with OUT_OF_MEMORY rather than wait.        */
/* Callers that never use streams see none of this.                         */
/* ------------------------------------------------------------------------ */

/* A stream of GPU `gpu`. `native`: CUDA: a CUstream of the GPU's primary
 * context that the caller keeps owning (the manager never destroys it; a
 * stream of another context is INVALID_ARGUMENT), or NULL for a new
 * non-blocking stream that the manager owns. Sim: must be NULL (else
 * INVALID_ARGUMENT). Errors: INVALID_ARGUMENT, INVALID_GPU, NOT_SUPPORTED,
 * BACKEND. Thread-safe. */
UVM_API uvm_status_t uvm_stream_create(uvm_manager_t *mgr, uint32_t gpu, void *native, uvm_stream_t **out);
/* Wait for the stream's work, then release what waited for it and forget the
 * stream (destroying it if the manager made it). Objects that tracked it no
 * longer wait for it. BUSY (sim: work held with uvm_sim_stream_hold) leaves
 * it as it was. uvm_manager_destroy destroys streams left. Thread-safe, but
 * the handle must not be used after (INVALID_HANDLE). */
UVM_API uvm_status_t uvm_stream_destroy(uvm_manager_t *mgr, uvm_stream_t *stream);
/* The CUstream (CUDA) to launch kernels on; NULL on sim. */
UVM_API uvm_status_t uvm_stream_native(uvm_manager_t *mgr, uvm_stream_t *stream, void **out);
/* Wait for all work queued on the stream, then release what waited for it.
 * BUSY on sim while work is held. Thread-safe. */
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
/* Free ordered on `stream` (see the rules above). Returns at once. Errors:
 * INVALID_ARGUMENT, INVALID_HANDLE (object or stream), BACKEND (a fence or
 * wait could not be queued: the object is then still alive). Thread-safe. */
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

/* Sim only (NOT_SUPPORTED on CUDA): queue work that stays in flight until
 * released, as a kernel spinning on a flag would, so that tests can hold a
 * stream's work deterministically. Release lets the oldest held work of the
 * stream finish (INVALID_ARGUMENT if none is held); the work queued behind
 * it runs then. Thread-safe. */
UVM_API uvm_status_t uvm_sim_stream_hold(uvm_manager_t *mgr, uvm_stream_t *stream);
UVM_API uvm_status_t uvm_sim_stream_release(uvm_manager_t *mgr, uvm_stream_t *stream);

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
    uint64_t stream_pool_bytes;  /* vidmem freed on streams, not yet back in the PMM */
} uvm_manager_stats_t;

UVM_API uvm_status_t uvm_manager_stats(uvm_manager_t *mgr, uvm_manager_stats_t *out);

/* ------------------------------------------------------------------------ */
/* Clients: named owners of objects, with budgets                            */
/*                                                                          */
/* A client owns the objects allocated with it (params.client) and has a    */
/* budget per GPU for vidmem and managed memory and one for sysmem (0 =     */
/* unlimited), changeable at any time. Budgets may add up to more than a GPU */
/* holds; the GPU's own limit still holds. An allocation or a restore that   */
/* would take a client over its budget first evicts that client's own       */
/* evictable objects (least recently used first, where eviction is on),     */
/* then gives OUT_OF_MEMORY. Usage never exceeds a budget, not even between */
/* two threads' calls. Evicted bytes count against no budget.               */
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
    uint64_t vidmem_used[UVM_MAX_GPUS];      /* resident vidmem and managed bytes, by GPU */
    uint64_t vidmem_evictable[UVM_MAX_GPUS]; /* of those, evictable */
    uint64_t vidmem_budget[UVM_MAX_GPUS];    /* 0 = unlimited */
    uint64_t sysmem_used;
    uint64_t sysmem_budget;
} uvm_client_info_t;

UVM_API uvm_status_t uvm_client_info(uvm_manager_t *mgr, uvm_client_t *client, uvm_client_info_t *out);

/* ------------------------------------------------------------------------ */
/* Pressure notices                                                          */
/*                                                                          */
/* Watermarks, in percent, on a GPU's held memory (what the manager holds    */
/* from the driver, against the GPU's total) or on a client's use of its     */
/* budget on a GPU (or UVM_CLIENT_SYSMEM). Each crossing queues one event:   */
/* upwards when usage reaches a watermark, downwards when it falls below it */
/* again. The queue's eventfd is readable while events wait; a runtime       */
/* polls it and takes them, then trims, frees or evicts. Events are never    */
/* called back: usage changes where the manager holds locks. At most 4,096   */
/* wait; beyond that the oldest are dropped.                                 */
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
 * UVM_CLIENT_SYSMEM). Crossings are judged from the next change on. Errors:
 * INVALID_ARGUMENT, INVALID_GPU, INVALID_HANDLE. Thread-safe. */
UVM_API uvm_status_t uvm_pressure_watermarks(uvm_manager_t *mgr, uvm_client_t *client, uint32_t gpu,
                                             const uint32_t *percents, uint32_t count);
/* The eventfd (the manager's; do not close it), readable while events wait. */
UVM_API uvm_status_t uvm_pressure_fd(uvm_manager_t *mgr, int *fd);
/* Take up to `max` waiting events, oldest first; *count gets how many. */
UVM_API uvm_status_t uvm_pressure_events(uvm_manager_t *mgr, uvm_pressure_event_t *out, uint32_t max,
                                         uint32_t *count);

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
 * evictable bytes (one client: the manager's); fragmentation (the largest
 * free block against the free bytes held); the largest objects; the largest
 * request that would have fit. NOT_FOUND where this thread has had none. */
UVM_API uvm_status_t uvm_oom_report(uvm_manager_t *mgr, uvm_report_format_t format, char *buf, size_t size,
                                    size_t *needed);

/* A JSON snapshot of the whole manager: its statistics, every GPU's (memory,
 * chunks by size and state, mappings, evictions, copy engine), and objects
 * by backing in power-of-two size classes. */
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
 * IP address to listen on ("127.0.0.1", "0.0.0.0"); port 0 lets the system
 * pick one, given back in *bound_port (may be NULL). Errors:
 * INVALID_ARGUMENT, ADDRESS_IN_USE (cannot listen there; cpp-httplib sets
 * SO_REUSEADDR, so a port another server holds may still be taken), NOT_SUPPORTED (a
 * build without cpp-httplib). uvm_manager_destroy stops servers left.
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

#endif /* UVM_UVM_H */
