// Clients and budgets (pressure/client.h): usage never over a budget, not even
// under eight threads; a client over its budget evicts its own evictable
// objects first; reports and metrics name the clients.
#include <gtest/gtest.h>

#include <poll.h>

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

uvm_client_info_t client_info(uvm_manager_t *mgr, uvm_client_t *c) {
    uvm_client_info_t i;
    std::memset(&i, 0, sizeof(i));
    EXPECT_EQ(uvm_client_info(mgr, c, &i), UVM_OK);
    return i;
}

uvm_status_t alloc_for(uvm_manager_t *mgr, uvm_client_t *c, uvm_backing_t b, uint64_t size, uint32_t flags,
                       uvm_mem_t **out, uint32_t gpu = 0) {
    uvm_mem_alloc_params_t p = alloc_params(b, size, gpu, 0, flags);
    p.client = c;
    return uvm_mem_alloc(mgr, &p, out);
}

}  // namespace

TEST(Clients, BudgetsHoldAndUsageIsExact) {
    uvm_manager_t *mgr = small_sim(2, 256 * M);
    uvm_client_t *a = nullptr, *b = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "trainer", &a), UVM_OK);
    ASSERT_EQ(uvm_client_create(mgr, "cache", &b), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, a, 0, 8 * M), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, a, UVM_CLIENT_SYSMEM, 64 * K), UVM_OK);
    uvm_mem_t *x = nullptr, *y = nullptr, *z = nullptr, *s = nullptr, *t = nullptr, *other = nullptr;
    ASSERT_EQ(alloc_for(mgr, a, UVM_BACKING_VIDMEM, 6 * M, 0, &x), UVM_OK);
    EXPECT_EQ(alloc_for(mgr, a, UVM_BACKING_VIDMEM, 4 * M, 0, &y), UVM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(alloc_for(mgr, a, UVM_BACKING_VIDMEM, 2 * M, 0, &y), UVM_OK);
    ASSERT_EQ(alloc_for(mgr, a, UVM_BACKING_VIDMEM, 4 * M, 0, &other, 1), UVM_OK) << "GPU 1 has no budget";
    ASSERT_EQ(alloc_for(mgr, a, UVM_BACKING_SYSMEM, 64 * K, 0, &s), UVM_OK);
    EXPECT_EQ(alloc_for(mgr, a, UVM_BACKING_SYSMEM, 4 * K, 0, &t), UVM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(alloc_for(mgr, b, UVM_BACKING_VIDMEM, 16 * M, 0, &z), UVM_OK) << "another client's budget";
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
    EXPECT_EQ(alloc_for(mgr, a, UVM_BACKING_VIDMEM, 4 * K, 0, &x), UVM_ERR_INVALID_HANDLE);
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
        ASSERT_EQ(alloc_for(mgr, b, UVM_BACKING_VIDMEM, 2 * M, UVM_MEM_EVICTABLE, &m), UVM_OK);
        theirs.push_back(m);
    }
    for (int i = 0; i < 8; ++i) {  // twice its budget, in evictable objects
        uvm_mem_t *m = nullptr;
        ASSERT_EQ(alloc_for(mgr, a, UVM_BACKING_VIDMEM, 2 * M, UVM_MEM_EVICTABLE, &m), UVM_OK) << i;
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
    EXPECT_EQ(alloc_for(mgr, a, UVM_BACKING_VIDMEM, 4 * M, 0, &pinned), UVM_ERR_OUT_OF_MEMORY);
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
                const uvm_status_t s = alloc_for(mgr, c, UVM_BACKING_VIDMEM, size, 0, &m);
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
    EXPECT_EQ(alloc_for(mgr, foreign, UVM_BACKING_VIDMEM, 4 * K, 0, &m), UVM_ERR_INVALID_HANDLE);
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

namespace {

std::vector<uvm_pressure_event_t> take_events(uvm_manager_t *mgr) {
    std::vector<uvm_pressure_event_t> out(64);
    uint32_t n = 0;
    EXPECT_EQ(uvm_pressure_events(mgr, out.data(), static_cast<uint32_t>(out.size()), &n), UVM_OK);
    out.resize(n);
    return out;
}

bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

}  // namespace

// A GPU's held memory crossing 50% and 75% queues one event per crossing,
// up and down (alternating, each true of the usage it carries), and the
// eventfd is readable exactly while events wait. (Held memory may dip while
// the GPU fills: the PMM gives scattered free roots back before growing a
// run; each such crossing is an event too.)
TEST(Pressure, GpuWatermarksFireOncePerCrossing) {
    uvm_manager_t *mgr = small_sim(2, 32 * M);
    int fd = -1;
    ASSERT_EQ(uvm_pressure_fd(mgr, &fd), UVM_OK);
    const uint32_t marks[] = {75, 50};
    ASSERT_EQ(uvm_pressure_watermarks(mgr, nullptr, 0, marks, 2), UVM_OK);
    std::map<uint32_t, bool> above{{50, false}, {75, false}};
    size_t events = 0;
    auto check = [&] {
        for (const auto &e : take_events(mgr)) {
            events++;
            EXPECT_EQ(e.client, nullptr);
            EXPECT_EQ(e.limit, 32 * M);
            ASSERT_TRUE(above.count(e.percent)) << e.percent;
            EXPECT_NE(above[e.percent], e.rising != 0) << "two crossings the same way at " << e.percent;
            above[e.percent] = e.rising != 0;
            EXPECT_EQ(e.used * 100 >= e.percent * 32 * M, e.rising != 0) << "an event untrue of its usage";
        }
        EXPECT_FALSE(readable(fd));
    };
    std::vector<uvm_mem_t *> objs;
    for (int i = 0; i < 16; ++i) {
        uvm_mem_t *m = nullptr;
        ASSERT_EQ(alloc_for(mgr, nullptr, UVM_BACKING_VIDMEM, 2 * M, 0, &m), UVM_OK);
        objs.push_back(m);
        check();
    }
    EXPECT_TRUE(above[50] && above[75]) << "a full GPU is above both marks";
    EXPECT_GE(events, 2u);
    for (uvm_mem_t *m : objs)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);  // held memory goes back
    EXPECT_TRUE(readable(fd));
    check();
    EXPECT_FALSE(above[50] || above[75]) << "an empty GPU is below both";
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A client's use of its budget: one event up at 85%, one down below it.
TEST(Pressure, ClientWatermarksOnTheBudget) {
    uvm_manager_t *mgr = small_sim(2, 256 * M);
    uvm_client_t *c = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "job", &c), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, c, 0, 8 * M), UVM_OK);
    const uint32_t mark = 85;
    ASSERT_EQ(uvm_pressure_watermarks(mgr, c, 0, &mark, 1), UVM_OK);
    std::vector<uvm_mem_t *> objs;
    for (int i = 0; i < 4; ++i) {
        uvm_mem_t *m = nullptr;
        ASSERT_EQ(alloc_for(mgr, c, UVM_BACKING_VIDMEM, 2 * M, 0, &m), UVM_OK);
        objs.push_back(m);
        const auto ev = take_events(mgr);
        ASSERT_EQ(ev.size(), i == 3 ? 1u : 0u) << i;
        if (i == 3) {
            EXPECT_EQ(ev[0].client, c);
            EXPECT_EQ(ev[0].rising, 1);
            EXPECT_EQ(ev[0].used, 8 * M);
            EXPECT_EQ(ev[0].limit, 8 * M);
        }
    }
    ASSERT_EQ(uvm_mem_free(mgr, objs.back()), UVM_OK);
    objs.pop_back();
    auto ev = take_events(mgr);
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].rising, 0);
    ASSERT_EQ(uvm_mem_free(mgr, objs.back()), UVM_OK);
    objs.pop_back();
    EXPECT_TRUE(take_events(mgr).empty()) << "one event per crossing";
    for (uvm_mem_t *m : objs)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    ASSERT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Pressure, EveryBadWatermarkIsRefusedWithItsStatus) {
    uvm_manager_t *mgr = small_sim(2, 32 * M);
    const uint32_t zero = 0, big = 101, ok = 90;
    uint32_t many[17];
    for (uint32_t &p : many)
        p = 50;
    EXPECT_EQ(uvm_pressure_watermarks(mgr, nullptr, 0, &zero, 1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pressure_watermarks(mgr, nullptr, 0, &big, 1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pressure_watermarks(mgr, nullptr, 0, many, 17), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pressure_watermarks(mgr, nullptr, 0, nullptr, 1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pressure_watermarks(mgr, nullptr, 9, &ok, 1), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_pressure_watermarks(mgr, nullptr, UVM_CLIENT_SYSMEM, &ok, 1), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_pressure_watermarks(mgr, reinterpret_cast<uvm_client_t *>(uintptr_t(0x99)), 0, &ok, 1),
              UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_pressure_watermarks(mgr, nullptr, 0, nullptr, 0), UVM_OK);  // none
    uint32_t n = 0;
    EXPECT_EQ(uvm_pressure_events(mgr, nullptr, 4, &n), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pressure_events(mgr, nullptr, 0, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_pressure_fd(mgr, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
