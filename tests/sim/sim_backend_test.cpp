// The simulated backend's own configuration: GPU count and size, page sizes,
// peer links, coherence, lazy memory, and backend selection.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "api/handles.h"
#include "common/bitmap.h"
#include "common/sizes.h"
#include "common/resident_memory.h"
#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {
constexpr uint64_t K = 1024, M = 1024 * 1024, G = 1024 * M;

uvm_status_t alloc(uvm_manager_t *mgr, uvm_backing_t backing, uint64_t size, uint32_t gpu, uvm_mem_t **out,
                   uint64_t chunk = 0) {
    const uvm_mem_alloc_params_t a = alloc_params(backing, size, gpu, chunk);
    return uvm_mem_alloc(mgr, &a, out);
}
}  // namespace

TEST(Sim, EightLarge80GiBGpusStartLazily) {
    const uint64_t rss_before = uvm::resident_bytes();
    uvm_manager_params_t p = sim_params(8, 80 * G);
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    uint32_t n = 0;
    ASSERT_EQ(uvm_gpu_count(mgr, &n), UVM_OK);
    ASSERT_EQ(n, 8u);
    std::vector<uvm_mem_t *> objs;
    for (uint32_t g = 0; g < 8; ++g) {
        uvm_gpu_info_t gi;
        ASSERT_EQ(uvm_gpu_info(mgr, g, &gi), UVM_OK);
        EXPECT_EQ(gi.memory_total, 80 * G);
        EXPECT_EQ(gi.memory_free, 80 * G);
        EXPECT_EQ(gi.peer_mask, 0xFFu & ~(1u << g));  // all pairs linked by default
        objs.push_back(nullptr);
        ASSERT_EQ(alloc(mgr, UVM_BACKING_VIDMEM, 64 * G, g, &objs.back()), UVM_OK);
    }
    // 512 GiB of vidmem objects, untouched, cost next to nothing.
    EXPECT_LT(uvm::resident_bytes() - rss_before, 512 * M);
    for (uvm_mem_t *m : objs)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Sim, PeerMatrixDecidesWhoReachesWhom) {
    uvm_manager_params_t p = sim_params(2, 64 * M);
    p.sim.peer_rows[0] = 1u << 1;  // GPU 0 reaches GPU 1, not the other way
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    uvm_mem_t *on0, *on1;
    ASSERT_EQ(alloc(mgr, UVM_BACKING_VIDMEM, 2 * M, 0, &on0), UVM_OK);
    ASSERT_EQ(alloc(mgr, UVM_BACKING_VIDMEM, 2 * M, 1, &on1), UVM_OK);
    EXPECT_EQ(uvm_mem_map_gpu_kernel(mgr, on0, 1), UVM_ERR_NO_PEER_ACCESS);
    EXPECT_EQ(uvm_mem_map_gpu_phys(mgr, on0, 1), UVM_ERR_NO_PEER_ACCESS);
    uvm_mem_info_t i;
    ASSERT_EQ(uvm_mem_info(mgr, on0, &i), UVM_OK);
    EXPECT_EQ(i.gpu_kernel_mask | (i.gpu_phys_mask & 2u), 0u);
    EXPECT_EQ(uvm_mem_map_gpu_kernel(mgr, on1, 0), UVM_OK);
    uvm_mem_free(mgr, on0);
    uvm_mem_free(mgr, on1);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);

    p = sim_params(2, 64 * M);
    p.sim.no_peers = 1;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    ASSERT_EQ(alloc(mgr, UVM_BACKING_VIDMEM, 2 * M, 0, &on0), UVM_OK);
    EXPECT_EQ(uvm_mem_map_gpu_kernel(mgr, on0, 1), UVM_ERR_NO_PEER_ACCESS);
    uvm_gpu_stats_t s;
    ASSERT_EQ(uvm_gpu_stats(mgr, 1, &s), UVM_OK);
    EXPECT_EQ(s.kernel_mappings + s.phys_mappings + s.peer_mappings, 0u);
    uvm_mem_free(mgr, on0);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// uvm_gpu_enable_peer_access follows the peer matrix, once per pair, and
// refuses what is not a pair of linked GPUs.
TEST(Sim, PeerAccessIsEnabledPerLinkedPair) {
    uvm_manager_params_t p = sim_params(2, 64 * M);
    p.sim.peer_rows[0] = 1u << 1;  // GPU 0 reaches GPU 1, not the other way
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    EXPECT_EQ(uvm_gpu_enable_peer_access(nullptr, 0, 1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_enable_peer_access(mgr, 0, 0), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_enable_peer_access(mgr, 0, 2), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_gpu_enable_peer_access(mgr, 2, 0), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_gpu_enable_peer_access(mgr, 1, 0), UVM_ERR_NO_PEER_ACCESS);
    EXPECT_EQ(uvm_gpu_enable_peer_access(mgr, 0, 1), UVM_OK);
    EXPECT_EQ(uvm_gpu_enable_peer_access(mgr, 0, 1), UVM_OK);  // once is enough; again does nothing
    uvm_mem_t *on1;
    ASSERT_EQ(alloc(mgr, UVM_BACKING_VIDMEM, 2 * M, 1, &on1), UVM_OK);
    EXPECT_EQ(uvm_mem_map_gpu_kernel(mgr, on1, 0), UVM_OK);
    uvm_mem_free(mgr, on1);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Sim, PageSizesOfTheGpuBoundTheChunkSizes) {
    uvm_manager_params_t p = sim_params(1, 64 * M);
    p.sim.page_sizes = UVM_PAGE_SIZE_4K | UVM_PAGE_SIZE_2M;  // no big pages
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    uvm_mem_t *m;
    ASSERT_EQ(alloc(mgr, UVM_BACKING_VIDMEM, 100 * K, 0, &m), UVM_OK);
    uvm_mem_info_t i;
    ASSERT_EQ(uvm_mem_info(mgr, m, &i), UVM_OK);
    EXPECT_EQ(i.chunk_size, 4 * K);  // the largest supported size below 64K
    uvm_mem_free(mgr, m);
    uvm_mem_t *none = nullptr;
    EXPECT_EQ(alloc(mgr, UVM_BACKING_VIDMEM, 100 * K, 0, &none, 64 * K), UVM_ERR_PAGE_SIZE_NOT_SUPPORTED);
    EXPECT_EQ(alloc(mgr, UVM_BACKING_SYSMEM, 100 * K, 0, &m, 64 * K), UVM_OK);  // host chunks are not the GPU's
    uvm_mem_free(mgr, m);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);

    p.sim.page_sizes = UVM_PAGE_SIZE_4K;  // root chunks are 2M: it must be there
    EXPECT_EQ(uvm_manager_create(&p, &mgr), UVM_ERR_INVALID_ARGUMENT);
}

TEST(Sim, BadConfigurationsAreRefused) {
    uvm_manager_t *mgr = nullptr;
    uvm_manager_params_t p = sim_params(33, 0);
    EXPECT_EQ(uvm_manager_create(&p, &mgr), UVM_ERR_INVALID_ARGUMENT);
    p = sim_params(1, 3 * M);
    EXPECT_EQ(uvm_manager_create(&p, &mgr), UVM_ERR_INVALID_ARGUMENT);
    p = sim_params(2, 0);
    p.sim.peer_rows[0] = 1u << 5;  // a link to a GPU that does not exist
    EXPECT_EQ(uvm_manager_create(&p, &mgr), UVM_ERR_INVALID_ARGUMENT);
    p = sim_params(1, 0);
    p.backend = static_cast<uvm_backend_kind_t>(7);
    EXPECT_EQ(uvm_manager_create(&p, &mgr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_manager_create(nullptr, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(mgr, nullptr);
}

TEST(Sim, CopyEngineWalksThePageTreeForEveryPage) {
    uvm_manager_params_t p = sim_params(1, 64 * M);
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    uvm_mem_t *vid, *sys;
    ASSERT_EQ(alloc(mgr, UVM_BACKING_VIDMEM, 3 * 64 * K, 0, &vid, 64 * K), UVM_OK);
    ASSERT_EQ(alloc(mgr, UVM_BACKING_SYSMEM, 3 * 64 * K, 0, &sys, 4 * K), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, vid, 0), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, sys, 0), UVM_OK);
    uvm_gpu_stats_t before, after;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &before), UVM_OK);
    uvm_mem_span_t d{vid, 0, UVM_VIEW_KERNEL}, s{sys, 0, UVM_VIEW_KERNEL};
    ASSERT_EQ(uvm_mem_copy(mgr, 0, &d, &s, 3 * 64 * K), UVM_OK);
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &after), UVM_OK);
    EXPECT_EQ(after.ce_operations - before.ce_operations, 1u);
    EXPECT_EQ(after.ce_bytes - before.ce_bytes, 3 * 64 * K);
    // Both sides walk the tree for every 4K source page.
    EXPECT_EQ(after.ce_translations - before.ce_translations, 2u * 48u);
    // Physically contiguous vidmem: one copy for the whole object.
    uvm_mem_span_t dp{vid, 0, UVM_VIEW_PHYSICAL};
    ASSERT_EQ(uvm_mem_memset(mgr, 0, &dp, 1, 3 * 64 * K), UVM_OK);
    uvm_gpu_stats_t last;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &last), UVM_OK);
    EXPECT_EQ(last.ce_operations - after.ce_operations, 1u);
    EXPECT_EQ(last.ce_translations, after.ce_translations);
    uvm_mem_free(mgr, vid);
    uvm_mem_free(mgr, sys);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Sim, LeakedObjectsAreReportedAndFreed) {
    uvm_manager_params_t p = sim_params(1, 64 * M);
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    uvm_mem_t *a, *b;
    ASSERT_EQ(alloc(mgr, UVM_BACKING_VIDMEM, 3 * M, 0, &a), UVM_OK);
    ASSERT_EQ(alloc(mgr, UVM_BACKING_SYSMEM, 5 * K, 0, &b), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, a, 0), UVM_OK);
    ASSERT_EQ(uvm_mem_map_cpu_kernel(mgr, b), UVM_OK);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_ERR_LEAKED_OBJECTS);
    const std::string report = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(report.find("vidmem, 3145728 bytes"), std::string::npos) << report;
    EXPECT_NE(report.find("sysmem, 5120 bytes"), std::string::npos) << report;
}

// What the OOM report asks the backend (pressure/fits.h): the longest run one
// root_chunks_alloc could give, were the roots the PMM holds free given back.
TEST(Sim, LargestFreeRunJoinsTheRootsHeldFreeWithItsOwn) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);  // 16 root chunks
    uvm::backend::Backend &b = uvm::from_handle(mgr)->backend();
    uint64_t low = 0, mid = 0;
    ASSERT_EQ(b.root_chunks_alloc(0, 4, false, &low), UVM_OK);
    ASSERT_EQ(b.root_chunks_alloc(0, 4, false, &mid), UVM_OK);
    ASSERT_EQ(low, 0u);
    ASSERT_EQ(mid, 8 * M);
    uvm::Bitmap held_free(b.gpu_info(0).phys_space / uvm::kRootChunkSize);
    EXPECT_EQ(b.largest_free_run(0, held_free), 8u);  // roots 8-15
    held_free.set_range(4, 4);  // the middle four, free in the caller's hands: they join the top
    EXPECT_EQ(b.largest_free_run(0, held_free), 12u);
    held_free = uvm::Bitmap(held_free.size());
    held_free.set_range(0, 2);  // apart from the top
    EXPECT_EQ(b.largest_free_run(0, held_free), 8u);
    EXPECT_EQ(b.gpu_memory_free(0), 16 * M);  // nothing changed
    for (uint64_t i = 0; i < 4; ++i) {
        b.root_chunk_free(0, low + i * uvm::kRootChunkSize);
        b.root_chunk_free(0, mid + i * uvm::kRootChunkSize);
    }
    EXPECT_EQ(b.largest_free_run(0, uvm::Bitmap(held_free.size())), 16u);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Backend, SelectionByParamsAndEnvironment) {
    uvm_manager_t *mgr;
    uvm_backend_kind_t kind;
    const char *saved = std::getenv("UVM_BACKEND");
    const std::string restore = saved ? saved : "";
    setenv("UVM_BACKEND", "sim", 1);
    ASSERT_EQ(uvm_manager_create(nullptr, &mgr), UVM_OK);
    ASSERT_EQ(uvm_manager_backend(mgr, &kind), UVM_OK);
    EXPECT_EQ(kind, UVM_BACKEND_SIM);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
    setenv("UVM_BACKEND", "nonsense", 1);
    EXPECT_EQ(uvm_manager_create(nullptr, &mgr), UVM_ERR_INVALID_ARGUMENT);
    unsetenv("UVM_BACKEND");
    // Auto always gives a manager: CUDA where a GPU is, sim elsewhere.
    ASSERT_EQ(uvm_manager_create(nullptr, &mgr), UVM_OK);
    ASSERT_EQ(uvm_manager_backend(mgr, &kind), UVM_OK);
    EXPECT_NE(kind, UVM_BACKEND_AUTO);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
    uvm_manager_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backend = UVM_BACKEND_CUDA;
    const uvm_status_t s = uvm_manager_create(&p, &mgr);
    if (s == UVM_OK) {
        EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
    } else {
        // Asking for CUDA where there is none is a clear error, never a fallback.
        EXPECT_TRUE(s == UVM_ERR_NO_DEVICE || s == UVM_ERR_NOT_SUPPORTED) << uvm_status_string(s);
    }
    if (saved)
        setenv("UVM_BACKEND", restore.c_str(), 1);
}
