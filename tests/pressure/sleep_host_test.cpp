// The host memory of a sleep (uvm_pressure.h, "Host memory of a sleep"): a
// sleepable client's backup holds exactly the bytes its sleep keeps, is kept
// or given back at the wake as its policy says (the process's resident
// memory with it), is made ready ahead to its reserve, and stays within the
// manager's limit, a sleep that would pass it refused with nothing changed.
#include <gtest/gtest.h>


#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "common/resident_memory.h"
#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;

uvm_client_t *sleepable(uvm_manager_t *mgr, const char *name = "model") {
    uvm_client_t *c = nullptr;
    EXPECT_EQ(uvm_client_create_sleepable(mgr, name, &c), UVM_OK);
    return c;
}

uvm_mem_t *place(uvm_manager_t *mgr, uvm_client_t *client, uint64_t size, uint64_t chunk = 0) {
    uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, size, 0, chunk, 0);
    a.client = client;
    uvm_mem_t *m = nullptr;
    EXPECT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_OK);
    return m;
}

uvm_sleep_policy_t policy(uvm_sleep_host_t host, uint64_t reserve = 0, uint32_t threads = 0) {
    uvm_sleep_policy_t p;
    std::memset(&p, 0, sizeof(p));
    p.host = host;
    p.host_reserve = reserve;
    p.pin_threads = threads;
    return p;
}

uvm_manager_stats_t mstats(uvm_manager_t *mgr) {
    uvm_manager_stats_t s;
    std::memset(&s, 0, sizeof(s));
    EXPECT_EQ(uvm_manager_stats(mgr, &s), UVM_OK);
    return s;
}

class SleepHost : public ManagerTest {};

// The backup is host memory the copy engine reaches: whether the CPU
// reaches vidmem (sim_coherent) changes nothing of it.
INSTANTIATE_TEST_SUITE_P(Backends, SleepHost, ::testing::Values("sim", "cuda"),
                         [](const auto &info) { return info.param; });

}  // namespace

// Every chunk size, objects not multiples of 2 MiB, one discarded: the
// backup is the kept objects' allocated sizes added, to the byte, and a
// lone 4 KiB object takes 4 KiB of host memory (the eviction store's
// 256 MiB slabs held it before).
TEST_P(SleepHost, TheBackupHoldsExactlyTheKeptBytes) {
    uvm_client_t *c = sleepable(mgr_);
    std::vector<uvm_mem_t *> objects;
    uint64_t kept = 0;
    for (uint64_t chunk : {4 * K, 64 * K, 2 * M})
        for (uint64_t size : {chunk, 3 * chunk + 4 * K}) {
            objects.push_back(place(mgr_, c, size, chunk));
            kept += info(objects.back()).alloc_size;
        }
    uvm_mem_t *dropped = place(mgr_, c, 6 * M);
    ASSERT_EQ(uvm_mem_set_sleep_mode(mgr_, dropped, UVM_SLEEP_DISCARD), UVM_OK);
    ASSERT_EQ(write_pattern(mgr_, objects[3], info(objects[3]).size, 4), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 0u) << "nothing before the first sleep";

    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    uvm_client_info_t ci = client_info(mgr_, c);
    EXPECT_EQ(ci.sleep_host_bytes, kept);
    EXPECT_EQ(ci.sleep_host_held, kept) << "exactly the kept bytes, nothing rounded up";
    EXPECT_EQ(mstats(mgr_).sleep_host_bytes, kept);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr_, objects[3], info(objects[3]).size, 4), 0u);
    ci = client_info(mgr_, c);
    EXPECT_EQ(ci.sleep_host_bytes, 0u);
    EXPECT_EQ(ci.sleep_host_held, kept) << "KEEP (the default): pinned for the next sleep";
    EXPECT_EQ(ci.sleep_host_policy, static_cast<uint32_t>(UVM_SLEEP_HOST_KEEP));
    // The next sleep fits it: it does not grow.
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, kept);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    for (uvm_mem_t *m : objects)
        ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, dropped), UVM_OK);

    // One object of 4 KiB.
    uvm_mem_t *tiny = place(mgr_, c, 4 * K, 4 * K);
    ASSERT_EQ(uvm_client_set_sleep_policy(mgr_, c, nullptr), UVM_ERR_INVALID_ARGUMENT);
    const uvm_sleep_policy_t release = policy(UVM_SLEEP_HOST_RELEASE);
    ASSERT_EQ(uvm_client_set_sleep_policy(mgr_, c, &release), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 0u) << "set awake: exactly the reserve, none";
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 4 * K);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 0u) << "RELEASE: back at the wake";
    EXPECT_EQ(mstats(mgr_).sleep_host_bytes, 0u);
    ASSERT_EQ(uvm_mem_free(mgr_, tiny), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

// RELEASE gives the host memory back to the system at the wake: the
// process's resident memory comes back within 64 MiB of where it was before
// the sleep; KEEP keeps it resident (and pinned) for the next sleep. The
// client is 96 MiB, so the backup is two pieces made by two threads, and
// the second object's copies cross from one piece into the next.
TEST_P(SleepHost, ReleaseGivesTheResidentMemoryBackAtTheWakeAndKeepKeepsIt) {
    constexpr uint64_t kBig = 56 * M, kSmall = 40 * M, kKept = kBig + kSmall;
    for (uvm_sleep_host_t host : {UVM_SLEEP_HOST_RELEASE, UVM_SLEEP_HOST_KEEP}) {
        SCOPED_TRACE(host == UVM_SLEEP_HOST_RELEASE ? "release" : "keep");
        uvm_client_t *c = sleepable(mgr_);
        const uvm_sleep_policy_t p = policy(host, 0, 2);
        ASSERT_EQ(uvm_client_set_sleep_policy(mgr_, c, &p), UVM_OK);
        uvm_mem_t *big = place(mgr_, c, kBig, 2 * M), *small = place(mgr_, c, kSmall, 2 * M);
        ASSERT_TRUE(big && small);
        uvm_mem_span_t span{big, 0, UVM_VIEW_PHYSICAL};
        ASSERT_EQ(uvm_mem_memset(mgr_, 0, &span, 0x5a, kBig), UVM_OK);  // every page written: resident on sim
        ASSERT_EQ(write_pattern(mgr_, small, kSmall, 11), UVM_OK);
        const uint64_t before = uvm::resident_bytes();
        ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
        EXPECT_EQ(client_info(mgr_, c).sleep_host_held, kKept);
        ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
        const uint64_t after = uvm::resident_bytes();
        EXPECT_EQ(wrong_bytes(mgr_, small, kSmall, 11), 0u);
        if (host == UVM_SLEEP_HOST_RELEASE) {
            EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 0u);
            EXPECT_LE(after, before + 64 * M) << "resident " << before << " before the sleep, " << after
                                              << " after the wake";
        } else {
            EXPECT_EQ(client_info(mgr_, c).sleep_host_held, kKept);
            EXPECT_GE(after, before + kKept * 9 / 10) << "kept: still resident";
        }
        ASSERT_EQ(uvm_mem_free(mgr_, big), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr_, small), UVM_OK);
        ASSERT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);  // its backup goes with it
        EXPECT_EQ(mstats(mgr_).sleep_host_bytes, 0u);
    }
}

// A reserve is made ready when set (before any sleep), a sleep within it
// does not grow it, one beyond grows it by exactly what it lacks, and a
// RELEASE wake cuts it back to the reserve; set awake, a policy makes the
// backup exactly its reserve.
TEST_P(SleepHost, AReserveIsReadyAheadAndTheBackupGrowsOnlyBeyondIt) {
    uvm_client_t *c = sleepable(mgr_);
    const uvm_sleep_policy_t reserve = policy(UVM_SLEEP_HOST_RELEASE, 70 * M + 1);  // rounded up to 4 KiB
    ASSERT_EQ(uvm_client_set_sleep_policy(mgr_, c, &reserve), UVM_OK);
    const uint64_t r = 70 * M + 4 * K;
    uvm_client_info_t ci = client_info(mgr_, c);
    EXPECT_EQ(ci.sleep_host_held, r) << "ready before any sleep";
    EXPECT_EQ(ci.sleep_host_reserve, r);
    EXPECT_EQ(ci.sleep_host_policy, static_cast<uint32_t>(UVM_SLEEP_HOST_RELEASE));
    EXPECT_EQ(mstats(mgr_).sleep_host_bytes, r);

    uvm_mem_t *a = place(mgr_, c, 40 * M);
    ASSERT_EQ(write_pattern(mgr_, a, 4 * M, 21), UVM_OK);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, r) << "within the reserve: nothing more pinned";
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr_, a, 4 * M, 21), 0u);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, r);

    // Beyond it (90 MiB kept): exactly what it lacks, in two more pieces.
    uvm_mem_t *b = place(mgr_, c, 50 * M);
    ASSERT_EQ(write_pattern(mgr_, b, 4 * M, 22), UVM_OK);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 90 * M) << "beyond it: exactly the kept bytes";
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, r) << "RELEASE: back to the reserve";
    EXPECT_EQ(wrong_bytes(mgr_, a, 4 * M, 21), 0u);
    EXPECT_EQ(wrong_bytes(mgr_, b, 4 * M, 22), 0u);

    // Set while asleep: it grows now, and the wake cuts it (KEEP: keeps it).
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    const uvm_sleep_policy_t larger = policy(UVM_SLEEP_HOST_KEEP, 100 * M);
    ASSERT_EQ(uvm_client_set_sleep_policy(mgr_, c, &larger), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 100 * M);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 100 * M);
    EXPECT_EQ(wrong_bytes(mgr_, b, 4 * M, 22), 0u);
    // Set awake: exactly the reserve, a part of a piece cut included.
    const uvm_sleep_policy_t smaller = policy(UVM_SLEEP_HOST_KEEP, 10 * M + 8 * K);
    ASSERT_EQ(uvm_client_set_sleep_policy(mgr_, c, &smaller), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 10 * M + 8 * K);
    EXPECT_EQ(mstats(mgr_).sleep_host_bytes, 10 * M + 8 * K);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 90 * M);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 90 * M) << "KEEP: the most a sleep needed";
    EXPECT_EQ(wrong_bytes(mgr_, a, 4 * M, 21), 0u);
    EXPECT_EQ(wrong_bytes(mgr_, b, 4 * M, 22), 0u);
    ASSERT_EQ(uvm_mem_free(mgr_, a), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, b), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
    EXPECT_EQ(mstats(mgr_).sleep_host_bytes, 0u);
}

// The manager's limit on the backups' host memory refuses a sleep that
// would pass it, clearly (HOST_LIMIT) and with nothing changed: the client
// awake, its memory held, its bytes where they were. A reserve is refused
// the same way; discarded bytes need no host memory; a limit below what is
// held takes nothing back.
TEST_P(SleepHost, TheHostLimitRefusesASleepAndChangesNothing) {
    uvm_client_t *c = sleepable(mgr_);
    uvm_mem_t *a = place(mgr_, c, 8 * M);
    ASSERT_EQ(write_pattern(mgr_, a, 8 * M, 31), UVM_OK);
    ASSERT_EQ(uvm_manager_set_sleep_host_limit(mgr_, 6 * M), UVM_OK);
    EXPECT_EQ(mstats(mgr_).sleep_host_limit, 6 * M);
    uvm_gpu_stats_t before;
    ASSERT_EQ(uvm_gpu_stats(mgr_, 0, &before), UVM_OK);
    EXPECT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_ERR_HOST_LIMIT);
    uvm_client_info_t ci = client_info(mgr_, c);
    EXPECT_EQ(ci.asleep, 0);
    EXPECT_EQ(ci.vidmem_used[0], 8 * M);
    EXPECT_EQ(ci.vidmem_asleep[0], 0u);
    EXPECT_EQ(ci.sleep_host_held, 0u);
    EXPECT_EQ(mstats(mgr_).sleep_host_bytes, 0u);
    uvm_gpu_stats_t after;
    ASSERT_EQ(uvm_gpu_stats(mgr_, 0, &after), UVM_OK);
    EXPECT_EQ(after.held_bytes, before.held_bytes) << "no memory went back";
    EXPECT_EQ(wrong_bytes(mgr_, a, 8 * M, 31), 0u);
    uvm_mem_span_t span{a, 0, UVM_VIEW_PHYSICAL};
    EXPECT_EQ(uvm_mem_memset(mgr_, 0, &span, 0, 4 * K), UVM_OK) << "awake and usable";
    ASSERT_EQ(write_pattern(mgr_, a, 8 * M, 31), UVM_OK);
    EXPECT_STRNE(uvm_status_string(UVM_ERR_HOST_LIMIT), "unknown status");

    // A reserve beyond it: refused, the policy as it was.
    const uvm_sleep_policy_t big = policy(UVM_SLEEP_HOST_RELEASE, 7 * M);
    EXPECT_EQ(uvm_client_set_sleep_policy(mgr_, c, &big), UVM_ERR_HOST_LIMIT);
    ci = client_info(mgr_, c);
    EXPECT_EQ(ci.sleep_host_reserve, 0u);
    EXPECT_EQ(ci.sleep_host_policy, static_cast<uint32_t>(UVM_SLEEP_HOST_KEEP));
    EXPECT_EQ(ci.sleep_host_held, 0u);

    // Dropped bytes need no host memory.
    uvm_sleep_params_t drop;
    std::memset(&drop, 0, sizeof(drop));
    drop.mode = UVM_SLEEP_DISCARD;
    ASSERT_EQ(uvm_client_sleep(mgr_, c, &drop), UVM_OK);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr_, a, 8 * M, UINT32_MAX), 0u);

    // Raised, the sleep goes; lowered below what is held, nothing is taken
    // back but nothing grows.
    ASSERT_EQ(write_pattern(mgr_, a, 8 * M, 32), UVM_OK);
    ASSERT_EQ(uvm_manager_set_sleep_host_limit(mgr_, 8 * M), UVM_OK);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    ASSERT_EQ(uvm_manager_set_sleep_host_limit(mgr_, 4 * M), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 8 * M);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK) << "it fits what is held: nothing grows";
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr_, a, 8 * M, 32), 0u);
    uvm_mem_t *more = place(mgr_, c, 2 * M);
    EXPECT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_ERR_HOST_LIMIT) << "it would grow past the limit";
    EXPECT_EQ(client_info(mgr_, c).asleep, 0);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_held, 8 * M);
    // A second client: the limit is every backup's together.
    ASSERT_EQ(uvm_manager_set_sleep_host_limit(mgr_, 12 * M), UVM_OK);
    uvm_client_t *d = sleepable(mgr_, "second");
    uvm_mem_t *e = place(mgr_, d, 6 * M);
    EXPECT_EQ(uvm_client_sleep(mgr_, d, nullptr), UVM_ERR_HOST_LIMIT) << "8 MiB held by the first";
    ASSERT_EQ(uvm_manager_set_sleep_host_limit(mgr_, 0), UVM_OK);
    ASSERT_EQ(uvm_client_sleep(mgr_, d, nullptr), UVM_OK);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    EXPECT_EQ(mstats(mgr_).sleep_host_bytes, 16 * M);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    ASSERT_EQ(uvm_client_wake(mgr_, d), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr_, a, 8 * M, 32), 0u);
    for (uvm_mem_t *m : {a, more, e})
        ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, d), UVM_OK);
}

// What an operator reads: the snapshot and the metrics carry the backups.
TEST_P(SleepHost, TheSnapshotAndTheMetricsSayWhatTheBackupsHold) {
    uvm_client_t *c = sleepable(mgr_);
    const uvm_sleep_policy_t p = policy(UVM_SLEEP_HOST_RELEASE, 4 * M);
    ASSERT_EQ(uvm_client_set_sleep_policy(mgr_, c, &p), UVM_OK);
    ASSERT_EQ(uvm_manager_set_sleep_host_limit(mgr_, 64 * M), UVM_OK);
    uvm_mem_t *a = place(mgr_, c, 6 * M);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    const std::string metrics =
        fetch([&](char *b, size_t n, size_t *need) { return uvm_manager_metrics(mgr_, b, n, need); });
    EXPECT_NE(metrics.find("uvm_client_sleep_host_bytes{client=\"model\",state=\"kept\"} " + std::to_string(6 * M)),
              std::string::npos)
        << metrics;
    EXPECT_NE(metrics.find("uvm_client_sleep_host_bytes{client=\"model\",state=\"ready\"} 0"), std::string::npos);
    EXPECT_NE(metrics.find("uvm_sleep_host_bytes " + std::to_string(6 * M)), std::string::npos);
    EXPECT_NE(metrics.find("uvm_sleep_host_limit_bytes " + std::to_string(64 * M)), std::string::npos);
    const std::string snapshot =
        fetch([&](char *b, size_t n, size_t *need) { return uvm_manager_snapshot(mgr_, b, n, need); });
    EXPECT_NE(snapshot.find("\"sleep_host\":{\"held\":" + std::to_string(6 * M) + ",\"kept\":" +
                            std::to_string(6 * M) + ",\"reserve\":" + std::to_string(4 * M) +
                            ",\"policy\":\"release\"}"),
              std::string::npos)
        << snapshot;
    EXPECT_NE(snapshot.find("\"sleep_host_bytes\":" + std::to_string(6 * M)), std::string::npos);
    EXPECT_NE(snapshot.find("\"sleep_host_limit\":" + std::to_string(64 * M)), std::string::npos);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    const std::string awake =
        fetch([&](char *b, size_t n, size_t *need) { return uvm_manager_metrics(mgr_, b, n, need); });
    EXPECT_NE(awake.find("uvm_client_sleep_host_bytes{client=\"model\",state=\"ready\"} " + std::to_string(4 * M)),
              std::string::npos);
    ASSERT_EQ(uvm_mem_free(mgr_, a), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

// Threads set policies and read the figures while one thread sleeps and
// wakes the client: every call succeeds or says why, every byte comes back,
// and the figures stay within what can be (the TSan job runs it).
TEST_P(SleepHost, PoliciesSetAndFiguresReadWhileAnotherThreadSleepsAndWakes) {
    uvm_client_t *c = sleepable(mgr_);
    uvm_mem_t *a = place(mgr_, c, 3 * M);
    ASSERT_EQ(write_pattern(mgr_, a, 3 * M, 41), UVM_OK);
    const uint64_t kept = info(a).alloc_size;
    std::atomic<bool> stop{false};
    std::atomic<int> failed{0};
    std::thread setter([&] {
        for (uint64_t i = 0; !stop.load(); ++i) {
            const uvm_sleep_policy_t p =
                policy(i % 2 ? UVM_SLEEP_HOST_RELEASE : UVM_SLEEP_HOST_KEEP, (i % 3) * 2 * M, 1 + i % 3);
            const uvm_status_t s = uvm_client_set_sleep_policy(mgr_, c, &p);
            if (s != UVM_OK && failed++ == 0)
                ADD_FAILURE() << "set_sleep_policy: " << uvm_status_string(s);
        }
    });
    std::thread reader([&] {
        while (!stop.load()) {
            const uvm_client_info_t ci = client_info(mgr_, c);
            const uvm_manager_stats_t ms = mstats(mgr_);
            // The kept bytes are all or none; what is held, at most the
            // largest reserve twice (a new one is made ready before the
            // old goes).
            if (((ci.sleep_host_bytes != 0 && ci.sleep_host_bytes != kept) || ci.sleep_host_held > 8 * M ||
                 ms.sleep_host_bytes > 8 * M) &&
                failed++ == 0)
                ADD_FAILURE() << "kept " << ci.sleep_host_bytes << ", held " << ci.sleep_host_held << ", all "
                              << ms.sleep_host_bytes;
        }
    });
    for (int i = 0; i < 30; ++i) {
        ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
        ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    }
    stop = true;
    setter.join();
    reader.join();
    EXPECT_EQ(failed.load(), 0);
    EXPECT_EQ(wrong_bytes(mgr_, a, 3 * M, 41), 0u);
    ASSERT_EQ(uvm_mem_free(mgr_, a), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
    EXPECT_EQ(mstats(mgr_).sleep_host_bytes, 0u);
}

TEST(SleepHostBadInput, EveryBadArgumentIsRefusedAndChangesNothing) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_client_t *c = sleepable(mgr);
    const uvm_sleep_policy_t good = policy(UVM_SLEEP_HOST_RELEASE, 2 * M);
    ASSERT_EQ(uvm_client_set_sleep_policy(mgr, c, &good), UVM_OK);
    auto unchanged = [&](const char *what) {
        SCOPED_TRACE(what);
        const uvm_client_info_t ci = client_info(mgr, c);
        EXPECT_EQ(ci.sleep_host_policy, static_cast<uint32_t>(UVM_SLEEP_HOST_RELEASE));
        EXPECT_EQ(ci.sleep_host_reserve, 2 * M);
        EXPECT_EQ(ci.sleep_host_held, 2 * M);
    };
    EXPECT_EQ(uvm_client_set_sleep_policy(nullptr, c, &good), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_set_sleep_policy(mgr, nullptr, &good), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_set_sleep_policy(mgr, c, nullptr), UVM_ERR_INVALID_ARGUMENT);
    uvm_sleep_policy_t bad = good;
    const int unknown = 7;
    std::memcpy(&bad.host, &unknown, sizeof(unknown));
    EXPECT_EQ(uvm_client_set_sleep_policy(mgr, c, &bad), UVM_ERR_INVALID_ARGUMENT);
    bad = good;
    bad.pin_threads = 65;
    EXPECT_EQ(uvm_client_set_sleep_policy(mgr, c, &bad), UVM_ERR_INVALID_ARGUMENT);
    bad = good;
    bad.host_reserve = UINT64_MAX;  // no multiple of 4 KiB above it
    EXPECT_EQ(uvm_client_set_sleep_policy(mgr, c, &bad), UVM_ERR_INVALID_ARGUMENT);
    unchanged("bad arguments");
    bad = good;
    bad.host_reserve = uint64_t{1} << 60;  // more than any host has
    EXPECT_EQ(uvm_client_set_sleep_policy(mgr, c, &bad), UVM_ERR_OUT_OF_MEMORY);
    unchanged("a reserve larger than the host");
    EXPECT_EQ(uvm_manager_set_sleep_host_limit(nullptr, 0), UVM_ERR_INVALID_ARGUMENT);
    // Not sleepable; another manager's; destroyed.
    uvm_client_t *plain = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "plain", &plain), UVM_OK);
    EXPECT_EQ(uvm_client_set_sleep_policy(mgr, plain, &good), UVM_ERR_NOT_SUPPORTED);
    uvm_client_info_t pi = client_info(mgr, plain);
    EXPECT_EQ(pi.sleep_host_held, 0u);
    uvm_manager_t *other = small_sim(1, 64 * M);
    EXPECT_EQ(uvm_client_set_sleep_policy(other, c, &good), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_manager_destroy(other), UVM_OK);
    unchanged("other handles");
    ASSERT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    uvm_manager_stats_t ms = mstats(mgr);
    EXPECT_EQ(ms.sleep_host_bytes, 0u) << "the backup went with its client";
    EXPECT_EQ(uvm_client_set_sleep_policy(mgr, c, &good), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_client_destroy(mgr, plain), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Torn down with a reserve held and a client asleep: everything goes back
// (the ASan job checks that nothing is left behind).
TEST(SleepHostTeardown, AManagerTornDownWithBackupsHeldGivesThemBack) {
    uvm_manager_t *mgr = small_sim(2, 64 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_client_t *idle = sleepable(mgr, "idle");
    const uvm_sleep_policy_t p = policy(UVM_SLEEP_HOST_KEEP, 3 * M);
    ASSERT_EQ(uvm_client_set_sleep_policy(mgr, idle, &p), UVM_OK);
    uvm_client_t *asleep = sleepable(mgr, "asleep");
    uvm_mem_t *a = place(mgr, asleep, 2 * M);
    ASSERT_NE(a, nullptr);
    ASSERT_EQ(uvm_client_sleep(mgr, asleep, nullptr), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_ERR_LEAKED_OBJECTS);
}
