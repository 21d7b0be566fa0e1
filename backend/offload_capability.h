// Offloading root chunks (uvm_client_sleep / uvm_client_wake): the physical
// memory of root chunks goes back to the driver while their addresses stay
// reserved for them, and comes back at the same addresses later. A backend
// capability (backend.h): Backend::offload() is null where the backend cannot
// do it, and sleep then says NOT_SUPPORTED.
//
// A root chunk's address (its phys) is what every GPU view of it is made
// from: on CUDA its place in the physical window, which is the kernel
// mapping of every object in it and the peers' view; on the sim the slot its
// page-table entries name. Keeping the address while the memory is gone is
// what lets a runtime keep every pointer it was given across a sleep, as
// vLLM's sleep mode keeps its virtual addresses and releases the handles
// under them (cuMemUnmap + cuMemRelease, then cuMemCreate + cuMemMap).
//
// States of a root chunk given by root_chunks_alloc or root_chunks_alloc_owned: backed (as given) ->
// offloaded (root_chunks_offload) -> backed (root_chunks_restore) -> ...;
// root_chunk_free takes either state and ends the root (an offloaded one
// only gives its address back).
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace uvm::backend {

class OffloadCapability {
public:
    // `count` adjacent root chunks of `gpu` from *phys, as root_chunks_alloc
    // gives, for one holder alone (a sleepable client's roots): the backend
    // may back them in few long pieces, as root_chunks_restore does, since
    // they are offloaded and restored together. Each comes back by
    // root_chunk_free; on CUDA a freed one is parked, its memory going back
    // to the driver with the last root of its handle (cuda/root_pool.h), and
    // none can be mapped at a caller's user address or exported. Why: the
    // driver's cost of giving memory back is per handle (a first sleep of 10
    // GiB grown in 2 MiB handles gave back 5,120 of them, 0.2 s; in 64 MiB
    // handles 160, 0.01 s: bench/results/2026-12-02-h200-checkpoints-sleep).
    // OUT_OF_MEMORY where the driver has not that much free.
    virtual uvm_status_t root_chunks_alloc_owned(uint32_t gpu, size_t count, uint64_t *phys) = 0;
    // Give back the memory of `count` root chunks of `gpu` (each given by
    // root_chunks_alloc with remappable = true or root_chunks_alloc_owned, or
    // restored since, and backed
    // now), keeping their addresses: the driver counts the memory free
    // (GpuMemory::free rises, held falls), root_chunks_alloc never hands the
    // addresses out, and nothing may touch them until they are restored. All
    // or nothing. NOT_SUPPORTED, nothing done, where one cannot go without
    // another root: on CUDA a root whose driver handle also holds a root not
    // in the list, one mapped at a caller's user address, exported or
    // imported. INVALID_ARGUMENT for a root that is not given and backed.
    virtual uvm_status_t root_chunks_offload(uint32_t gpu, const uint64_t *phys, size_t count) = 0;
    // Back `count` offloaded root chunks again, at the same addresses and
    // reachable by the same GPUs as before (peers granted meanwhile too).
    // Their contents are undefined (zero on the sim). All or nothing:
    // OUT_OF_MEMORY, nothing done, where the driver has not that much memory
    // free. INVALID_ARGUMENT for a root that is not offloaded.
    virtual uvm_status_t root_chunks_restore(uint32_t gpu, const uint64_t *phys, size_t count) = 0;
    // Give back the memory of the root chunks of the driver allocation
    // [first, first + count * 2 MiB) of `gpu` (as root_chunk_span names it;
    // its roots given by root_chunks_alloc, not remappable) that are not
    // given now, while the given ones keep their addresses and bytes: each
    // run of them is copied into a driver allocation of its own, put where
    // it was, and the old allocation goes back (compaction, compact/: a few
    // live objects would otherwise keep a whole driver allocation). For a
    // moment it holds new memory as large as what it copies. *released:
    // bytes the driver got back; *copied: bytes copied. OK with nothing done
    // where the allocation has no root that is not given (on the sim each
    // root is one). INVALID_ARGUMENT where no allocation is that span now
    // (or none of its roots is given); NOT_SUPPORTED where its roots cannot
    // be re-backed (one holder's, remappable, exported, imported) or a
    // capture on a stream the backend knows is under way (the mapping calls
    // would break it); OUT_OF_MEMORY where the driver has not the memory
    // for the copies. A failure leaves the allocation as it was, bytes
    // intact, but for a driver that refuses both the new mappings and the
    // old one's again (BACKEND, and the given roots unmapped: a broken
    // driver, not a state a caller can mend). The caller makes sure that no
    // work touches the given roots and that no chunk of them is handed out
    // or freed meanwhile: on CUDA their addresses are unmapped for a moment.
    virtual uvm_status_t root_span_shrink(uint32_t gpu, uint64_t first, size_t count, uint64_t *released,
                                          uint64_t *copied) = 0;

protected:
    // Owned by the backend that hands it out, never through this interface.
    ~OffloadCapability() = default;
};

}  // namespace uvm::backend
