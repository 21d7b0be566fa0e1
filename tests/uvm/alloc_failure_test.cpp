// Host allocation failure inside the manager, after sqlite's malloc-failure
// tests: this program replaces the global operator new, and for every N along
// each operation the Nth allocation the calling thread makes fails
// (std::bad_alloc, what the library's containers and objects meet when the
// host is out of memory). The operation must return NO_HOST_MEMORY and leave
// the manager as it was, and succeed once nothing fails. Then the same with
// every allocation from the Nth on failing (host memory gone for good).
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>

#include "tests/uvm/operations.h"
#include "tests/uvm/snapshot.h"

namespace {

// The arming is per thread: gtest's own allocations on other threads, and
// this thread's outside the operation, never fail.
thread_local uint64_t t_fail_at = 0;  // 0 = not armed
thread_local uint64_t t_count = 0;
thread_local bool t_persistent = false;
thread_local bool t_fired = false;

void arm(uint64_t n, bool persistent) {
    t_count = 0;
    t_fired = false;
    t_persistent = persistent;
    t_fail_at = n;
}
void disarm() { t_fail_at = 0; }

bool should_fail() {
    if (t_fail_at == 0)
        return false;
    const uint64_t call = ++t_count;
    if (call == t_fail_at || (t_persistent && call > t_fail_at)) {
        t_fired = true;
        return true;
    }
    return false;
}

void *allocate(size_t size, size_t align) {
    if (should_fail())
        return nullptr;
    if (size == 0)
        size = 1;
    if (align <= alignof(std::max_align_t))
        return std::malloc(size);
    return std::aligned_alloc(align, (size + align - 1) / align * align);
}

}  // namespace

void *operator new(size_t size) {
    void *p = allocate(size, 0);
    if (!p)
        throw std::bad_alloc();
    return p;
}
void *operator new[](size_t size) { return operator new(size); }
void *operator new(size_t size, const std::nothrow_t &) noexcept { return allocate(size, 0); }
void *operator new[](size_t size, const std::nothrow_t &) noexcept { return allocate(size, 0); }
void *operator new(size_t size, std::align_val_t align) {
    void *p = allocate(size, static_cast<size_t>(align));
    if (!p)
        throw std::bad_alloc();
    return p;
}
void *operator new[](size_t size, std::align_val_t align) { return operator new(size, align); }
// GCC sees free() of what operator new returned; here both are malloc's.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, size_t) noexcept { std::free(p); }
void operator delete[](void *p, size_t) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, size_t, std::align_val_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

using namespace uvm_test;

namespace {

// Operations whose work is mostly the manager's own bookkeeping, beside the
// backend operations of the shared catalog.
// No gtest assertion runs while allocations fail (a failed one allocates its
// message): an operation only returns its status.
std::vector<Operation> bookkeeping_operations() {
    auto nothing = [](World &) {};
    return {
        {"client_create", false, nothing, [](World &w) { return uvm_client_create(w.mgr, "tenant", &w.client); }},
        {"alloc_in_client_with_budget", false,
         [](World &w) {
             ASSERT_EQ(uvm_client_create(w.mgr, "tenant", &w.client), UVM_OK);
             ASSERT_EQ(uvm_client_set_budget(w.mgr, w.client, 0, 64 * M), UVM_OK);
         },
         [](World &w) {
             uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 3 * M);
             a.client = w.client;
             return uvm_mem_alloc(w.mgr, &a, &w.made);
         }},
        {"pressure_watermarks", false, nothing,
         [](World &w) {
             const uint32_t percents[] = {50, 85, 95};
             return uvm_pressure_watermarks(w.mgr, nullptr, 0, percents, 3);
         }},
        {"trace_start", false, nothing, [](World &w) { return uvm_trace_start(w.mgr, 1 << 20); }},
        {"stream_create", false, nothing, [](World &w) { return uvm_stream_create(w.mgr, 0, nullptr, &w.stream); }},
        {"memset_async", false, [](World &w) { ASSERT_EQ(uvm_stream_create(w.mgr, 0, nullptr, &w.stream), UVM_OK); },
         [](World &w) {
             uvm_mem_span_t d{w.vid, 0, UVM_VIEW_PHYSICAL};
             const uvm_status_t s = uvm_mem_memset_async(w.mgr, 0, &d, 7, 1 * M, w.stream);
             const uvm_status_t synced = uvm_stream_synchronize(w.mgr, w.stream);
             return s != UVM_OK ? s : synced;
         }},
        {"evict", false,
         [](World &w) {
             uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 4 * M, 0, 0, UVM_MEM_EVICTABLE);
             ASSERT_EQ(uvm_mem_alloc(w.mgr, &a, &w.made), UVM_OK);
         },
         [](World &w) { return uvm_mem_evict(w.mgr, w.made); }},
        {"make_resident", false,
         [](World &w) {
             uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 4 * M, 0, 0, UVM_MEM_EVICTABLE);
             ASSERT_EQ(uvm_mem_alloc(w.mgr, &a, &w.made), UVM_OK);
             ASSERT_EQ(uvm_mem_evict(w.mgr, w.made), UVM_OK);
         },
         [](World &w) { return uvm_mem_make_resident(w.mgr, w.made); }},
        {"alloc_evictable", false, nothing,
         [](World &w) {
             uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 4 * M, 0, 0, UVM_MEM_EVICTABLE);
             return uvm_mem_alloc(w.mgr, &a, &w.made);
         }},
    };
}

struct Case {
    Operation op;
    bool persistent;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.op.name << (c.persistent ? "/persistent" : ""); }

std::vector<Case> cases() {
    std::vector<Case> out;
    std::vector<Operation> ops = operations();
    for (Operation &op : bookkeeping_operations())
        ops.push_back(op);
    for (const Operation &op : ops) {
        out.push_back({op, false});
        out.push_back({op, true});
    }
    return out;
}

class AllocFailure : public ::testing::TestWithParam<Case> {};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Operations, AllocFailure, ::testing::ValuesIn(cases()), [](const auto &info) {
    return std::string(info.param.op.name) + (info.param.persistent ? "_from_then_on" : "");
});

TEST_P(AllocFailure, EveryFailedAllocationLeavesTheManagerAsItWas) {
    const Operation &op = GetParam().op;
    uint64_t failures_seen = 0;
    for (uint64_t n = 1; n <= 2000; ++n) {
        World w = make_world(op.coherent);
        op.prepare(w);
        const Snapshot before = Snapshot::take(w.mgr, {w.sys, w.vid, w.made});
        arm(n, GetParam().persistent);
        uvm_status_t status = UVM_OK;
        bool escaped = false;
        try {
            status = op.run(w);
        } catch (...) {
            escaped = true;
        }
        disarm();
        EXPECT_FALSE(escaped) << op.name << ": an exception left the C API at allocation " << n;
        if (t_fired) {
            failures_seen++;
            EXPECT_EQ(status, UVM_ERR_NO_HOST_MEMORY) << op.name << ": allocation " << n;
            const Snapshot after = Snapshot::take(w.mgr, {w.sys, w.vid, w.made});
            EXPECT_TRUE(after == before) << op.name << ": failed allocation " << n << " left a trace: "
                                         << before.differences(after);
            const uvm_status_t again = op.run(w);
            EXPECT_EQ(again, UVM_OK) << op.name << ": retry after failing allocation " << n << " gave "
                                     << uvm_status_string(again);
        } else {
            EXPECT_EQ(status, UVM_OK) << op.name;
        }
        destroy_world(w);
        if (!t_fired || ::testing::Test::HasFailure())
            break;
    }
    RecordProperty("failed", static_cast<int>(failures_seen));
}

// The replacement allocator fails what it is told to, and only then.
TEST(AllocFailureHarness, FailsTheNthAllocationOfThisThreadOnly) {
    arm(2, false);
    void *first = operator new(16);
    EXPECT_THROW(static_cast<void>(operator new(16)), std::bad_alloc);
    void *third = operator new(16);
    disarm();
    EXPECT_TRUE(t_fired);
    operator delete(first);
    operator delete(third);
    arm(1, true);
    EXPECT_THROW(static_cast<void>(operator new(8)), std::bad_alloc);
    EXPECT_THROW(static_cast<void>(operator new(8)), std::bad_alloc);
    disarm();
    void *after = operator new(8);
    EXPECT_NE(after, nullptr);
    operator delete(after);
}
