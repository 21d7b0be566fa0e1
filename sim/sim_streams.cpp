// The sim's streams (StreamCapability): queues of copy-engine work that run
// as soon as nothing holds them back (held work, a wait on another stream).
#include "sim/sim_backend_private.h"

namespace uvm::sim {

uvm_status_t SimBackend::stream_create(uint32_t gpu, void *native, void **stream) {
    if (native && native != UVM_STREAM_LEGACY && native != UVM_STREAM_PER_THREAD)
        return UVM_ERR_INVALID_ARGUMENT;  // the sim has no native streams; a default one is a queue of its own
    auto s = std::make_unique<SimStream>();
    s->gpu = gpu;
    std::lock_guard<std::mutex> guard(streams_lock_);
    streams_.push_back(std::move(s));
    *stream = streams_.back().get();
    return UVM_OK;
}

uvm_status_t SimBackend::stream_destroy(void *stream) {
    std::lock_guard<std::mutex> guard(streams_lock_);
    progress();
    auto *target = static_cast<SimStream *>(stream);
    if (!target->queue.empty())
        return UVM_ERR_BUSY;
    for (const auto &s : streams_)
        for (SimOp &op : s->queue)
            if (op.wait_on == target)
                op.wait_on = nullptr;  // finished: nothing left to wait for
    for (auto it = streams_.begin(); it != streams_.end(); ++it)
        if (it->get() == target) {
            streams_.erase(it);
            break;
        }
    return UVM_OK;
}

bool SimBackend::runnable(const SimOp &op) const {
    switch (op.kind) {
        case SimOp::Kind::Hold: return op.released;
        case SimOp::Kind::Wait: return !op.wait_on || op.wait_on->completed >= op.wait_fence;
        default: return true;
    }
}

void SimBackend::progress() {
    for (bool moved = true; moved;) {
        moved = false;
        for (const auto &s : streams_) {
            while (!s->queue.empty() && runnable(s->queue.front())) {
                run(s->queue.front());
                s->queue.pop_front();
                s->completed++;
                moved = true;
            }
        }
    }
}

uvm_status_t SimBackend::enqueue(void *stream, SimOp op) {
    std::lock_guard<std::mutex> guard(streams_lock_);
    auto *s = static_cast<SimStream *>(stream);
    s->queue.push_back(std::move(op));
    s->queued++;
    progress();
    return UVM_OK;
}

uvm_status_t SimBackend::stream_wait(void *waiter, void *stream, uint64_t fence) {
    SimOp op;
    op.kind = SimOp::Kind::Wait;
    op.wait_on = static_cast<SimStream *>(stream);
    op.wait_fence = fence;
    return enqueue(waiter, std::move(op));
}

uvm_status_t SimBackend::ce_copy_async(uint32_t g, void *stream, const backend::CeAddress &dst,
                                       const backend::CeAddress &src, uint64_t size) {
    SimOp op;
    const uvm_status_t status = ce_op(g, dst, &src, 0, size, &op);
    return status == UVM_OK ? enqueue(stream, std::move(op)) : status;
}

uvm_status_t SimBackend::ce_memset_async(uint32_t g, void *stream, const backend::CeAddress &dst, uint8_t value,
                                         uint64_t size) {
    SimOp op;
    const uvm_status_t status = ce_op(g, dst, nullptr, value, size, &op);
    return status == UVM_OK ? enqueue(stream, std::move(op)) : status;
}

// A simulated queue never captures: its work always runs.
uvm_status_t SimBackend::stream_capture_info(void *, backend::StreamCaptureInfo *out) {
    *out = backend::StreamCaptureInfo{};
    return UVM_OK;
}

backend::CaptureMode SimBackend::exchange_capture_mode(backend::CaptureMode mode) {
    static thread_local backend::CaptureMode t_mode = backend::CaptureMode::Global;  // the driver's default
    const backend::CaptureMode old = t_mode;
    t_mode = mode;
    return old;
}

uvm_status_t SimBackend::stream_hold(void *stream) {
    SimOp op;
    op.kind = SimOp::Kind::Hold;
    return enqueue(stream, std::move(op));
}

uvm_status_t SimBackend::stream_release(void *stream) {
    std::lock_guard<std::mutex> guard(streams_lock_);
    for (SimOp &op : static_cast<SimStream *>(stream)->queue)
        if (op.kind == SimOp::Kind::Hold && !op.released) {
            op.released = true;
            progress();
            return UVM_OK;
        }
    return UVM_ERR_INVALID_ARGUMENT;  // nothing held
}

}  // namespace uvm::sim
