#include "pressure/pressure.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

namespace uvm {

void Watermarks::set(const uint32_t *percents, uint32_t count) {
    std::lock_guard<std::mutex> guard(lock_);
    percents_.assign(percents, percents + count);
    std::sort(percents_.begin(), percents_.end());
    above_.assign(count, false);
    count_.store(count, std::memory_order_relaxed);
}

void Watermarks::update(uint64_t after, uint64_t limit, std::vector<Crossing> *out) {
    if (empty() || limit == 0)
        return;
    std::lock_guard<std::mutex> guard(lock_);
    for (size_t i = 0; i < percents_.size(); ++i) {
        // Reached: usage at or above the mark (in exact integer arithmetic).
        const bool reached = after * 100 >= static_cast<uint64_t>(percents_[i]) * limit;
        if (reached != above_[i]) {
            above_[i] = reached;
            out->push_back({percents_[i], reached});
        }
    }
}

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

}  // namespace uvm
