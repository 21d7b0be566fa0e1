// The C functions of uvm_sim.h, over api/entry.h.
#include "api/entry.h"

using namespace uvm::api;

extern "C" {

// Hold or release simulated work on a stream.
static uvm_status_t sim_hold(uvm_manager_t *m, uvm_stream_t *handle, bool hold) {
    return with_stream(m, handle, [&](Manager &mgr, const std::shared_ptr<uvm::Stream> &stream) {
        uvm_status_t status;
        {
            std::lock_guard<std::mutex> guard(stream->lock);
            if (stream->destroyed)
                return uvm::fail(UVM_ERR_INVALID_HANDLE, "the stream was destroyed");
            status = hold ? mgr.backend_streams()->stream_hold(stream->backend)
                          : mgr.backend_streams()->stream_release(stream->backend);
        }
        if (status == UVM_OK && !hold)
            mgr.streams().reap(false);
        return status;
    });
}

uvm_status_t uvm_sim_stream_hold(uvm_manager_t *m, uvm_stream_t *stream) { return sim_hold(m, stream, true); }
uvm_status_t uvm_sim_stream_release(uvm_manager_t *m, uvm_stream_t *stream) { return sim_hold(m, stream, false); }

}  // extern "C"
