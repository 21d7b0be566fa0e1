// Budgets and pressure notices under threads (issue 28): a client's
// counters never go below zero and never let it pass its budget when its own
// evictions race its frees; the notices of each watermark are one
// linearizable sequence (alternating, rising first, true of the usage they
// carry, the last one true of the final usage), and a watermark set while
// usage is already above it starts above, queueing nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;

std::vector<uvm_pressure_event_t> take_events(uvm_manager_t *mgr) {
    std::vector<uvm_pressure_event_t> all, some(256);
    for (;;) {
        uint32_t n = 0;
        EXPECT_EQ(uvm_pressure_events(mgr, some.data(), static_cast<uint32_t>(some.size()), &n), UVM_OK);
        all.insert(all.end(), some.begin(), some.begin() + n);
        if (n < some.size())
            return all;
    }
}

}  // namespace

// The reproducer: one client, budget 40 MiB, half its objects
// evictable, eight threads allocating and freeing. An evictable object is
// on its GPU's evictable list before it is charged; another thread's budget
// eviction took it there and uncharged what was never charged. Every sample
// of the counters, read as signed, must be >= 0 and within the budget; once
// everything is freed they must read 0 and the whole budget must fit again.
TEST(Clients, OwnEvictionsRacingFreesNeverDriveUsageBelowZero) {
    uvm_manager_t *mgr = small_sim(1, 1024 * M);
    uvm_client_t *c = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "racer", &c), UVM_OK);
    constexpr uint64_t kBudget = 40 * M;
    ASSERT_EQ(uvm_client_set_budget(mgr, c, 0, kBudget), UVM_OK);
    std::atomic<bool> done{false};
    std::atomic<uint64_t> negative{0}, over{0}, samples{0};
    std::thread observer([&] {
        while (!done.load()) {
            uvm_client_info_t i;
            if (uvm_client_info(mgr, c, &i) != UVM_OK)
                continue;
            samples++;
            if (static_cast<int64_t>(i.vidmem_used[0]) < 0 || static_cast<int64_t>(i.vidmem_evictable[0]) < 0)
                negative++;
            if (i.vidmem_used[0] > kBudget)
                over++;
        }
    });
    std::atomic<uint64_t> evicted_refusals{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            std::vector<uvm_mem_t *> mine;
            for (int i = 0; i < 1000; ++i) {
                uvm_mem_t *m = nullptr;
                const uint32_t flags = (i + t) % 2 ? UVM_MEM_EVICTABLE : 0;
                const uvm_status_t s = alloc_in_client(mgr, c, UVM_BACKING_VIDMEM, 2 * M, flags, &m);
                if (s == UVM_OK)
                    mine.push_back(m);
                else
                    evicted_refusals += s == UVM_ERR_OUT_OF_MEMORY;
                // Up to 24 each: one thread alone passes the 40 MiB budget, so its own
                // charges evict while the others free.
                if (mine.size() > 23 || (i % 5 == 0 && !mine.empty())) {
                    EXPECT_EQ(uvm_mem_free(mgr, mine.front()), UVM_OK);
                    mine.erase(mine.begin());
                }
            }
            for (uvm_mem_t *m : mine)
                EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
        });
    for (auto &th : threads)
        th.join();
    done = true;
    observer.join();
    EXPECT_GT(samples.load(), 0u);
    EXPECT_EQ(negative.load(), 0u) << "of " << samples.load() << " samples";
    EXPECT_EQ(over.load(), 0u);
    uvm_gpu_stats_t gs;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &gs), UVM_OK);
    EXPECT_GT(gs.evictions, 0u) << "no eviction raced anything: the test tested nothing";
    const uvm_client_info_t i = client_info(mgr, c);
    EXPECT_EQ(static_cast<int64_t>(i.vidmem_used[0]), 0);
    EXPECT_EQ(static_cast<int64_t>(i.vidmem_evictable[0]), 0);
    EXPECT_EQ(i.objects, 0u);
    // Not locked out: twenty 2 MiB objects fill the empty 40 MiB budget.
    std::vector<uvm_mem_t *> again;
    for (int n = 0; n < 20; ++n) {
        uvm_mem_t *m = nullptr;
        EXPECT_EQ(alloc_in_client(mgr, c, UVM_BACKING_VIDMEM, 2 * M, 0, &m), UVM_OK) << n;
        if (m)
            again.push_back(m);
    }
    for (uvm_mem_t *m : again)
        EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    ASSERT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

namespace {

// The events of one watermark, in queue order, checked as a sequence: the
// first rises, they alternate, each is true of the usage it carries; `final`
// is the usage once everything is done, which the last one must match.
void check_sequence(const std::vector<uvm_pressure_event_t> &events, uint32_t percent, uint64_t final_used,
                    uint64_t limit, const char *what) {
    SCOPED_TRACE(std::string(what) + " at " + std::to_string(percent) + "%");
    bool above = false;
    for (size_t n = 0; n < events.size(); ++n) {
        const uvm_pressure_event_t &e = events[n];
        ASSERT_NE(e.rising != 0, above) << "event " << n << " of " << events.size()
                                        << (n == 0 ? ": the first is a falling one" : ": two the same way in a row");
        above = e.rising != 0;
        EXPECT_EQ(e.used * 100 >= static_cast<uint64_t>(percent) * e.limit, above)
            << "event " << n << " untrue of its usage " << e.used;
        EXPECT_EQ(e.limit, limit);
    }
    EXPECT_EQ(above, final_used * 100 >= static_cast<uint64_t>(percent) * limit)
        << "the last event says " << (above ? "above" : "below") << " at a final usage of " << final_used;
}

}  // namespace

// Eight threads charge and uncharge one client across four watermarks of its
// budget (no eviction: every change is a charge or a free), draining the
// queue as they go. Each watermark's events must read as one sequence that
// a single thread could have made: rising first, alternating, each true of
// its usage, the last one true of the final usage. The GPU's held-memory
// watermarks likewise, held memory rising as the PMM grows and falling at
// the trim at the end.
TEST(Pressure, NoticesPerWatermarkAreOneLinearizableSequence) {
    uvm_manager_t *mgr = small_sim(1, 256 * M);
    uvm_eviction_policy_t policy{};
    policy.disabled = 1;
    ASSERT_EQ(uvm_manager_set_eviction_policy(mgr, &policy), UVM_OK);
    uvm_client_t *c = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "tenant", &c), UVM_OK);
    constexpr uint64_t kBudget = 32 * M;
    ASSERT_EQ(uvm_client_set_budget(mgr, c, 0, kBudget), UVM_OK);
    const uint32_t marks[] = {25, 50, 75, 90};
    ASSERT_EQ(uvm_pressure_watermarks(mgr, c, 0, marks, 4), UVM_OK);
    const uint32_t held_marks[] = {5, 10};
    ASSERT_EQ(uvm_pressure_watermarks(mgr, nullptr, 0, held_marks, 2), UVM_OK);

    // The workers drain the queue themselves, often enough that it never
    // holds near its 4,096 (a dropped event would be a gap, not a finding):
    // taking and appending under one lock keeps the queue's order.
    std::mutex lock;
    std::vector<uvm_pressure_event_t> events;
    std::vector<uvm_mem_t *> kept;
    auto drain = [&] {
        std::lock_guard<std::mutex> guard(lock);
        const auto some = take_events(mgr);
        events.insert(events.end(), some.begin(), some.end());
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            std::vector<uvm_mem_t *> mine;
            for (int i = 0; i < 2000; ++i) {
                uvm_mem_t *m = nullptr;
                const uint64_t size = (i + t) % 4 ? 2 * M : 64 * K;
                if (alloc_in_client(mgr, c, UVM_BACKING_VIDMEM, size, 0, &m) == UVM_OK)
                    mine.push_back(m);
                // Up to 16 each: one thread alone sweeps the whole budget.
                if (mine.size() > 15 || (i % 3 == t % 3 && !mine.empty())) {
                    EXPECT_EQ(uvm_mem_free(mgr, mine.back()), UVM_OK);
                    mine.pop_back();
                }
                if (i % 8 == 7)
                    drain();
            }
            // Thread t keeps t % 3 objects: the final usage is somewhere in the middle.
            while (mine.size() > static_cast<size_t>(t % 3)) {
                EXPECT_EQ(uvm_mem_free(mgr, mine.back()), UVM_OK);
                mine.pop_back();
            }
            // Left for the end (below): the objects kept.
            std::lock_guard<std::mutex> guard(lock);
            kept.insert(kept.end(), mine.begin(), mine.end());
        });
    for (auto &th : threads)
        th.join();
    drain();
    std::map<std::pair<bool, uint32_t>, std::vector<uvm_pressure_event_t>> by_mark;
    for (const auto &e : events)
        by_mark[std::make_pair(e.client != nullptr, e.percent)].push_back(e);
    const uint64_t final_used = client_info(mgr, c).vidmem_used[0];
    for (uint32_t p : marks) {
        const auto &seq = by_mark[std::make_pair(true, p)];
        EXPECT_GE(seq.size(), 1u) << p << "% never crossed: the test tested nothing";
        check_sequence(seq, p, final_used, kBudget, "the client's budget");
    }
    // Held memory: everything freed and trimmed, it falls below both marks.
    for (uvm_mem_t *m : kept)
        EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
    for (const auto &e : take_events(mgr))
        by_mark[std::make_pair(e.client != nullptr, e.percent)].push_back(e);
    uvm_gpu_stats_t gs;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &gs), UVM_OK);
    uvm_gpu_info_t gi;
    ASSERT_EQ(uvm_gpu_info(mgr, 0, &gi), UVM_OK);
    for (uint32_t p : held_marks) {
        const auto &seq = by_mark[std::make_pair(false, p)];
        EXPECT_GE(seq.size(), 2u) << "held memory rose past " << p << "% and fell at the trim";
        check_sequence(seq, p, gs.root_chunks * 2 * M, gi.memory_total, "the GPU's held memory");
    }
    ASSERT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A watermark set while usage is already above it starts above: the next
// change queues nothing (nothing crossed), the fall below it queues one
// falling event, the rise past it again one rising event.
TEST(Pressure, AWatermarkSetBelowTheUsageStartsAboveAndQueuesNothing) {
    uvm_manager_t *mgr = small_sim(1, 256 * M);
    uvm_client_t *c = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "late", &c), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, c, 0, 8 * M), UVM_OK);
    std::vector<uvm_mem_t *> objs(3, nullptr);
    for (uvm_mem_t *&m : objs)
        ASSERT_EQ(alloc_in_client(mgr, c, UVM_BACKING_VIDMEM, 2 * M, 0, &m), UVM_OK);  // 6 of 8 MiB: 75%
    const uint32_t mark = 50;
    ASSERT_EQ(uvm_pressure_watermarks(mgr, c, 0, &mark, 1), UVM_OK);
    uvm_mem_t *more = nullptr;
    ASSERT_EQ(alloc_in_client(mgr, c, UVM_BACKING_VIDMEM, 64 * K, 0, &more), UVM_OK);  // a change, no crossing
    EXPECT_TRUE(take_events(mgr).empty()) << "a rising event with nothing crossed";
    ASSERT_EQ(uvm_mem_free(mgr, more), UVM_OK);
    EXPECT_TRUE(take_events(mgr).empty());
    ASSERT_EQ(uvm_mem_free(mgr, objs[2]), UVM_OK);  // 4 of 8: still at 50%
    EXPECT_TRUE(take_events(mgr).empty());
    ASSERT_EQ(uvm_mem_free(mgr, objs[1]), UVM_OK);  // 2 of 8: below
    auto ev = take_events(mgr);
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].rising, 0);
    EXPECT_EQ(ev[0].used, 2 * M);
    ASSERT_EQ(alloc_in_client(mgr, c, UVM_BACKING_VIDMEM, 2 * M, 0, &objs[1]), UVM_OK);  // 4 of 8: reached again
    ev = take_events(mgr);
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].rising, 1);
    EXPECT_EQ(ev[0].used, 4 * M);
    // The same for a GPU's held memory: set below what it holds, nothing until a crossing.
    uvm_gpu_stats_t gs;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &gs), UVM_OK);
    ASSERT_GT(gs.root_chunks, 0u);
    const uint32_t low = 1;  // 1% of 256 MiB: below the 2 MiB root held
    ASSERT_EQ(uvm_pressure_watermarks(mgr, nullptr, 0, &low, 1), UVM_OK);
    uvm_mem_t *big = nullptr;
    ASSERT_EQ(alloc_in_client(mgr, nullptr, UVM_BACKING_VIDMEM, 8 * M, 0, &big), UVM_OK);  // held memory grows, no crossing
    EXPECT_TRUE(take_events(mgr).empty());
    ASSERT_EQ(uvm_mem_free(mgr, big), UVM_OK);
    for (uvm_mem_t *m : {objs[0], objs[1]})
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    take_events(mgr);  // the client's falling one
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
    ev = take_events(mgr);
    ASSERT_EQ(ev.size(), 1u) << "the trim empties the GPU: one fall below 1%";
    EXPECT_EQ(ev[0].client, nullptr);
    EXPECT_EQ(ev[0].rising, 0);
    ASSERT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A percent given twice is one watermark: one event per crossing, not two.
TEST(Pressure, APercentGivenTwiceIsOneWatermark) {
    uvm_manager_t *mgr = small_sim(1, 256 * M);
    uvm_client_t *c = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "twice", &c), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, c, 0, 8 * M), UVM_OK);
    const uint32_t marks[] = {50, 50};
    ASSERT_EQ(uvm_pressure_watermarks(mgr, c, 0, marks, 2), UVM_OK);
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(alloc_in_client(mgr, c, UVM_BACKING_VIDMEM, 4 * M, 0, &m), UVM_OK);
    const auto ev = take_events(mgr);
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].percent, 50u);
    EXPECT_EQ(ev[0].rising, 1);
    ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(take_events(mgr).size(), 1u);
    ASSERT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
