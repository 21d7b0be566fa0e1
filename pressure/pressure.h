// Pressure notices (uvm.h, "Pressure notices"): watermarks on a GPU's held
// memory and on a client's budget use, and a queue of crossing events that a
// runtime polls through an eventfd. Events are queued, never called back:
// usage changes inside the PMM and the charge paths, with locks held, where
// running the application's code could deadlock.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "uvm/uvm.h"

namespace uvm {

// The watermarks of one usage (a GPU's held memory, or a client's use of
// one budget), with the state of each: reached (usage at or above the mark
// of a non-zero limit) or not.
//
// The events of one watermark are one linearizable sequence: with marks
// set, a change of the usage (or of its limit) is made, judged against
// each mark's state and its crossings queued, all under the marks' lock
// (change()), so the crossings are found and queued in the order the
// changes happened: per watermark they alternate, each is true of the usage
// it carries, and the last one is true of the usage now. Without marks a
// change is one atomic operation, no lock (the charge paths stay as they
// were for callers that set none).
class Watermarks {
public:
    struct Level {
        uint64_t used = 0;
        uint64_t limit = 0;  // 0: unlimited, no mark is reached
    };
    struct Crossing {
        uint32_t percent;
        bool rising;  // true: `percent` now reached; false: left
    };

    // Replace the marks. Each starts in the state the level `now()` gives,
    // queueing nothing: a watermark set below the usage starts reached, and
    // its first event is the fall below it.
    template <typename Now>
    void set(const uint32_t *percents, uint32_t count, Now now) {
        std::lock_guard<std::mutex> guard(lock_);
        percents_.assign(percents, percents + count);
        std::sort(percents_.begin(), percents_.end());
        // A percent given twice is one watermark: one event per crossing of it.
        percents_.erase(std::unique(percents_.begin(), percents_.end()), percents_.end());
        count = static_cast<uint32_t>(percents_.size());
        // Published before the level is read: a change made without the lock
        // (it saw no marks) either shows in the level read here or sees the
        // marks afterwards and judges the level again (change()). Both
        // sequentially consistent, as the changes' read-modify-writes are.
        count_.store(count);
        const Level level = now();
        above_.assign(count, false);
        for (size_t i = 0; i < percents_.size(); ++i)
            above_[i] = reached(level, percents_[i]);
    }

    // Make a change: `make(&after)` changes the usage (or its limit) and
    // gives the level it left, or returns false where it changed nothing.
    // Each crossing it makes goes to `emit(crossing, after)` before the next
    // change of this usage is judged. `now()` reads the level. Returns what
    // `make` returned.
    template <typename Make, typename Now, typename Emit>
    bool change(Make make, Now now, Emit emit) {
        Level after;
        if (count_.load() == 0) {
            if (!make(&after))
                return false;
            if (count_.load() == 0)
                return true;
            // Marks were set meanwhile, maybe judged before this change: judge the level now.
            std::lock_guard<std::mutex> guard(lock_);
            judge(now(), emit);
            return true;
        }
        std::lock_guard<std::mutex> guard(lock_);
        if (!make(&after))
            return false;
        judge(after, emit);
        return true;
    }
    bool empty() const { return count_.load() == 0; }

private:
    static bool reached(const Level &l, uint32_t percent) {
        return l.limit != 0 && l.used * 100 >= static_cast<uint64_t>(percent) * l.limit;  // exact integers
    }
    template <typename Emit>
    void judge(const Level &level, Emit &emit) {
        for (size_t i = 0; i < percents_.size(); ++i) {
            const bool now = reached(level, percents_[i]);
            if (now != above_[i]) {
                above_[i] = now;
                emit(Crossing{percents_[i], now}, level);
            }
        }
    }

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
