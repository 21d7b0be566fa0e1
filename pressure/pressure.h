// Pressure notices (uvm.h, "Pressure notices"): watermarks on a GPU's held
// memory and on a client's budget use, and a queue of crossing events that a
// runtime polls through an eventfd. Events are queued, never called back:
// usage changes inside the PMM and the charge paths, with locks held, where
// running the application's code could deadlock.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "uvm/uvm.h"

namespace uvm {

// The watermarks of one usage (a GPU's held memory, or a client's use of
// one budget), with the crossing state of each.
class Watermarks {
public:
    void set(const uint32_t *percents, uint32_t count);
    // Usage went from `before` to `after` of `limit`: the crossings, each
    // reported once (rising: `percent` now reached; falling: left).
    struct Crossing {
        uint32_t percent;
        bool rising;
    };
    void update(uint64_t after, uint64_t limit, std::vector<Crossing> *out);
    bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }

private:
    std::mutex lock_;
    std::vector<uint32_t> percents_;  // ascending
    std::vector<bool> above_;
    std::atomic<uint32_t> count_{0};
};

class PressureQueue {
public:
    PressureQueue();
    ~PressureQueue();
    int fd() const { return fd_; }
    void push(const uvm_pressure_event_t &e);
    uint32_t take(uvm_pressure_event_t *out, uint32_t max);

private:
    static constexpr size_t kMaxQueued = 4096;  // beyond it the oldest go (counted in `dropped`)
    std::mutex lock_;
    std::deque<uvm_pressure_event_t> events_;
    int fd_ = -1;

public:
    std::atomic<uint64_t> dropped{0};
};

}  // namespace uvm
