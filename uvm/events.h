// The events of an object's life, said once by the code where they happen
// (uvm/mem.cpp, pressure/residency.cpp) and heard here by the listeners: the
// statistics' counters (read by observe/stats.cpp) and the trace (eviction
// and restore; the other calls are traced where the caller made them). As RMM stacks its statistics adaptor
// over a resource, the object code names what happened and never which
// counter it moves.
//
// The counters are the manager's and each GPU's atomics (uvm/manager.h):
// relaxed, since each is read alone. Vidmem objects are counted per thread
// by the chunk caches (chunk/chunk_cache.h), so the pair touches no shared
// counter. Map and unmap calls are traced where the caller made them
// (api/entry.h, map_call): a physical mapping made on the way to a virtual
// one is counted here but is not a call of its own in the trace.
#pragma once

#include "observe/trace.h"
#include "uvm/manager.h"
#include "uvm/mem.h"

namespace uvm::events {

// `mem` is a live object now (its memory allocated, not yet published).
inline void created(Manager &mgr, Mem &mem) {
    if (mem.is_vidmem()) {
        mgr.gpu(mem.owner).caches.count_object(+1);
    } else if (mem.is_managed()) {
        mgr.managed_objects++;
        mgr.managed_bytes += mem.alloc_size;
    } else {
        mgr.sysmem_objects++;
        mgr.sysmem_bytes += mem.alloc_size;
    }
}

// `mem`'s memory went back (to the PMM, the driver or the host), or, for a
// vidmem object detached from its run, to whoever took the run.
inline void released(Manager &mgr, Mem &mem) {
    if (mem.is_vidmem()) {
        mgr.gpu(mem.owner).caches.count_object(-1);
    } else if (mem.is_managed()) {
        mgr.managed_objects--;
        mgr.managed_bytes -= mem.alloc_size;
    } else {
        mgr.sysmem_objects--;
        mgr.sysmem_bytes -= mem.alloc_size;
    }
}

// A mapping of `kind` of `mem` was made on GPU `gpu` (ignored for the CPU
// kinds); `peer`: a physical mapping of another GPU's vidmem.
inline void mapped(Manager &mgr, MapKind kind, uint32_t gpu, bool peer = false) {
    switch (kind) {
    case MapKind::CpuKernel: mgr.cpu_kernel_mappings++; break;
    case MapKind::CpuUser: mgr.cpu_user_mappings++; break;
    case MapKind::GpuPhys:
        if (peer)
            mgr.gpu(gpu).peer_mappings++;
        mgr.gpu(gpu).other_phys_mappings++;
        break;
    case MapKind::GpuKernel: mgr.gpu(gpu).kernel_mappings++; break;
    case MapKind::GpuUser: mgr.gpu(gpu).user_mappings++; break;
    }
}

inline void unmapped(Manager &mgr, MapKind kind, uint32_t gpu, bool peer = false) {
    switch (kind) {
    case MapKind::CpuKernel: mgr.cpu_kernel_mappings--; break;
    case MapKind::CpuUser: mgr.cpu_user_mappings--; break;
    case MapKind::GpuPhys:
        if (peer)
            mgr.gpu(gpu).peer_mappings--;
        mgr.gpu(gpu).other_phys_mappings--;
        break;
    case MapKind::GpuKernel: mgr.gpu(gpu).kernel_mappings--; break;
    case MapKind::GpuUser: mgr.gpu(gpu).user_mappings--; break;
    }
}

// `mem` left its GPU (`discarded`: its bytes were dropped, not kept in host
// memory): the GPU's eviction counters and the trace.
inline void evicted(Manager &mgr, Mem &mem, bool discarded) {
    GpuState &g = mgr.gpu(mem.owner);
    g.evictions++;
    g.evicted_objects++;
    if (!discarded) {
        g.bytes_evicted += mem.alloc_size;
        g.evicted_bytes += mem.alloc_size;
        mgr.evicted_host_bytes += mem.alloc_size;
    }
    trace_event(mgr, mem, TraceKind::Evict);
}

// An evicted `mem` no longer holds host memory (restored, or freed while
// out); `kept`: its bytes had been kept.
inline void eviction_ended(Manager &mgr, Mem &mem, bool kept) {
    GpuState &g = mgr.gpu(mem.owner);
    g.evicted_objects--;
    if (kept) {
        mgr.evicted_host_bytes -= mem.alloc_size;
        g.evicted_bytes -= mem.alloc_size;
    }
}

// `mem` is back on its GPU (`discarded`: zeroed, nothing copied back).
inline void restored(Manager &mgr, Mem &mem, bool discarded) {
    GpuState &g = mgr.gpu(mem.owner);
    g.restores++;
    if (!discarded)
        g.bytes_restored += mem.alloc_size;
    trace_event(mgr, mem, TraceKind::Restore);
}

// A managed range was prefetched.
inline void prefetched(Manager &mgr, uint64_t bytes) {
    mgr.prefetches++;
    mgr.prefetched_bytes += bytes;
}

}  // namespace uvm::events
