// The placement logic and the topology helpers, against configured
// topologies: no NUMA hardware needed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "topo/placement.h"
#include "topo/topology.h"

namespace {

using uvm::topo::GpuPlace;
using uvm::topo::HostPolicy;
using uvm::topo::NumaNode;
using uvm::topo::ResolvedPlacement;
using uvm::topo::Topology;

// A host with nodes 0 and 2 (ids need not be dense), and four simulated nodes on it.
Topology two_node_host() {
    Topology t;
    NumaNode a, b;
    a.id = a.host_node = 0;
    a.cpus = "0-7";
    a.memory_total = 1ull << 34;
    b.id = b.host_node = 2;
    b.cpus = "8-15";
    b.memory_total = 1ull << 34;
    t.nodes = {a, b};
    return t;
}

uvm_placement_t placement(uvm_placement_kind_t kind, uint32_t node = 0, uint64_t mask = 0, int strict = 0) {
    uvm_placement_t p{};
    p.kind = kind;
    p.node = node;
    p.node_mask = mask;
    p.strict = strict;
    return p;
}

TEST(Topology, ConfiguredNodesAreBackedRoundRobinByHostNodes) {
    const Topology t = uvm::topo::configured_topology(two_node_host(), 5);
    ASSERT_EQ(t.nodes.size(), 5u);
    const int32_t backing[] = {0, 2, 0, 2, 0};
    for (int i = 0; i < 5; i++) {
        EXPECT_EQ(t.nodes[i].id, i);
        EXPECT_EQ(t.nodes[i].host_node, backing[i]);
        EXPECT_EQ(t.nodes[i].cpus, backing[i] == 0 ? "0-7" : "8-15");
    }
    EXPECT_NE(t.node(4), nullptr);
    EXPECT_EQ(t.node(5), nullptr);
    EXPECT_EQ(t.node(-1), nullptr);
}

TEST(Topology, HostTopologyHasNodesInAscendingOrderWithCpus) {
    const Topology &t = uvm::topo::host_topology();
    ASSERT_FALSE(t.nodes.empty());
    for (size_t i = 0; i < t.nodes.size(); i++) {
        EXPECT_EQ(t.nodes[i].id, t.nodes[i].host_node);
        EXPECT_FALSE(t.nodes[i].cpus.empty() && t.nodes.size() == 1) << "a lone node holds every CPU";
        EXPECT_GT(t.nodes[i].memory_total, 0u);
        if (i)
            EXPECT_LT(t.nodes[i - 1].id, t.nodes[i].id);
    }
    EXPECT_EQ(&t, &uvm::topo::host_topology()) << "read once, then cached";
}

TEST(Topology, UnknownPciDeviceHasNoPlace) {
    const GpuPlace p = uvm::topo::locate_pci_device("ffff:ff:1f.7");
    EXPECT_EQ(p.numa_node, -1);
    EXPECT_TRUE(p.bridges.empty());
    EXPECT_EQ(uvm::topo::locate_pci_device("not a bus id").numa_node, -1);
}

TEST(Topology, PathsAreClassifiedAsNvidiaSmiDoes) {
    // Bridge ids: 1 and 2 are host bridges; 10 a switch's upstream port with
    // downstream ports 11 and 12; 20 a bridge above that switch.
    GpuPlace a, b, c, d, e, f;
    a.bridges = {11, 10, 1};
    b.bridges = {12, 10, 1};   // same switch as a
    c.bridges = {13, 20, 1};   // another path under host bridge 1
    d.bridges = {2};           // another host bridge
    e.bridges = {30, 11, 10, 1};  // one level deeper under a's switch
    for (GpuPlace *p : {&a, &b, &c, &d, &e})
        p->numa_node = 0;
    f.numa_node = 1;  // no PCI path known, another node
    EXPECT_EQ(uvm::topo::classify_path(a, b), UVM_GPU_PATH_PIX);
    EXPECT_EQ(uvm::topo::classify_path(a, e), UVM_GPU_PATH_PIX);   // shares downstream port 11
    EXPECT_EQ(uvm::topo::classify_path(b, e), UVM_GPU_PATH_PXB);   // meet at 10, two levels up from e
    EXPECT_EQ(uvm::topo::classify_path(a, c), UVM_GPU_PATH_PHB);
    EXPECT_EQ(uvm::topo::classify_path(a, d), UVM_GPU_PATH_NODE);
    EXPECT_EQ(uvm::topo::classify_path(a, f), UVM_GPU_PATH_SYS);
    GpuPlace unknown;
    EXPECT_EQ(uvm::topo::classify_path(a, unknown), UVM_GPU_PATH_UNKNOWN);
}

TEST(Placement, GpuLocalFollowsTheGpusNode) {
#ifndef UVM_HAVE_LIBNUMA
    GTEST_SKIP() << "built without libnuma: the default placement binds nothing (see the next test)";
#endif
    const Topology t = uvm::topo::configured_topology(two_node_host(), 4);
    ResolvedPlacement r;
    ASSERT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_GPU_LOCAL), 3, t, &r), UVM_OK);
    EXPECT_EQ(r.node, 3);
    EXPECT_EQ(r.node_mask, 1u << 3);
    EXPECT_EQ(r.policy.mode, HostPolicy::Mode::Preferred);
    EXPECT_EQ(r.policy.host_nodes, 1u << 2) << "node 3 is backed by host node 2";
    ASSERT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_GPU_LOCAL, 0, 0, 1), 2, t, &r), UVM_OK);
    EXPECT_EQ(r.policy.mode, HostPolicy::Mode::Bind);
    EXPECT_EQ(r.policy.host_nodes, 1u << 0);
    // A GPU whose node is unknown (or outside the topology) binds nothing.
    for (int32_t node : {-1, 9}) {
        ASSERT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_GPU_LOCAL), node, t, &r), UVM_OK);
        EXPECT_EQ(r.node, -1);
        EXPECT_EQ(r.node_mask, 0u);
        EXPECT_EQ(r.policy.mode, HostPolicy::Mode::Any);
    }
}

TEST(Placement, WithoutLibnumaTheDefaultBindsNothing) {
#ifdef UVM_HAVE_LIBNUMA
    GTEST_SKIP() << "built with libnuma: the default placement binds to the GPU's node";
#else
    ResolvedPlacement r;
    ASSERT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_GPU_LOCAL), 1, two_node_host(), &r), UVM_OK);
    EXPECT_EQ(r.policy.mode, HostPolicy::Mode::Any);
    EXPECT_EQ(r.node, -1);
    // An explicit node is still resolved, and applying it says NOT_SUPPORTED.
    ASSERT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_NODE, 2), 0, two_node_host(), &r), UVM_OK);
    char page[4096];
    EXPECT_EQ(uvm::topo::apply_policy(page, sizeof page, r.policy), UVM_ERR_NOT_SUPPORTED);
#endif
}

TEST(Placement, NodeInterleaveAndAny) {
    const Topology t = two_node_host();
    ResolvedPlacement r;
    ASSERT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_NODE, 2, 0, 1), 0, t, &r), UVM_OK);
    EXPECT_EQ(r.node, 2);
    EXPECT_EQ(r.policy.mode, HostPolicy::Mode::Bind);
    EXPECT_EQ(r.policy.host_nodes, 1u << 2);

    ASSERT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_INTERLEAVE), 0, t, &r), UVM_OK);
    EXPECT_EQ(r.node, -1);
    EXPECT_EQ(r.node_mask, (1u << 0) | (1u << 2)) << "mask 0 = every node";
    EXPECT_EQ(r.policy.mode, HostPolicy::Mode::Interleave);
    EXPECT_EQ(r.policy.host_nodes, (1u << 0) | (1u << 2));

    // Interleaving over simulated nodes 1 and 3 lands on the one host node backing both.
    const Topology sim = uvm::topo::configured_topology(t, 4);
    ASSERT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_INTERLEAVE, 0, 0b1010), 0, sim, &r), UVM_OK);
    EXPECT_EQ(r.node_mask, 0b1010u);
    EXPECT_EQ(r.policy.host_nodes, 1u << 2);

    ASSERT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_ANY), 0, t, &r), UVM_OK);
    EXPECT_EQ(r.node, -1);
    EXPECT_EQ(r.policy.mode, HostPolicy::Mode::Any);
}

TEST(Placement, UnknownNodesAndKindsAreRefused) {
    const Topology t = two_node_host();
    ResolvedPlacement r;
    r.node = 77;  // must stay untouched on failure
    EXPECT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_NODE, 1), 0, t, &r), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_NODE, 64), 0, t, &r), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_NODE, 0xFFFFFFFFu), 0, t, &r),
              UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_INTERLEAVE, 0, 0b10), 0, t, &r),
              UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm::topo::resolve_placement(placement(UVM_PLACEMENT_INTERLEAVE, 0, 1ull << 63), 0, t, &r),
              UVM_ERR_INVALID_ARGUMENT);
    uvm_placement_t bad = placement(UVM_PLACEMENT_ANY);
    const int raw = 99;
    std::memcpy(&bad.kind, &raw, sizeof raw);
    EXPECT_EQ(uvm::topo::resolve_placement(bad, 0, t, &r), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(r.node, 77);
}

TEST(Placement, ThpModesAreReadFromTheHost) {
    for (bool shmem : {false, true}) {
        const uvm_thp_mode_t m = uvm::topo::thp_mode(shmem);
        FILE *f = std::fopen(shmem ? "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
                                   : "/sys/kernel/mm/transparent_hugepage/enabled", "r");
        if (f) {
            std::fclose(f);
            EXPECT_NE(m, UVM_THP_UNKNOWN) << "the file exists: its bracketed mode must parse";
        }
    }
}

}  // namespace
