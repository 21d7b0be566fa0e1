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

// Stream capture (CUDA graphs). While a stream captures, work queued on it
// is recorded into a graph instead of run, and the driver refuses calls that
// would break the recording, invalidating the capture (a graph is then never
// made): a query or wait on the capturing stream or on an event recorded in
// the capture, in every mode; and "potentially unsafe" calls (allocating or
// releasing memory, mapping, querying events) as the calling thread's
// interaction mode says:
//  - Global: prohibited while this thread captures (not relaxed), or while
//    any thread has a capture begun in global mode;
//  - ThreadLocal: prohibited while this thread captures (not relaxed);
//  - Relaxed: never prohibited (calls that conflict with the capture still are).
// A capture's mode is the mode it was begun with; a thread's mode is its own
// (exchange_capture_mode). docs/cuda_backend.md, "Stream capture", lists
// which calls are which and what the manager's paths make.
enum class CaptureStatus : uint8_t { None, Active, Invalidated };
enum class CaptureMode : uint8_t { Global = 0, ThreadLocal = 1, Relaxed = 2 };

struct StreamCaptureInfo {
    CaptureStatus status = CaptureStatus::None;
    uint64_t id = 0;        // the capture sequence's id, unique in the process; 0 where none
    bool implicit = false;  // the legacy stream, while a blocking stream of its
                            // context captures: any use of it would join (and
                            // break) that capture; status is then Active
};

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
    // Whether the stream captures now (no call of the stream's is made, so
    // asking never disturbs a capture). Sim: never.
    virtual uvm_status_t stream_capture_info(void *stream, StreamCaptureInfo *out) = 0;
    // Set the calling thread's interaction mode with captures and return the
    // one it had (cuThreadExchangeStreamCaptureMode), for a scope that makes
    // calls a capture may prohibit: Relaxed around them, the old mode back
    // after. Never fails. Sim: remembered per thread, with no effect.
    virtual CaptureMode exchange_capture_mode(CaptureMode mode) = 0;
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
