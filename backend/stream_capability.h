// Streams: ordered queues of GPU work (a CUstream on CUDA, a simulated queue
// on sim), and copy-engine work queued on them. A backend capability
// (backend.h): Backend::streams() is null where the backend has none, and the
// manager then says NOT_SUPPORTED to uvm_stream_create; the rest is asked
// only of streams this made.
//
// A fence is a point in a stream: all work queued on it before the fence was
// taken. Fences of one stream complete in order, and a fence of a stream that
// has been destroyed is complete.
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace uvm::backend {

class StreamCapability {
public:
    // `native`: a stream of the caller's to use (CUDA: a CUstream of the
    // GPU's primary context, else INVALID_ARGUMENT; the caller keeps owning
    // it); null: the backend makes one.
    virtual uvm_status_t stream_create(uint32_t gpu, void *native, void **stream) = 0;
    // Waits for the stream's work, then forgets it (destroying it if the
    // backend made it). BUSY where the work cannot finish by itself (sim:
    // held work), and then nothing changes.
    virtual uvm_status_t stream_destroy(void *stream) = 0;
    // The driver's stream under it (CUDA: the CUstream); null where there is none (sim).
    virtual void *stream_native(void *stream) = 0;
    virtual uvm_status_t stream_fence(void *stream, uint64_t *fence) = 0;
    // Cheap (no waiting, no driver call where the answer is already known);
    // never blocks.
    virtual bool fence_done(void *stream, uint64_t fence) = 0;
    // Work queued on `waiter` from now on runs after `fence` of `stream`.
    virtual uvm_status_t stream_wait(void *waiter, void *stream, uint64_t fence) = 0;
    // Wait until every fence taken so far on the stream is done. BUSY where
    // the work cannot finish by itself (sim: held work).
    virtual uvm_status_t stream_synchronize(void *stream) = 0;
    // Copy-engine work queued on a stream of `gpu`; returns once queued. The
    // addresses are resolved when the call is made (a later change of a
    // mapping does not move queued work).
    virtual uvm_status_t ce_copy_async(uint32_t gpu, void *stream, const CeAddress &dst, const CeAddress &src,
                                       uint64_t size) = 0;
    virtual uvm_status_t ce_memset_async(uint32_t gpu, void *stream, const CeAddress &dst, uint8_t value,
                                         uint64_t size) = 0;
    // Sim only (NOT_SUPPORTED elsewhere, for the uvm_sim_stream_hold test
    // hook): queue work that stays in flight until released, as a kernel that
    // spins on a flag would; release lets the oldest held work of the stream
    // finish.
    virtual uvm_status_t stream_hold(void *stream) = 0;
    virtual uvm_status_t stream_release(void *stream) = 0;

protected:
    // Owned by the backend that hands it out, never through this interface.
    ~StreamCapability() = default;
};

}  // namespace uvm::backend
