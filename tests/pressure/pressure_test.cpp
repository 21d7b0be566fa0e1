// Pressure notices (pressure/pressure.h): a GPU's held memory and a client's
// usage against its budget crossing watermarks queue one event per crossing,
// the eventfd is readable while events wait, and bad watermarks are refused.
#include <gtest/gtest.h>

#include <poll.h>

#include <cstring>
#include <vector>

#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {
constexpr uint64_t M = 1024 * 1024;
}  // namespace

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
        ASSERT_EQ(alloc_in_client(mgr, nullptr, UVM_BACKING_VIDMEM, 2 * M, 0, &m), UVM_OK);
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
        ASSERT_EQ(alloc_in_client(mgr, c, UVM_BACKING_VIDMEM, 2 * M, 0, &m), UVM_OK);
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
