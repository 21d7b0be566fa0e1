// Pressure notices: the queue of crossings, and the watermarks on a GPU's
// held memory, heard where the object core says it changed.
#include "pressure/pressure.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "common/assert.h"
#include "pressure/gpu_pressure.h"
#include "uvm/events.h"

namespace uvm {

PressureQueue::PressureQueue() { fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

PressureQueue::~PressureQueue() {
    if (fd_ >= 0)
        close(fd_);
}

void PressureQueue::push(const uvm_pressure_event_t &e) {
    std::lock_guard<std::mutex> guard(lock_);
    if (events_.size() == kMaxQueued) {
        events_.pop_front();
        dropped++;
    }
    events_.push_back(e);
    if (fd_ >= 0) {
        const uint64_t one = 1;
        ssize_t n = write(fd_, &one, sizeof(one));  // readable until the queue is drained
        (void)n;
    }
}

uint32_t PressureQueue::take(uvm_pressure_event_t *out, uint32_t max) {
    std::lock_guard<std::mutex> guard(lock_);
    uint32_t n = 0;
    while (n < max && !events_.empty()) {
        out[n++] = events_.front();
        events_.pop_front();
    }
    if (events_.empty() && fd_ >= 0) {
        uint64_t count;
        ssize_t r = read(fd_, &count, sizeof(count));  // not readable again until the next event
        (void)r;
    }
    return n;
}

void events::held_changed(Manager &mgr, uint32_t gpu, int64_t delta) {
    if (mgr.tearing_down.load(std::memory_order_relaxed) || gpu >= mgr.gpu_count())
        return;  // the GPUs' PMMs giving their roots back at teardown
    GpuState &g = mgr.gpu(gpu);
    UVM_ASSERT(g.pressure);  // made with the GPU, before its PMM takes a root (api/assembly.cpp)
    const uint64_t total = g.info.memory_total;
    // The change and its watermark crossings as one step (pressure.h); a
    // fetch_add and two loads where no marks are set.
    g.pressure->held_marks.change(
        [&](Watermarks::Level *after) {
            after->used = g.held_bytes.fetch_add(static_cast<uint64_t>(delta)) + static_cast<uint64_t>(delta);
            after->limit = total;
            return true;
        },
        [&] { return Watermarks::Level{g.held_bytes.load(), total}; },
        [&](const Watermarks::Crossing &c, const Watermarks::Level &l) {
            mgr.pressure().push({gpu, nullptr, c.percent, c.rising ? 1 : 0, l.used, l.limit});
        });
}

}  // namespace uvm
