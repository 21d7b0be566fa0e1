// Sysmem in the host: huge pages for 2M chunks, NUMA placement, private and
// shareable pages. Where pages landed is checked against the kernel's own
// answers (get_mempolicy, move_pages), not only the library's report.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "tests/uvm/fixtures.h"
#include "topo/topology.h"

#ifdef UVM_HAVE_LIBNUMA
#include <numaif.h>
#endif

namespace {

using uvm_test::alloc_params;
using uvm_test::sim_params;
constexpr uint64_t K = 1024, M = K * K;

class HostMemoryTest : public ::testing::Test {
protected:
    void make(uvm_manager_params_t p) {
        ASSERT_EQ(uvm_manager_create(&p, &mgr_), UVM_OK);
        ASSERT_EQ(uvm_host_info(mgr_, &host_), UVM_OK);
    }
    void SetUp() override { make(sim_params(2, 1ull << 30)); }
    void TearDown() override {
        if (mgr_)
            EXPECT_EQ(uvm_manager_destroy(mgr_), UVM_OK);
    }
    uvm_mem_t *alloc(const uvm_mem_alloc_params_t &p) {
        uvm_mem_t *mem = nullptr;
        EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &mem), UVM_OK);
        return mem;
    }
    uvm_mem_info_t info(uvm_mem_t *mem) {
        uvm_mem_info_t i;
        EXPECT_EQ(uvm_mem_info(mgr_, mem, &i), UVM_OK);
        return i;
    }
    uvm_host_pages_t pages(uvm_mem_t *mem) {
        uvm_host_pages_t p;
        EXPECT_EQ(uvm_mem_host_pages(mgr_, mem, &p), UVM_OK);
        return p;
    }
    uint8_t *kernel(uvm_mem_t *mem) {
        EXPECT_EQ(uvm_mem_map_cpu_kernel(mgr_, mem), UVM_OK);
        void *p = nullptr;
        EXPECT_EQ(uvm_mem_cpu_kernel_address(mgr_, mem, 0, &p), UVM_OK);
        return static_cast<uint8_t *>(p);
    }
    // The kernel's policy on the page at `address`: mode and node mask.
    static void policy_at(void *address, int *mode, uint64_t *mask) {
#ifdef UVM_HAVE_LIBNUMA
        unsigned long m[UVM_MAX_NUMA_NODES / 64 + 1] = {};
        ASSERT_EQ(get_mempolicy(mode, m, UVM_MAX_NUMA_NODES + 1, address, MPOL_F_ADDR), 0);
        *mask = m[0];
#else
        (void)address, (void)mode, (void)mask;
#endif
    }
    static int node_of_page(void *address) {
#ifdef UVM_HAVE_LIBNUMA
        int node = -1;
        EXPECT_EQ(get_mempolicy(&node, nullptr, 0, address, MPOL_F_NODE | MPOL_F_ADDR), 0);
        return node;
#else
        (void)address;
        return -1;
#endif
    }

    uvm_manager_t *mgr_ = nullptr;
    uvm_host_info_t host_{};
};

TEST_F(HostMemoryTest, TwoMegChunksAreOnHugePagesWhereTheHostAllowsThem) {
    uvm_mem_t *big = alloc(alloc_params(UVM_BACKING_SYSMEM, 16 * M));
    const uvm_mem_info_t bi = info(big);
    ASSERT_EQ(bi.chunk_size, UVM_PAGE_SIZE_2M);
    uint8_t *p = kernel(big);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (2 * M), 0u) << "2M chunks need 2 MiB-aligned mappings";
    const uvm_host_pages_t bp = pages(big);
    EXPECT_EQ(bp.resident_bytes, bi.alloc_size) << "allocated up front";
    if (host_.thp == UVM_THP_NEVER || host_.thp == UVM_THP_UNKNOWN) {
        EXPECT_EQ(bp.huge_bytes, 0u) << "the fallback: base pages";
    } else {
        // Huge pages can be short when memory is fragmented; on a machine
        // with free memory every 2 MiB of a fresh object is one.
        EXPECT_EQ(bp.huge_bytes, bi.alloc_size);
    }
    // The pages hold data like any others.
    for (uint64_t i = 0; i < bi.alloc_size; i += 4 * K)
        p[i] = static_cast<uint8_t>(i >> 12);
    for (uint64_t i = 0; i < bi.alloc_size; i += 4 * K)
        ASSERT_EQ(p[i], static_cast<uint8_t>(i >> 12));

    // Forced 4K chunks stay on base pages, whatever THP says.
    uvm_mem_t *small = alloc(alloc_params(UVM_BACKING_SYSMEM, 16 * M, 0, UVM_PAGE_SIZE_4K));
    const uvm_host_pages_t sp = pages(small);
    EXPECT_EQ(info(small).chunk_size, UVM_PAGE_SIZE_4K);
    EXPECT_EQ(sp.resident_bytes, 16 * M);
    EXPECT_EQ(sp.huge_bytes, 0u);
    EXPECT_EQ(uvm_mem_free(mgr_, big), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr_, small), UVM_OK);
}

TEST_F(HostMemoryTest, ShareableSysmemIsTheOnlyKindWithAUserMapping) {
    uvm_mem_t *priv = alloc(alloc_params(UVM_BACKING_SYSMEM, 64 * K));
    uvm_mem_t *shared = alloc(alloc_params(UVM_BACKING_SYSMEM, 64 * K, 0, 0, UVM_MEM_USER_MAPPABLE));
    void *where = uvm_test::unused_range(64 * K, 64 * K);
    EXPECT_EQ(uvm_mem_map_cpu_user(mgr_, priv, where), UVM_ERR_NOT_SUPPORTED);
    const uvm_mem_info_t pi = info(priv);
    EXPECT_EQ(pi.cpu_user_mapped, 0);
    EXPECT_EQ(pi.user_address, 0u) << "the refused call claimed no address";
    EXPECT_EQ(pi.flags, 0u);
    ASSERT_EQ(uvm_mem_map_cpu_user(mgr_, shared, where), UVM_OK) << "the address is still free";
    EXPECT_EQ(info(shared).flags, UVM_MEM_USER_MAPPABLE);
    uint8_t *k = kernel(shared);
    k[5] = 0xA5;
    EXPECT_EQ(static_cast<uint8_t *>(where)[5], 0xA5);
    // The private object works in every other way.
    uint8_t *pk = kernel(priv);
    pk[0] = 1;
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, priv, 0), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr_, priv), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr_, shared), UVM_OK);
}

TEST_F(HostMemoryTest, DefaultPlacementIsLocalToTheObjectsGpu) {
#ifndef UVM_HAVE_LIBNUMA
    GTEST_SKIP() << "built without libnuma: NUMA placement is NOT_SUPPORTED";
#else
    for (uint32_t gpu = 0; gpu < 2; gpu++) {
        uvm_gpu_info_t gi;
        ASSERT_EQ(uvm_gpu_info(mgr_, gpu, &gi), UVM_OK);
        ASSERT_GE(gi.host_numa_id, 0) << "sim GPUs sit on a node of the host's topology";
        EXPECT_NE(gi.cpus[0], 0);
        for (uint64_t size : {12 * K, 4 * M}) {
            uvm_mem_t *mem = alloc(alloc_params(UVM_BACKING_SYSMEM, size, gpu));
            const uvm_mem_info_t mi = info(mem);
            EXPECT_EQ(mi.numa_node, gi.host_numa_id);
            EXPECT_EQ(mi.numa_node_mask, 1ull << gi.host_numa_id);
            uint8_t *p = kernel(mem);
            int mode = -1;
            uint64_t mask = 0;
            policy_at(p, &mode, &mask);
            EXPECT_EQ(mode, MPOL_PREFERRED) << "not strict by default";
            EXPECT_EQ(mask, 1ull << gi.host_numa_id);
            const uvm_host_pages_t hp = pages(mem);
            EXPECT_EQ(hp.node_bytes[gi.host_numa_id], mi.alloc_size) << "every page on the GPU's node";
            EXPECT_EQ(node_of_page(p + mi.alloc_size - 4 * K), gi.host_numa_id);
            EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
        }
    }
#endif
}

TEST_F(HostMemoryTest, StrictInterleavedAndUnboundPlacements) {
#ifndef UVM_HAVE_LIBNUMA
    GTEST_SKIP() << "built without libnuma: NUMA placement is NOT_SUPPORTED";
#else
    uvm_numa_node_info_t first;
    ASSERT_EQ(uvm_numa_node_info(mgr_, 0, &first), UVM_OK);
    uint64_t all = 0;
    for (uint32_t i = 0; i < host_.numa_node_count; i++) {
        uvm_numa_node_info_t n;
        ASSERT_EQ(uvm_numa_node_info(mgr_, i, &n), UVM_OK);
        all |= 1ull << n.id;
    }
    struct Case {
        uvm_placement_t placement;
        int mode;
        uint64_t mask;
        int32_t node;
    } cases[] = {
        {{UVM_PLACEMENT_NODE, static_cast<uint32_t>(first.id), 0, 1}, MPOL_BIND, 1ull << first.id, first.id},
        {{UVM_PLACEMENT_NODE, static_cast<uint32_t>(first.id), 0, 0}, MPOL_PREFERRED, 1ull << first.id, first.id},
        {{UVM_PLACEMENT_INTERLEAVE, 0, 0, 0}, MPOL_INTERLEAVE, all, -1},
        {{UVM_PLACEMENT_ANY, 0, 0, 0}, MPOL_DEFAULT, 0, -1},
    };
    for (const Case &c : cases) {
        uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, 6 * M);
        p.placement = c.placement;
        uvm_mem_t *mem = alloc(p);
        const uvm_mem_info_t mi = info(mem);
        EXPECT_EQ(mi.numa_node, c.node);
        EXPECT_EQ(mi.numa_node_mask, c.mask);
        int mode = -1;
        uint64_t mask = 0;
        policy_at(kernel(mem), &mode, &mask);
        EXPECT_EQ(mode, c.mode) << "placement kind " << c.placement.kind;
        if (c.mode != MPOL_DEFAULT)
            EXPECT_EQ(mask, c.mask);
        uint64_t placed = 0;
        const uvm_host_pages_t hp = pages(mem);
        for (int n = 0; n < UVM_MAX_NUMA_NODES; n++)
            placed += hp.node_bytes[n];
        EXPECT_EQ(placed, mi.alloc_size) << "every page is on some node";
        EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    }
#endif
}

TEST_F(HostMemoryTest, PagesLandOnEachNodeOfAMultiNodeHost) {
#ifndef UVM_HAVE_LIBNUMA
    GTEST_SKIP() << "built without libnuma: NUMA placement is NOT_SUPPORTED";
#else
    if (host_.numa_node_count < 2)
        GTEST_SKIP() << "this host has " << host_.numa_node_count
                     << " NUMA node: placement across nodes needs two (the logic is tested on configured topologies)";
    for (uint32_t i = 0; i < host_.numa_node_count; i++) {
        uvm_numa_node_info_t n;
        ASSERT_EQ(uvm_numa_node_info(mgr_, i, &n), UVM_OK);
        if (n.memory_free < 64 * M)
            continue;  // a memory-less or full node
        uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, 8 * M);
        p.placement.kind = UVM_PLACEMENT_NODE;
        p.placement.node = static_cast<uint32_t>(n.id);
        p.placement.strict = 1;
        uvm_mem_t *mem = alloc(p);
        EXPECT_EQ(pages(mem).node_bytes[n.host_node], 8 * M) << "node " << n.id;
        EXPECT_EQ(node_of_page(kernel(mem)), n.host_node);
        EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    }
    // Interleaved over every node: pages on each of them.
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, 64 * M, 0, UVM_PAGE_SIZE_4K);
    p.placement.kind = UVM_PLACEMENT_INTERLEAVE;
    uvm_mem_t *mem = alloc(p);
    const uvm_host_pages_t hp = pages(mem);
    for (uint32_t i = 0; i < host_.numa_node_count; i++) {
        uvm_numa_node_info_t n;
        ASSERT_EQ(uvm_numa_node_info(mgr_, i, &n), UVM_OK);
        if (n.memory_total)
            EXPECT_GT(hp.node_bytes[n.host_node], 0u) << "node " << n.id;
    }
    EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
#endif
}

// A simulated machine of four nodes and four GPUs, one per node.
class ConfiguredTopologyTest : public HostMemoryTest {
protected:
    void SetUp() override {
        uvm_manager_params_t p = sim_params(4, 1ull << 30);
        p.sim.numa_nodes = 4;
        make(p);
    }
};

TEST_F(ConfiguredTopologyTest, GpusAndNodesAreAsConfigured) {
    EXPECT_EQ(host_.numa_node_count, 4u);
    EXPECT_EQ(host_.from_hwloc, 0);
    const uvm::topo::Topology &real = uvm::topo::host_topology();
    for (uint32_t i = 0; i < 4; i++) {
        uvm_numa_node_info_t n;
        ASSERT_EQ(uvm_numa_node_info(mgr_, i, &n), UVM_OK);
        EXPECT_EQ(n.id, static_cast<int32_t>(i));
        EXPECT_EQ(n.host_node, real.nodes[i % real.nodes.size()].id);
        uvm_gpu_info_t gi;
        ASSERT_EQ(uvm_gpu_info(mgr_, i, &gi), UVM_OK);
        EXPECT_EQ(gi.host_numa_id, static_cast<int32_t>(i));
        EXPECT_STREQ(gi.cpus, n.cpus);
    }
    uvm_numa_node_info_t n;
    EXPECT_EQ(uvm_numa_node_info(mgr_, 4, &n), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_numa_node_info(mgr_, 0, nullptr), UVM_ERR_INVALID_ARGUMENT);
    uvm_gpu_path_t path;
    ASSERT_EQ(uvm_gpu_path(mgr_, 1, 1, &path), UVM_OK);
    EXPECT_EQ(path, UVM_GPU_PATH_SELF);
    ASSERT_EQ(uvm_gpu_path(mgr_, 0, 1, &path), UVM_OK);
    EXPECT_EQ(path, UVM_GPU_PATH_SYS) << "GPUs on different nodes";
    EXPECT_EQ(uvm_gpu_path(mgr_, 0, 4, &path), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_gpu_path(mgr_, 0, 1, nullptr), UVM_ERR_INVALID_ARGUMENT);
}

TEST_F(ConfiguredTopologyTest, SysmemFollowsItsGpuToTheBackingHostNode) {
#ifndef UVM_HAVE_LIBNUMA
    GTEST_SKIP() << "built without libnuma: NUMA placement is NOT_SUPPORTED";
#else
    for (uint32_t gpu = 0; gpu < 4; gpu++) {
        uvm_numa_node_info_t n;
        ASSERT_EQ(uvm_numa_node_info(mgr_, gpu, &n), UVM_OK);
        uvm_mem_t *mem = alloc(alloc_params(UVM_BACKING_SYSMEM, 2 * M, gpu));
        const uvm_mem_info_t mi = info(mem);
        EXPECT_EQ(mi.numa_node, static_cast<int32_t>(gpu));
        int mode = -1;
        uint64_t mask = 0;
        policy_at(kernel(mem), &mode, &mask);
        EXPECT_EQ(mode, MPOL_PREFERRED);
        EXPECT_EQ(mask, 1ull << n.host_node);
        EXPECT_EQ(pages(mem).node_bytes[n.host_node], 2 * M);
        EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    }
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, 2 * M);
    p.placement.kind = UVM_PLACEMENT_INTERLEAVE;
    p.placement.node_mask = 0b1010;
    uvm_mem_t *mem = alloc(p);
    EXPECT_EQ(info(mem).numa_node_mask, 0b1010u);
    EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
#endif
}

TEST_F(ConfiguredTopologyTest, BadPlacementsAreRefusedAndChangeNothing) {
    uvm_mem_t *keep = alloc(alloc_params(UVM_BACKING_SYSMEM, 64 * K, 3));
    uvm_manager_stats_t before, after;
    ASSERT_EQ(uvm_manager_stats(mgr_, &before), UVM_OK);
    uvm_mem_t *out = nullptr;
    auto refuse = [&](uvm_mem_alloc_params_t p, uvm_status_t want) {
        EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &out), want);
        EXPECT_EQ(out, nullptr);
    };
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, 64 * K);
    p.placement.kind = UVM_PLACEMENT_NODE;
    p.placement.node = 4;  // nodes are 0..3
    refuse(p, UVM_ERR_INVALID_ARGUMENT);
    p.placement.kind = UVM_PLACEMENT_INTERLEAVE;
    p.placement.node_mask = 1u << 4;
    refuse(p, UVM_ERR_INVALID_ARGUMENT);
    p = alloc_params(UVM_BACKING_SYSMEM, 64 * K, 9);  // local to a GPU that does not exist
    refuse(p, UVM_ERR_INVALID_GPU);
    p.placement.kind = UVM_PLACEMENT_NODE;  // with a node named, the GPU index is not used
    p.placement.node = 1;
#ifdef UVM_HAVE_LIBNUMA
    uvm_mem_t *placed = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &placed), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr_, placed), UVM_OK);
#else
    refuse(p, UVM_ERR_NOT_SUPPORTED);  // no libnuma: a named node cannot be bound
#endif
    p = alloc_params(UVM_BACKING_VIDMEM, 64 * K);
    p.placement.kind = UVM_PLACEMENT_NODE;  // placement is for host memory
    refuse(p, UVM_ERR_INVALID_ARGUMENT);
    p = alloc_params(UVM_BACKING_SYSMEM, 64 * K);
    const int raw = 1234;
    std::memcpy(&p.placement.kind, &raw, sizeof raw);
    refuse(p, UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(uvm_manager_stats(mgr_, &after), UVM_OK);
    EXPECT_EQ(std::memcmp(&before, &after, sizeof before), 0);
#ifdef UVM_HAVE_LIBNUMA
    EXPECT_EQ(info(keep).numa_node, 3);
#else
    EXPECT_EQ(info(keep).numa_node, -1);  // the default binds nothing without libnuma
#endif
    EXPECT_EQ(uvm_mem_free(mgr_, keep), UVM_OK);
}

TEST(SimTopologyParams, BadNodeConfigurationsAreRefused) {
    uvm_manager_t *mgr = nullptr;
    uvm_manager_params_t p = sim_params(2, 1ull << 30);
    p.sim.numa_nodes = UVM_MAX_NUMA_NODES + 1;
    EXPECT_EQ(uvm_manager_create(&p, &mgr), UVM_ERR_INVALID_ARGUMENT);
    p.sim.numa_nodes = 2;
    p.sim.gpu_numa_node[1] = 2;  // nodes are 0 and 1
    EXPECT_EQ(uvm_manager_create(&p, &mgr), UVM_ERR_INVALID_ARGUMENT);
    p.sim.gpu_numa_node[1] = -1;
    EXPECT_EQ(uvm_manager_create(&p, &mgr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(mgr, nullptr);
    p.sim.gpu_numa_node[0] = 1;  // both GPUs on node 1
    p.sim.gpu_numa_node[1] = 1;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    for (uint32_t g = 0; g < 2; g++) {
        uvm_gpu_info_t gi;
        ASSERT_EQ(uvm_gpu_info(mgr, g, &gi), UVM_OK);
        EXPECT_EQ(gi.host_numa_id, 1);
    }
    uvm_gpu_path_t path;
    ASSERT_EQ(uvm_gpu_path(mgr, 0, 1, &path), UVM_OK);
    EXPECT_EQ(path, UVM_GPU_PATH_NODE);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

}  // namespace
