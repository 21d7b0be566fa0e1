// Clients and budgets (pressure/client.h): usage never over a budget, not even
// under eight threads; a client over its budget evicts its own evictable
// objects first; reports and metrics name the clients.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;

}  // namespace

TEST(Clients, BudgetsHoldAndUsageIsExact) {
    uvm_manager_t *mgr = small_sim(2, 256 * M);
    uvm_client_t *a = nullptr, *b = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "trainer", &a), UVM_OK);
    ASSERT_EQ(uvm_client_create(mgr, "cache", &b), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, a, 0, 8 * M), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, a, UVM_CLIENT_SYSMEM, 64 * K), UVM_OK);
    uvm_mem_t *x = nullptr, *y = nullptr, *z = nullptr, *s = nullptr, *t = nullptr, *other = nullptr;
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 6 * M, 0, &x), UVM_OK);
    EXPECT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 4 * M, 0, &y), UVM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 2 * M, 0, &y), UVM_OK);
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 4 * M, 0, &other, 1), UVM_OK) << "GPU 1 has no budget";
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_SYSMEM, 64 * K, 0, &s), UVM_OK);
    EXPECT_EQ(alloc_in_client(mgr, a, UVM_BACKING_SYSMEM, 4 * K, 0, &t), UVM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(alloc_in_client(mgr, b, UVM_BACKING_VIDMEM, 16 * M, 0, &z), UVM_OK) << "another client's budget";
    uvm_client_info_t i = client_info(mgr, a);
    EXPECT_STREQ(i.name, "trainer");
    EXPECT_EQ(i.objects, 4u);
    EXPECT_EQ(i.vidmem_used[0], 8 * M);
    EXPECT_EQ(i.vidmem_used[1], 4 * M);
    EXPECT_EQ(i.sysmem_used, 64 * K);
    EXPECT_EQ(i.vidmem_budget[0], 8 * M);
    EXPECT_EQ(uvm_client_destroy(mgr, a), UVM_ERR_BUSY) << "it still owns objects";
    for (uvm_mem_t *m : {x, y, other, s})
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    i = client_info(mgr, a);
    EXPECT_EQ(i.vidmem_used[0], 0u);
    EXPECT_EQ(i.sysmem_used, 0u);
    EXPECT_EQ(i.objects, 0u);
    ASSERT_EQ(uvm_client_destroy(mgr, a), UVM_OK);
    EXPECT_EQ(uvm_client_info(mgr, a, &i), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 4 * K, 0, &x), UVM_ERR_INVALID_HANDLE);
    ASSERT_EQ(uvm_mem_free(mgr, z), UVM_OK);
    ASSERT_EQ(uvm_client_destroy(mgr, b), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Over its budget, a client's own evictable objects go first; other
// clients' objects are never evicted for it.
TEST(Clients, AClientOverBudgetEvictsItsOwnObjects) {
    uvm_manager_t *mgr = small_sim(2, 256 * M);
    uvm_client_t *a = nullptr, *b = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "a", &a), UVM_OK);
    ASSERT_EQ(uvm_client_create(mgr, "b", &b), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, a, 0, 8 * M), UVM_OK);
    std::vector<uvm_mem_t *> mine, theirs;
    for (int i = 0; i < 4; ++i) {
        uvm_mem_t *m = nullptr;
        ASSERT_EQ(alloc_in_client(mgr, b, UVM_BACKING_VIDMEM, 2 * M, UVM_MEM_EVICTABLE, &m), UVM_OK);
        theirs.push_back(m);
    }
    for (int i = 0; i < 8; ++i) {  // twice its budget, in evictable objects
        uvm_mem_t *m = nullptr;
        ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 2 * M, UVM_MEM_EVICTABLE, &m), UVM_OK) << i;
        mine.push_back(m);
        EXPECT_LE(client_info(mgr, a).vidmem_used[0], 8 * M);
    }
    uvm_residency_t r;
    for (size_t i = 0; i < mine.size(); ++i) {
        ASSERT_EQ(uvm_mem_residency(mgr, mine[i], &r), UVM_OK);
        EXPECT_EQ(r.resident, i >= 4 ? 1 : 0) << "the client's least recently used went first: " << i;
    }
    for (uvm_mem_t *m : theirs) {
        ASSERT_EQ(uvm_mem_residency(mgr, m, &r), UVM_OK);
        EXPECT_EQ(r.resident, 1) << "another client's object was evicted";
    }
    // Bringing one back pushes another of its own out.
    ASSERT_EQ(uvm_mem_make_resident(mgr, mine[0]), UVM_OK);
    EXPECT_EQ(client_info(mgr, a).vidmem_used[0], 8 * M);
    // A pinned allocation over the budget with nothing evictable left to give.
    uvm_mem_t *pinned = nullptr;
    ASSERT_EQ(uvm_client_set_budget(mgr, a, 0, 2 * M), UVM_OK);
    EXPECT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 4 * M, 0, &pinned), UVM_ERR_OUT_OF_MEMORY);
    char text[4096];
    ASSERT_EQ(uvm_oom_report(mgr, UVM_REPORT_TEXT, text, sizeof(text), nullptr), UVM_OK);
    EXPECT_NE(std::string(text).find("client a: "), std::string::npos) << text;
    EXPECT_NE(std::string(text).find("budget 2.00 MiB"), std::string::npos) << text;
    for (uvm_mem_t *m : mine)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    for (uvm_mem_t *m : theirs)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Eight threads of one client against one budget: never over it, and the
// usage is exact once they are done.
TEST(Clients, StressEightThreadsNeverPassTheBudget) {
    uvm_manager_t *mgr = small_sim(2, 1024 * M);
    uvm_client_t *c = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "shared", &c), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, c, 0, 12 * M), UVM_OK);  // one thread alone reaches it
    std::atomic<int> over{0}, refused{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            std::vector<uvm_mem_t *> mine;
            for (int i = 0; i < 300; ++i) {
                uvm_mem_t *m = nullptr;
                const uint64_t size = (i + t) % 3 ? 2 * M : 64 * K;
                const uvm_status_t s = alloc_in_client(mgr, c, UVM_BACKING_VIDMEM, size, 0, &m);
                if (s == UVM_OK)
                    mine.push_back(m);
                else
                    refused += s == UVM_ERR_OUT_OF_MEMORY;
                uvm_client_info_t info;
                if (uvm_client_info(mgr, c, &info) == UVM_OK && info.vidmem_used[0] > 12 * M)
                    over++;
                if (mine.size() > 14 || (i % 5 == 0 && !mine.empty())) {
                    uvm_mem_free(mgr, mine.back());
                    mine.pop_back();
                }
            }
            for (uvm_mem_t *m : mine)
                uvm_mem_free(mgr, m);
        });
    }
    for (auto &th : threads)
        th.join();
    EXPECT_EQ(over.load(), 0);
    EXPECT_GT(refused.load(), 0) << "the budget never bit: the test tested nothing";
    EXPECT_EQ(client_info(mgr, c).vidmem_used[0], 0u);
    ASSERT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A client's object freed on a stream (uvm_mem_free_async) whose memory
// stays in the stream's pool is gone for its client too: its budget comes
// back and the client can be destroyed. (Found by the API fuzzer's stream
// operations: the pooled path never uncharged, the client stayed charged and
// BUSY for ever.)
TEST(Clients, AStreamOrderedFreeGivesTheBudgetBack) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    uvm_client_t *c = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "streamer", &c), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, c, 0, 4 * M), UVM_OK);
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &s), UVM_OK);
    for (int round = 0; round < 4; ++round) {  // more than the budget in all: each free gives it back
        uvm_mem_t *m = nullptr;
        uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 4 * M);
        p.client = c;
        ASSERT_EQ(uvm_mem_alloc_async(mgr, &p, s, &m), UVM_OK) << round;
        EXPECT_EQ(client_info(mgr, c).vidmem_used[0], 4 * M);
        ASSERT_EQ(uvm_mem_free_async(mgr, m, s), UVM_OK);
        const uvm_client_info_t i = client_info(mgr, c);
        EXPECT_EQ(i.objects, 0u) << round;
        EXPECT_EQ(i.vidmem_used[0], 0u) << round;
    }
    EXPECT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    EXPECT_EQ(uvm_stream_destroy(mgr, s), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Clients, EveryBadArgumentIsRefusedWithItsStatus) {
    uvm_manager_t *mgr = small_sim(2, 64 * M);
    uvm_client_t *c = nullptr;
    EXPECT_EQ(uvm_client_create(mgr, nullptr, &c), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_create(mgr, "", &c), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_create(mgr, std::string(64, 'x').c_str(), &c), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_create(mgr, "ok", nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_create(nullptr, "ok", &c), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(uvm_client_create(mgr, "ok", &c), UVM_OK);
    EXPECT_EQ(uvm_client_set_budget(mgr, c, 5, M), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_client_set_budget(mgr, nullptr, 0, M), UVM_ERR_INVALID_ARGUMENT);
    uvm_manager_t *other = small_sim(2, 64 * M);
    uvm_client_t *foreign = nullptr;
    ASSERT_EQ(uvm_client_create(other, "theirs", &foreign), UVM_OK);
    uvm_mem_t *m = nullptr;
    EXPECT_EQ(alloc_in_client(mgr, foreign, UVM_BACKING_VIDMEM, 4 * K, 0, &m), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_client_set_budget(mgr, foreign, 0, M), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_client_destroy(mgr, foreign), UVM_ERR_INVALID_HANDLE);
    uvm_client_info_t i;
    EXPECT_EQ(uvm_client_info(mgr, c, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_info(mgr, reinterpret_cast<uvm_client_t *>(uintptr_t(0x777)), &i), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_manager_destroy(other), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr, c), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A client's freed object of one chunk is parked for the client's next
// allocation on the thread (uvm/mem.h, mem_park): it stays charged to the
// client, out of its objects, and shows as vidmem_cached; the next
// allocation of that size takes it with no new charge, and a trim, another
// owner's allocation or the destroy gives the charge back.
TEST(Clients, AFreedObjectStaysChargedAsCachedUntilTheClientAllocatesAgain) {
    uvm_manager_t *mgr = small_sim(1, 256 * M);
    uvm_client_t *a = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "trainer", &a), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, a, 0, 8 * M), UVM_OK);
    uvm_mem_t *x = nullptr;
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 64 * K, 0, &x), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, x), UVM_OK);
    uvm_client_info_t i = client_info(mgr, a);
    EXPECT_EQ(i.objects, 0u);
    EXPECT_EQ(i.vidmem_used[0], 64 * K);
    EXPECT_EQ(i.vidmem_cached[0], 64 * K);
    uvm_mem_t *y = nullptr;
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 40 * K, 0, 64 * K);  // a smaller size, the same chunk
    p.client = a;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &y), UVM_OK);
    EXPECT_NE(y, x);
    uvm_mem_info_t mi;
    EXPECT_EQ(uvm_mem_info(mgr, x, &mi), UVM_ERR_INVALID_HANDLE) << "the freed handle stays dead";
    ASSERT_EQ(uvm_mem_info(mgr, y, &mi), UVM_OK);
    EXPECT_EQ(mi.size, 40 * K);
    EXPECT_EQ(mi.alloc_size, 64 * K);
    i = client_info(mgr, a);
    EXPECT_EQ(i.objects, 1u);
    EXPECT_EQ(i.vidmem_used[0], 64 * K) << "charged once";
    EXPECT_EQ(i.vidmem_cached[0], 0u);
    // Another owner's allocation of that size takes the chunk: the charge goes.
    ASSERT_EQ(uvm_mem_free(mgr, y), UVM_OK);
    uvm_mem_t *plain = nullptr;
    ASSERT_EQ(alloc_in_client(mgr, nullptr, UVM_BACKING_VIDMEM, 64 * K, 0, &plain), UVM_OK);
    i = client_info(mgr, a);
    EXPECT_EQ(i.vidmem_used[0], 0u);
    EXPECT_EQ(i.vidmem_cached[0], 0u);
    ASSERT_EQ(uvm_mem_free(mgr, plain), UVM_OK);
    // A trim gives it back.
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 64 * K, 0, &x), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, x), UVM_OK);
    EXPECT_EQ(client_info(mgr, a).vidmem_cached[0], 64 * K);
    // The snapshot and the metrics say so too, and count it out of what is live.
    const std::string snapshot = fetch([&](char *b, size_t n, size_t *need) { return uvm_manager_snapshot(mgr, b, n, need); });
    EXPECT_NE(snapshot.find("\"name\":\"trainer\",\"objects\":0"), std::string::npos) << snapshot;
    EXPECT_NE(snapshot.find("\"used\":65536,\"cached\":65536"), std::string::npos) << snapshot;
    const std::string metrics = fetch([&](char *b, size_t n, size_t *need) { return uvm_manager_metrics(mgr, b, n, need); });
    EXPECT_NE(metrics.find("uvm_client_vidmem_bytes{client=\"trainer\",gpu=\"0\",state=\"cached\"} 65536"),
              std::string::npos);
    EXPECT_NE(metrics.find("uvm_client_vidmem_bytes{client=\"trainer\",gpu=\"0\",state=\"pinned\"} 0"),
              std::string::npos);
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
    i = client_info(mgr, a);
    EXPECT_EQ(i.vidmem_used[0], 0u);
    EXPECT_EQ(i.vidmem_cached[0], 0u);
    // So does the destroy, which a parked object does not keep busy; the
    // dead handle then takes nothing.
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 64 * K, 0, &x), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, x), UVM_OK);
    ASSERT_EQ(uvm_client_destroy(mgr, a), UVM_OK);
    EXPECT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 64 * K, 0, &x), UVM_ERR_INVALID_HANDLE);
    uvm_gpu_stats_t s;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &s), UVM_OK);
    EXPECT_EQ(s.vidmem_objects, 0u);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// What a client's parked objects hold never stands in its way: an
// allocation that would not fit its budget beside them drops them before
// anything is evicted; and a budget set below its use lets no allocation
// through, parked or not.
TEST(Clients, ParkedObjectsGiveWayToTheBudget) {
    uvm_manager_t *mgr = small_sim(1, 256 * M);
    uvm_client_t *a = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "trainer", &a), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, a, 0, 2 * M), UVM_OK);
    std::vector<uvm_mem_t *> small(16, nullptr);
    for (uvm_mem_t *&m : small)
        ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 64 * K, 0, &m), UVM_OK);
    for (uvm_mem_t *m : small)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    uvm_client_info_t i = client_info(mgr, a);
    ASSERT_GT(i.vidmem_cached[0], 0u);
    EXPECT_EQ(i.vidmem_used[0], i.vidmem_cached[0]);
    // 1.5 MiB more fits the budget only without the parked ones.
    uvm_mem_t *big = nullptr;
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 1536 * K, 0, &big), UVM_OK);
    i = client_info(mgr, a);
    EXPECT_EQ(i.vidmem_used[0], 1536 * K);
    EXPECT_EQ(i.vidmem_cached[0], 0u);
    ASSERT_EQ(uvm_mem_free(mgr, big), UVM_OK);
    // Two live, one parked; then a budget below the use.
    uvm_mem_t *x = nullptr, *y = nullptr, *z = nullptr;
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 64 * K, 0, &x), UVM_OK);
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 64 * K, 0, &y), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, y), UVM_OK);
    ASSERT_EQ(client_info(mgr, a).vidmem_used[0], 128 * K);
    ASSERT_EQ(uvm_client_set_budget(mgr, a, 0, 64 * K), UVM_OK);
    EXPECT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 64 * K, 0, &z), UVM_ERR_OUT_OF_MEMORY);
    i = client_info(mgr, a);
    EXPECT_EQ(i.vidmem_used[0], 64 * K) << "the live object only";
    EXPECT_EQ(i.objects, 1u);
    EXPECT_LE(i.vidmem_used[0], i.vidmem_budget[0]);
    ASSERT_EQ(uvm_mem_free(mgr, x), UVM_OK);
    ASSERT_EQ(uvm_client_destroy(mgr, a), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A usage with watermarks is watched: its objects are never parked, and
// setting the marks drops those parked before.
TEST(Clients, AWatchedUsageFallsAtTheFree) {
    uvm_manager_t *mgr = small_sim(1, 256 * M);
    uvm_client_t *a = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "trainer", &a), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, a, 0, 8 * M), UVM_OK);
    uvm_mem_t *x = nullptr;
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 64 * K, 0, &x), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, x), UVM_OK);
    ASSERT_EQ(client_info(mgr, a).vidmem_cached[0], 64 * K);
    const uint32_t mark = 50;
    ASSERT_EQ(uvm_pressure_watermarks(mgr, a, 0, &mark, 1), UVM_OK);
    uvm_client_info_t i = client_info(mgr, a);
    EXPECT_EQ(i.vidmem_used[0], 0u);
    EXPECT_EQ(i.vidmem_cached[0], 0u);
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 64 * K, 0, &x), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, x), UVM_OK);
    i = client_info(mgr, a);
    EXPECT_EQ(i.vidmem_used[0], 0u);
    EXPECT_EQ(i.vidmem_cached[0], 0u);
    ASSERT_EQ(uvm_client_destroy(mgr, a), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A request that even evicting every object of the client's that could go
// would not bring within its budget fails at once: nothing of its moves
// (uvm_pressure.h). Counted by what can go: an object mapped on a peer is
// evictable but never evicted, so it frees nothing.
TEST(Clients, ARequestNoEvictionCouldBringWithinTheBudgetMovesNothing) {
    uvm_manager_t *mgr = small_sim(2, 256 * M);
    uvm_client_t *a = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "a", &a), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, a, 0, 20 * M), UVM_OK);
    uvm_mem_t *pinned = nullptr, *e1 = nullptr, *e2 = nullptr, *out = nullptr;
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 4 * M, 0, &pinned), UVM_OK);
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 4 * M, UVM_MEM_EVICTABLE, &e1), UVM_OK);
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 4 * M, UVM_MEM_EVICTABLE, &e2), UVM_OK);
    auto evictions = [&] {
        uint64_t n = 0;
        for (uvm_mem_t *m : {e1, e2}) {
            uvm_residency_t r;
            EXPECT_EQ(uvm_mem_residency(mgr, m, &r), UVM_OK);
            n += r.evictions;
        }
        return n;
    };
    const uvm_client_info_t before = client_info(mgr, a);
    ASSERT_EQ(before.vidmem_used[0], 12 * M);
    // 4 MiB pinned + 24 MiB > 20 MiB, whatever is evicted.
    EXPECT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 24 * M, 0, &out), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(out, nullptr);
    EXPECT_EQ(evictions(), 0u) << "evicted for a request that could never fit the budget";
    uvm_client_info_t now = client_info(mgr, a);
    EXPECT_EQ(now.vidmem_used[0], before.vidmem_used[0]);
    EXPECT_EQ(now.vidmem_evictable[0], before.vidmem_evictable[0]);
    // An evictable object mapped on a peer cannot go: 4 + 4 + 16 > 20.
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, e1, 1), UVM_OK);
    EXPECT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 16 * M, 0, &out), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(evictions(), 0u) << "evicted what could go though the rest could not";
    // What eviction can bring within the budget, it does: 4 + 4 + 12 = 20.
    ASSERT_EQ(alloc_in_client(mgr, a, UVM_BACKING_VIDMEM, 12 * M, 0, &out), UVM_OK);
    EXPECT_EQ(evictions(), 1u);
    uvm_residency_t r;
    ASSERT_EQ(uvm_mem_residency(mgr, e2, &r), UVM_OK);
    EXPECT_EQ(r.resident, 0);
    EXPECT_EQ(client_info(mgr, a).vidmem_used[0], 20 * M);
    // A restore is held to the same rule: e2 back would need e1 out, which cannot go.
    EXPECT_EQ(uvm_mem_make_resident(mgr, e2), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(evictions(), 1u);
    for (uvm_mem_t *m : {pinned, e1, e2, out})
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    ASSERT_EQ(uvm_client_destroy(mgr, a), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
