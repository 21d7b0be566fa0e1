// A backend that fails its Nth call, for every N along each operation: the
// operation returns the failure and the manager is as it was (no fd left
// open either: export and import pass fds around), and the same operation
// then succeeds once nothing fails. And the failing backend forwards every
// capability of the sim's, so that none of this skips a capability's calls.
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "backend/fault_injection.h"
#include "sim/sim_backend.h"
#include "tests/backend/forwarding.h"
#include "tests/uvm/operations.h"
#include "tests/uvm/snapshot.h"
#include "api/handles.h"

using namespace uvm_test;

namespace {

class FaultInjection : public ::testing::TestWithParam<Operation> {};

// File descriptors this process holds now.
size_t open_fds() {
    size_t n = 0;
    if (DIR *d = opendir("/proc/self/fd")) {
        while (readdir(d))
            n++;
        closedir(d);
    }
    return n;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Operations, FaultInjection, ::testing::ValuesIn(operations()),
                         [](const auto &info) { return std::string(info.param.name); });

TEST_P(FaultInjection, EveryFailurePointLeavesTheManagerAsItWas) {
    const Operation &op = GetParam();
    uint64_t failures_seen = 0;
    for (uint64_t n = 1;; ++n) {
        World w = make_world(op.coherent);
        op.prepare(w);
        const Snapshot before = Snapshot::take(w.mgr, {w.sys, w.vid, w.shared});
        const size_t fds_before = open_fds();
        w.faults->fail_call(n);
        const uvm_status_t status = op.run(w);
        const bool fired = w.faults->fired();
        w.faults->fail_call(0);
        if (fired) {
            failures_seen++;
            EXPECT_EQ(status, UVM_ERR_BACKEND) << op.name << ": call " << n;
            const Snapshot after = Snapshot::take(w.mgr, {w.sys, w.vid, w.shared});
            EXPECT_TRUE(after == before) << op.name << ": call " << n << " left a trace: " << before.differences(after);
            EXPECT_EQ(open_fds(), fds_before) << op.name << ": call " << n << " left an fd open";
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

// The adaptor over the sim has the sim's capabilities (streams, sharing and
// offload), and fails and counts every call of them.
TEST(FaultInjection, ForwardsEveryCapability) {
    uvm_sim_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.gpu_count = 1;
    p.vidmem_size = 64 * M;
    std::unique_ptr<uvm::backend::Backend> sim;
    ASSERT_EQ(uvm::sim::create_sim_backend(p, &sim), UVM_OK);
    uvm::backend::Backend *inner = sim.get();
    EXPECT_NE(inner->streams(), nullptr);
    EXPECT_NE(inner->sharing(), nullptr);
    EXPECT_NE(inner->offload(), nullptr);
    uvm::backend::FaultInjectingBackend faults(std::move(sim));
    expect_forwards_every_capability(*inner, faults);
}
