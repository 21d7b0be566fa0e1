// Object tests over every backend, after nvidia-uvm's uvm_mem_test.c: every
// size and chunk size, each mapping kind with data written through one and
// read back through another, DMA addresses, peers, teardown.
#include <random>

#include "common/sizes.h"
#include "api/handles.h"
#include "tests/uvm/fixtures.h"

using namespace uvm_test;
using uvm::align_up;

class MemTest : public ManagerTest {};

INSTANTIATE_TEST_SUITE_P(Backends, MemTest, ::testing::ValuesIn(backend_names()),
                         [](const auto &info) { return info.param; });

namespace {
constexpr uint64_t K = 1024, M = 1024 * 1024;
const uint64_t kSizes[] = {1, 4095, 4096, 4097, 12 * K, 64 * K - 1, 64 * K, 100 * K, 2 * M - 1,
                           2 * M, 2 * M + 1, 6 * M, 20 * M + 3};
const uint64_t kChunks[] = {0, 4 * K, 64 * K, 2 * M};

uint64_t expected_chunk(uvm_backing_t backing, uint64_t size) {
    if (backing == UVM_BACKING_SYSMEM)
        return size >= 2 * M ? 2 * M : 4 * K;
    return size < 64 * K ? 4 * K : size < 2 * M ? 64 * K : 2 * M;
}
}  // namespace

TEST_P(MemTest, EverySizeAndChunkSize) {
    for (uvm_backing_t backing : {UVM_BACKING_SYSMEM, UVM_BACKING_VIDMEM}) {
        for (uint64_t size : kSizes) {
            for (uint64_t chunk : kChunks) {
                uvm_mem_t *mem = alloc(backing, size, 0, chunk);
                ASSERT_NE(mem, nullptr);
                const uvm_mem_info_t i = info(mem);
                const uint64_t want = chunk ? chunk : expected_chunk(backing, size);
                EXPECT_EQ(i.chunk_size, want) << size << " " << chunk;
                EXPECT_EQ(i.size, size);
                EXPECT_EQ(i.alloc_size, align_up(size, want));
                EXPECT_EQ(i.chunk_count, align_up(size, want) / want);
                EXPECT_EQ(i.backing, backing);
                ASSERT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
            }
        }
    }
    const uvm_gpu_stats_t s = stats(0);
    for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i)
        EXPECT_EQ(s.bytes_pinned[i], 0u);
}

TEST_P(MemTest, AdaptiveRuleMatchesTheDriver) {
    struct Case { uint64_t size; uint64_t vid; uint64_t sys; };
    for (const Case c : {Case{12 * K, 4 * K, 4 * K}, Case{100 * K, 64 * K, 4 * K}, Case{6 * M, 2 * M, 2 * M}}) {
        uvm_mem_t *v = alloc(UVM_BACKING_VIDMEM, c.size), *s = alloc(UVM_BACKING_SYSMEM, c.size);
        EXPECT_EQ(info(v).chunk_size, c.vid);
        EXPECT_EQ(info(s).chunk_size, c.sys);
        ASSERT_EQ(uvm_mem_free(mgr_, v), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr_, s), UVM_OK);
    }
}

TEST_P(MemTest, CpuKernelWritesAreSeenThroughCpuUser) {
    for (uint64_t size : {4 * K, 100 * K, 6 * M}) {
        uvm_mem_t *mem = alloc(UVM_BACKING_SYSMEM, size, 0, 0, UVM_MEM_USER_MAPPABLE);
        const uint64_t n = info(mem).alloc_size;
        uint8_t *kernel = cpu(mem);
        void *where = unused_range(n, 2 * M);
        ASSERT_EQ(uvm_mem_map_cpu_user(mgr_, mem, where), UVM_OK);
        uint8_t *user = nullptr;
        ASSERT_EQ(uvm_mem_cpu_user_address(mgr_, mem, 0, reinterpret_cast<void **>(&user)), UVM_OK);
        EXPECT_EQ(user, where);
        EXPECT_NE(user, kernel);
        for (uint64_t i = 0; i < n; ++i)
            kernel[i] = pattern(i, 1);
        for (uint64_t i = 0; i < n; ++i)
            ASSERT_EQ(user[i], pattern(i, 1)) << i;
        user[n - 1] = 0x5A;  // and back the other way
        EXPECT_EQ(kernel[n - 1], 0x5A);
        EXPECT_EQ(info(mem).user_address, reinterpret_cast<uint64_t>(where));
        ASSERT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    }
}

// CPU -> sysmem -> (GPU copy engine, view A) -> vidmem -> (view B) -> sysmem -> CPU.
TEST_P(MemTest, CopiesThroughEveryGpuView) {
    const uvm_gpu_view_t views[] = {UVM_VIEW_KERNEL, UVM_VIEW_USER, UVM_VIEW_PHYSICAL};
    for (uint64_t chunk : {4 * K, 64 * K, 2 * M}) {
        const uint64_t size = 3 * chunk + (chunk == 2 * M ? 0 : 5 * chunk);
        uvm_mem_t *src = alloc(UVM_BACKING_SYSMEM, size), *dst = alloc(UVM_BACKING_SYSMEM, size);
        uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, size, 0, chunk);
        uint8_t *in = cpu(src), *out = cpu(dst);
        for (uint64_t i = 0; i < size; ++i)
            in[i] = pattern(i, static_cast<uint32_t>(chunk));
        // Each object gets its own user range: GPU user mappings take no CPU addresses.
        const uint64_t span = align_up(size, 2 * M);
        const uint64_t base = gpu_user_range(3 * span, 2 * M);
        uint64_t next = base;
        bool user_views = true;
        for (uvm_mem_t *m : {src, dst, vid}) {
            const uvm_status_t s = uvm_mem_map_gpu_kernel(mgr_, m, 0);
            ASSERT_EQ(s, UVM_OK) << uvm_status_string(s);
            user_views &= map_gpu_user(m, 0, next);
            next += span;
        }
        for (uvm_gpu_view_t a : views) {
            for (uvm_gpu_view_t b : views) {
                if (!user_views && (a == UVM_VIEW_USER || b == UVM_VIEW_USER))
                    continue;
                std::memset(out, 0, size);
                ASSERT_EQ(copy(0, vid, a, src, a, size), UVM_OK);
                ASSERT_EQ(copy(0, dst, b, vid, b, size), UVM_OK);
                ASSERT_EQ(std::memcmp(in, out, size), 0) << "chunk " << chunk << " views " << a << "," << b;
            }
        }
        // Offsets that straddle chunks.
        std::memset(out, 0, size);
        ASSERT_EQ(copy(0, vid, UVM_VIEW_PHYSICAL, src, UVM_VIEW_KERNEL, size - 3, 3, 0), UVM_OK);
        ASSERT_EQ(copy(0, dst, user_views ? UVM_VIEW_USER : UVM_VIEW_KERNEL, vid, UVM_VIEW_KERNEL, size - 3, 0, 3),
                  UVM_OK);
        ASSERT_EQ(std::memcmp(in, out, size - 3), 0);
        for (uvm_mem_t *m : {src, dst, vid})
            ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    }
}

TEST_P(MemTest, PeerMappingReadsTheOwnersData) {
    if (!peers())
        GTEST_SKIP() << "needs two GPUs with peer access";
    for (uint64_t chunk : {4 * K, 64 * K, 2 * M}) {
        const uint64_t size = 4 * chunk;
        uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, size, 0, chunk);
        uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, size);
        uint8_t *host = cpu(sys);
        for (uint64_t i = 0; i < size; ++i)
            host[i] = pattern(i, 7);
        ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, sys, 0), UVM_OK);
        ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, vid, 0), UVM_OK);
        ASSERT_EQ(copy(0, vid, UVM_VIEW_KERNEL, sys, UVM_VIEW_KERNEL, size), UVM_OK);
        std::memset(host, 0, size);
        // GPU 1 reaches GPU 0's vidmem through its own kernel mapping of it.
        ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, vid, 1), UVM_OK);
        ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, sys, 1), UVM_OK);
        uvm_gpu_phys_address_t pa;
        ASSERT_EQ(uvm_mem_gpu_phys_address(mgr_, vid, 1, 0, chunk, &pa), UVM_OK);
        EXPECT_EQ(pa.aperture, UVM_APERTURE_PEER);
        EXPECT_EQ(pa.peer_gpu, 0u);
        EXPECT_EQ(stats(1).peer_mappings, 1u);
        ASSERT_EQ(copy(1, sys, UVM_VIEW_KERNEL, vid, UVM_VIEW_KERNEL, size), UVM_OK);
        for (uint64_t i = 0; i < size; ++i)
            ASSERT_EQ(host[i], pattern(i, 7)) << i;
        ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
        EXPECT_EQ(stats(1).peer_mappings, 0u);
    }
}

TEST_P(MemTest, DmaAddressesPerGpu) {
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 3 * 64 * K, 0, 64 * K);
    uint8_t *host = cpu(sys);
    for (uint64_t i = 0; i < 3 * 64 * K; ++i)
        host[i] = pattern(i, 3);
    for (uint32_t g = 0; g < gpus_; ++g) {
        uvm_gpu_phys_address_t pa;
        EXPECT_EQ(uvm_mem_gpu_phys_address(mgr_, sys, g, 0, 1, &pa), UVM_ERR_NOT_MAPPED);
        ASSERT_EQ(uvm_mem_map_gpu_phys(mgr_, sys, g), UVM_OK);
        EXPECT_EQ(uvm_mem_map_gpu_phys(mgr_, sys, g), UVM_ERR_ALREADY_MAPPED);
        uvm_gpu_phys_address_t first, second;
        ASSERT_EQ(uvm_mem_gpu_phys_address(mgr_, sys, g, 0, 3 * 64 * K, &first), UVM_OK);
        EXPECT_EQ(first.aperture, UVM_APERTURE_SYS);
        ASSERT_EQ(uvm_mem_gpu_phys_address(mgr_, sys, g, 64 * K + 9, 1, &second), UVM_OK);
        EXPECT_EQ(second.address, first.address + 64 * K + 9);
        EXPECT_EQ(info(sys).gpu_phys_mask & (1u << g), 1u << g);
        // The copy engine reads through the DMA address: the data is the CPU's.
        uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, 3 * 64 * K, g, 64 * K);
        uvm_mem_t *back = alloc(UVM_BACKING_SYSMEM, 3 * 64 * K);
        ASSERT_EQ(uvm_mem_map_gpu_phys(mgr_, back, g), UVM_OK);
        ASSERT_EQ(copy(g, vid, UVM_VIEW_PHYSICAL, sys, UVM_VIEW_PHYSICAL, 3 * 64 * K), UVM_OK);
        ASSERT_EQ(copy(g, back, UVM_VIEW_PHYSICAL, vid, UVM_VIEW_PHYSICAL, 3 * 64 * K), UVM_OK);
        EXPECT_EQ(std::memcmp(cpu(back), host, 3 * 64 * K), 0);
        ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr_, back), UVM_OK);
    }
    ASSERT_EQ(uvm_mem_unmap_gpu_phys(mgr_, sys, 0), UVM_OK);
    EXPECT_EQ(uvm_mem_unmap_gpu_phys(mgr_, sys, 0), UVM_ERR_NOT_MAPPED);
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);  // still mapped on the other GPUs
}

TEST_P(MemTest, VidmemPhysicalAddressesAndContiguity) {
    uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, 8 * 4 * K, 0, 4 * K);
    uvm_gpu_phys_address_t pa;
    ASSERT_EQ(uvm_mem_gpu_phys_address(mgr_, vid, 0, 0, 8 * 4 * K, &pa), UVM_OK);
    EXPECT_EQ(pa.aperture, UVM_APERTURE_VID);
    EXPECT_EQ(pa.address % (4 * K), 0u);
    // A fresh PMM hands out consecutive 4K chunks: the object is contiguous.
    EXPECT_TRUE(pa.contiguous);
    EXPECT_EQ(uvm_mem_map_gpu_phys(mgr_, vid, 0), UVM_ERR_ALREADY_MAPPED);
    EXPECT_EQ(uvm_mem_unmap_gpu_phys(mgr_, vid, 0), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(uvm_mem_gpu_phys_address(mgr_, vid, 0, 8 * 4 * K, 1, &pa), UVM_ERR_OUT_OF_RANGE);
    EXPECT_EQ(uvm_mem_gpu_phys_address(mgr_, vid, 0, 0, 8 * 4 * K + 1, &pa), UVM_ERR_OUT_OF_RANGE);
    // Free every other chunk-sized object between two allocations: a new
    // object does not go over the holes (its chunks would not be contiguous)
    // but on a run that fits; a one-chunk object fills a hole.
    std::vector<uvm_mem_t *> small;
    for (int i = 0; i < 8; ++i)
        small.push_back(alloc(UVM_BACKING_VIDMEM, 4 * K, 0, 4 * K));
    for (int i = 0; i < 8; i += 2)
        ASSERT_EQ(uvm_mem_free(mgr_, small[i]), UVM_OK);
    // Freed one-chunk objects stay in this thread's chunk cache; trim gives
    // them back to the PMM.
    ASSERT_EQ(uvm_gpu_trim(mgr_, 0, nullptr), UVM_OK);
    uvm_mem_t *holes = alloc(UVM_BACKING_VIDMEM, 4 * 4 * K, 0, 4 * K);
    ASSERT_EQ(uvm_mem_gpu_phys_address(mgr_, holes, 0, 0, 4 * 4 * K, &pa), UVM_OK);
    EXPECT_TRUE(pa.contiguous);
    for (int i = 1; i < 8; i += 2) {
        uvm_gpu_phys_address_t neighbour;
        ASSERT_EQ(uvm_mem_gpu_phys_address(mgr_, small[i], 0, 0, 4 * K, &neighbour), UVM_OK);
        EXPECT_TRUE(neighbour.address + 4 * K <= pa.address || neighbour.address >= pa.address + 4 * 4 * K);
    }
    for (int i = 1; i < 8; i += 2)
        ASSERT_EQ(uvm_mem_free(mgr_, small[i]), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, holes), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
}

TEST_P(MemTest, UnmappingPhysRemovesTheVirtualMappings) {
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 64 * K);
    const uvm_gpu_stats_t before = stats(0);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, sys, 0), UVM_OK);  // makes the phys mapping too
    map_gpu_user(sys, 0, reinterpret_cast<uint64_t>(unused_range(64 * K, 2 * M)));
    EXPECT_EQ(info(sys).gpu_phys_mask & 1u, 1u);
    EXPECT_EQ(stats(0).kernel_mappings, before.kernel_mappings + 1);
    ASSERT_EQ(uvm_mem_unmap_gpu_phys(mgr_, sys, 0), UVM_OK);
    const uvm_mem_info_t i = info(sys);
    EXPECT_EQ(i.gpu_phys_mask & 1u, 0u);
    EXPECT_EQ(i.gpu_kernel_mask & 1u, 0u);
    EXPECT_EQ(i.gpu_user_mask & 1u, 0u);
    EXPECT_EQ(i.user_address, 0u);
    const uvm_gpu_stats_t after = stats(0);
    EXPECT_EQ(after.kernel_mappings, before.kernel_mappings);
    EXPECT_EQ(after.user_mappings, before.user_mappings);
    EXPECT_EQ(after.phys_mappings, before.phys_mappings);
    EXPECT_EQ(after.page_table_bytes, before.page_table_bytes);
    uint64_t va;
    EXPECT_EQ(uvm_mem_gpu_kernel_address(mgr_, sys, 0, 0, &va), UVM_ERR_NOT_MAPPED);
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
}

TEST_P(MemTest, UserAddressIsOneForCpuAndEveryGpu) {
    if (on_cuda()) {
        // Host pages: the GPUs reach them at their CPU user address (registered there).
        uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 2 * M, 0, 0, UVM_MEM_USER_MAPPABLE);
        void *where = unused_range(2 * M, 2 * M);
        ASSERT_EQ(uvm_mem_map_cpu_user(mgr_, sys, where), UVM_OK);
        ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, sys, 0, 0), UVM_OK);
        uint64_t sva = 0;
        ASSERT_EQ(uvm_mem_gpu_user_address(mgr_, sys, 0, 0, &sva), UVM_OK);
        EXPECT_EQ(sva, reinterpret_cast<uint64_t>(where));
        uvm_mem_span_t sv{sys, 0, UVM_VIEW_USER};
        ASSERT_EQ(uvm_mem_memset(mgr_, 0, &sv, 0x5C, 2 * M), UVM_OK);
        EXPECT_EQ(static_cast<uint8_t *>(where)[0], 0x5C);
        EXPECT_EQ(static_cast<uint8_t *>(where)[2 * M - 1], 0x5C);
        if (peers())
            ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, sys, 1, 0), UVM_OK);
        // The CPU mapping goes; the GPU's, resting on the same pages, stays.
        ASSERT_EQ(uvm_mem_unmap_cpu_user(mgr_, sys), UVM_OK);
        ASSERT_EQ(uvm_mem_memset(mgr_, 0, &sv, 0x5D, 2 * M), UVM_OK);
        EXPECT_EQ(cpu(sys)[7], 0x5D);
        ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
        uvm_mem_t *priv = alloc(UVM_BACKING_SYSMEM, 2 * M);
        EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, priv, 0, 0), UVM_ERR_NOT_SUPPORTED);  // private pages
        ASSERT_EQ(uvm_mem_free(mgr_, priv), UVM_OK);
        // Vidmem of 2M chunks takes a chosen address, on every GPU, where it
        // was allocated remappable; pool memory (large handles) cannot.
        uvm_mem_t *pooled = alloc(UVM_BACKING_VIDMEM, 4 * M);
        uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, 4 * M, 0, 0, UVM_MEM_USER_MAPPABLE);
        const uint64_t addr = gpu_user_range(4 * M, 2 * M);
        EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, pooled, 0, addr), UVM_ERR_NOT_SUPPORTED);
        EXPECT_EQ(info(pooled).user_address, 0u);
        ASSERT_EQ(uvm_mem_free(mgr_, pooled), UVM_OK);
        ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, vid, 0, addr), UVM_OK);
        uint64_t gva;
        ASSERT_EQ(uvm_mem_gpu_user_address(mgr_, vid, 0, 5, &gva), UVM_OK);
        EXPECT_EQ(gva, addr + 5);
        uvm_mem_t *host = alloc(UVM_BACKING_SYSMEM, 4 * M);
        ASSERT_EQ(uvm_mem_map_gpu_phys(mgr_, host, 0), UVM_OK);
        uvm_mem_span_t v{vid, 0, UVM_VIEW_USER};
        ASSERT_EQ(uvm_mem_memset(mgr_, 0, &v, 0xC3, 4 * M), UVM_OK);
        ASSERT_EQ(copy(0, host, UVM_VIEW_PHYSICAL, vid, UVM_VIEW_PHYSICAL, 4 * M), UVM_OK);
        EXPECT_EQ(cpu(host)[4 * M - 1], 0xC3);
        if (peers()) {
            EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, vid, 1, addr + 2 * M), UVM_ERR_INVALID_ARGUMENT);
            ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, vid, 1, 0), UVM_OK);
        }
        uvm_mem_t *other = alloc(UVM_BACKING_VIDMEM, 2 * M, 0, 0, UVM_MEM_USER_MAPPABLE);
        EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, other, 0, addr + 2 * M), UVM_ERR_ADDRESS_IN_USE);
        ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
        ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, other, 0, addr + 2 * M), UVM_OK);  // released with the object
        ASSERT_EQ(uvm_mem_free(mgr_, other), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr_, host), UVM_OK);
        return;
    }
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 2 * M, 0, 0, UVM_MEM_USER_MAPPABLE);
    uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, 2 * M);
    void *where = unused_range(2 * M, 2 * M);
    const uint64_t addr = reinterpret_cast<uint64_t>(where);
    ASSERT_EQ(uvm_mem_map_cpu_user(mgr_, sys, where), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, sys, 0, 0), UVM_OK);  // 0: the address already set
    uint64_t gva;
    ASSERT_EQ(uvm_mem_gpu_user_address(mgr_, sys, 0, 5, &gva), UVM_OK);
    EXPECT_EQ(gva, addr + 5);
    if (gpus_ > 1) {
        EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, sys, 1, addr + 2 * M), UVM_ERR_INVALID_ARGUMENT);
        ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, sys, 1, addr), UVM_OK);
    }
    // A GPU write through the user mapping lands at the CPU user address.
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, vid, 0), UVM_OK);
    uvm_mem_span_t v{vid, 0, UVM_VIEW_KERNEL};
    ASSERT_EQ(uvm_mem_memset(mgr_, 0, &v, 0xC3, 2 * M), UVM_OK);
    ASSERT_EQ(copy(0, sys, UVM_VIEW_USER, vid, UVM_VIEW_KERNEL, 2 * M), UVM_OK);
    EXPECT_EQ(static_cast<uint8_t *>(where)[0], 0xC3);
    EXPECT_EQ(static_cast<uint8_t *>(where)[2 * M - 1], 0xC3);
    // Another object cannot take an overlapping user range, on the CPU or a GPU.
    EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, vid, 0, addr), UVM_ERR_ADDRESS_IN_USE);
    // The address stays while any user mapping holds it.
    ASSERT_EQ(uvm_mem_unmap_cpu_user(mgr_, sys), UVM_OK);
    EXPECT_EQ(info(sys).user_address, addr);
    EXPECT_EQ(uvm_mem_unmap_cpu_user(mgr_, sys), UVM_ERR_NOT_MAPPED);
    for (uint32_t g = 0; g < std::min(gpus_, 2u); ++g)
        ASSERT_EQ(uvm_mem_unmap_gpu_user(mgr_, sys, g), UVM_OK);
    EXPECT_EQ(info(sys).user_address, 0u);
    ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, vid, 0, addr), UVM_OK);  // free again
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
    // A user address a CPU user mapping set 4 KiB aligned is no GPU's for 2M
    // pages: `address` 0 takes it, so the GPU mapping is MISALIGNED, and
    // nothing changes. (Found by the API fuzzer: the backend refused it as
    // INVALID_ARGUMENT.)
    uvm_mem_t *big = alloc(UVM_BACKING_SYSMEM, 2 * M, 0, UVM_PAGE_SIZE_2M, UVM_MEM_USER_MAPPABLE);
    void *off = static_cast<char *>(unused_range(4 * M, 2 * M)) + 4 * K;
    ASSERT_EQ(uvm_mem_map_cpu_user(mgr_, big, off), UVM_OK);
    EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, big, 0, 0), UVM_ERR_MISALIGNED);
    const uvm_mem_info_t bi = info(big);
    EXPECT_EQ(bi.user_address, reinterpret_cast<uint64_t>(off));
    EXPECT_EQ(bi.gpu_user_mask, 0u);
    ASSERT_EQ(uvm_mem_free(mgr_, big), UVM_OK);
}

TEST_P(MemTest, UserMappingNeverReplacesTheCallersMemory) {
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 8 * K, 0, 0, UVM_MEM_USER_MAPPABLE);
    void *mine = mmap(nullptr, 16 * K, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mine, MAP_FAILED);
    std::memset(mine, 0x77, 16 * K);
    EXPECT_EQ(uvm_mem_map_cpu_user(mgr_, sys, static_cast<uint8_t *>(mine) + 4 * K), UVM_ERR_ADDRESS_IN_USE);
    EXPECT_EQ(static_cast<uint8_t *>(mine)[4 * K], 0x77);
    EXPECT_EQ(info(sys).user_address, 0u);  // the failed call left no address behind
    EXPECT_EQ(uvm_mem_map_cpu_user(mgr_, sys, static_cast<uint8_t *>(unused_range(8 * K, 4 * K)) + 1),
              UVM_ERR_MISALIGNED);
    munmap(mine, 16 * K);
    uvm_mem_t *big = alloc(UVM_BACKING_SYSMEM, 2 * M);
    EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, big, 0, reinterpret_cast<uint64_t>(unused_range(4 * M, 2 * M)) + 4 * K),
              UVM_ERR_MISALIGNED);  // GPU user mappings are aligned to the chunk size
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, big), UVM_OK);
}

TEST_P(MemTest, VidmemCpuMappingsOnlyWhereCoherent) {
    uvm_gpu_info_t gi;
    ASSERT_EQ(uvm_gpu_info(mgr_, 0, &gi), UVM_OK);
    uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, 3 * 64 * K, 0, 64 * K);
    if (!gi.cpu_coherent) {
        EXPECT_EQ(uvm_mem_map_cpu_kernel(mgr_, vid), UVM_ERR_NOT_SUPPORTED);
        EXPECT_EQ(uvm_mem_map_cpu_user(mgr_, vid, unused_range(3 * 64 * K, 64 * K)), UVM_ERR_NOT_SUPPORTED);
        EXPECT_FALSE(info(vid).cpu_kernel_mapped);
        ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
        return;
    }
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, vid, 0), UVM_OK);
    uvm_mem_span_t v{vid, 0, UVM_VIEW_KERNEL};
    ASSERT_EQ(uvm_mem_memset(mgr_, 0, &v, 0x11, 3 * 64 * K), UVM_OK);
    uint8_t *k = cpu(vid);
    void *where = unused_range(3 * 64 * K, 64 * K);
    ASSERT_EQ(uvm_mem_map_cpu_user(mgr_, vid, where), UVM_OK);
    EXPECT_EQ(k[0], 0x11);
    EXPECT_EQ(k[3 * 64 * K - 1], 0x11);
    k[64 * K] = 0x22;  // the CPU writes, the user mapping and the GPU see it
    EXPECT_EQ(static_cast<uint8_t *>(where)[64 * K], 0x22);
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 64 * K);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, sys, 0), UVM_OK);
    ASSERT_EQ(copy(0, sys, UVM_VIEW_KERNEL, vid, UVM_VIEW_KERNEL, 64 * K, 0, 64 * K), UVM_OK);
    EXPECT_EQ(cpu(sys)[0], 0x22);
    ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
}

TEST_P(MemTest, FreeRemovesEveryMapping) {
    uvm_manager_stats_t m0;
    ASSERT_EQ(uvm_manager_stats(mgr_, &m0), UVM_OK);
    std::vector<uvm_gpu_stats_t> before;
    for (uint32_t g = 0; g < gpus_; ++g)
        before.push_back(stats(g));
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 300 * K, 0, 0, UVM_MEM_USER_MAPPABLE);
    uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, 300 * K);
    ASSERT_EQ(uvm_mem_map_cpu_kernel(mgr_, sys), UVM_OK);
    ASSERT_EQ(uvm_mem_map_cpu_user(mgr_, sys, unused_range(300 * K, 64 * K)), UVM_OK);
    for (uint32_t g = 0; g < gpus_; ++g) {
        ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, sys, g), UVM_OK);
        map_gpu_user(sys, g, 0);
        if (g == 0 || peers())
            ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, vid, g), UVM_OK);
    }
    map_gpu_user(vid, 0, gpu_user_range(320 * K, 64 * K));
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
    uvm_manager_stats_t m1;
    ASSERT_EQ(uvm_manager_stats(mgr_, &m1), UVM_OK);
    EXPECT_EQ(m1.objects, m0.objects);
    EXPECT_EQ(m1.cpu_kernel_mappings, m0.cpu_kernel_mappings);
    EXPECT_EQ(m1.cpu_user_mappings, m0.cpu_user_mappings);
    for (uint32_t g = 0; g < gpus_; ++g) {
        const uvm_gpu_stats_t s = stats(g);
        EXPECT_EQ(s.phys_mappings, before[g].phys_mappings);
        EXPECT_EQ(s.kernel_mappings, before[g].kernel_mappings);
        EXPECT_EQ(s.user_mappings, before[g].user_mappings);
        EXPECT_EQ(s.peer_mappings, before[g].peer_mappings);
        EXPECT_EQ(s.page_table_bytes, before[g].page_table_bytes);
        EXPECT_EQ(s.vidmem_objects, before[g].vidmem_objects);
    }
}

TEST_P(MemTest, EveryRootChunkIsWholeAfterFreeingEverything) {
    std::mt19937_64 rng(42);
    std::vector<uvm_mem_t *> live;
    for (int i = 0; i < 300; ++i) {
        const uint64_t chunk = kChunks[1 + rng() % 3];
        const uint64_t size = 1 + rng() % (chunk == 2 * M ? 5 * M : 40 * chunk);
        live.push_back(alloc(UVM_BACKING_VIDMEM, size, 0, chunk));
        if (rng() % 3 == 0) {
            const size_t j = rng() % live.size();
            ASSERT_EQ(uvm_mem_free(mgr_, live[j]), UVM_OK);
            live[j] = live.back();
            live.pop_back();
        }
    }
    EXPECT_GT(stats(0).chunks_split[2], 0u);
    for (uvm_mem_t *m : live)
        ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    // The PMM merges what it gets back; chunks this thread still caches are
    // not back yet (reading statistics leaves them cached): give them back.
    uvm::from_handle(mgr_)->gpu(0).caches.flush_all();
    const uvm_gpu_stats_t s = stats(0);
    EXPECT_GT(s.root_chunks, 0u);
    EXPECT_EQ(s.bytes_free[2], s.root_chunks * 2 * M);
    EXPECT_EQ(s.bytes_free[0] + s.bytes_free[1], 0u);
    EXPECT_EQ(s.chunks_split[1] + s.chunks_split[2], 0u);
    uvm_gpu_info_t before;
    ASSERT_EQ(uvm_gpu_info(mgr_, 0, &before), UVM_OK);
    uint64_t released = 0;
    ASSERT_EQ(uvm_gpu_trim(mgr_, 0, &released), UVM_OK);
    EXPECT_EQ(released, s.root_chunks * 2 * M);
    EXPECT_EQ(stats(0).root_chunks, 0u);
    uvm_gpu_info_t after;
    ASSERT_EQ(uvm_gpu_info(mgr_, 0, &after), UVM_OK);
    EXPECT_GE(after.memory_free, before.memory_free + released);
}

TEST_P(MemTest, MemsetAndZeroFlag) {
    uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, 5 * 64 * K, 0, 64 * K);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, vid, 0), UVM_OK);
    uvm_mem_span_t v{vid, 0, UVM_VIEW_KERNEL};
    ASSERT_EQ(uvm_mem_memset(mgr_, 0, &v, 0xEE, 5 * 64 * K), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
    // The same chunks come back dirty unless zeroing is asked for.
    uvm_mem_t *zeroed = alloc(UVM_BACKING_VIDMEM, 5 * 64 * K, 0, 64 * K, UVM_MEM_ZERO);
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 5 * 64 * K);
    uint8_t *host = cpu(sys);
    std::memset(host, 0xFF, 5 * 64 * K);
    ASSERT_EQ(uvm_mem_map_gpu_phys(mgr_, sys, 0), UVM_OK);
    ASSERT_EQ(copy(0, sys, UVM_VIEW_PHYSICAL, zeroed, UVM_VIEW_PHYSICAL, 5 * 64 * K), UVM_OK);
    for (uint64_t i = 0; i < 5 * 64 * K; ++i)
        ASSERT_EQ(host[i], 0) << i;
    ASSERT_EQ(uvm_mem_free(mgr_, zeroed), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
}

TEST_P(MemTest, ObjectsOfManyRootChunks) {
    const uint64_t size = 64 * M + 4 * K;
    uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, size, 0, 64 * K);
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, size, 0, 4 * K);
    EXPECT_EQ(info(vid).chunk_count, align_up(size, 64 * K) / (64 * K));
    EXPECT_GE(stats(0).root_chunks, 33u);
    uint8_t *host = cpu(sys);
    for (uint64_t i = 0; i < size; i += 4093)
        host[i] = pattern(i, 9);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, vid, 0), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, sys, 0), UVM_OK);
    ASSERT_EQ(copy(0, vid, UVM_VIEW_KERNEL, sys, UVM_VIEW_KERNEL, size), UVM_OK);
    std::memset(host, 0, size);
    ASSERT_EQ(copy(0, sys, UVM_VIEW_KERNEL, vid, UVM_VIEW_KERNEL, size), UVM_OK);
    for (uint64_t i = 0; i < size; i += 4093)
        ASSERT_EQ(host[i], pattern(i, 9)) << i;
    uvm_page_tree_info_t t;
    ASSERT_EQ(uvm_gpu_page_tree_info(mgr_, 0, UVM_VA_SPACE_KERNEL, &t), UVM_OK);
    // On CUDA both kernel views are placed by the backend (a range of the
    // physical window, the registered pages' device pointer): the driver's
    // page tables for them exist already, so the modelled tree has none.
    const bool placed = GetParam() == "cuda";
    EXPECT_EQ(t.mapped_bytes[UVM_CHUNK_INDEX_64K], placed ? 0 : align_up(size, 64 * K));
    EXPECT_EQ(t.mapped_bytes[UVM_CHUNK_INDEX_4K], placed ? 0 : align_up(size, 4 * K));
    ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
}

TEST_P(MemTest, ManagedObjectsWithAdviceAndPrefetch) {
    uvm_mem_alloc_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backing = UVM_BACKING_MANAGED;
    p.size = 6 * M;
    uvm_mem_t *mem = nullptr;
    const uvm_status_t s = uvm_mem_alloc(mgr_, &p, &mem);
    if (!on_cuda()) {
        EXPECT_EQ(s, UVM_ERR_NOT_SUPPORTED) << "the sim backend has no managed memory";
        return;
    }
    ASSERT_EQ(s, UVM_OK) << uvm_status_string(s);
    {
        // Warm-up: the first managed object brings up the driver's managed
        // memory machinery on the GPU, once per process. Free it all, then
        // take the leak check's baseline.
        uvm_mem_t *warm = nullptr;
        ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &warm), UVM_OK);
        ASSERT_EQ(uvm_mem_prefetch(mgr_, warm, 0, 6 * M, 0), UVM_OK);
        ASSERT_EQ(uvm_mem_prefetch(mgr_, warm, 0, 6 * M, UVM_PROCESSOR_CPU), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr_, warm), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
        rebaseline_free_memory();
        ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &mem), UVM_OK);
    }
    const uvm_mem_info_t i = info(mem);
    EXPECT_EQ(i.backing, UVM_BACKING_MANAGED);
    EXPECT_EQ(i.chunk_size, 2 * M);
    uvm_manager_stats_t ms;
    ASSERT_EQ(uvm_manager_stats(mgr_, &ms), UVM_OK);
    EXPECT_EQ(ms.managed_objects, 1u);
    EXPECT_EQ(ms.managed_bytes, 6 * M);

    // The CPU writes through the managed address ...
    uint8_t *host = cpu(mem);
    for (uint64_t k = 0; k < 6 * M; ++k)
        host[k] = pattern(k, 11);
    ASSERT_EQ(uvm_mem_advise(mgr_, mem, UVM_ADVISE_SET_PREFERRED_LOCATION, 0), UVM_OK);
    ASSERT_EQ(uvm_mem_advise(mgr_, mem, UVM_ADVISE_SET_ACCESSED_BY, UVM_PROCESSOR_CPU), UVM_OK);
    ASSERT_EQ(uvm_mem_advise(mgr_, mem, UVM_ADVISE_SET_READ_MOSTLY, 0), UVM_OK);
    ASSERT_EQ(uvm_mem_advise(mgr_, mem, UVM_ADVISE_UNSET_READ_MOSTLY, 0), UVM_OK);
    ASSERT_EQ(uvm_mem_prefetch(mgr_, mem, 0, 6 * M, 0), UVM_OK);
    // ... GPU 0's copy engine reads it through its kernel address (the same one) ...
    uint64_t va = 0;
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, mem, 0), UVM_OK);
    ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, mem, 0, 0, &va), UVM_OK);
    EXPECT_EQ(va, reinterpret_cast<uint64_t>(host));
    uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, 6 * M);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, vid, 0), UVM_OK);
    ASSERT_EQ(copy(0, vid, UVM_VIEW_KERNEL, mem, UVM_VIEW_KERNEL, 6 * M), UVM_OK);
    // ... and writes it back changed; after a prefetch to the CPU the CPU sees it.
    uvm_mem_span_t half{mem, 0, UVM_VIEW_KERNEL};
    ASSERT_EQ(uvm_mem_memset(mgr_, 0, &half, 0x5C, 3 * M), UVM_OK);
    ASSERT_EQ(uvm_mem_prefetch(mgr_, mem, 0, 6 * M, UVM_PROCESSOR_CPU), UVM_OK);
    EXPECT_EQ(host[0], 0x5C);
    EXPECT_EQ(host[3 * M - 1], 0x5C);
    EXPECT_EQ(host[3 * M], pattern(3 * M, 11));
    ASSERT_EQ(copy(0, mem, UVM_VIEW_KERNEL, vid, UVM_VIEW_KERNEL, 6 * M), UVM_OK);
    ASSERT_EQ(uvm_mem_prefetch(mgr_, mem, 0, 6 * M, UVM_PROCESSOR_CPU), UVM_OK);
    size_t wrong = 0;
    for (uint64_t k = 0; k < 6 * M; ++k)
        wrong += host[k] != pattern(k, 11);
    EXPECT_EQ(wrong, 0u);
    ASSERT_EQ(uvm_manager_stats(mgr_, &ms), UVM_OK);
    EXPECT_EQ(ms.prefetches, 3u + 2u);  // with the warm-up's two
    EXPECT_EQ(ms.prefetched_bytes, 30 * M);

    // What managed memory cannot do, and bad arguments.
    EXPECT_EQ(uvm_mem_map_cpu_user(mgr_, mem, unused_range(6 * M, 2 * M)), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(uvm_mem_map_gpu_phys(mgr_, mem, 0), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, mem, 0, gpu_user_range(6 * M, 2 * M)), UVM_ERR_NOT_SUPPORTED);
    uvm_gpu_phys_address_t pa;
    EXPECT_EQ(uvm_mem_gpu_phys_address(mgr_, mem, 0, 0, 1, &pa), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(uvm_mem_advise(mgr_, mem, static_cast<uvm_managed_advice_t>(99), 0), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_advise(mgr_, mem, UVM_ADVISE_SET_ACCESSED_BY, static_cast<int32_t>(gpus_)), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_mem_prefetch(mgr_, mem, 6 * M, 1, 0), UVM_ERR_OUT_OF_RANGE);
    EXPECT_EQ(uvm_mem_prefetch(mgr_, mem, 0, 0, 0), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_advise(mgr_, vid, UVM_ADVISE_SET_READ_MOSTLY, 0), UVM_ERR_NOT_SUPPORTED);
    // Never more managed memory than the GPU has free: refused before the driver is asked.
    uvm_gpu_info_t gi;
    ASSERT_EQ(uvm_gpu_info(mgr_, 0, &gi), UVM_OK);
    p.size = gi.memory_total;
    uvm_mem_t *huge = nullptr;
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &huge), UVM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    ASSERT_EQ(uvm_manager_stats(mgr_, &ms), UVM_OK);
    EXPECT_EQ(ms.managed_objects, 0u);
}

// uvm_mem_map_gpu_user with address 0 and none set: the manager picks an
// address every GPU and the CPU can use (on CUDA, the object's range of the
// physical window), for vidmem of every chunk size.
TEST_P(MemTest, ManagerPicksTheUserAddress) {
    uvm_mem_t *host = alloc(UVM_BACKING_SYSMEM, 6 * M);
    ASSERT_EQ(uvm_mem_map_gpu_phys(mgr_, host, 0), UVM_OK);
    for (uint64_t chunk : {4 * K, 64 * K, 2 * M}) {
        const uint64_t size = chunk == 2 * M ? 6 * M : 5 * chunk;
        uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, size, 0, chunk);
        ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, vid, 0, 0), UVM_OK) << chunk;
        const uint64_t addr = info(vid).user_address;
        EXPECT_NE(addr, 0u);
        EXPECT_EQ(addr % chunk, 0u);
        uint64_t gva = 0;
        ASSERT_EQ(uvm_mem_gpu_user_address(mgr_, vid, 0, 7, &gva), UVM_OK);
        EXPECT_EQ(gva, addr + 7);
        if (peers()) {
            ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, vid, 1, 0), UVM_OK);  // the same address on the peer
            ASSERT_EQ(uvm_mem_gpu_user_address(mgr_, vid, 1, 0, &gva), UVM_OK);
            EXPECT_EQ(gva, addr);
        }
        // Another object gets another range; the first one's is taken.
        uvm_mem_t *next = alloc(UVM_BACKING_VIDMEM, size, 0, chunk);
        ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, next, 0, 0), UVM_OK);
        const uint64_t addr2 = info(next).user_address;
        EXPECT_TRUE(addr2 >= addr + size || addr2 + size <= addr);
        // Bytes written through the user view land in the object.
        uvm_mem_span_t v{vid, 0, UVM_VIEW_USER};
        ASSERT_EQ(uvm_mem_memset(mgr_, 0, &v, 0x5A, size), UVM_OK);
        uvm_mem_span_t n{next, 0, UVM_VIEW_USER};
        ASSERT_EQ(uvm_mem_memset(mgr_, 0, &n, 0xA5, size), UVM_OK);
        std::memset(cpu(host), 0, size);
        ASSERT_EQ(copy(0, host, UVM_VIEW_PHYSICAL, vid, UVM_VIEW_PHYSICAL, size), UVM_OK);
        EXPECT_EQ(cpu(host)[0], 0x5A);
        EXPECT_EQ(cpu(host)[size - 1], 0x5A);
        ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr_, next), UVM_OK);
    }
    // Shareable host memory: a picked address is free on the CPU too, so the
    // CPU user mapping joins the GPU's there (on CUDA the GPU reaches the
    // pages through that CPU mapping, made with the GPU mapping).
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 2 * M, 0, 0, UVM_MEM_USER_MAPPABLE);
    ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, sys, 0, 0), UVM_OK);
    const uint64_t at = info(sys).user_address;
    ASSERT_NE(at, 0u);
    uvm_mem_span_t sv{sys, 0, UVM_VIEW_USER};
    ASSERT_EQ(uvm_mem_memset(mgr_, 0, &sv, 0x66, 2 * M), UVM_OK);
    EXPECT_EQ(cpu(sys)[2 * M - 1], 0x66);
    void *where = reinterpret_cast<void *>(static_cast<uintptr_t>(at));
    ASSERT_EQ(uvm_mem_map_cpu_user(mgr_, sys, where), UVM_OK);
    EXPECT_EQ(static_cast<uint8_t *>(where)[9], 0x66);
    static_cast<uint8_t *>(where)[5] = 0x77;
    EXPECT_EQ(cpu(sys)[5], 0x77);
    ASSERT_EQ(uvm_mem_unmap_gpu_user(mgr_, sys, 0), UVM_OK);
    EXPECT_EQ(static_cast<uint8_t *>(where)[5], 0x77);  // the CPU mapping is still there
    ASSERT_EQ(uvm_mem_unmap_cpu_user(mgr_, sys), UVM_OK);
    EXPECT_EQ(info(sys).user_address, 0u);
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, host), UVM_OK);
}

// UVM_MEM_GPU_MAPPED: memory and a kernel-usable address in one call.
TEST_P(MemTest, GpuMappedFlagMapsAtAllocation) {
    for (uvm_backing_t backing : {UVM_BACKING_VIDMEM, UVM_BACKING_SYSMEM}) {
        for (uint64_t size : {4 * K, 12 * K, 100 * K, 2 * M, 6 * M}) {
            const uint32_t gpu = backing == UVM_BACKING_SYSMEM ? gpus_ - 1 : 0;
            uvm_mem_t *mem = alloc(backing, size, gpu, 0, UVM_MEM_GPU_MAPPED);
            ASSERT_NE(mem, nullptr);
            const uvm_mem_info_t i = info(mem);
            EXPECT_EQ(i.gpu, gpu);
            EXPECT_EQ(i.gpu_kernel_mask, 1u << gpu);
            uint64_t va = 0;
            ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, mem, gpu, 0, &va), UVM_OK);
            EXPECT_EQ(i.gpu_kernel_address, va);
            EXPECT_NE(va, 0u);
            uvm_mem_span_t k{mem, 0, UVM_VIEW_KERNEL};
            ASSERT_EQ(uvm_mem_memset(mgr_, gpu, &k, 0x3C, size), UVM_OK);
            ASSERT_EQ(uvm_mem_unmap_gpu_kernel(mgr_, mem, gpu), UVM_OK);
            EXPECT_EQ(info(mem).gpu_kernel_address, 0u);
            ASSERT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
        }
    }
    // A failed mapping fails the allocation and leaves nothing behind.
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_MANAGED, 2 * M, 0, 0, UVM_MEM_GPU_MAPPED);
    uvm_mem_t *managed = nullptr;
    const uvm_status_t s = uvm_mem_alloc(mgr_, &p, &managed);
    if (on_cuda()) {
        ASSERT_EQ(s, UVM_OK);
        EXPECT_EQ(info(managed).gpu_kernel_mask, 1u);
        ASSERT_EQ(uvm_mem_free(mgr_, managed), UVM_OK);
        rebaseline_free_memory();
    } else {
        EXPECT_EQ(s, UVM_ERR_NOT_SUPPORTED);
    }
    uvm_manager_stats_t ms;
    ASSERT_EQ(uvm_manager_stats(mgr_, &ms), UVM_OK);
    EXPECT_EQ(ms.objects, 0u);
}

// A GPU fragmented by small objects freed at random still places, maps and
// serves every new object: runs go where they fit, or the pool grows.
TEST_P(MemTest, FragmentedGpuStillMapsEveryNewObject) {
    std::mt19937_64 rng(2026);
    auto random_size = [&rng]() -> uint64_t {
        switch (rng() % 4) {
            case 0: return (1 + rng() % 15) * 4 * K;        // 4K chunks
            case 1: return (1 + rng() % 31) * 64 * K;       // 64K chunks
            case 2: return (2 + rng() % 6) * 1000 * K;      // 64K chunks, not chunk-aligned
            default: return (1 + rng() % 3) * 2 * M;        // 2M chunks
        }
    };
    std::vector<uvm_mem_t *> live;
    for (int i = 0; i < 300; ++i)
        live.push_back(alloc(UVM_BACKING_VIDMEM, random_size()));
    std::shuffle(live.begin(), live.end(), rng);
    for (size_t i = 0; i < live.size() / 2; ++i)
        ASSERT_EQ(uvm_mem_free(mgr_, live[i]), UVM_OK);
    live.erase(live.begin(), live.begin() + live.size() / 2);
    ASSERT_EQ(uvm_gpu_trim(mgr_, 0, nullptr), UVM_OK);  // cached chunks back: the holes are real
    uvm_mem_t *host = alloc(UVM_BACKING_SYSMEM, 8 * M, 0, 0, UVM_MEM_GPU_MAPPED);
    for (int i = 0; i < 200; ++i) {
        const uint64_t size = random_size();
        const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size, 0, 0, UVM_MEM_GPU_MAPPED);
        uvm_mem_t *mem = nullptr;
        const uvm_status_t s = uvm_mem_alloc(mgr_, &p, &mem);
        ASSERT_EQ(s, UVM_OK) << "object " << i << " of " << size << " bytes: " << uvm_status_string(s);
        uvm_gpu_phys_address_t pa;
        ASSERT_EQ(uvm_mem_gpu_phys_address(mgr_, mem, 0, 0, size, &pa), UVM_OK);
        EXPECT_TRUE(pa.contiguous);
        if (i % 20 == 0) {
            // The kernel view reaches exactly the object's bytes.
            uvm_mem_span_t k{mem, 0, UVM_VIEW_KERNEL};
            ASSERT_EQ(uvm_mem_memset(mgr_, 0, &k, static_cast<uint8_t>(i), size), UVM_OK);
            ASSERT_EQ(copy(0, host, UVM_VIEW_KERNEL, mem, UVM_VIEW_PHYSICAL, size), UVM_OK);
            EXPECT_EQ(cpu(host)[0], static_cast<uint8_t>(i));
            EXPECT_EQ(cpu(host)[size - 1], static_cast<uint8_t>(i));
        }
        live.push_back(mem);
    }
    for (uvm_mem_t *m : live)
        ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, host), UVM_OK);
}

// A range reserved for a caller that places objects itself.
TEST_P(MemTest, UserRangesForCallersThatPlaceObjects) {
    uint64_t range = 0;
    EXPECT_EQ(uvm_user_range_reserve(mgr_, 0, &range), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_user_range_reserve(mgr_, 3 * M, &range), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_user_range_reserve(mgr_, 16 * M, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_user_range_reserve(nullptr, 16 * M, &range), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(uvm_user_range_reserve(mgr_, 16 * M, &range), UVM_OK);
    EXPECT_EQ(range % (2 * M), 0u);
    uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, 4 * M, 0, 0, UVM_MEM_USER_MAPPABLE);
    ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, vid, 0, range + 2 * M), UVM_OK);
    uint64_t gva = 0;
    ASSERT_EQ(uvm_mem_gpu_user_address(mgr_, vid, 0, 9, &gva), UVM_OK);
    EXPECT_EQ(gva, range + 2 * M + 9);
    if (peers()) {
        ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, vid, 1, 0), UVM_OK);
        ASSERT_EQ(uvm_mem_gpu_user_address(mgr_, vid, 1, 0, &gva), UVM_OK);
        EXPECT_EQ(gva, range + 2 * M);
    }
    uvm_mem_span_t v{vid, 0, UVM_VIEW_USER};
    ASSERT_EQ(uvm_mem_memset(mgr_, 0, &v, 0xE1, 4 * M), UVM_OK);
    uvm_mem_t *host = alloc(UVM_BACKING_SYSMEM, 4 * M, 0, 0, UVM_MEM_GPU_MAPPED);
    ASSERT_EQ(copy(0, host, UVM_VIEW_KERNEL, vid, UVM_VIEW_PHYSICAL, 4 * M), UVM_OK);
    EXPECT_EQ(cpu(host)[0], 0xE1);
    EXPECT_EQ(cpu(host)[4 * M - 1], 0xE1);
    // Overlaps inside the range, and a mapping across its edge, are refused.
    uvm_mem_t *other = alloc(UVM_BACKING_VIDMEM, 4 * M, 0, 0, UVM_MEM_USER_MAPPABLE);
    EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, other, 0, range + 4 * M), UVM_ERR_ADDRESS_IN_USE);
    EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, other, 0, range + 14 * M), UVM_ERR_ADDRESS_IN_USE);
    EXPECT_EQ(info(other).user_address, 0u);
    // Addresses the manager picks never fall inside.
    ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, other, 0, 0), UVM_OK);
    const uint64_t picked = info(other).user_address;
    EXPECT_TRUE(picked + 4 * M <= range || picked >= range + 16 * M);
    // Host memory inside: the CPU maps there on sim; on CUDA the driver holds the range.
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 2 * M, 0, 0, UVM_MEM_USER_MAPPABLE);
    void *at = reinterpret_cast<void *>(static_cast<uintptr_t>(range + 8 * M));
    if (on_cuda()) {
        EXPECT_EQ(uvm_mem_map_cpu_user(mgr_, sys, at), UVM_ERR_NOT_SUPPORTED);
    } else {
        ASSERT_EQ(uvm_mem_map_cpu_user(mgr_, sys, at), UVM_OK);
        static_cast<uint8_t *>(at)[3] = 0x42;
        EXPECT_EQ(cpu(sys)[3], 0x42);
    }
    // Not released while anything is mapped inside; released once empty, once.
    EXPECT_EQ(uvm_user_range_release(mgr_, range), UVM_ERR_ADDRESS_IN_USE);
    EXPECT_EQ(uvm_user_range_release(mgr_, range + 2 * M), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
    ASSERT_EQ(uvm_user_range_release(mgr_, range), UVM_OK);
    EXPECT_EQ(uvm_user_range_release(mgr_, range), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(uvm_mem_free(mgr_, other), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, host), UVM_OK);
    // A range left reserved goes back with the manager (no leak reported).
    ASSERT_EQ(uvm_user_range_reserve(mgr_, 2 * M, &range), UVM_OK);
}

// The held pair's objects are parked on free (uvm/manager.h, Manager::parkable):
// the next plain allocation of the same chunk size on the thread takes the
// record and its chunk whole. What it hands out must be a new object in
// every way the API can see, and the memory free memory in every statistic.
TEST_P(MemTest, APlainFreedObjectIsHandedOutAgainAsANewOne) {
    for (uint64_t chunk : {UVM_PAGE_SIZE_4K, UVM_PAGE_SIZE_64K, UVM_PAGE_SIZE_2M}) {
        SCOPED_TRACE(chunk);
        uvm_mem_t *first = alloc(UVM_BACKING_VIDMEM, chunk, 0, chunk);
        ASSERT_NE(first, nullptr);
        ASSERT_EQ(uvm_mem_free(mgr_, first), UVM_OK);
        uvm_gpu_stats_t s = stats(0);
        EXPECT_EQ(s.vidmem_objects, 0u);
        EXPECT_EQ(s.held_live_bytes, 0u) << "a parked object's chunk is free memory";
        EXPECT_GE(s.held_cached_bytes, chunk);
        // The freed handle stays dead, whatever took its memory.
        uvm_mem_t *second = alloc(UVM_BACKING_VIDMEM, chunk / 2, 0, chunk);
        ASSERT_NE(second, nullptr);
        EXPECT_NE(second, first);
        uvm_mem_info_t i;
        EXPECT_EQ(uvm_mem_info(mgr_, first, &i), UVM_ERR_INVALID_HANDLE);
        EXPECT_EQ(uvm_mem_free(mgr_, first), UVM_ERR_INVALID_HANDLE);
        i = info(second);
        EXPECT_EQ(i.size, chunk / 2);
        EXPECT_EQ(i.alloc_size, chunk);
        EXPECT_EQ(i.chunk_size, chunk);
        EXPECT_EQ(i.flags, 0u);
        s = stats(0);
        EXPECT_EQ(s.vidmem_objects, 1u);
        EXPECT_EQ(s.held_live_bytes, chunk);
        ASSERT_EQ(uvm_mem_free(mgr_, second), UVM_OK);
        EXPECT_EQ(stats(0).vidmem_objects, 0u);
    }
    // A trim gives the parked chunks back with the threads' cached ones.
    ASSERT_EQ(uvm_gpu_trim(mgr_, 0, nullptr), UVM_OK);
    const uvm_gpu_stats_t s = stats(0);
    EXPECT_EQ(s.held_live_bytes, 0u);
    EXPECT_EQ(s.bytes_pinned[0] + s.bytes_pinned[1] + s.bytes_pinned[2], 0u);
    if (GetParam() != "cuda")
        EXPECT_EQ(s.held_bytes, 0u);
}

// An object a call reached (here mapped in the GPU's kernel address space)
// is never parked: the next allocation gets a record made new, not one that
// kept any of it.
TEST_P(MemTest, AnObjectACallReachedIsNeverHandedOutAgain) {
    uvm_mem_t *first = alloc(UVM_BACKING_VIDMEM, UVM_PAGE_SIZE_64K, 0, UVM_PAGE_SIZE_64K);
    ASSERT_NE(first, nullptr);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, first, 0), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, first), UVM_OK);
    uvm_mem_t *second = alloc(UVM_BACKING_VIDMEM, UVM_PAGE_SIZE_64K, 0, UVM_PAGE_SIZE_64K);
    ASSERT_NE(second, nullptr);
    const uvm_mem_info_t i = info(second);
    EXPECT_EQ(i.gpu_kernel_mask, 0u);
    EXPECT_EQ(i.gpu_kernel_address, 0u);
    const uvm_gpu_stats_t s = stats(0);
    EXPECT_EQ(s.kernel_mappings, 0u);
    EXPECT_EQ(s.vidmem_objects, 1u);
    ASSERT_EQ(uvm_mem_free(mgr_, second), UVM_OK);
    // One with a tag or flags is made new too, and one made after it plain.
    uvm_mem_alloc_params_t tagged = alloc_params(UVM_BACKING_VIDMEM, UVM_PAGE_SIZE_64K, 0, UVM_PAGE_SIZE_64K);
    tagged.tag = "weights";
    uvm_mem_t *t = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr_, &tagged, &t), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, t), UVM_OK);
    uvm_mem_t *plain = alloc(UVM_BACKING_VIDMEM, UVM_PAGE_SIZE_64K, 0, UVM_PAGE_SIZE_64K);
    ASSERT_NE(plain, nullptr);
    char buf[8192];
    size_t needed = 0;
    ASSERT_EQ(uvm_objects_report(mgr_, UVM_REPORT_TEXT, buf, sizeof(buf), &needed), UVM_OK);
    EXPECT_EQ(std::string(buf).find("weights"), std::string::npos) << buf;
    ASSERT_EQ(uvm_mem_free(mgr_, plain), UVM_OK);
}
