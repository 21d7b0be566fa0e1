// The CUDA backend's OffloadCapability (client sleep and wake) over the
// stand-in driver (fake_driver.cpp): offloaded root chunks give their memory
// back to the driver and keep their window addresses; restore backs them again
// there, a handle per run of up to 64 MiB; refusals, failures and frees leave
// the driver and the pool as they should.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/offload_capability.h"
#include "backend/placement_capability.h"
#include "backend/sharing_capability.h"
#include "common/sizes.h"
#include "cuda/cuda_backend.h"
#include "cuda/driver_api.h"
#include "tests/cuda/root_runs.h"

#if defined(UVM_TEST_DRIVER_LIBRARY)
// Chosen before anything loads a driver.
static const int g_driver_chosen = setenv("UVM_CUDA_DRIVER_LIBRARY", UVM_TEST_DRIVER_LIBRARY, 1);
#endif

using uvm::kRootChunkSize;
using uvm::cuda::driver_audit;
using uvm_test::alloc_elsewhere;
using uvm_test::roots_from;

namespace {

constexpr uint64_t M = 1ull << 20;

// A function of the stand-in driver (see the end of fake_driver.cpp).
template <typename F>
F fake_function(const char *name) {
    void *lib = dlopen(uvm::cuda::driver_library_name(), RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
        return nullptr;
    auto f = reinterpret_cast<F>(dlsym(lib, name));
    dlclose(lib);  // still loaded by the backend's driver_api
    return f;
}
uint64_t fake_calls(const char *name) {
    auto count = fake_function<uint64_t (*)(const char *)>("fake_cuda_call_count");
    return count ? count(name) : 0;
}
uint64_t fake_device_bytes() {
    auto used = fake_function<uint64_t (*)()>("fake_cuda_device_bytes_used");
    return used ? used() : 0;
}

class CudaOffloadTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (!uvm::cuda::driver_api() || fake_function<void *>("fake_cuda_call_count") == nullptr)
            GTEST_SKIP() << "needs the stand-in driver";
        before_ = driver_audit();
        ASSERT_EQ(uvm::cuda::create_cuda_backend(&backend_), UVM_OK);
        offload_ = backend_->offload();
        ASSERT_NE(offload_, nullptr);
    }
    void TearDown() override {
        if (!backend_)
            return;
        backend_.reset();
        EXPECT_TRUE(driver_audit().balanced_with(before_)) << "driver objects left behind";
        EXPECT_EQ(fake_device_bytes(), 0u);
    }

    uvm_status_t memset_vid(uint64_t phys, uint8_t value, uint64_t size) {
        uvm::backend::CeAddress a;
        a.address = phys;
        a.aperture = uvm::mmu::Aperture::Vid;
        return backend_->ce_memset(0, a, value, size);
    }
    // The root chunk's kernel address (its window address): a host address on the stand-in driver.
    uint8_t *window_of(uint64_t phys) {
        uvm::mmu::Pte pte;
        pte.address = phys;
        pte.aperture = uvm::mmu::Aperture::Vid;
        uint64_t va = 0;
        EXPECT_EQ(backend_->placement()->kernel_va_placement(0, kRootChunkSize, &pte, 1, &va), UVM_OK);
        return reinterpret_cast<uint8_t *>(va);
    }
    std::vector<uint64_t> alloc_elsewhere_on_0(uint64_t first, size_t roots, int singles, size_t run) {
        auto alloc = [this](size_t count, bool remappable, uint64_t *phys) {
            return backend_->root_chunks_alloc(0, count, remappable, phys);
        };
        return alloc_elsewhere(alloc, first, roots, singles, run);
    }
    // `count` remappable root chunks of GPU 0 side by side, offloaded.
    std::vector<uint64_t> offloaded_run(size_t count) {
        uint64_t phys = 0;
        EXPECT_EQ(backend_->root_chunks_alloc(0, count, true, &phys), UVM_OK);
        const auto roots = roots_from(phys, count);
        EXPECT_EQ(offload_->root_chunks_offload(0, roots.data(), count), UVM_OK);
        return roots;
    }
    void free_all(const std::vector<uint64_t> &roots) {
        for (uint64_t r : roots)
            backend_->root_chunk_free(0, r);
    }

    std::unique_ptr<uvm::backend::Backend> backend_;
    uvm::backend::OffloadCapability *offload_ = nullptr;
    uvm::cuda::DriverAudit before_;
};

}  // namespace

TEST_F(CudaOffloadTest, OffloadReleasesTheMemoryAndRestoreBacksTheSameAddresses) {
    uint64_t phys = 0;
    ASSERT_EQ(backend_->root_chunks_alloc(0, 40, true, &phys), UVM_OK);
    const auto roots = roots_from(phys, 40);
    ASSERT_EQ(memset_vid(phys, 0xab, 80 * M), UVM_OK);
    uint8_t *window = window_of(phys);
    EXPECT_EQ(window[0], 0xab);
    const uvm::backend::GpuMemory before = backend_->gpu_memory(0);
    EXPECT_EQ(before.held, 80 * M);

    ASSERT_EQ(offload_->root_chunks_offload(0, roots.data(), roots.size()), UVM_OK);
    const uvm::backend::GpuMemory asleep = backend_->gpu_memory(0);
    EXPECT_EQ(asleep.free, before.free + 80 * M);
    EXPECT_EQ(asleep.held, 0u);
    EXPECT_EQ(asleep.ready, before.ready);
    // The window range is still the roots' address, and unmapped.
    EXPECT_EQ(window_of(phys), window);
    EXPECT_NE(memset_vid(phys, 1, kRootChunkSize), UVM_OK);
    EXPECT_NE(memset_vid(phys + 39 * kRootChunkSize, 1, kRootChunkSize), UVM_OK);
    // Nothing else is placed there.
    const auto others = alloc_elsewhere_on_0(phys, 40, 4, 10);
    ASSERT_EQ(others.size(), 14u);

    const uvm::backend::GpuMemory awake_before = backend_->gpu_memory(0);
    const uint64_t creates = fake_calls("cuMemCreate"), grants = fake_calls("cuMemSetAccess");
    const int64_t handles = driver_audit().handles;
    ASSERT_EQ(offload_->root_chunks_restore(0, roots.data(), roots.size()), UVM_OK);
    // 40 adjacent roots: handles of 64 and 16 MiB, each granted once.
    EXPECT_EQ(fake_calls("cuMemCreate") - creates, 2u);
    EXPECT_EQ(fake_calls("cuMemSetAccess") - grants, 2u);
    EXPECT_EQ(driver_audit().handles - handles, 2);
    const uvm::backend::GpuMemory awake = backend_->gpu_memory(0);
    EXPECT_EQ(awake.free, awake_before.free - 80 * M);
    EXPECT_EQ(awake.held, awake_before.held + 80 * M);
    EXPECT_EQ(awake.ready, awake_before.ready);
    // The contents are undefined, but the memory works at the same addresses.
    EXPECT_EQ(window_of(phys), window);
    ASSERT_EQ(memset_vid(phys, 0x5a, 80 * M), UVM_OK);
    EXPECT_EQ(window[0], 0x5a);
    EXPECT_EQ(window[80 * M - 1], 0x5a);
    window[12345] = 7;  // and through the window directly (a host address here)
    EXPECT_EQ(window[12345], 7);
    free_all(roots);
    free_all(others);
}

TEST_F(CudaOffloadTest, OffloadIsRefusedForASharedHandleAnExportedRootAndAUserMappedRoot) {
    uint64_t a = 0, b = 0, c = 0, r = 0;
    ASSERT_EQ(backend_->root_chunks_alloc(0, 1, false, &a), UVM_OK);  // a pooled handle of 2 MiB
    ASSERT_EQ(backend_->root_chunks_alloc(0, 1, false, &b), UVM_OK);  // one of 4 MiB...
    ASSERT_EQ(backend_->root_chunks_alloc(0, 1, false, &c), UVM_OK);  // ...that c shares
    ASSERT_EQ(c, b + kRootChunkSize);
    ASSERT_EQ(backend_->root_chunks_alloc(0, 2, true, &r), UVM_OK);
    const uint64_t r2 = r + kRootChunkSize;
    int fd = -1;
    uint64_t offset = 0;
    ASSERT_EQ(backend_->sharing()->root_chunk_export(0, r, &fd, &offset), UVM_OK);
    close(fd);
    const uint64_t va = uvm::cuda::reservable_gpu_address(kRootChunkSize, kRootChunkSize);
    ASSERT_NE(va, 0u);
    uvm::mmu::Pte pte;
    pte.address = r2;
    pte.aperture = uvm::mmu::Aperture::Vid;
    ASSERT_EQ(backend_->gpu_va_map(0, UVM_VA_SPACE_USER, va, kRootChunkSize, &pte, 1), UVM_OK);

    const uvm::backend::GpuMemory before = backend_->gpu_memory(0);
    const int64_t handles = driver_audit().handles;
    EXPECT_EQ(offload_->root_chunks_offload(0, &b, 1), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(offload_->root_chunks_offload(0, &r, 1), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(offload_->root_chunks_offload(0, &r2, 1), UVM_ERR_NOT_SUPPORTED);
    const uint64_t all[] = {a, r2};  // one that could go, one that cannot: neither goes
    EXPECT_EQ(offload_->root_chunks_offload(0, all, 2), UVM_ERR_NOT_SUPPORTED);
    const uvm::backend::GpuMemory after = backend_->gpu_memory(0);
    EXPECT_EQ(after.free, before.free);
    EXPECT_EQ(after.held, before.held);
    EXPECT_EQ(driver_audit().handles, handles);
    for (uint64_t p : {a, b, c, r, r2})
        EXPECT_EQ(memset_vid(p, 3, kRootChunkSize), UVM_OK);

    // Unmapped from the user address, r2 may go (a handle of its own).
    backend_->gpu_va_unmap(0, UVM_VA_SPACE_USER, va, kRootChunkSize);
    ASSERT_EQ(offload_->root_chunks_offload(0, &r2, 1), UVM_OK);
    EXPECT_EQ(backend_->gpu_memory(0).held, before.held - 2 * M);
    free_all({a, b, c, r, r2});
}

TEST_F(CudaOffloadTest, RestoreFailingLeavesEverythingOffloadedAndARetrySucceeds) {
    const auto roots = offloaded_run(40);
    const uint64_t phys = roots[0];
    // Someone else takes all but 64 MiB: the first handle is made, the second is not.
    const uint64_t spare = backend_->gpu_memory(0).free;
    ASSERT_GT(spare, 64 * M);
    uint64_t filler = 0;
    const size_t filler_roots = (spare - 64 * M) / kRootChunkSize;
    ASSERT_EQ(backend_->root_chunks_alloc(0, filler_roots, false, &filler), UVM_OK);
    const uint64_t bytes = fake_device_bytes();
    const int64_t handles = driver_audit().handles;
    const int64_t mappings = driver_audit().mappings;  // the filler's, in handles of up to 32 MiB
    const uint64_t creates = fake_calls("cuMemCreate");
    EXPECT_EQ(offload_->root_chunks_restore(0, roots.data(), roots.size()), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(fake_calls("cuMemCreate") - creates, 2u);
    EXPECT_EQ(fake_device_bytes(), bytes);
    EXPECT_EQ(driver_audit().handles, handles);
    EXPECT_EQ(driver_audit().mappings, mappings);  // the restore left none of its own
    EXPECT_NE(memset_vid(phys, 1, kRootChunkSize), UVM_OK);
    free_all(roots_from(filler, filler_roots));

    // Every failable driver call of the restore in turn (create, map, grant
    // of each handle): each failure undoes the call.
    uint64_t n = 1;
    for (;; ++n) {
        const uvm::cuda::DriverAudit audit = driver_audit();
        const uint64_t used = fake_device_bytes();
        uvm::cuda::driver_fail_call(n, CUDA_ERROR_UNKNOWN);
        const uvm_status_t status = offload_->root_chunks_restore(0, roots.data(), roots.size());
        const bool fired = uvm::cuda::driver_fault_fired();
        uvm::cuda::driver_fail_call(0, CUDA_SUCCESS);
        if (!fired) {
            ASSERT_EQ(status, UVM_OK);
            break;
        }
        EXPECT_EQ(status, UVM_ERR_BACKEND) << "call " << n;
        EXPECT_TRUE(driver_audit().balanced_with(audit)) << "call " << n;
        EXPECT_EQ(fake_device_bytes(), used) << "call " << n;
        EXPECT_NE(memset_vid(phys + 39 * kRootChunkSize, 1, kRootChunkSize), UVM_OK) << "call " << n;
    }
    EXPECT_EQ(n, 7u);  // six failable calls: two handles, each created, mapped and granted
    EXPECT_EQ(backend_->gpu_memory(0).held, 80 * M);
    EXPECT_EQ(memset_vid(phys, 1, 80 * M), UVM_OK);
    free_all(roots);
}

TEST_F(CudaOffloadTest, ARestoredRunFreedRootByRootGoesBackWithItsLastRoot) {
    const auto roots = offloaded_run(4);
    const uint64_t phys = roots[0];
    ASSERT_EQ(offload_->root_chunks_restore(0, roots.data(), 4), UVM_OK);
    for (size_t i = 0; i < 3; ++i)
        backend_->root_chunk_free(0, roots[i]);
    EXPECT_EQ(backend_->gpu_memory(0).held, 8 * M);
    EXPECT_EQ(backend_->gpu_memory(0).ready, 0u);  // the freed ones are nobody's
    const auto others = alloc_elsewhere_on_0(phys, 4, 6, 3);
    ASSERT_EQ(others.size(), 9u);
    const int64_t handles = driver_audit().handles;
    const uint64_t held = backend_->gpu_memory(0).held;
    backend_->root_chunk_free(0, roots[3]);
    EXPECT_EQ(driver_audit().handles, handles - 1);
    EXPECT_EQ(backend_->gpu_memory(0).held, held - 8 * M);
    free_all(others);
}

TEST_F(CudaOffloadTest, OffloadedRootsAreFreedAcrossATrimAndTheBackendEndsClean) {
    const auto roots = offloaded_run(3);
    const uint64_t phys = roots[0];
    backend_->trim(0);
    EXPECT_EQ(backend_->gpu_memory(0).held, 0u);
    ASSERT_EQ(offload_->root_chunks_restore(0, &roots[1], 1), UVM_OK);  // one back, two asleep
    EXPECT_EQ(backend_->gpu_memory(0).held, 2 * M);
    free_all(roots);  // the offloaded ones only give their addresses back
    EXPECT_EQ(backend_->gpu_memory(0).held, 0u);
    EXPECT_EQ(fake_device_bytes(), 0u);
    // The addresses are free again: a run of the same size may take them.
    uint64_t again = 0;
    ASSERT_EQ(backend_->root_chunks_alloc(0, 3, true, &again), UVM_OK);
    EXPECT_EQ(again, phys);
    free_all(roots_from(again, 3));
}

TEST_F(CudaOffloadTest, BadInputIsInvalidAndChangesNothing) {
    uint64_t phys = 0, freed = 0;
    ASSERT_EQ(backend_->root_chunks_alloc(0, 2, true, &phys), UVM_OK);
    ASSERT_EQ(backend_->root_chunks_alloc(0, 1, true, &freed), UVM_OK);
    backend_->root_chunk_free(0, freed);
    const uvm::backend::GpuMemory before = backend_->gpu_memory(0);
    const uint64_t bad[] = {freed, phys + 4096, backend_->gpu_info(0).phys_space};
    for (uint64_t p : bad) {
        EXPECT_EQ(offload_->root_chunks_offload(0, &p, 1), UVM_ERR_INVALID_ARGUMENT) << p;
        EXPECT_EQ(offload_->root_chunks_restore(0, &p, 1), UVM_ERR_INVALID_ARGUMENT) << p;
    }
    const uint64_t twice[] = {phys, phys};
    EXPECT_EQ(offload_->root_chunks_offload(0, twice, 2), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(offload_->root_chunks_restore(0, &phys, 1), UVM_ERR_INVALID_ARGUMENT);  // backed
    EXPECT_EQ(backend_->gpu_memory(0).held, before.held);
    ASSERT_EQ(offload_->root_chunks_offload(0, &phys, 1), UVM_OK);
    EXPECT_EQ(offload_->root_chunks_offload(0, &phys, 1), UVM_ERR_INVALID_ARGUMENT);  // offloaded already
    const uint64_t mixed[] = {phys, phys + kRootChunkSize};  // the second is backed
    EXPECT_EQ(offload_->root_chunks_restore(0, mixed, 2), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(backend_->gpu_memory(0).held, before.held - 2 * M);
    EXPECT_NE(memset_vid(phys, 1, kRootChunkSize), UVM_OK);  // still offloaded
    EXPECT_EQ(memset_vid(phys + kRootChunkSize, 1, kRootChunkSize), UVM_OK);
    free_all(roots_from(phys, 2));
}

// A handle's shrink at the backend (compaction's): a span that is not a
// handle now, or one with no root given, is INVALID_ARGUMENT; a remappable
// or one holder's handle is NOT_SUPPORTED; a handle wholly given is left as
// it is; each changes nothing. Then the shrink itself: the given root keeps
// its window address and bytes, and the handle's free root goes back.
TEST_F(CudaOffloadTest, ShrinkTakesOnlyAPartGivenHandleAndKeepsItsBytes) {
    uint64_t one = 0, a = 0, b = 0;
    ASSERT_EQ(backend_->root_chunks_alloc(0, 1, false, &one), UVM_OK);  // a pooled handle of 2 MiB
    ASSERT_EQ(backend_->root_chunks_alloc(0, 1, false, &a), UVM_OK);    // one of 4 MiB...
    ASSERT_EQ(backend_->root_chunks_alloc(0, 1, false, &b), UVM_OK);    // ...that b shares
    uint64_t span = 0;
    size_t count = 0;
    backend_->root_chunk_span(0, a, &span, &count);
    ASSERT_EQ(count, 2u);
    uint64_t remap = 0;
    ASSERT_EQ(backend_->root_chunks_alloc(0, 1, true, &remap), UVM_OK);
    uint64_t owned = 0;
    ASSERT_EQ(offload_->root_chunks_alloc_owned(0, 2, &owned), UVM_OK);
    const uint64_t held = backend_->gpu_memory_held(0);
    uint64_t released = 7, copied = 7;
    for (const auto &[first, n] : std::vector<std::pair<uint64_t, size_t>>{
             {span, 1}, {span + kRootChunkSize, 1}, {span, 3}, {span + 1, 2}, {1ull << 60, 1}})
        EXPECT_EQ(offload_->root_span_shrink(0, first, n, &released, &copied), UVM_ERR_INVALID_ARGUMENT)
            << first << " " << n;
    EXPECT_EQ(offload_->root_span_shrink(0, remap, 1, &released, &copied), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(offload_->root_span_shrink(0, owned, 2, &released, &copied), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(offload_->root_span_shrink(0, one, 1, &released, &copied), UVM_OK);  // all of it given
    EXPECT_EQ(released + copied, 0u);
    EXPECT_EQ(offload_->root_span_shrink(0, span, 2, &released, &copied), UVM_OK);  // all of it given too
    EXPECT_EQ(released + copied, 0u);
    EXPECT_EQ(backend_->gpu_memory_held(0), held);

    // b back (its handle keeps it: a is given), then the shrink.
    ASSERT_EQ(memset_vid(a, 0x5a, 2 * M), UVM_OK);
    uint8_t *view = window_of(a);
    backend_->root_chunk_free(0, b);
    EXPECT_EQ(backend_->gpu_memory_held(0), held) << "b's memory stays in a's handle";
    EXPECT_EQ(offload_->root_span_shrink(0, span, 2, &released, &copied), UVM_OK);
    EXPECT_EQ(released, 2 * M);
    EXPECT_EQ(copied, 2 * M);
    EXPECT_EQ(backend_->gpu_memory_held(0), held - 2 * M);
    EXPECT_EQ(window_of(a), view);
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < 2 * M; ++i)
        wrong += view[i] != 0x5a;
    EXPECT_EQ(wrong, 0u);
    backend_->root_chunk_span(0, a, &span, &count);
    EXPECT_EQ(span, a);
    EXPECT_EQ(count, 1u) << "a is a handle of its own now";
    backend_->root_chunk_free(0, a);
    backend_->root_chunk_free(0, one);
    backend_->root_chunk_free(0, remap);
    backend_->root_chunk_free(0, owned);
    backend_->root_chunk_free(0, owned + kRootChunkSize);
}
