// A backend that fails its Nth call, for every N along each operation: the
// operation returns the failure and the manager is as it was, and the same
// operation then succeeds once nothing fails.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "backend/fault_injection.h"
#include "sim/sim_backend.h"
#include "tests/uvm/operations.h"
#include "tests/uvm/snapshot.h"
#include "api/handles.h"

using namespace uvm_test;

namespace {

class FaultInjection : public ::testing::TestWithParam<Operation> {};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Operations, FaultInjection, ::testing::ValuesIn(operations()),
                         [](const auto &info) { return std::string(info.param.name); });

TEST_P(FaultInjection, EveryFailurePointLeavesTheManagerAsItWas) {
    const Operation &op = GetParam();
    uint64_t failures_seen = 0;
    for (uint64_t n = 1;; ++n) {
        World w = make_world(op.coherent);
        op.prepare(w);
        const Snapshot before = Snapshot::take(w.mgr, {w.sys, w.vid});
        w.faults->fail_call(n);
        const uvm_status_t status = op.run(w);
        const bool fired = w.faults->fired();
        w.faults->fail_call(0);
        if (fired) {
            failures_seen++;
            EXPECT_EQ(status, UVM_ERR_BACKEND) << op.name << ": call " << n;
            EXPECT_TRUE(Snapshot::take(w.mgr, {w.sys, w.vid}) == before) << op.name << ": call " << n << " left a trace";
            EXPECT_EQ(op.run(w), UVM_OK) << op.name << ": retry after failing call " << n;
        } else {
            EXPECT_EQ(status, UVM_OK) << op.name;
        }
        destroy_world(w);
        if (!fired || n > 64)
            break;
    }
    if (op.no_backend_call)
        EXPECT_EQ(failures_seen, 0u) << op.name << " now makes a backend call: let the test fail it";
    else
        EXPECT_GE(failures_seen, 1u) << op.name << " made no backend call to fail";
}
