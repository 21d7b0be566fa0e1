// The calls a runtime's allocator is made of (PyTorch, CuPy, Numba;
// docs/integrations.md): size-0 allocations, an allocation that hands back
// its GPU pointer, the address lookup, the default-stream constants. Each
// over every backend; bad input, many threads.
#include <atomic>
#include <random>
#include <thread>

#include "tests/uvm/fixtures.h"
#include "uvm/address_map.h"

using namespace uvm_test;

namespace {
constexpr uint64_t K = 1024, M = 1024 * 1024;

class RuntimeCallsTest : public ManagerTest {
protected:
    void SetUp() override {
        ManagerTest::SetUp();
        if (mgr_ && on_cuda())
            warm_up_streams();  // the driver keeps 2 MiB once a context has had a stream
    }
    // The object and offset a kernel address of `gpu` names (NOT_FOUND: null).
    uvm_mem_t *owner_of(uint32_t gpu, uint64_t address, uint64_t *offset) {
        uvm_mem_t *m = nullptr;
        const uvm_status_t s = uvm_mem_lookup_gpu_kernel(mgr_, gpu, address, &m, offset);
        EXPECT_TRUE(s == UVM_OK || s == UVM_ERR_NOT_FOUND) << uvm_status_string(s);
        return s == UVM_OK ? m : nullptr;
    }
};
INSTANTIATE_TEST_SUITE_P(Backends, RuntimeCallsTest, ::testing::ValuesIn(backend_names()),
                         [](const auto &info) { return info.param; });

}  // namespace

TEST_P(RuntimeCallsTest, SizeZeroGivesNoObjectAndItsFreeDoesNothing) {
    const uvm_manager_stats_t before = manager_stats();
    for (uvm_backing_t b : {UVM_BACKING_SYSMEM, UVM_BACKING_VIDMEM}) {
        uvm_mem_alloc_params_t p = alloc_params(b, 0);
        auto *m = reinterpret_cast<uvm_mem_t *>(uintptr_t{0xdead});
        ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_OK);
        EXPECT_EQ(m, nullptr);
        uint64_t address = 1;
        m = reinterpret_cast<uvm_mem_t *>(uintptr_t{0xdead});
        ASSERT_EQ(uvm_mem_alloc_gpu(mgr_, &p, nullptr, &m, &address), UVM_OK);
        EXPECT_EQ(m, nullptr);
        EXPECT_EQ(address, 0u);
        EXPECT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
        uvm_mem_info_t i;
        EXPECT_EQ(uvm_mem_info(mgr_, m, &i), UVM_ERR_INVALID_ARGUMENT);  // the null handle names nothing
    }
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr_, 0, nullptr, &s), UVM_OK);
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 0);
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(uvm_mem_alloc_async(mgr_, &p, s, &m), UVM_OK);
    EXPECT_EQ(m, nullptr);
    EXPECT_EQ(uvm_mem_free_async(mgr_, m, s), UVM_OK);
    ASSERT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);
    const uvm_manager_stats_t after = manager_stats();
    EXPECT_EQ(after.objects, before.objects);
    const uvm_gpu_stats_t g = stats(0);
    EXPECT_EQ(g.bytes_pinned[UVM_CHUNK_INDEX_4K] + g.bytes_pinned[UVM_CHUNK_INDEX_64K] + g.bytes_pinned[UVM_CHUNK_INDEX_2M],
              0u);
    EXPECT_EQ(g.vidmem_objects, 0u);
}

TEST_P(RuntimeCallsTest, SizeZeroStillRefusesWhatAnyOtherSizeWould) {
    uvm_mem_t *m = nullptr;
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 0, gpus_);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_GPU);
    p = alloc_params(UVM_BACKING_VIDMEM, 0);
    p.flags = 1u << 30;
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_ARGUMENT);
    p = alloc_params(static_cast<uvm_backing_t>(42), 0);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_ARGUMENT);
    p = alloc_params(UVM_BACKING_VIDMEM, 0, 0, 8 * K);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_PAGE_SIZE_NOT_SUPPORTED);
    p = alloc_params(UVM_BACKING_VIDMEM, 0);
    p.client = reinterpret_cast<uvm_client_t *>(uintptr_t{0x999});
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_HANDLE);
    p.client = nullptr;
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_alloc_async(mgr_, &p, reinterpret_cast<uvm_stream_t *>(uintptr_t{0x12345}), &m),
              UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(m, nullptr);
}

TEST_P(RuntimeCallsTest, AllocGpuHandsBackTheKernelAddressInfoGives) {
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr_, 0, nullptr, &s), UVM_OK);
    for (uint64_t size : {4 * K, 100 * K, 3 * M}) {
        for (uvm_stream_t *on : {static_cast<uvm_stream_t *>(nullptr), s}) {
            uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size, gpus_ - 1);
            uvm_mem_t *m = nullptr;
            uint64_t address = 0;
            ASSERT_EQ(uvm_mem_alloc_gpu(mgr_, &p, on, &m, &address), UVM_OK);
            const uvm_mem_info_t i = info(m);
            EXPECT_NE(address, 0u);
            EXPECT_EQ(address, i.gpu_kernel_address);
            EXPECT_TRUE(i.flags & UVM_MEM_GPU_MAPPED);
            EXPECT_EQ(i.gpu_kernel_mask, 1u << (gpus_ - 1));
            uint64_t offset = 1;
            EXPECT_EQ(owner_of(gpus_ - 1, address, &offset), m);
            EXPECT_EQ(offset, 0u);
            ASSERT_EQ(on ? uvm_mem_free_async(mgr_, m, on) : uvm_mem_free(mgr_, m), UVM_OK);
        }
    }
    // Sysmem, for the GPU that uses it.
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, 64 * K, 0);
    uvm_mem_t *m = nullptr;
    uint64_t address = 0;
    ASSERT_EQ(uvm_mem_alloc_gpu(mgr_, &p, nullptr, &m, &address), UVM_OK);
    EXPECT_EQ(address, info(m).gpu_kernel_address);
    EXPECT_EQ(owner_of(0, address + 64 * K - 1, nullptr), m);
    ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    ASSERT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);
}

TEST_P(RuntimeCallsTest, AllocGpuRefusesBadArgumentsAndWritesNothing) {
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 64 * K);
    uvm_mem_t *m = nullptr;
    uint64_t address = 7;
    EXPECT_EQ(uvm_mem_alloc_gpu(nullptr, &p, nullptr, &m, &address), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_alloc_gpu(mgr_, nullptr, nullptr, &m, &address), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_alloc_gpu(mgr_, &p, nullptr, nullptr, &address), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_alloc_gpu(mgr_, &p, nullptr, &m, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_alloc_gpu(mgr_, &p, reinterpret_cast<uvm_stream_t *>(uintptr_t{0x12345}), &m, &address),
              UVM_ERR_INVALID_HANDLE);
    p = alloc_params(UVM_BACKING_VIDMEM, 64 * K, gpus_);
    EXPECT_EQ(uvm_mem_alloc_gpu(mgr_, &p, nullptr, &m, &address), UVM_ERR_INVALID_GPU);
    uvm_gpu_info_t gi;
    ASSERT_EQ(uvm_gpu_info(mgr_, 0, &gi), UVM_OK);
    p = alloc_params(UVM_BACKING_VIDMEM, gi.memory_total + 1);
    EXPECT_EQ(uvm_mem_alloc_gpu(mgr_, &p, nullptr, &m, &address), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(m, nullptr);
    EXPECT_EQ(address, 7u);
    EXPECT_EQ(manager_stats().objects, 0u);
}

// The pair by address: what the handle calls give, in one call each way.
TEST_P(RuntimeCallsTest, ThePairByAddressAllocatesAndFreesWhatTheHandleCallsWould) {
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr_, 0, nullptr, &s), UVM_OK);
    const uvm_manager_stats_t before = manager_stats();
    for (uint64_t size : {1 * K, 100 * K, 3 * M, 12 * M}) {
        for (uvm_stream_t *on : {static_cast<uvm_stream_t *>(nullptr), s}) {
            for (int again = 0; again < 2; ++again) {  // the second time from the stream's parked object
                const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size, gpus_ - 1);
                uint64_t address = 0, held = 0;
                ASSERT_EQ(uvm_gpu_malloc_async(mgr_, &p, on, &address, &held), UVM_OK);
                uint64_t offset = 1;
                uvm_mem_t *m = owner_of(gpus_ - 1, address, &offset);
                ASSERT_NE(m, nullptr);
                EXPECT_EQ(offset, 0u);
                const uvm_mem_info_t i = info(m);
                EXPECT_EQ(i.gpu_kernel_address, address);
                EXPECT_EQ(i.alloc_size, held);
                EXPECT_EQ(held % i.chunk_size, 0u);
                EXPECT_GE(held, size);
                // An address inside the object, or on another GPU, frees nothing.
                uint64_t got = 7, got_held = 7;
                EXPECT_EQ(uvm_gpu_free_async(mgr_, gpus_ - 1, address + 1, on, &got, &got_held), UVM_ERR_NOT_FOUND);
                if (gpus_ > 1)
                    EXPECT_EQ(uvm_gpu_free_async(mgr_, 0, address, on, &got, &got_held), UVM_ERR_NOT_FOUND);
                EXPECT_EQ(got, 7u);
                EXPECT_EQ(got_held, 7u);
                EXPECT_EQ(info(m).size, size);
                ASSERT_EQ(uvm_gpu_free_async(mgr_, gpus_ - 1, address, on, &got, &got_held), UVM_OK);
                EXPECT_EQ(got, size);
                EXPECT_EQ(got_held, held);
                EXPECT_EQ(owner_of(gpus_ - 1, address, nullptr), nullptr);
                EXPECT_EQ(uvm_gpu_free_async(mgr_, gpus_ - 1, address, on, nullptr, nullptr), UVM_ERR_NOT_FOUND);
            }
        }
    }
    EXPECT_EQ(manager_stats().objects, before.objects);
    // Size 0 and address 0, as cudaMallocAsync(0) and cudaFree(NULL).
    const uvm_mem_alloc_params_t zero = alloc_params(UVM_BACKING_VIDMEM, 0);
    uint64_t address = 7, held = 7;
    ASSERT_EQ(uvm_gpu_malloc_async(mgr_, &zero, s, &address, &held), UVM_OK);
    EXPECT_EQ(address, 0u);
    EXPECT_EQ(held, 0u);
    uint64_t got = 7;
    ASSERT_EQ(uvm_gpu_free_async(mgr_, 0, 0, s, &got, nullptr), UVM_OK);
    EXPECT_EQ(got, 0u);
    ASSERT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);
}

TEST_P(RuntimeCallsTest, ThePairByAddressRefusesBadArgumentsAndWritesNothing) {
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 64 * K);
    uint64_t address = 7, held = 7;
    uvm_stream_t *bogus = reinterpret_cast<uvm_stream_t *>(uintptr_t{0x12345});
    EXPECT_EQ(uvm_gpu_malloc_async(nullptr, &p, nullptr, &address, &held), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_malloc_async(mgr_, nullptr, nullptr, &address, &held), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_malloc_async(mgr_, &p, nullptr, nullptr, &held), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_malloc_async(mgr_, &p, bogus, &address, &held), UVM_ERR_INVALID_HANDLE);
    p = alloc_params(UVM_BACKING_VIDMEM, 64 * K, gpus_);
    EXPECT_EQ(uvm_gpu_malloc_async(mgr_, &p, nullptr, &address, &held), UVM_ERR_INVALID_GPU);
    uvm_gpu_info_t gi;
    ASSERT_EQ(uvm_gpu_info(mgr_, 0, &gi), UVM_OK);
    p = alloc_params(UVM_BACKING_VIDMEM, gi.memory_total + 1);
    EXPECT_EQ(uvm_gpu_malloc_async(mgr_, &p, nullptr, &address, &held), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(address, 7u);
    EXPECT_EQ(held, 7u);
    EXPECT_EQ(manager_stats().objects, 0u);
    // The free: a live object stays live whatever is wrong.
    p = alloc_params(UVM_BACKING_VIDMEM, 64 * K);
    ASSERT_EQ(uvm_gpu_malloc_async(mgr_, &p, nullptr, &address, &held), UVM_OK);
    uint64_t got = 7;
    EXPECT_EQ(uvm_gpu_free_async(nullptr, 0, address, nullptr, &got, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_free_async(mgr_, gpus_, address, nullptr, &got, nullptr), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_gpu_free_async(mgr_, 0, address, bogus, &got, nullptr), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_gpu_free_async(mgr_, 0, uint64_t{1} << 60, nullptr, &got, nullptr), UVM_ERR_NOT_FOUND);
    EXPECT_EQ(got, 7u);
    EXPECT_EQ(manager_stats().objects, 1u);
    ASSERT_EQ(uvm_gpu_free_async(mgr_, 0, address, nullptr, &got, nullptr), UVM_OK);
    EXPECT_EQ(got, 64 * K);
    EXPECT_EQ(manager_stats().objects, 0u);
}

// Threads on their own streams allocate and free by address while another
// frees whatever addresses they publish: every object is freed exactly once
// (the losing free is NOT_FOUND), and none is left.
TEST_P(RuntimeCallsTest, ThePairByAddressFromManyThreadsFreesEachObjectOnce) {
    constexpr int kThreads = 4, kRounds = 300;
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> allocated{0}, freed{0}, wrong{0};
    std::vector<std::atomic<uint64_t>> published(kThreads);
    for (auto &p : published)
        p = 0;
    std::vector<uvm_stream_t *> streams(kThreads);
    for (auto &st : streams)
        ASSERT_EQ(uvm_stream_create(mgr_, 0, nullptr, &st), UVM_OK);
    auto free_one = [&](uint64_t address, uvm_stream_t *on) {
        uint64_t size = 0;
        const uvm_status_t s = uvm_gpu_free_async(mgr_, 0, address, on, &size, nullptr);
        if (s == UVM_OK)
            freed++;
        else if (s != UVM_ERR_NOT_FOUND)
            wrong++;
    };
    std::thread thief([&] {
        std::mt19937_64 rng(7);
        while (!stop.load()) {
            const uint64_t a = published[rng() % kThreads].load();
            if (a)
                free_one(a, nullptr);
        }
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            std::mt19937_64 rng(100 + t);
            for (int r = 0; r < kRounds; ++r) {
                const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, (1 + rng() % 40) * 16 * K);
                uint64_t address = 0, held = 0;
                // The bytes held come back even where the thief frees the
                // object (reused at an address it saw) before this returns.
                if (uvm_gpu_malloc_async(mgr_, &p, streams[t], &address, &held) != UVM_OK || held < p.size) {
                    wrong++;
                    continue;
                }
                allocated++;
                published[t] = address;
                std::this_thread::yield();
                published[t] = 0;
                free_one(address, streams[t]);
            }
        });
    for (auto &t : threads)
        t.join();
    stop = true;
    thief.join();
    EXPECT_EQ(wrong.load(), 0u);
    EXPECT_EQ(freed.load(), allocated.load());
    EXPECT_EQ(manager_stats().objects, 0u);
    for (auto &st : streams)
        ASSERT_EQ(uvm_stream_destroy(mgr_, st), UVM_OK);
}

TEST_P(RuntimeCallsTest, LookupFindsEveryAddressInsideAnObjectAndNothingElse) {
    // Neighbours of every chunk size, so that 2 MiB and 64 KiB slots are shared.
    std::vector<uvm_mem_t *> objects;
    for (uint64_t size : {4 * K, 12 * K, 64 * K, 200 * K, 2 * M, 5 * M, 8 * K})
        objects.push_back(alloc(UVM_BACKING_VIDMEM, size, 0, 0, UVM_MEM_GPU_MAPPED));
    for (uvm_mem_t *m : objects) {
        const uvm_mem_info_t i = info(m);
        for (uint64_t off : {uint64_t{0}, uint64_t{1}, i.alloc_size / 2, i.alloc_size - 1}) {
            uint64_t offset = 0;
            EXPECT_EQ(owner_of(0, i.gpu_kernel_address + off, &offset), m) << "size " << i.size << " +" << off;
            EXPECT_EQ(offset, off);
        }
        // Its kernel address space is GPU 0's alone.
        if (gpus_ > 1)
            EXPECT_NE(owner_of(1, i.gpu_kernel_address, nullptr), m);
    }
    // A mapping made later is found; unmapped or freed, nothing is.
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 300 * K);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, sys, gpus_ - 1), UVM_OK);
    uint64_t sys_address = 0;
    ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, sys, gpus_ - 1, 0, &sys_address), UVM_OK);
    uint64_t offset = 0;
    EXPECT_EQ(owner_of(gpus_ - 1, sys_address + 299 * K, &offset), sys);
    EXPECT_EQ(offset, 299 * K);
    ASSERT_EQ(uvm_mem_unmap_gpu_kernel(mgr_, sys, gpus_ - 1), UVM_OK);
    EXPECT_EQ(owner_of(gpus_ - 1, sys_address, nullptr), nullptr);
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
    const uvm_mem_info_t gone = info(objects[4]);
    ASSERT_EQ(uvm_mem_free(mgr_, objects[4]), UVM_OK);
    EXPECT_EQ(owner_of(0, gone.gpu_kernel_address, nullptr), nullptr);
    EXPECT_EQ(owner_of(0, gone.gpu_kernel_address + gone.alloc_size - 1, nullptr), nullptr);
    objects.erase(objects.begin() + 4);
    // An object without a kernel mapping is not found by its physical address.
    uvm_mem_t *plain = alloc(UVM_BACKING_VIDMEM, 2 * M);
    uvm_gpu_phys_address_t pa;
    ASSERT_EQ(uvm_mem_gpu_phys_address(mgr_, plain, 0, 0, 4096, &pa), UVM_OK);
    if (!on_cuda())  // on CUDA the physical window's addresses are kernel addresses
        EXPECT_EQ(owner_of(0, pa.address, nullptr), nullptr);
    EXPECT_EQ(owner_of(0, uvm::AddressMap::kLimit + 4096, nullptr), nullptr);
    objects.push_back(plain);
    for (uvm_mem_t *m : objects)
        ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
}

TEST_P(RuntimeCallsTest, LookupRefusesBadArguments) {
    uvm_mem_t *m = nullptr;
    uint64_t offset = 0;
    EXPECT_EQ(uvm_mem_lookup_gpu_kernel(nullptr, 0, 4096, &m, &offset), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_lookup_gpu_kernel(mgr_, 0, 4096, nullptr, &offset), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_lookup_gpu_kernel(mgr_, gpus_, 4096, &m, &offset), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_mem_lookup_gpu_kernel(mgr_, 0, 0, &m, &offset), UVM_ERR_NOT_FOUND);
    EXPECT_EQ(uvm_mem_lookup_gpu_kernel(mgr_, 0, UINT64_MAX, &m, &offset), UVM_ERR_NOT_FOUND);
    EXPECT_EQ(m, nullptr);
}

// Readers look up while writers allocate, map and free: every answer names
// the object then at that address, or nothing; never another object's
// offset beyond its size.
TEST_P(RuntimeCallsTest, LookupsFromManyThreadsWhileOthersAllocateAndFree) {
    constexpr int kWriters = 4, kReaders = 4, kRounds = 300;
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> found{0}, wrong{0};
    std::vector<std::thread> threads;
    std::vector<std::atomic<uint64_t>> published(kWriters);
    for (auto &p : published)
        p = 0;
    for (int t = 0; t < kReaders; ++t)
        threads.emplace_back([&, t] {
            std::mt19937_64 rng(t);
            while (!stop.load()) {
                const uint64_t a = published[rng() % kWriters].load();
                if (!a)
                    continue;
                uvm_mem_t *m = nullptr;
                uint64_t offset = 0;
                const uvm_status_t s = uvm_mem_lookup_gpu_kernel(mgr_, 0, a + 4096, &m, &offset);
                if (s == UVM_OK) {
                    found++;
                    uvm_mem_info_t i;
                    // The object may be gone by now (INVALID_HANDLE); alive, the offset is inside it.
                    if (uvm_mem_info(mgr_, m, &i) == UVM_OK && offset >= i.alloc_size)
                        wrong++;
                } else if (s != UVM_ERR_NOT_FOUND) {
                    wrong++;
                }
            }
        });
    for (int t = 0; t < kWriters; ++t)
        threads.emplace_back([&, t] {
            std::mt19937_64 rng(100 + t);
            for (int r = 0; r < kRounds; ++r) {
                const uint64_t size = (1 + rng() % 40) * 16 * K;
                uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size);
                uvm_mem_t *m = nullptr;
                uint64_t address = 0;
                if (uvm_mem_alloc_gpu(mgr_, &p, nullptr, &m, &address) != UVM_OK) {
                    wrong++;
                    continue;
                }
                uvm_mem_t *seen = nullptr;
                uint64_t offset = 0;
                if (uvm_mem_lookup_gpu_kernel(mgr_, 0, address + size - 1, &seen, &offset) != UVM_OK || seen != m ||
                    offset != size - 1)
                    wrong++;  // its own object, while it holds it, is always found
                published[t] = address;
                published[t] = 0;
                if (uvm_mem_free(mgr_, m) != UVM_OK)
                    wrong++;
            }
        });
    for (int t = kReaders; t < kReaders + kWriters; ++t)
        threads[t].join();
    stop = true;
    for (int t = 0; t < kReaders; ++t)
        threads[t].join();
    EXPECT_EQ(wrong.load(), 0u);
    EXPECT_EQ(manager_stats().objects, 0u);
}

TEST_P(RuntimeCallsTest, TheDefaultStreamConstantsMakeStreams) {
    EXPECT_EQ(UVM_STREAM_LEGACY, reinterpret_cast<void *>(uintptr_t{1}));
    EXPECT_EQ(UVM_STREAM_PER_THREAD, reinterpret_cast<void *>(uintptr_t{2}));
    for (void *native : {UVM_STREAM_LEGACY, UVM_STREAM_PER_THREAD}) {
        uvm_stream_t *a = nullptr, *b = nullptr;
        ASSERT_EQ(uvm_stream_create(mgr_, 0, native, &a), UVM_OK);
        ASSERT_EQ(uvm_stream_create(mgr_, gpus_ - 1, native, &b), UVM_OK);
        EXPECT_NE(a, b);
        void *back = reinterpret_cast<void *>(uintptr_t{0x77});
        ASSERT_EQ(uvm_stream_native(mgr_, a, &back), UVM_OK);
        EXPECT_EQ(back, on_cuda() ? native : nullptr);  // sim: a queue of its own, no native stream
        // Stream-ordered allocation and free on it, as a runtime's stream 0 does.
        uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 1 * M, 0, 0, UVM_MEM_ZERO);
        uvm_mem_t *m = nullptr;
        uint64_t address = 0;
        ASSERT_EQ(uvm_mem_alloc_gpu(mgr_, &p, a, &m, &address), UVM_OK);
        ASSERT_EQ(uvm_mem_free_async(mgr_, m, a), UVM_OK);
        ASSERT_EQ(uvm_mem_alloc_gpu(mgr_, &p, a, &m, &address), UVM_OK);
        EXPECT_EQ(read_back(m, 4096), std::vector<uint8_t>(4096, 0));
        ASSERT_EQ(uvm_mem_free_async(mgr_, m, a), UVM_OK);
        ASSERT_EQ(uvm_stream_synchronize(mgr_, a), UVM_OK);
        ASSERT_EQ(uvm_stream_destroy(mgr_, a), UVM_OK);  // the caller's default stream is never destroyed
        ASSERT_EQ(uvm_stream_destroy(mgr_, b), UVM_OK);
    }
    uvm_stream_t *bad = nullptr;
    if (!on_cuda())
        EXPECT_EQ(uvm_stream_create(mgr_, 0, reinterpret_cast<void *>(uintptr_t{3}), &bad), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_stream_create(mgr_, gpus_, UVM_STREAM_LEGACY, &bad), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(bad, nullptr);
}

// The radix table itself: ranges sharing slots at every level, one across
// a directory boundary, an erase that clears only its own entries, and a
// range renamed (for nobody, then for another object) with every address
// following at once.
TEST(AddressMap, SharedSlotsBoundariesRenamesAndErasesOfOthers) {
    uvm::AddressMap map;
    const uint64_t base = uint64_t{3} << 31;  // a 2 GiB directory boundary
    struct Range {
        uint64_t start, size, handle;
        uint32_t name;
    };
    Range ranges[] = {
        {base - 8 * K, 4 * K, 11, 0},           // 4 KiB slots of one 64 KiB slot
        {base - 4 * K, 68 * K, 12, 0},          // across the boundary, into the next 64 KiB slot
        {base + 64 * K, 2 * M - 64 * K, 13, 0}, // the rest of that 2 MiB slot
        {base + 2 * M, 6 * M, 14, 0},           // whole 2 MiB slots
        {(uint64_t{1} << 47) - 4 * K, 4 * K, 15, 0},
    };
    uint64_t h = 0, b = 0;
    for (Range &r : ranges) {
        r.name = map.reserve(r.start, r.size);
        ASSERT_NE(r.name, 0u);
        EXPECT_FALSE(map.find(r.start, &h, &b)) << "reserved, nobody's yet";
        map.name(r.name, r.handle);
    }
    for (const Range &r : ranges)
        for (uint64_t off : {uint64_t{0}, r.size / 2, r.size - 1}) {
            ASSERT_TRUE(map.find(r.start + off, &h, &b)) << r.handle;
            EXPECT_EQ(h, r.handle);
            EXPECT_EQ(b, r.start);
        }
    EXPECT_FALSE(map.find(base - 12 * K, &h, &b));
    EXPECT_FALSE(map.find(base + 8 * M, &h, &b));
    // Renamed: nobody's (a parked object), then another object's, whole.
    map.name(ranges[3].name, 0);
    EXPECT_FALSE(map.find(ranges[3].start + 3 * M, &h, &b));
    map.name(ranges[3].name, 99);
    ASSERT_TRUE(map.find(ranges[3].start + 6 * M - 1, &h, &b));
    EXPECT_EQ(h, 99u);
    EXPECT_EQ(b, ranges[3].start);
    map.erase(ranges[1].name);
    EXPECT_FALSE(map.find(base, &h, &b));
    EXPECT_TRUE(map.find(base - 8 * K, &h, &b));
    EXPECT_EQ(h, 11u);
    // A new range in the freed one, at another size (its name may be the old one's).
    const uint32_t again = map.reserve(base, 64 * K);
    ASSERT_NE(again, 0u);
    map.name(again, 16);
    EXPECT_TRUE(map.find(base + 64 * K - 1, &h, &b));
    EXPECT_EQ(h, 16u);
    EXPECT_EQ(b, base);
    EXPECT_FALSE(map.find(base - 4 * K, &h, &b));
    // From the limit up nothing is kept, and naming or erasing it is harmless.
    const uint32_t unkept = map.reserve(uvm::AddressMap::kLimit, 4 * K);
    EXPECT_EQ(unkept, uvm::AddressMap::kUnkept);
    map.name(unkept, 5);
    EXPECT_FALSE(map.find(uvm::AddressMap::kLimit, &h, &b));
    map.erase(unkept);
    for (const Range &r : ranges)
        if (r.handle != 12)
            map.erase(r.name);
    map.erase(again);
    for (const Range &r : ranges)
        EXPECT_FALSE(map.find(r.start, &h, &b));

    // A long range across the next directory boundary, with partial 2 MiB
    // slots at both ends (its whole slots are written in one run on each
    // side of the boundary), beside small ranges in those end slots: every
    // address inside is the long one, the neighbours keep theirs, and its
    // erase clears its slots only.
    const uint64_t edge = uint64_t{5} << 31;
    const uint64_t start = edge - 4 * M - 64 * K, size = 8 * M + 64 * K + 4 * K;
    const uint32_t before = map.reserve(start - 8 * K, 8 * K), after = map.reserve(start + size, 4 * K);
    const uint32_t long_range = map.reserve(start, size);
    ASSERT_TRUE(before && after && long_range);
    map.name(before, 21);
    map.name(after, 22);
    map.name(long_range, 23);
    for (uint64_t at : {start, start + 64 * K, start + 2 * M, edge - 1, edge, edge + 2 * M, start + size - 1}) {
        ASSERT_TRUE(map.find(at, &h, &b)) << at - start;
        EXPECT_EQ(h, 23u);
        EXPECT_EQ(b, start);
    }
    ASSERT_TRUE(map.find(start - 1, &h, &b));
    EXPECT_EQ(h, 21u);
    ASSERT_TRUE(map.find(start + size, &h, &b));
    EXPECT_EQ(h, 22u);
    map.erase(long_range);
    for (uint64_t at : {start, edge - 1, edge, start + size - 1})
        EXPECT_FALSE(map.find(at, &h, &b)) << at - start;
    EXPECT_TRUE(map.find(start - 8 * K, &h, &b) && h == 21u);
    EXPECT_TRUE(map.find(start + size, &h, &b) && h == 22u);
    map.erase(before);
    map.erase(after);
}

// A runtime frees on a stream (uvm_mem_free_async): the memory waits in the
// stream's pool, but it is no longer the client's: out of its budget and its
// object count, so the client can take it again, or go.
TEST_P(RuntimeCallsTest, AnObjectFreedIntoAStreamsPoolLeavesItsClient) {
    uvm_client_t *client = nullptr;
    ASSERT_EQ(uvm_client_create(mgr_, "runtime", &client), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr_, client, 0, 4 * M), UVM_OK);
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr_, 0, UVM_STREAM_LEGACY, &s), UVM_OK);
    for (int round = 0; round < 3; ++round) {
        uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 3 * M);
        p.client = client;
        uvm_mem_t *m = nullptr;
        uint64_t address = 0;
        ASSERT_EQ(uvm_mem_alloc_gpu(mgr_, &p, s, &m, &address), UVM_OK) << "round " << round;
        uvm_client_info_t ci;
        ASSERT_EQ(uvm_client_info(mgr_, client, &ci), UVM_OK);
        EXPECT_EQ(ci.objects, 1u);
        EXPECT_EQ(ci.vidmem_used[0], 4 * M);  // two 2 MiB chunks
        ASSERT_EQ(uvm_mem_free_async(mgr_, m, s), UVM_OK);
        ASSERT_EQ(uvm_client_info(mgr_, client, &ci), UVM_OK);
        EXPECT_EQ(ci.objects, 0u);
        EXPECT_EQ(ci.vidmem_used[0], 0u);
    }
    ASSERT_EQ(uvm_stream_synchronize(mgr_, s), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, client), UVM_OK);
    ASSERT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);
}
