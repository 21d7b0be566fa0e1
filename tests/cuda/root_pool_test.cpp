// The CUDA root pool's policy (cuda/root_pool.h) against a fake driver, so
// that it runs everywhere, GPU or not: handles that double up to the cap, a
// long run that gets handles of its own of up to 32 MiB, halving when the driver is short, a
// handle back to the driver when its last root chunk comes back, remappable
// root chunks as handles of their own, a peer grant once per handle, and
// offloaded roots (their handles released, their window ranges kept) restored
// a handle per run.
#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "common/sizes.h"
#include "cuda/root_pool.h"
#include "tests/cuda/root_runs.h"

using uvm::kRootChunkSize;
using uvm::cuda::RootPool;
using uvm_test::alloc_elsewhere;
using uvm_test::roots_from;

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
    int create_calls = 0;
    int release_calls = 0;
    int map_calls = 0;
    int fail_map_at = 0;  // the Nth cuMemMap from the start fails (0: none)
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
    g_driver.create_calls++;
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
    g_driver.release_calls++;
    for (const auto &m : g_driver.mapped)
        EXPECT_NE(m.second, h) << "released while mapped";
    g_driver.used -= it->second;
    g_driver.handles.erase(it);
    return CUDA_SUCCESS;
}
CUresult fake_map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long) {
    if (++g_driver.map_calls == g_driver.fail_map_at)
        return CUDA_ERROR_UNKNOWN;
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

// Exported and imported handles: the fd is the handle's number.
CUresult fake_export(void *fd, CUmemGenericAllocationHandle h, CUmemAllocationHandleType, unsigned long long) {
    if (!g_driver.handles.count(h))
        return CUDA_ERROR_INVALID_VALUE;
    *static_cast<int *>(fd) = static_cast<int>(h);
    return CUDA_SUCCESS;
}
CUresult fake_import(CUmemGenericAllocationHandle *h, void *, CUmemAllocationHandleType) {
    *h = g_driver.next_handle++;
    g_driver.handles[*h] = 2 * M;
    g_driver.used += 2 * M;
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
    api.cuMemExportToShareableHandle = fake_export;
    api.cuMemImportFromShareableHandle = fake_import;
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

// A long run gets exactly its size in handles of its own of up to 32 MiB,
// side by side, granted in one call; each goes back to the driver with its
// last root chunk, so a root left live keeps one 32 MiB handle, not the run.
TEST_F(RootPoolTest, ARunGetsHandlesOfItsOwnOfUpTo32MiB) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    uint64_t phys = 0;
    const int access_calls = g_driver.set_access_calls;
    ASSERT_EQ(pool.alloc(100, false, access_, &phys), UVM_OK);
    EXPECT_EQ(pool.handle_count(), 7u);  // 6 x 32 MiB + 8 MiB
    EXPECT_EQ(pool.handle_bytes(), 200 * M);
    EXPECT_EQ(g_driver.used, 200 * M);
    EXPECT_EQ(g_driver.set_access_calls, access_calls + 1);
    EXPECT_EQ(phys % kRootChunkSize, 0u);
    for (uint64_t i = 0; i < 100; ++i)
        EXPECT_TRUE(pool.is_given(phys + i * kRootChunkSize));
    // Every root back but one in the middle: only its handle stays.
    for (uint64_t i = 0; i < 100; ++i)
        if (i != 50)
            pool.free(phys + i * kRootChunkSize);
    EXPECT_EQ(pool.handle_count(), 1u);
    EXPECT_EQ(pool.held_bytes(), 32 * M);
    EXPECT_EQ(g_driver.used, 32 * M);
    EXPECT_EQ(pool.ready_bytes(), 15 * kRootChunkSize);
    pool.free(phys + 50 * kRootChunkSize);
    EXPECT_EQ(pool.handle_count(), 0u);
    EXPECT_EQ(pool.ready_bytes(), 0u);
    EXPECT_EQ(g_driver.used, 0u);
}

// A long run's growth that the driver cannot finish leaves nothing behind.
TEST_F(RootPoolTest, ALongRunsGrowthThatFailsMidwayGivesBackWhatItMade) {
    g_driver.memory = 100 * M;
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    uint64_t phys = 0;
    EXPECT_EQ(pool.alloc(60, false, access_, &phys), UVM_ERR_OUT_OF_MEMORY);  // 120 MiB: the fourth handle fails
    EXPECT_EQ(pool.handle_count(), 0u);
    EXPECT_EQ(g_driver.used, 0u);
    EXPECT_TRUE(g_driver.mapped.empty());
    ASSERT_EQ(pool.alloc(50, false, access_, &phys), UVM_OK);  // and the window range came back too
    for (uint64_t i = 0; i < 50; ++i)
        pool.free(phys + i * kRootChunkSize);
    EXPECT_EQ(g_driver.used, 0u);
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

// Offloaded roots (client sleep): their handles go back to the driver, their
// window ranges stay theirs, and restore backs them again at the same phys.

namespace {

const std::function<bool(uint64_t)> kNothingPinned;

// `count` remappable root chunks side by side, offloaded.
std::vector<uint64_t> offloaded_run(RootPool &pool, size_t count, const std::vector<CUmemAccessDesc> &access) {
    uint64_t phys = 0;
    EXPECT_EQ(pool.alloc(count, true, access, &phys), UVM_OK);
    const auto roots = roots_from(phys, count);
    EXPECT_EQ(pool.offload(roots.data(), roots.size(), kNothingPinned), UVM_OK);
    return roots;
}

auto alloc_from(RootPool &pool, const std::vector<CUmemAccessDesc> &access) {
    return [&pool, &access](size_t count, bool remappable, uint64_t *phys) {
        return pool.alloc(count, remappable, access, phys);
    };
}

}  // namespace

TEST_F(RootPoolTest, OffloadReleasesTheHandlesAndKeepsTheirWindowRanges) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    uint64_t phys = 0;
    ASSERT_EQ(pool.alloc(3, true, access_, &phys), UVM_OK);
    const auto roots = roots_from(phys, 3);
    EXPECT_EQ(g_driver.used, 6 * M);
    ASSERT_EQ(pool.offload(roots.data(), roots.size(), kNothingPinned), UVM_OK);
    EXPECT_EQ(g_driver.used, 0u);
    EXPECT_TRUE(g_driver.handles.empty());
    EXPECT_TRUE(g_driver.mapped.empty());
    EXPECT_EQ(pool.handle_count(), 0u);
    EXPECT_EQ(pool.held_bytes(), 0u);
    EXPECT_EQ(pool.ready_bytes(), 0u);
    EXPECT_EQ(pool.offloaded_bytes(), 6 * M);
    for (uint64_t r : roots) {
        EXPECT_TRUE(pool.is_offloaded(r));
        EXPECT_FALSE(pool.is_given(r));
        EXPECT_EQ(pool.own_handle(r), 0u);
    }
    // Nothing else is placed on the offloaded range, of either kind.
    const auto others = alloc_elsewhere(alloc_from(pool, access_), phys, 3, 6, 8);
    ASSERT_EQ(others.size(), 14u);
    // Restore: one handle for the run, at the same phys, granted once.
    const int creates = g_driver.create_calls, grants = g_driver.set_access_calls;
    ASSERT_EQ(pool.restore(roots.data(), roots.size(), access_), UVM_OK);
    EXPECT_EQ(g_driver.create_calls - creates, 1);
    EXPECT_EQ(g_driver.set_access_calls - grants, 1);
    ASSERT_EQ(g_driver.mapped.count(pool.window() + phys), 1u);
    EXPECT_EQ(g_driver.handles[g_driver.mapped[pool.window() + phys]], 6 * M);
    EXPECT_EQ(pool.offloaded_bytes(), 0u);
    for (uint64_t r : roots)
        EXPECT_TRUE(pool.is_given(r));
    EXPECT_EQ(pool.held_bytes(), g_driver.used);
    for (uint64_t r : roots)
        pool.free(r);
    for (uint64_t p : others)
        pool.free(p);
    EXPECT_EQ(pool.handle_count(), 0u);
}

TEST_F(RootPoolTest, RestoreMakesOneHandlePerRunOfUpTo64MiB) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    uint64_t phys = 0, spacer = 0, apart = 0;
    ASSERT_EQ(pool.alloc(40, true, access_, &phys), UVM_OK);
    ASSERT_EQ(pool.alloc(1, true, access_, &spacer), UVM_OK);
    ASSERT_EQ(pool.alloc(3, true, access_, &apart), UVM_OK);
    ASSERT_EQ(spacer, phys + 40 * kRootChunkSize);
    EXPECT_EQ(pool.handle_count(), 44u);
    // 40 adjacent roots, and the first and last of three more (two runs of one).
    auto roots = roots_from(phys, 40);
    roots.push_back(apart);
    roots.push_back(apart + 2 * kRootChunkSize);
    ASSERT_EQ(pool.offload(roots.data(), roots.size(), kNothingPinned), UVM_OK);
    EXPECT_EQ(pool.handle_count(), 2u);
    EXPECT_EQ(g_driver.used, 4 * M);
    const int creates = g_driver.create_calls, grants = g_driver.set_access_calls;
    ASSERT_EQ(pool.restore(roots.data(), roots.size(), access_), UVM_OK);
    EXPECT_EQ(g_driver.create_calls - creates, 4);  // 64 + 16 MiB, 2 + 2 MiB
    EXPECT_EQ(g_driver.set_access_calls - grants, 4);
    EXPECT_EQ(pool.handle_count(), 6u);
    EXPECT_EQ(g_driver.handles[g_driver.mapped[pool.window() + phys]], RootPool::kMaxRestoredHandle);
    EXPECT_EQ(g_driver.handles[g_driver.mapped[pool.window() + phys + RootPool::kMaxRestoredHandle]], 16 * M);
    EXPECT_EQ(g_driver.handles[g_driver.mapped[pool.window() + apart]], 2 * M);
    EXPECT_EQ(g_driver.used, 88 * M);
    EXPECT_EQ(pool.held_bytes(), 88 * M);
    for (uint64_t r : roots)
        pool.free(r);
    pool.free(apart + kRootChunkSize);
    pool.free(spacer);
    EXPECT_EQ(pool.handle_count(), 0u);
}

TEST_F(RootPoolTest, OffloadIsRefusedWhereAHandleHoldsAGivenRootNotInTheList) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    ASSERT_EQ(pool.alloc(1, false, access_, &a), UVM_OK);  // handle of 2 MiB
    ASSERT_EQ(pool.alloc(1, false, access_, &b), UVM_OK);  // handle of 4 MiB, its second root ready
    ASSERT_EQ(pool.alloc(1, false, access_, &c), UVM_OK);  // b's neighbour
    ASSERT_EQ(c, b + kRootChunkSize);
    const uint64_t used = g_driver.used, handles = pool.handle_count(), ready = pool.ready_bytes();
    EXPECT_EQ(pool.offload(&b, 1, kNothingPinned), UVM_ERR_NOT_SUPPORTED);
    const uint64_t a_and_b[] = {a, b};
    EXPECT_EQ(pool.offload(a_and_b, 2, kNothingPinned), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(g_driver.used, used);
    EXPECT_EQ(pool.handle_count(), handles);
    EXPECT_EQ(pool.ready_bytes(), ready);
    EXPECT_TRUE(pool.is_given(a));
    EXPECT_TRUE(pool.is_given(b));
    EXPECT_FALSE(pool.is_offloaded(a));
    // Every given root of the handle in the list: it goes whole.
    pool.free(c);
    EXPECT_EQ(pool.ready_bytes(), kRootChunkSize);
    ASSERT_EQ(pool.offload(&b, 1, kNothingPinned), UVM_OK);
    EXPECT_EQ(pool.ready_bytes(), 0u);
    EXPECT_EQ(g_driver.used, used - 4 * M);
    EXPECT_TRUE(pool.is_offloaded(b));
    EXPECT_FALSE(pool.is_offloaded(c));
    EXPECT_FALSE(pool.is_given(c));
    // b's ready neighbour went with the handle: its window range is free
    // again, and the next handle (8 MiB) starts there.
    ASSERT_EQ(pool.alloc(1, false, access_, &d), UVM_OK);
    EXPECT_EQ(d, c);
    pool.free(b);
    pool.free(a);
    pool.free(d);
    EXPECT_EQ(pool.handle_count(), 0u);
}

TEST_F(RootPoolTest, OffloadIsRefusedForExportedImportedAndPinnedRoots) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    uint64_t phys = 0, imported = 0;
    ASSERT_EQ(pool.alloc(2, true, access_, &phys), UVM_OK);
    int fd = -1;
    ASSERT_EQ(pool.export_root(phys, &fd), UVM_OK);
    const int fds[] = {7};
    ASSERT_EQ(pool.import(fds, 1, access_, &imported), UVM_OK);
    const uint64_t used = g_driver.used;
    const auto both = roots_from(phys, 2);
    EXPECT_EQ(pool.offload(both.data(), 2, kNothingPinned), UVM_ERR_NOT_SUPPORTED);  // the first is exported
    EXPECT_EQ(pool.offload(&imported, 1, kNothingPinned), UVM_ERR_NOT_SUPPORTED);
    const uint64_t second = phys + kRootChunkSize;
    auto pinned = [&](uint64_t p) { return p == second; };
    EXPECT_EQ(pool.offload(&second, 1, pinned), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(g_driver.used, used);
    EXPECT_EQ(pool.handle_count(), 3u);
    EXPECT_EQ(pool.offloaded_bytes(), 0u);
    // Unpinned, the second goes on its own (a handle of its own).
    ASSERT_EQ(pool.offload(&second, 1, kNothingPinned), UVM_OK);
    EXPECT_EQ(g_driver.used, used - 2 * M);
    pool.free(second);
    pool.free(phys);
    pool.release_import(imported, 1);
    EXPECT_EQ(pool.handle_count(), 0u);
}

TEST_F(RootPoolTest, BadInputIsInvalidAndChangesNothing) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    uint64_t phys = 0, pooled = 0;
    ASSERT_EQ(pool.alloc(2, true, access_, &phys), UVM_OK);
    ASSERT_EQ(pool.alloc(1, false, access_, &pooled), UVM_OK);  // a 2 MiB handle
    uint64_t holder = 0;
    ASSERT_EQ(pool.alloc(1, false, access_, &holder), UVM_OK);  // a 4 MiB handle
    const uint64_t ready = holder + kRootChunkSize;              // its other root, not given
    ASSERT_EQ(pool.handle_count(), 4u);
    const uint64_t used = g_driver.used;
    const uint64_t not_given[] = {ready, phys + 100 * kRootChunkSize, phys + 4096, pool.window_size()};
    for (uint64_t p : not_given) {
        EXPECT_EQ(pool.offload(&p, 1, kNothingPinned), UVM_ERR_INVALID_ARGUMENT) << p;
        EXPECT_EQ(pool.restore(&p, 1, access_), UVM_ERR_INVALID_ARGUMENT) << p;
    }
    const uint64_t twice[] = {phys, phys};
    EXPECT_EQ(pool.offload(twice, 2, kNothingPinned), UVM_ERR_INVALID_ARGUMENT);
    // A good root with a bad one: nothing done.
    const uint64_t mixed[] = {phys, ready};
    EXPECT_EQ(pool.offload(mixed, 2, kNothingPinned), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(pool.is_given(phys));
    EXPECT_EQ(pool.restore(&phys, 1, access_), UVM_ERR_INVALID_ARGUMENT);  // backed
    EXPECT_EQ(g_driver.used, used);
    ASSERT_EQ(pool.offload(&phys, 1, kNothingPinned), UVM_OK);
    EXPECT_EQ(pool.offload(&phys, 1, kNothingPinned), UVM_ERR_INVALID_ARGUMENT);  // offloaded already
    EXPECT_EQ(pool.restore(twice, 2, access_), UVM_ERR_INVALID_ARGUMENT);
    const uint64_t restore_mixed[] = {phys, phys + kRootChunkSize};  // the second is backed
    EXPECT_EQ(pool.restore(restore_mixed, 2, access_), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(pool.is_offloaded(phys));
    EXPECT_EQ(g_driver.used, used - 2 * M);
    EXPECT_EQ(pool.handle_count(), 3u);
    pool.free(phys);
    pool.free(phys + kRootChunkSize);
    pool.free(pooled);
    pool.free(holder);
    EXPECT_EQ(pool.handle_count(), 0u);
}

TEST_F(RootPoolTest, RestoreOutOfMemoryLeavesEverythingOffloadedAndARetrySucceeds) {
    g_driver.memory = 100 * M;
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    const auto roots = offloaded_run(pool, 40, access_);
    // Someone else takes the memory: 70 MiB left, the 64 MiB handle is made
    // and the 16 MiB one is not.
    g_driver.memory = 70 * M;
    const int creates = g_driver.create_calls;
    EXPECT_EQ(pool.restore(roots.data(), roots.size(), access_), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(g_driver.create_calls - creates, 2);
    EXPECT_EQ(g_driver.used, 0u);
    EXPECT_TRUE(g_driver.handles.empty());
    EXPECT_TRUE(g_driver.mapped.empty());
    EXPECT_EQ(pool.handle_count(), 0u);
    EXPECT_EQ(pool.offloaded_bytes(), 80 * M);
    // A cuMemMap failing midway (the second handle's) is undone the same way.
    g_driver.memory = 100 * M;
    g_driver.fail_map_at = g_driver.map_calls + 2;
    EXPECT_EQ(pool.restore(roots.data(), roots.size(), access_), UVM_ERR_BACKEND);
    EXPECT_EQ(g_driver.used, 0u);
    EXPECT_TRUE(g_driver.handles.empty());
    EXPECT_TRUE(g_driver.mapped.empty());
    EXPECT_EQ(pool.offloaded_bytes(), 80 * M);
    for (uint64_t r : roots)
        EXPECT_TRUE(pool.is_offloaded(r));
    // The memory back: the retry succeeds.
    ASSERT_EQ(pool.restore(roots.data(), roots.size(), access_), UVM_OK);
    EXPECT_EQ(g_driver.used, 80 * M);
    EXPECT_EQ(pool.handle_count(), 2u);
    for (uint64_t r : roots)
        pool.free(r);
    EXPECT_EQ(pool.handle_count(), 0u);
}

// A restored handle's roots are the sleeping client's: freed, they wait for
// the last one and are never handed out to anyone else.
TEST_F(RootPoolTest, ARestoredHandleGoesBackWithItsLastRootAndNoAllocTakesItsFreedRoots) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(40 * M), UVM_OK);  // a window of 40 root chunks
    const auto roots = offloaded_run(pool, 4, access_);
    const uint64_t phys = roots[0];
    ASSERT_EQ(pool.restore(roots.data(), 4, access_), UVM_OK);
    EXPECT_EQ(pool.handle_count(), 1u);
    for (size_t i = 0; i < 3; ++i)
        pool.free(roots[i]);
    EXPECT_EQ(pool.handle_count(), 1u);
    EXPECT_EQ(g_driver.used, 8 * M);
    EXPECT_EQ(pool.ready_bytes(), 0u);  // held, but ready for nobody
    EXPECT_EQ(pool.held_bytes(), 8 * M);
    EXPECT_FALSE(pool.is_given(roots[0]));
    EXPECT_TRUE(pool.is_given(roots[3]));
    // With no memory to grow, nothing is found there either.
    const uint64_t memory = g_driver.memory;
    g_driver.memory = g_driver.used;
    uint64_t p = 0;
    EXPECT_EQ(pool.alloc(1, false, access_, &p), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(pool.alloc(1, true, access_, &p), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(pool.alloc(3, false, access_, &p), UVM_ERR_OUT_OF_MEMORY);
    uvm::Bitmap back(40);
    EXPECT_EQ(pool.largest_free_run(back, 0), 0u);
    back.set(phys / kRootChunkSize + 3);  // its last root back: the handle goes
    EXPECT_EQ(pool.largest_free_run(back, 1ull << 30), 40u);
    g_driver.memory = memory;
    const auto others = alloc_elsewhere(alloc_from(pool, access_), phys, 4, 5, 3);
    ASSERT_EQ(others.size(), 8u);
    const uint64_t before = g_driver.used;
    pool.free(roots[3]);
    EXPECT_EQ(before - g_driver.used, 8 * M);
    for (uint64_t o : others)
        pool.free(o);
    EXPECT_EQ(pool.handle_count(), 0u);
}

// One holder's roots (a sleepable client's growth): handles of up to 64
// MiB from the start, as restore() makes them, so the first offload releases
// as few handles as later ones; freed roots are parked, never handed out to
// another, and a handle goes back with its last root.
TEST_F(RootPoolTest, OwnedRootsAreLongHandlesThatOffloadWholeAndParkWhatIsFreed) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(80ull << 30), UVM_OK);
    uint64_t phys = 0;
    const int creates = g_driver.create_calls, grants = g_driver.set_access_calls;
    ASSERT_EQ(pool.alloc_owned(40, access_, &phys), UVM_OK);
    EXPECT_EQ(g_driver.create_calls - creates, 2);  // 64 + 16 MiB
    EXPECT_EQ(g_driver.set_access_calls - grants, 1);
    EXPECT_EQ(pool.handle_count(), 2u);
    EXPECT_EQ(g_driver.handles[g_driver.mapped[pool.window() + phys]], RootPool::kMaxRestoredHandle);
    EXPECT_EQ(g_driver.handles[g_driver.mapped[pool.window() + phys + RootPool::kMaxRestoredHandle]], 16 * M);
    const auto roots = roots_from(phys, 40);
    for (uint64_t r : roots) {
        EXPECT_TRUE(pool.is_given(r));
        EXPECT_EQ(pool.own_handle(r), 0u);  // never mapped at a caller's address or exported
    }
    EXPECT_EQ(pool.ready_bytes(), 0u);
    // A freed root is parked: held, ready for nobody.
    pool.free(roots[39]);
    EXPECT_EQ(pool.handle_count(), 2u);
    EXPECT_EQ(pool.ready_bytes(), 0u);
    EXPECT_EQ(pool.held_bytes(), 80 * M);
    uint64_t other = 0;
    ASSERT_EQ(pool.alloc(1, false, access_, &other), UVM_OK);
    EXPECT_TRUE(other < phys || other >= phys + 40 * kRootChunkSize);
    pool.free(other);
    // Offload of every root still given: both handles go in two releases.
    const int releases = g_driver.release_calls;
    std::vector<uint64_t> given(roots.begin(), roots.end() - 1);
    ASSERT_EQ(pool.offload(given.data(), given.size(), kNothingPinned), UVM_OK);
    EXPECT_EQ(g_driver.release_calls - releases, 2);
    EXPECT_EQ(pool.handle_count(), 0u);
    EXPECT_EQ(pool.offloaded_bytes(), 39 * 2 * M);
    EXPECT_FALSE(pool.is_offloaded(roots[39]));  // the parked one's range went back
    for (uint64_t r : given)
        pool.free(r);
    // Out of memory takes nothing.
    const uint64_t memory = g_driver.memory;
    g_driver.memory = g_driver.used + 8 * M;
    EXPECT_EQ(pool.alloc_owned(40, access_, &phys), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(pool.handle_count(), 0u);
    EXPECT_EQ(g_driver.used, 0u);
    g_driver.memory = memory;
    EXPECT_EQ(pool.alloc_owned(0, access_, &phys), UVM_ERR_OUT_OF_MEMORY);
    // A cuMemMap failing midway (the second handle's): the first handle and
    // the window range go back, and a later growth succeeds.
    g_driver.fail_map_at = g_driver.map_calls + 2;
    EXPECT_EQ(pool.alloc_owned(40, access_, &phys), UVM_ERR_BACKEND);
    EXPECT_EQ(pool.handle_count(), 0u);
    EXPECT_TRUE(g_driver.handles.empty());
    EXPECT_TRUE(g_driver.mapped.empty());
    uint64_t again = 0;
    ASSERT_EQ(pool.alloc_owned(40, access_, &again), UVM_OK);
    for (uint64_t r : roots_from(again, 40))
        pool.free(r);
    EXPECT_EQ(pool.handle_count(), 0u);
}

TEST_F(RootPoolTest, FreeingAnOffloadedRootGivesItsWindowRangeBack) {
    RootPool pool(&api_, 0);
    ASSERT_EQ(pool.init(40 * M), UVM_OK);  // a window of 40 root chunks
    const auto roots = offloaded_run(pool, 4, access_);
    ASSERT_EQ(roots[0], 0u);
    uvm::Bitmap back(40);
    EXPECT_EQ(pool.largest_free_run(back, 1ull << 30), 36u);  // the offloaded range stays taken
    pool.trim();  // trim keeps them offloaded: they are the client's
    EXPECT_EQ(pool.offloaded_bytes(), 8 * M);
    ASSERT_EQ(pool.restore(roots.data() + 2, 2, access_), UVM_OK);  // two back, two still asleep
    EXPECT_EQ(g_driver.used, 4 * M);
    pool.free(roots[0]);
    pool.free(roots[1]);
    EXPECT_EQ(g_driver.used, 4 * M);  // counts nothing: they had no memory
    EXPECT_EQ(pool.offloaded_bytes(), 0u);
    EXPECT_EQ(pool.largest_free_run(back, 1ull << 30), 36u);  // roots 0-1 free, 2-3 held
    pool.free(roots[2]);
    pool.free(roots[3]);
    EXPECT_EQ(pool.largest_free_run(back, 1ull << 30), 40u);
    // The whole window is one hole again.
    uint64_t all = 0;
    ASSERT_EQ(pool.alloc(40, false, access_, &all), UVM_OK);
    EXPECT_EQ(all, 0u);
    for (uint64_t i = 0; i < 40; ++i)
        pool.free(all + i * kRootChunkSize);
    EXPECT_EQ(pool.handle_count(), 0u);
    EXPECT_EQ(g_driver.used, 0u);
}
