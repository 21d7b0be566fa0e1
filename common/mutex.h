// A mutex for an object's lock: taken and released without a call where
// nobody waits (one compare-and-swap to take, one exchange to release), and
// a waiter sleeps in the kernel (futex) rather than spinning, since an
// object's lock may be held across driver calls and copies. A pthread mutex
// costs a call each way: on the held alloc+free pair, whose free tries the
// object's lock once, that was 55 of some 1,100 instructions.
//
// States: 0 free, 1 taken, 2 taken and maybe waited for (after Drepper,
// "Futexes Are Tricky", mutex 3). Linux only, as the library is.
#pragma once

#include <atomic>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace uvm {

class Mutex {
public:
    Mutex() = default;
    Mutex(const Mutex &) = delete;
    Mutex &operator=(const Mutex &) = delete;

    void lock() {
        int c = 0;
        if (__builtin_expect(state_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed), 1))
            return;
        lock_slow(c);
    }
    bool try_lock() {
        int c = 0;
        return state_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed);
    }
    void unlock() {
        if (__builtin_expect(state_.exchange(0, std::memory_order_release) == 2, 0))
            wake_one();
    }

private:
    __attribute__((noinline)) void lock_slow(int c) {
        // Say there may be waiters (2), and sleep while it stays taken.
        if (c != 2)
            c = state_.exchange(2, std::memory_order_acquire);
        while (c != 0) {
            futex(FUTEX_WAIT_PRIVATE, 2);
            c = state_.exchange(2, std::memory_order_acquire);
        }
    }
    __attribute__((noinline)) void wake_one() { futex(FUTEX_WAKE_PRIVATE, 1); }
    void futex(int op, int value) {
        // std::atomic<int> is an int in memory (lock-free, standard layout).
        syscall(SYS_futex, reinterpret_cast<int *>(&state_), op, value, nullptr, nullptr, 0);
    }

    static_assert(sizeof(std::atomic<int>) == sizeof(int), "a futex is an int");
    std::atomic<int> state_{0};
};

}  // namespace uvm
