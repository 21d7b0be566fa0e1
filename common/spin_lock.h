// A lock for short critical sections that are almost never contended: the
// fast path's per-thread chunk caches and the handle table's shards, which
// each thread mostly takes alone. Taking it is one atomic exchange and
// releasing it a plain store, where a pthread mutex is a call, a
// compare-and-swap to take and another atomic to release: on the held
// alloc+free pair, which takes such locks six times, that was a fifth of its
// instructions.
//
// A waiter spins briefly, then yields its CPU: a holder preempted in its
// critical section costs the waiter a time slice, never a deadlock. Not for
// sections that block (driver calls, waiting for GPU work): those keep
// std::mutex.
#pragma once

#include <atomic>

#include <sched.h>

namespace uvm {

class SpinLock {
public:
    void lock() {
        if (!locked_.exchange(true, std::memory_order_acquire))
            return;
        lock_slow();
    }
    void unlock() { locked_.store(false, std::memory_order_release); }

private:
    static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        asm volatile("yield" ::: "memory");
#endif
    }
    __attribute__((noinline)) void lock_slow() {
        for (unsigned spins = 0;; ++spins) {
            // Read until it looks free, so that waiters do not keep taking the
            // cache line from the holder; then try again.
            while (locked_.load(std::memory_order_relaxed)) {
                if (spins < 64) {
                    cpu_relax();
                    ++spins;
                } else {
                    sched_yield();
                }
            }
            if (!locked_.exchange(true, std::memory_order_acquire))
                return;
        }
    }

    std::atomic<bool> locked_{false};
};

}  // namespace uvm
