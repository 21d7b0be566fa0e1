// The events of an object's life, said once by the code where they happen
// (uvm/mem.cpp, pressure/residency.cpp) and heard by the listeners: the
// statistics' counters (read by observe/stats.cpp), the trace (through its
// hook, uvm/trace_hook.h), the budgets and the list of evictable objects
// (pressure/, through the listeners declared below). As RMM stacks its
// statistics and limiting adaptors over a resource, the object code names
// what happened and never which counter, budget or list it moves.
//
// The counters are the manager's and each GPU's atomics (uvm/manager.h):
// relaxed, since each is read alone. Vidmem objects are counted per thread
// by the chunk caches (chunk/chunk_cache.h), so the pair touches no shared
// counter, and an object with no client that is not evictable (every object
// of the held pair) calls no listener out of line. Map and unmap calls are
// traced where the caller made them (api/entry.h, map_call): a physical
// mapping made on the way to a virtual one is counted here but is not a call
// of its own in the trace.
#pragma once

#include <memory>

#include "uvm/manager.h"
#include "uvm/mem.h"
#include "uvm/trace_hook.h"
#include "uvm/uvm.h"

namespace uvm {

// Record an event of the object in the trace where tracing is on.
inline void trace_event(Manager &mgr, const Mem &mem, TraceKind kind, MapKind space = MapKind::CpuKernel,
                        uint32_t target = 0) {
    if (__builtin_expect(mgr.tracing.on(), 0))
        trace_mem(mgr, mem, kind, space, target);
}

namespace events {

// The listeners of the layers above the core: declared here, defined where
// what they move is (pressure/residency.cpp), joined at link time.
namespace heard {
// An evictable object joins its GPU's list of evictable objects
// (NO_HOST_MEMORY: it did not, and its creation is undone).
uvm_status_t evictable_created(Manager &mgr, const std::shared_ptr<Mem> &mem);
// An object with a client or evictable ends: out of its client's budget
// (unless evicted, which took it out already), off the evictable list, and
// an evicted one's bytes out of the host store.
void owned_released(Manager &mgr, Mem &mem);
// A client's parked object (mem_park), charged to it all along, is to be
// an object again: whether its client's budget lets an allocation through
// (not where the budget was set below its use since).
bool owned_reused(const Mem &mem);
// A client's object is to be parked: the key (its client's handle) under
// which that client's allocations find it; 0 where it must not be (its
// client's usage has watermarks, or a charge of its waits for its parked
// objects to go: it is released at once).
uintptr_t owned_parked(const Mem &mem);
}  // namespace heard

// `mem` is a live object now (its memory allocated, not yet published). Only
// the evictable list can refuse it (NO_HOST_MEMORY): nothing is counted then,
// and the caller undoes the allocation. `counted`: a vidmem object the chunk
// caches counted already, with its chunk (ChunkCaches::alloc), where nothing
// after the chunk could fail: one visit of the thread's cache, not two.
inline uvm_status_t created(Manager &mgr, const std::shared_ptr<Mem> &object, bool counted = false) {
    Mem &mem = *object;
    if (mem.evictable) {
        const uvm_status_t status = heard::evictable_created(mgr, object);
        if (status != UVM_OK)
            return status;
    }
    if (mem.is_vidmem()) {
        if (!counted)
            mgr.gpu(mem.owner).caches.count_object(+1);
    } else if (mem.is_managed()) {
        mgr.managed_objects++;
        mgr.managed_bytes += mem.alloc_size;
    } else {
        mgr.sysmem_objects++;
        mgr.sysmem_bytes += mem.alloc_size;
    }
    return UVM_OK;
}

// `mem` ends as an object, its mappings gone: its memory goes back right
// after (to the PMM, the driver or the host), or, for a vidmem object
// detached from its run, to whoever takes the run. `counted`: the chunk
// caches count the vidmem object out with its chunk (ChunkCaches::free).
inline void released(Manager &mgr, Mem &mem, bool counted = false) {
    if (mem.client || mem.evictable)
        heard::owned_released(mgr, mem);
    if (mem.is_vidmem()) {
        if (!counted)
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

// GPU `gpu`'s held memory (root chunks from the backend) changed by `delta`
// bytes: heard by its counter and the pressure notices on it
// (pressure/pressure.cpp, where it is defined).
void held_changed(Manager &mgr, uint32_t gpu, int64_t delta);

}  // namespace events
}  // namespace uvm
