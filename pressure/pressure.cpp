#include "pressure/pressure.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

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

}  // namespace uvm
