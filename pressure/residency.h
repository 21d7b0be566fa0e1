// Residency of evictable vidmem (UVM_MEM_EVICTABLE): eviction to host memory
// and back, and eviction under pressure (after nvidia-uvm's root-chunk
// eviction in uvm_pmm_gpu.c, at object granularity).
//
//  - An evicted object's bytes live in private host memory the manager owns
//    (Mem::saved); its chunks and mappings are gone. Data moves on the
//    owner's copy engine, the object being one physically contiguous run:
//    one copy each way, through the host memory's DMA mapping.
//  - Eviction takes only objects that nothing outside the manager can be
//    using through an address: no stream work pending, no CPU or user
//    mapping, no peer mapping. Their owner's kernel mapping is made again on
//    restore.
//  - Under pressure, victims are taken least recently used first, among the
//    objects whose root chunks hold no pinned memory (so that evicting them
//    can give whole roots back to the PMM, which any request can use).
//
// Every function here takes an object whose lock the caller holds; victims
// are locked with try_lock, and objects the caller holds are named to be
// skipped (a thread never tries a lock it holds).
#pragma once

#include "stream/stream.h"

#include <cstdint>
#include <memory>

#include "backend/stream_capability.h"
#include "compact/compact.h"
#include "uvm/manager.h"
#include "uvm/mem.h"

namespace uvm {

// An object joins and leaves its GPU's list of evictable objects as it is
// created and released (residency.cpp hears uvm/events.h).
// Release an evicted object's host bytes (its restore, or its release).
void drop_evicted_bytes(Manager &mgr, Mem &mem);

// Mark a use (alloc, map, copy, memset, uvm_mem_touch) for the LRU order.
void mem_touch(Mem &mem);

// Why `mem` (locked by the caller) cannot be evicted now, or OK: not
// evictable vidmem, mapped where a move would break an address, or used by
// stream work not yet done (asking takes a fence on each such stream).
uvm_status_t mem_can_evict(Manager &mgr, Mem &mem);
uvm_status_t mem_evict(Manager &mgr, Mem &mem);
// `holding`: objects whose locks the caller holds besides `mem` (never
// evicted to make room); may be null.
uvm_status_t mem_make_resident(Manager &mgr, Mem &mem, const Mem *holding = nullptr);

// Unmap an evicted object's mapping of `kind` on `gpu` without bringing it
// back (its client asleep): the owner's kernel or user mapping, which its
// restore would make again, is forgotten (the held user address goes with
// the user one). NOT_MAPPED where it had none; NOT_SUPPORTED for a physical
// mapping on its owner, as for any vidmem.
uvm_status_t mem_forget_remap(Manager &mgr, Mem &mem, uint32_t gpu, MapKind kind);

// Make room on GPU `gpu`, if the policy allows: evict the objects of the
// coldest root chunk that can come whole (no pinned memory in it), other
// than `skip_a` and `skip_b`, root after root until one is whole. False when
// nothing could be evicted.
bool evict_one(Manager &mgr, uint32_t gpu, const Mem *skip_a, const Mem *skip_b);
// What a request that found its GPU full needs for eviction to help: its
// bytes, and the run of adjacent whole root chunks its chunks must take
// (pmm.h's runs: 2M chunks, or more than one root's worth of 64K or 4K
// chunks); whole_roots 0 where they fit inside a root, or where any free
// memory does (a wake's, which comes back under its own addresses).
struct RoomNeed {
    uint64_t bytes = 0;
    uint64_t whole_roots = 0;
};
RoomNeed room_for_run(uint64_t bytes, uint64_t chunk_size);

// Whether evicting everything that could go would leave room for `need`:
// the bytes (free memory of the GPU and its PMMs, plus the roots eviction
// could empty), and for a run of whole roots, a run that long once all
// went (fits.h: roots_after_eviction). An estimate that errs towards
// trying only for a request inside a root (where the bytes are all it
// counts); false means nothing should move.
bool eviction_could_make_room(Manager &mgr, uint32_t gpu, const RoomNeed &need, const Mem *skip_a,
                              const Mem *skip_b);

// Give the whole free root chunks that every pool of GPU `gpu` keeps back
// to the driver (the threads' caches flushed into them first): its PMM, its
// remappable PMM and the sleepable clients' roots. Each pool gives back its
// own before it fails, but not another's: once the driver has no more, what
// one keeps free is another's. Returns the bytes given back.
uint64_t give_back_free_roots(Manager &mgr, uint32_t gpu);

// The free-then-retry ladder, in one place for every path that takes GPU
// memory (an allocation, a restore, a wake), for after `attempt` failed with
// OUT_OF_MEMORY: make room and try again, cheapest first: memory the streams
// have finished with (pooled and retiring), then, for vidmem, the whole free
// roots the GPU's pools keep (give_back_free_roots), then the memory
// that waits for work on the GPU's streams, once that work is done (the
// call blocks for it: Streams::wait_pending), then, for vidmem where the
// GPU's policy says so, a compaction (compact/compact.h: live objects move
// so that free memory comes whole), then, for vidmem and where eviction
// could make room for `need`, cold evictable objects of GPU `gpu` one at a
// time (never `skip_a` or `skip_b`). Returns the last try's status; at once
// for a request larger than the GPU's memory.
// Out of line: the first try stays on the caller's fast path.
template <typename Attempt>
__attribute__((noinline)) uvm_status_t retry_with_room(Manager &mgr, bool vidmem, uint32_t gpu, const RoomNeed &need,
                                                       const Mem *skip_a, const Mem *skip_b, Attempt &&attempt) {
    uvm_status_t status = UVM_ERR_OUT_OF_MEMORY;
    if (vidmem && need.bytes > mgr.gpu(gpu).info.memory_total)
        return status;  // more than the GPU has: no room to make, nothing to wait for
    if (mgr.streams().reap(true) != 0)
        status = attempt();
    if (status == UVM_ERR_OUT_OF_MEMORY && vidmem && give_back_free_roots(mgr, gpu) != 0)
        status = attempt();
    if (status == UVM_ERR_OUT_OF_MEMORY && vidmem && mgr.streams().wait_pending(gpu) != 0)
        status = attempt();
    if (status == UVM_ERR_OUT_OF_MEMORY && vidmem && compact_for_oom(mgr, gpu, need.bytes, skip_a, skip_b)) {
        status = attempt();
        if (status == UVM_OK)
            compact_oom_served(mgr, gpu);
    }
    if (status == UVM_ERR_OUT_OF_MEMORY && vidmem && eviction_could_make_room(mgr, gpu, need, skip_a, skip_b))
        while (status == UVM_ERR_OUT_OF_MEMORY && evict_one(mgr, gpu, skip_a, skip_b))
            status = attempt();
    return status;
}

}  // namespace uvm
