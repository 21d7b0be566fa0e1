// A mutex for critical sections of tens of nanoseconds that many threads hit
// at once (the PMM's free lists, the handle table). std::mutex puts a waiter
// to sleep in the kernel, and waking it costs microseconds: far more than the
// section it waits for, so throughput collapses as threads are added. This one
// spins (reading, not writing, the lock word while it is held), then yields the
// CPU, so that a waiter is on its way as soon as the holder is done. A holder
// that stays long (the PMM growing the pool through the driver, milliseconds)
// sends waiters to short sleeps instead of burning their CPUs.
//
// Meets the standard Lockable requirements (std::lock_guard works with it).
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define UVM_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define UVM_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define UVM_CPU_RELAX() ((void)0)
#endif

namespace uvm {

class SpinMutex {
public:
    void lock() {
        for (unsigned spins = 0;; ++spins) {
            if (!locked_.exchange(true, std::memory_order_acquire))
                return;
            while (locked_.load(std::memory_order_relaxed)) {
                if (++spins < kSpinsBeforeYield)
                    UVM_CPU_RELAX();
                else if (spins < kSpinsBeforeSleep)
                    std::this_thread::yield();  // the holder may not be running: let it
                else
                    std::this_thread::sleep_for(std::chrono::microseconds(20));
            }
        }
    }
    bool try_lock() {
        return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
    }
    void unlock() { locked_.store(false, std::memory_order_release); }

private:
    static constexpr unsigned kSpinsBeforeYield = 256;
    static constexpr unsigned kSpinsBeforeSleep = 4096;
    std::atomic<bool> locked_{false};
};

}  // namespace uvm
