// The largest request that fits (the OOM report's fits, uvm_observe.h): the
// largest vidmem object of 2 MiB chunks that uvm_mem_alloc would give on a
// GPU now without evicting anything, and with the eviction the manager would
// do itself; and the same for a client, within its budget.
//
// Worked out the way the allocation path finds memory, never by trying it:
//  - an object of k 2M chunks needs k adjacent whole free root chunks (pmm.h);
//  - the PMM's whole free roots count with the per-thread caches as if
//    flushed, for an allocation that finds the PMM out of memory flushes
//    them (chunk_cache.h): a cached 2M chunk is a free root, and cached 4K
//    and 64K chunks may complete one;
//  - those roots join what the backend can still give
//    (Backend::largest_free_run), for a PMM out of memory gives its free
//    roots back and asks the backend once more (pmm.h);
//  - with eviction, as retry_with_room (residency.h) goes: if
//    eviction_could_make_room's estimate lets it, evict_one root after root,
//    coldest first, never a root that holds pinned memory, until nothing
//    more can go; the figure is the run then, as far as the estimate allows.
//    Eviction only frees memory, so every request up to that run is met on
//    the way. Off by the policy (uvm_manager_set_eviction_policy), the
//    figure is the one without eviction;
//  - a client is charged after the GPU gave the memory (api/entry.h): its
//    figures are the GPU's, bounded by its budget less its usage, and with
//    eviction less the objects of its own that charge_client would evict
//    (client.h). The default client, or one without a budget: the GPU's.
//
// Reading changes nothing the manager holds: no cache is flushed and no lock
// is held for long; objects are only try-locked, and one busy in another
// thread counts as eviction would find it (passed by). Whether an object's
// stream work is done is asked as eviction asks it, with a fence (on CUDA an
// event recorded on the stream). Not counted: memory freed on
// streams and not yet released (uvm_manager_stats' retiring_bytes and
// stream_pool_bytes), which a failed allocation reaps first, so a request
// may get more where streams hold some. With a host limit on evicted bytes
// and a client, the client's and the GPU's evictions share the limit; each
// figure assumes the limit is its own.
#pragma once

#include <cstdint>

#include "uvm/manager.h"

namespace uvm {

struct Client;
struct Mem;

// Bytes, multiples of 2 MiB.
struct Fits {
    uint64_t gpu_now = 0;
    uint64_t gpu_with_eviction = 0;
    uint64_t client_now = 0;
    uint64_t client_with_eviction = 0;
};

// The fits on GPU `gpu` for `client` (null: the default client). `skip_a`
// and `skip_b` (may be null): objects whose locks the caller holds, which
// are never tried and never counted as evictable (the eviction of the
// failed call skipped them too).
Fits largest_fits(Manager &mgr, uint32_t gpu, Client *client, const Mem *skip_a, const Mem *skip_b);

// The longest run of adjacent whole root chunks GPU `gpu` could give (the
// PMMs' free roots and the backend's free memory joined) once evict_one had
// taken everything it would, root after root: what a request of whole roots
// can hope for (eviction_could_make_room, residency.h). In root chunks.
uint64_t roots_after_eviction(Manager &mgr, uint32_t gpu, const Mem *skip_a, const Mem *skip_b);

// The bytes of `client`'s objects on GPU `gpu` that its own evictions
// (charge_client, client.h) could take now: evictable, resident, able to go,
// within the host limit; 0 with eviction off.
uint64_t client_evictable_bytes(Manager &mgr, uint32_t gpu, const Client &client, const Mem *skip_a,
                                const Mem *skip_b);

}  // namespace uvm
