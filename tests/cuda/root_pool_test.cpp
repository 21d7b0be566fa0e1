// The CUDA root pool's policy (cuda/root_pool.h) against a fake driver, so
// that it runs everywhere, GPU or not: handles that double up to the cap, a
// run that gets one handle of its own, halving when the driver is short, a
// handle back to the driver when its last root chunk comes back, remappable
// root chunks as handles of their own, and a peer grant once per handle.
#include <gtest/gtest.h>

#include <map>

#include "common/sizes.h"
#include "cuda/root_pool.h"

using uvm::kRootChunkSize;
using uvm::cuda::RootPool;

namespace {

constexpr uint64_t M = 1ull << 20;

// What the fake driver holds.
struct FakeDriver {
    uint64_t memory = 0;  // what cuMemCreate may hand out in all
    uint64_t used = 0;
    CUmemGenericAllocationHandle next_handle = 1;
    std::map<CUmemGenericAllocationHandle, uint64_t> handles;  // handle -> size
    std::map<CUdeviceptr, CUmemGenericAllocationHandle> mapped;  // VA -> handle
    int set_access_calls = 0;
    CUdeviceptr reserved = 0;
};
FakeDriver g_driver;

CUresult fake_reserve(CUdeviceptr *ptr, size_t size, size_t, CUdeviceptr, unsigned long long) {
    if (g_driver.reserved)
        return CUDA_ERROR_OUT_OF_MEMORY;  // the pool reserves its window once
    g_driver.reserved = 1ull << 40;
    *ptr = g_driver.reserved;
    (void)size;
    return CUDA_SUCCESS;
}
CUresult fake_address_free(CUdeviceptr ptr, size_t) {
    EXPECT_EQ(ptr, g_driver.reserved);
    g_driver.reserved = 0;
    return CUDA_SUCCESS;
}
CUresult fake_create(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *, unsigned long long) {
    if (size % (2 * M) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (g_driver.used + size > g_driver.memory)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g_driver.used += size;
    *h = g_driver.next_handle++;
    g_driver.handles[*h] = size;
    return CUDA_SUCCESS;
}
CUresult fake_release(CUmemGenericAllocationHandle h) {
    auto it = g_driver.handles.find(h);
    if (it == g_driver.handles.end())
        return CUDA_ERROR_INVALID_VALUE;
    for (const auto &m : g_driver.mapped)
        EXPECT_NE(m.second, h) << "released while mapped";
    g_driver.used -= it->second;
    g_driver.handles.erase(it);
    return CUDA_SUCCESS;
}
CUresult fake_map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long) {
    auto it = g_driver.handles.find(h);
    // The driver maps a handle whole, from offset 0.
    if (it == g_driver.handles.end() || offset != 0 || size != it->second || g_driver.mapped.count(va))
        return CUDA_ERROR_INVALID_VALUE;
    g_driver.mapped[va] = h;
    return CUDA_SUCCESS;
}
CUresult fake_unmap(CUdeviceptr va, size_t size) {
    auto it = g_driver.mapped.find(va);
    if (it == g_driver.mapped.end() || g_driver.handles[it->second] != size)
        return CUDA_ERROR_INVALID_VALUE;
    g_driver.mapped.erase(it);
    return CUDA_SUCCESS;
}
CUresult fake_set_access(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t count) {
    EXPECT_GE(count, 1u);
    g_driver.set_access_calls++;
    return CUDA_SUCCESS;
}

uvm::cuda::DriverApi fake_api() {
    uvm::cuda::DriverApi api;
    api.cuMemAddressReserve = fake_reserve;
    api.cuMemAddressFree = fake_address_free;
    api.cuMemCreate = fake_create;
    api.cuMemRelease = fake_release;
    api.cuMemMap = fake_map;
    api.cuMemUnmap = fake_unmap;
    api.cuMemSetAccess = fake_set_access;
    return api;
}

class RootPoolTest : public ::testing::Test {
protected:
    void SetUp() override {
        g_driver = FakeDriver();
        g_driver.memory = 80ull << 30;
        access_.resize(1);
        access_[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access_[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    void TearDown() override { EXPECT_TRUE(g_driver.handles.empty()) << "handles left with the driver"; }

    uvm::cuda::DriverApi api_ = fake_api();
    std::vector<CUmemAccessDesc> access_;
};

}  // namespace

TEST_F(RootPoolTest, HandlesDoubleUpToTheCap) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    std::vector<uint64_t> roots;
    // 1 + 2 + 4 + 4 + 4 root chunks take five growths: handles of 2, 4, 8,
    // 8 and 8 MiB (the cap).
    for (int i = 0; i < 15; ++i) {
        uint64_t phys = 0;
        ASSERT_EQ(pool.alloc(1, false, access_, &phys), UVM_OK);
        roots.push_back(phys);
    }
    EXPECT_EQ(pool.handle_count(), 5u);
    EXPECT_EQ(pool.handle_bytes(), 30 * M);
    EXPECT_EQ(pool.held_bytes(), 30 * M);
    EXPECT_EQ(pool.ready_bytes(), 0u);
    EXPECT_EQ(g_driver.set_access_calls, 5);
    // Many more: no pooled handle ever exceeds the cap, so one live root
    // chunk never keeps more than 8 MiB from the driver.
    for (int i = 0; i < 3000; ++i) {
        uint64_t phys = 0;
        ASSERT_EQ(pool.alloc(1, false, access_, &phys), UVM_OK);
        roots.push_back(phys);
    }
    for (const auto &h : g_driver.handles)
        EXPECT_LE(h.second, RootPool::kMaxPooledHandle);
    EXPECT_EQ(pool.handle_count(), 3u + (3015u - 7u) / 4u);  // 1 + 2 + 4 roots, then 4 a handle
    EXPECT_EQ(pool.held_bytes(), g_driver.used);
    // All but every 512th back: what stays held is the handles of the live ones.
    for (size_t i = 0; i < roots.size(); ++i)
        if (i % 512 != 511)
            pool.free(roots[i]);
    EXPECT_EQ(pool.handle_count(), 5u);
    EXPECT_LE(g_driver.used, 5 * RootPool::kMaxPooledHandle);
    for (size_t i = 511; i < roots.size(); i += 512)
        pool.free(roots[i]);
    EXPECT_EQ(pool.handle_count(), 0u);
    EXPECT_EQ(g_driver.used, 0u);
}

TEST_F(RootPoolTest, ARunGetsOneHandleOfItsOwnSize) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    uint64_t phys = 0;
    ASSERT_EQ(pool.alloc(100, false, access_, &phys), UVM_OK);
    EXPECT_EQ(pool.handle_count(), 1u);
    EXPECT_EQ(pool.handle_bytes(), 200 * M);
    EXPECT_EQ(phys % kRootChunkSize, 0u);
    for (uint64_t i = 0; i < 100; ++i)
        EXPECT_TRUE(pool.is_given(phys + i * kRootChunkSize));
    // The handle goes back to the driver with its last root chunk, not before.
    for (uint64_t i = 0; i < 99; ++i)
        pool.free(phys + i * kRootChunkSize);
    EXPECT_EQ(pool.handle_count(), 1u);
    EXPECT_EQ(pool.ready_bytes(), 99 * kRootChunkSize);
    pool.free(phys + 99 * kRootChunkSize);
    EXPECT_EQ(pool.handle_count(), 0u);
    EXPECT_EQ(pool.ready_bytes(), 0u);
}

TEST_F(RootPoolTest, HalvesWhereTheDriverIsShortAndFailsCleanly) {
    g_driver.memory = 10 * M;
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    // Handles of 2 and 4 MiB; the third would be 8 MiB, but 4 is all that is left.
    std::vector<uint64_t> roots(5);
    for (uint64_t &r : roots)
        ASSERT_EQ(pool.alloc(1, false, access_, &r), UVM_OK);
    EXPECT_EQ(g_driver.used, 10 * M);
    EXPECT_EQ(pool.handle_count(), 3u);
    uint64_t c = 0;
    EXPECT_EQ(pool.alloc(1, false, access_, &c), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(pool.handle_count(), 3u);  // the failure left nothing behind
    for (uint64_t r : roots)
        pool.free(r);
    EXPECT_EQ(g_driver.used, 0u);
}

// A short run never gets a root chunk of a long run's handle, even one that
// waits there unused: the small object would keep the whole handle.
TEST_F(RootPoolTest, ShortRunsNeverTakeRootsOfALongRunsHandle) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    uint64_t run = 0, one = 0, again = 0;
    ASSERT_EQ(pool.alloc(10, false, access_, &run), UVM_OK);  // a handle of its own, 20 MiB
    for (uint64_t i = 1; i < 10; ++i)
        pool.free(run + i * kRootChunkSize);
    EXPECT_EQ(pool.ready_bytes(), 9 * kRootChunkSize);
    ASSERT_EQ(pool.alloc(1, false, access_, &one), UVM_OK);
    EXPECT_FALSE(one >= run && one < run + 10 * kRootChunkSize);
    EXPECT_EQ(pool.handle_count(), 2u);
    ASSERT_EQ(pool.alloc(5, false, access_, &again), UVM_OK);  // a long run may
    EXPECT_EQ(again, run + kRootChunkSize);
    for (uint64_t i = 0; i < 5; ++i)
        pool.free(again + i * kRootChunkSize);
    pool.free(run);
    pool.free(one);
    EXPECT_EQ(pool.handle_count(), 0u);
}

TEST_F(RootPoolTest, RemappableRootChunksAreHandlesOfTheirOwn) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    uint64_t phys = 0;
    ASSERT_EQ(pool.alloc(3, true, access_, &phys), UVM_OK);
    EXPECT_EQ(pool.handle_count(), 3u);
    EXPECT_EQ(g_driver.set_access_calls, 1);  // one grant for the run
    for (uint64_t i = 0; i < 3; ++i)
        EXPECT_NE(pool.own_handle(phys + i * kRootChunkSize), 0u);
    // Pool memory is not remappable, and the two kinds never share a root.
    uint64_t pooled = 0;
    ASSERT_EQ(pool.alloc(1, false, access_, &pooled), UVM_OK);
    EXPECT_EQ(pool.own_handle(pooled), 0u);
    pool.free(phys + kRootChunkSize);  // each goes back on its own
    EXPECT_EQ(pool.handle_count(), 3u);
    pool.free(phys);
    pool.free(phys + 2 * kRootChunkSize);
    pool.free(pooled);
    EXPECT_EQ(pool.handle_count(), 0u);
}

TEST_F(RootPoolTest, APeerIsGrantedOncePerHandle) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    std::vector<uint64_t> roots(7);
    for (uint64_t &r : roots)
        ASSERT_EQ(pool.alloc(1, false, access_, &r), UVM_OK);  // handles of 2, 4, 8 MiB
    const int before = g_driver.set_access_calls;
    ASSERT_EQ(pool.grant(access_), UVM_OK);
    EXPECT_EQ(g_driver.set_access_calls - before, 3);
    for (uint64_t r : roots)
        pool.free(r);
}

// What the OOM report asks (pressure/fits.h): the longest run one alloc could
// give, were the PMM's free roots given back first, changing nothing.
TEST_F(RootPoolTest, LargestFreeRunCountsReadyRunsAndWhatTheDriverAndTheWindowAllow) {
    g_driver.memory = 100 * M;
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(40 * M), UVM_OK);  // a window of 80 MiB: 40 root chunks
    uint64_t a = 0, b = 0;
    ASSERT_EQ(pool.alloc(4, false, access_, &a), UVM_OK);  // handle A: 8 MiB, roots 0-3
    ASSERT_EQ(pool.alloc(2, false, access_, &b), UVM_OK);  // handle B: 8 MiB, roots 4-7, 6-7 ready
    ASSERT_EQ(a, 0u);
    ASSERT_EQ(b, 8 * M);
    const uint64_t driver_free = g_driver.memory - g_driver.used;  // 84 MiB
    uvm::Bitmap back(40);
    // The driver has 42 roots' worth, the window's free tail only 32.
    EXPECT_EQ(pool.largest_free_run(back, driver_free), 32u);
    // Without the driver: B's ready run of 2.
    EXPECT_EQ(pool.largest_free_run(back, 0), 2u);
    // One of B's given roots back: beside a root still given, nothing more.
    back.set(4);
    EXPECT_EQ(pool.largest_free_run(back, 0), 2u);
    // All of A back: A goes to the driver, its range stays apart from the tail.
    back = uvm::Bitmap(40);
    back.set_range(0, 4);
    EXPECT_EQ(pool.largest_free_run(back, driver_free), 32u);
    // All of B back: B goes, and its range joins the free tail.
    back = uvm::Bitmap(40);
    back.set_range(4, 2);
    EXPECT_EQ(pool.largest_free_run(back, driver_free), 36u);
    EXPECT_EQ(pool.handle_count(), 2u);  // the questions changed nothing
    EXPECT_EQ(pool.ready_bytes(), 4 * M);
    // Given back for real, that is what one alloc gets, and no more.
    for (uint64_t i = 0; i < 2; ++i)
        pool.free(b + i * kRootChunkSize);
    uint64_t c = 0;
    EXPECT_EQ(pool.alloc(37, false, access_, &c), UVM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(pool.alloc(36, false, access_, &c), UVM_OK);
    for (uint64_t i = 0; i < 36; ++i)
        pool.free(c + i * kRootChunkSize);
    for (uint64_t i = 0; i < 4; ++i)
        pool.free(a + i * kRootChunkSize);
}
