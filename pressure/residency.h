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

// Make room on GPU `gpu`, if the policy allows: evict the objects of the
// coldest root chunk that can come whole (no pinned memory in it), other
// than `skip_a` and `skip_b`, root after root until one is whole. False when
// nothing could be evicted.
bool evict_one(Manager &mgr, uint32_t gpu, const Mem *skip_a, const Mem *skip_b);
// Whether evicting everything that could go would leave room for `bytes`
// (free memory of the GPU and its PMM, plus the roots eviction could empty).
// An estimate that errs towards trying; false means nothing should move.
bool eviction_could_make_room(Manager &mgr, uint32_t gpu, uint64_t bytes, const Mem *skip_a, const Mem *skip_b);

// The free-then-retry ladder, in one place for every path that takes GPU
// memory (an allocation, a restore), for after `attempt` failed with
// OUT_OF_MEMORY: make room and try again, cheapest first: memory the streams
// have finished with (pooled and retiring), then, for vidmem, the memory
// that waits for work on the GPU's streams, once that work is done (the
// call blocks for it: Streams::wait_pending), then, for vidmem where the
// GPU's policy says so, a compaction (compact/compact.h: live objects move
// so that free memory comes whole), then, for vidmem and where eviction
// could free enough for `bytes`, cold evictable objects of GPU `gpu` one at
// a time (never `skip_a` or `skip_b`). Returns the last try's status.
// Out of line: the first try stays on the caller's fast path.
template <typename Attempt>
__attribute__((noinline)) uvm_status_t retry_with_room(Manager &mgr, bool vidmem, uint32_t gpu, uint64_t bytes,
                                                       const Mem *skip_a, const Mem *skip_b, Attempt &&attempt) {
    uvm_status_t status = UVM_ERR_OUT_OF_MEMORY;
    if (mgr.streams().reap(true) != 0)
        status = attempt();
    if (status == UVM_ERR_OUT_OF_MEMORY && vidmem && mgr.streams().wait_pending(gpu) != 0)
        status = attempt();
    if (status == UVM_ERR_OUT_OF_MEMORY && vidmem && compact_for_oom(mgr, gpu, bytes, skip_a, skip_b)) {
        status = attempt();
        if (status == UVM_OK)
            compact_oom_served(mgr, gpu);
    }
    if (status == UVM_ERR_OUT_OF_MEMORY && vidmem && eviction_could_make_room(mgr, gpu, bytes, skip_a, skip_b))
        while (status == UVM_ERR_OUT_OF_MEMORY && evict_one(mgr, gpu, skip_a, skip_b))
            status = attempt();
    return status;
}

}  // namespace uvm
