/*
 * uvm_lab.h - the page-size lab's simulator as a C API (docs/page-size-lab.md),
 * for the Python bindings (python/uvm_lab.py) and any other language.
 *
 * A lab replays memory accesses against objects under one page-size policy,
 * through a model of a GPU's address translation (per-SM L1 TLBs, a shared
 * L2 TLB, a page-walk cache, page walks over the manager's page tree), and
 * counts misses, walks, page-table bytes, fragmentation and, out of core,
 * the bytes pages move. It needs no GPU and no manager.
 *
 * Conventions as in uvm.h: every call returns uvm_status_t; structs are
 * zero-initialisable only where said. Thread safety: a lab is used by one
 * thread at a time; different labs may be used concurrently.
 */
#ifndef UVM_UVM_LAB_H
#define UVM_UVM_LAB_H

#include "uvm/uvm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct uvm_lab uvm_lab_t; /* opaque */

typedef enum uvm_lab_policy {
    UVM_LAB_PAGES_4K = 0,
    UVM_LAB_PAGES_64K,
    UVM_LAB_PAGES_2M,
    UVM_LAB_ADAPTIVE, /* the manager's rule: 4K below 64 KiB, 64K below 2 MiB, 2M from there */
    UVM_LAB_MOSAIC    /* 4K pages in 2 MiB frames; a full frame is one 2M translation */
} uvm_lab_policy_t;

/* The machine. TLB entries must be a non-zero multiple of their ways. */
typedef struct uvm_lab_model_s {
    uint32_t sms;          /* L1 TLBs, one per SM */
    uint32_t l1_entries, l1_ways;
    uint32_t l2_entries, l2_ways;
    uint32_t pwc_entries;  /* page-walk cache; 0 = none */
    double   l1_hit_ns, l2_hit_ns, walk_ref_ns;
    uint64_t gpu_memory;   /* out of core: bytes of pages the GPU holds; 0 = all resident */
    uint64_t coalesce_bytes;  /* 0, or a power of two in (2 MiB, 512 MiB]: one TLB entry covers an
                                 aligned region of an object's 2M pages that size (Hopper: 32 MiB) */
    int32_t  random_replacement; /* TLBs replace a random way (non-zero) or the least recent one */
    uint32_t reserved;     /* 0 */
} uvm_lab_model_t;

typedef struct uvm_lab_access_s {
    uint64_t address;
    uint32_t size;       /* bytes, > 0 */
    uint32_t processor;  /* the SM issuing it (its L1 TLB: processor % sms) */
    int32_t  write;
    uint32_t reserved;   /* 0 */
} uvm_lab_access_t;

typedef enum uvm_lab_pattern {
    UVM_LAB_SEQUENTIAL = 0,
    UVM_LAB_RANDOM,
    UVM_LAB_STRIDED,       /* one access per stride */
    UVM_LAB_POINTER_CHASE, /* a random cycle through elements one stride apart */
    UVM_LAB_GRAPH_WALK,    /* mostly short hops, sometimes anywhere */
    UVM_LAB_GROWING_SET    /* a working set growing from a sixteenth of the footprint to all of it */
} uvm_lab_pattern_t;

typedef struct uvm_lab_workload_s {
    uvm_lab_pattern_t pattern;
    uint64_t footprint;   /* bytes the accesses range over, from `base` */
    uint64_t accesses;
    uint64_t stride;      /* STRIDED, POINTER_CHASE; 0 = 4 KiB */
    uint32_t processors;  /* accesses go to SMs 0..processors-1 in turn; 0 = 1 */
    uint32_t access_size; /* 0 = 8 */
    uint64_t seed;
} uvm_lab_workload_t;

typedef struct uvm_lab_stats_s {
    uint64_t accesses, l1_misses, l2_misses, pwc_hits, walk_refs, unmapped;
    uint64_t allocated_bytes, touched_bytes, page_table_bytes, coalesced_frames;
    uint64_t faults, bytes_migrated_in, bytes_migrated_out;
    double   time_l1_ns, time_l2_ns, time_walks_ns; /* modelled translation time, by cause */
    double   time_mapping_ns;   /* pinning each object's pages (uvm_lab_set_costs; else 0) */
    double   time_migration_ns; /* the copies of out-of-core faults and evictions (likewise) */
} uvm_lab_stats_t;

/* A named machine into *out: "example" (round numbers for teaching, not a
 * real GPU), "h100" or "h200" (calibrated on those GPUs, docs/page-size-lab.md).
 * NOT_FOUND for another name. */
UVM_API uvm_status_t uvm_lab_preset(const char *name, uvm_lab_model_t *out);

/* INVALID_ARGUMENT: NULL, a model with a bad TLB shape or coalescing size,
 * non-zero reserved fields, an unknown policy. */
UVM_API uvm_status_t uvm_lab_create(const uvm_lab_model_t *model, uvm_lab_policy_t policy, uvm_lab_t **out);
UVM_API uvm_status_t uvm_lab_destroy(uvm_lab_t *lab);
/* An object at `base` (4 KiB aligned, and aligned to the page size the
 * policy gives it, else MISALIGNED). ADDRESS_IN_USE where it overlaps one. */
UVM_API uvm_status_t uvm_lab_allocate(uvm_lab_t *lab, uint64_t base, uint64_t size);
/* NOT_MAPPED for a base that starts no object. */
UVM_API uvm_status_t uvm_lab_free(uvm_lab_t *lab, uint64_t base);
/* Replay `count` accesses (those outside every object count as unmapped). */
UVM_API uvm_status_t uvm_lab_access(uvm_lab_t *lab, const uvm_lab_access_t *accesses, size_t count);
/* Generate and replay a workload over the object(s) at [base, base + footprint). */
UVM_API uvm_status_t uvm_lab_run(uvm_lab_t *lab, const uvm_lab_workload_t *workload, uint64_t base);
/* Replay a trace file in the lab's format. A bad line is INVALID_ARGUMENT
 * with "line N: why" in `error` (when given), and stops the replay. */
UVM_API uvm_status_t uvm_lab_replay(uvm_lab_t *lab, const char *path, char *error, size_t error_size);
UVM_API uvm_status_t uvm_lab_stats(uvm_lab_t *lab, uvm_lab_stats_t *out);

/* Charge pinning and migration from now on at the costs fitted to the rows
 * of the GPU named `device` (case-insensitive), or else of the one whose name
 * contains it, in the calibration file at `path` (NULL: the lab's own,
 * lab/calibration.csv). INVALID_ARGUMENT with "line N: why" in `error` for a
 * malformed file; NOT_FOUND where no GPU, or more than one, matches, or the
 * file cannot be opened. */
UVM_API uvm_status_t uvm_lab_set_costs(uvm_lab_t *lab, const char *path, const char *device, char *error,
                                       size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* UVM_UVM_LAB_H */
