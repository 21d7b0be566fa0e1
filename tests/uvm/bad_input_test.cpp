// Bad input and exhaustion: a clear status, and every other object intact.
#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {
constexpr uint64_t K = 1024, M = 1024 * 1024;

class BadInputTest : public ManagerTest {};
INSTANTIATE_TEST_SUITE_P(Backends, BadInputTest, ::testing::ValuesIn(backend_names()),
                         [](const auto &info) { return info.param; });

}  // namespace

TEST_P(BadInputTest, RefusedAllocationsChangeNothing) {
    uvm_mem_t *keep = alloc(UVM_BACKING_VIDMEM, 100 * K);
    uvm_manager_stats_t before;
    ASSERT_EQ(uvm_manager_stats(mgr_, &before), UVM_OK);
    uvm_mem_t *m = nullptr;
    // (Size 0 is no object, not an error: runtime_calls_test.cpp.)
    // An absurd size: GPU memory more than the GPU has (as cudaMalloc says),
    // host memory over the largest object.
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, UINT64_MAX);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_OUT_OF_MEMORY);
    p = alloc_params(UVM_BACKING_SYSMEM, UINT64_MAX - 4095);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_ARGUMENT);
    uvm_gpu_info_t gi;
    ASSERT_EQ(uvm_gpu_info(mgr_, 0, &gi), UVM_OK);
    p = alloc_params(UVM_BACKING_VIDMEM, gi.memory_total + 1);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_OUT_OF_MEMORY);  // more than the GPU has: as cudaMalloc
    p = alloc_params(UVM_BACKING_VIDMEM, 1ull << 40);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_OUT_OF_MEMORY);
    p = alloc_params(UVM_BACKING_VIDMEM, 4 * K, 0, 8 * K);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_PAGE_SIZE_NOT_SUPPORTED);
    p = alloc_params(UVM_BACKING_VIDMEM, 4 * K, 0, 1ull << 30);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_PAGE_SIZE_NOT_SUPPORTED);
    p = alloc_params(UVM_BACKING_SYSMEM, 4 * K, 0, 3 * K);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_PAGE_SIZE_NOT_SUPPORTED);
    p = alloc_params(UVM_BACKING_VIDMEM, 4 * K, gpus_);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_GPU);
    p = alloc_params(static_cast<uvm_backing_t>(42), 4 * K);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_ARGUMENT);
    p = alloc_params(UVM_BACKING_SYSMEM, 4 * K);
    p.flags = 1u << 30;
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_ARGUMENT);  // unknown flag
    EXPECT_EQ(uvm_mem_alloc(mgr_, nullptr, &m), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_alloc(nullptr, &p, &m), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(m, nullptr);  // out-parameters are written only on success
    uvm_manager_stats_t after;
    ASSERT_EQ(uvm_manager_stats(mgr_, &after), UVM_OK);
    EXPECT_EQ(after.objects, before.objects);
    EXPECT_EQ(info(keep).size, 100 * K);
    ASSERT_EQ(uvm_mem_free(mgr_, keep), UVM_OK);
}

TEST_P(BadInputTest, DeadAndForeignHandles) {
    uvm_mem_t *mem = alloc(UVM_BACKING_SYSMEM, 4 * K);
    uvm_mem_t *other_obj = alloc(UVM_BACKING_SYSMEM, 4 * K);
    ASSERT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_ERR_INVALID_HANDLE);  // double free
    uvm_mem_info_t i;
    EXPECT_EQ(uvm_mem_info(mgr_, mem, &i), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_mem_map_cpu_kernel(mgr_, mem), UVM_ERR_INVALID_HANDLE);
    // The slot of the freed object is reused: the stale handle still fails.
    uvm_mem_t *reuse = alloc(UVM_BACKING_SYSMEM, 8 * K);
    EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(info(reuse).size, 8 * K);
    // An object of another manager.
    uvm_manager_t *other = nullptr;
    ASSERT_EQ(make_manager("sim", &other), UVM_OK);
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, 4 * K);
    uvm_mem_t *foreign = nullptr;
    ASSERT_EQ(uvm_mem_alloc(other, &p, &foreign), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr_, foreign), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_mem_map_gpu_kernel(mgr_, foreign, 0), UVM_ERR_INVALID_HANDLE);
    uvm_mem_span_t d{other_obj, 0, UVM_VIEW_PHYSICAL}, s{foreign, 0, UVM_VIEW_PHYSICAL};
    EXPECT_EQ(uvm_mem_copy(mgr_, 0, &d, &s, 4 * K), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_mem_free(other, foreign), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(other), UVM_OK);
    // Garbage handles.
    EXPECT_EQ(uvm_mem_free(mgr_, reinterpret_cast<uvm_mem_t *>(uintptr_t{0x1234})), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_mem_free(mgr_, nullptr), UVM_OK);  // what a size-0 allocation gives
    EXPECT_EQ(info(other_obj).size, 4 * K);
    ASSERT_EQ(uvm_mem_free(mgr_, other_obj), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, reuse), UVM_OK);
}

TEST_P(BadInputTest, MappingErrors) {
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 64 * K);
    uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, 64 * K);
    EXPECT_EQ(uvm_mem_unmap_cpu_kernel(mgr_, sys), UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(uvm_mem_unmap_cpu_user(mgr_, sys), UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(uvm_mem_unmap_gpu_phys(mgr_, sys, 0), UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(uvm_mem_unmap_gpu_kernel(mgr_, sys, 0), UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(uvm_mem_unmap_gpu_user(mgr_, vid, 0), UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(uvm_mem_map_gpu_kernel(mgr_, sys, gpus_), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_mem_map_gpu_phys(mgr_, sys, 99), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_mem_map_cpu_user(mgr_, sys, nullptr), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(uvm_mem_map_cpu_kernel(mgr_, sys), UVM_OK);
    EXPECT_EQ(uvm_mem_map_cpu_kernel(mgr_, sys), UVM_ERR_ALREADY_MAPPED);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, sys, 0), UVM_OK);
    EXPECT_EQ(uvm_mem_map_gpu_kernel(mgr_, sys, 0), UVM_ERR_ALREADY_MAPPED);
    void *p = nullptr;
    uint64_t va = 0;
    EXPECT_EQ(uvm_mem_cpu_kernel_address(mgr_, sys, 64 * K, &p), UVM_ERR_OUT_OF_RANGE);
    EXPECT_EQ(uvm_mem_cpu_kernel_address(mgr_, sys, 0, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_cpu_user_address(mgr_, sys, 0, &p), UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(uvm_mem_gpu_kernel_address(mgr_, sys, 0, 64 * K, &va), UVM_ERR_OUT_OF_RANGE);
    EXPECT_EQ(uvm_mem_gpu_user_address(mgr_, sys, 0, 0, &va), UVM_ERR_NOT_MAPPED);
    if (gpus_ > 1)
        EXPECT_EQ(uvm_mem_gpu_kernel_address(mgr_, sys, 1, 0, &va), UVM_ERR_NOT_MAPPED);
    uvm_gpu_phys_address_t pa;
    EXPECT_EQ(uvm_mem_gpu_phys_address(mgr_, sys, 0, 0, 0, &pa), UVM_ERR_INVALID_ARGUMENT);
    // Copies: missing mappings, ranges beyond the object, overlap within one object.
    uvm_mem_span_t d{vid, 0, UVM_VIEW_KERNEL}, s{sys, 0, UVM_VIEW_KERNEL};
    EXPECT_EQ(uvm_mem_copy(mgr_, 0, &d, &s, 64 * K), UVM_ERR_NOT_MAPPED);
    d.view = UVM_VIEW_PHYSICAL;
    EXPECT_EQ(uvm_mem_copy(mgr_, 0, &d, &s, 64 * K + 1), UVM_ERR_OUT_OF_RANGE);
    EXPECT_EQ(uvm_mem_copy(mgr_, 0, &d, &s, 0), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_copy(mgr_, gpus_, &d, &s, 1), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_mem_copy(mgr_, 0, &d, nullptr, 1), UVM_ERR_INVALID_ARGUMENT);
    uvm_mem_span_t a{sys, 0, UVM_VIEW_KERNEL}, b{sys, 100, UVM_VIEW_KERNEL};
    EXPECT_EQ(uvm_mem_copy(mgr_, 0, &a, &b, 200), UVM_ERR_INVALID_ARGUMENT);
    s.view = static_cast<uvm_gpu_view_t>(9);
    EXPECT_EQ(uvm_mem_copy(mgr_, 0, &d, &s, 1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_copy(mgr_, 0, &d, &b, 64 * K - 100), UVM_OK);  // phys <- kernel, fine
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
}

TEST_P(BadInputTest, QueriesRefuseBadArguments) {
    uvm_gpu_info_t gi;
    uvm_gpu_stats_t gs;
    uvm_page_tree_info_t ti;
    uint32_t n;
    EXPECT_EQ(uvm_gpu_info(mgr_, gpus_, &gi), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_gpu_info(mgr_, 0, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_info(nullptr, 0, &gi), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_stats(mgr_, gpus_, &gs), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_gpu_page_tree_info(mgr_, 0, static_cast<uvm_va_space_kind_t>(5), &ti), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_count(nullptr, &n), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_trim(mgr_, gpus_, nullptr), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_gpu_set_release_threshold(mgr_, gpus_, 0), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_gpu_set_release_threshold(nullptr, 0, 0), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_set_growth_slack(mgr_, gpus_, 0), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_gpu_set_growth_slack(nullptr, 0, 0), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_manager_destroy(nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_STRNE(uvm_status_string(UVM_ERR_OUT_OF_MEMORY), "unknown status");
    EXPECT_STREQ(uvm_status_string(static_cast<uvm_status_t>(1000)), "unknown status");
}

// Exhaustion on a small simulated GPU: a status, nothing leaks, other objects keep their data.
TEST(Exhaustion, OutOfVidmemIsAStatusAndLeavesOthersIntact) {
    uvm_manager_params_t p = sim_params(1, 8 * M);
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 5 * M);
    uvm_mem_t *big;
    ASSERT_EQ(uvm_mem_alloc(mgr, &a, &big), UVM_OK);  // 3 of the 4 root chunks
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, big, 0), UVM_OK);
    uvm_mem_span_t span{big, 0, UVM_VIEW_KERNEL};
    ASSERT_EQ(uvm_mem_memset(mgr, 0, &span, 0xAB, 6 * M), UVM_OK);
    uvm_gpu_stats_t before;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &before), UVM_OK);
    uvm_mem_t *m = nullptr;
    a = alloc_params(UVM_BACKING_VIDMEM, 4 * M);
    EXPECT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_ERR_OUT_OF_MEMORY);
    a = alloc_params(UVM_BACKING_VIDMEM, 3 * M, 0, 64 * K);  // 48 chunks of 64K, one root short
    EXPECT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_ERR_OUT_OF_MEMORY);
    uvm_gpu_stats_t after;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &after), UVM_OK);
    EXPECT_EQ(after.root_chunks, before.root_chunks);
    for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i) {
        EXPECT_EQ(after.bytes_pinned[i], before.bytes_pinned[i]);
        EXPECT_EQ(after.bytes_free[i], before.bytes_free[i]);
    }
    // What is left can still be had, to the last chunk.
    std::vector<uvm_mem_t *> small;
    a = alloc_params(UVM_BACKING_VIDMEM, 4 * K);
    for (int i = 0; i < 512; ++i) {
        small.push_back(nullptr);
        ASSERT_EQ(uvm_mem_alloc(mgr, &a, &small.back()), UVM_OK) << i;
    }
    EXPECT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_ERR_OUT_OF_MEMORY);
    // The big object's data is intact.
    a = alloc_params(UVM_BACKING_SYSMEM, 6 * M);
    uvm_mem_t *host;
    ASSERT_EQ(uvm_mem_alloc(mgr, &a, &host), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, host, 0), UVM_OK);
    uvm_mem_span_t dst{host, 0, UVM_VIEW_KERNEL};
    ASSERT_EQ(uvm_mem_copy(mgr, 0, &dst, &span, 6 * M), UVM_OK);
    ASSERT_EQ(uvm_mem_map_cpu_kernel(mgr, host), UVM_OK);
    uint8_t *bytes;
    ASSERT_EQ(uvm_mem_cpu_kernel_address(mgr, host, 0, reinterpret_cast<void **>(&bytes)), UVM_OK);
    for (uint64_t i = 0; i < 6 * M; i += 4096)
        ASSERT_EQ(bytes[i], 0xAB);
    for (uvm_mem_t *s : small)
        ASSERT_EQ(uvm_mem_free(mgr, s), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, host), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, big), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Exhaustion, SysmemBeyondHostMemoryIsAStatus) {
    uvm_manager_t *mgr;
    ASSERT_EQ(make_manager("sim", &mgr), UVM_OK);
    // 128 TiB: a valid size, more than any host here has.
    uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_SYSMEM, 128ull << 40);
    uvm_mem_t *m = nullptr;
    EXPECT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_ERR_OUT_OF_MEMORY);
    uvm_manager_stats_t s;
    ASSERT_EQ(uvm_manager_stats(mgr, &s), UVM_OK);
    EXPECT_EQ(s.objects, 0u);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
