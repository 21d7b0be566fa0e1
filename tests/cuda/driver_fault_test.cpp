// Driver failure injection on the CUDA backend: for every N along each
// operation (alloc, map, peer, sysmem, managed, copies, streams, export and
// import, and the manager's own creation), the driver's Nth failable call returns a chosen
// error. The operation must return OUT_OF_MEMORY or BACKEND and leave the
// manager as it was (statistics, page trees, objects, trace), the same
// operation must then succeed, and once the manager is destroyed every driver
// object it made (handles, reservations, mappings, registrations,
// allocations, streams, events, contexts) must have been released.
//
// It runs on a GPU machine against the real driver, and everywhere against
// the stand-in driver (fake_driver.cpp), which ctest loads through
// UVM_CUDA_DRIVER_LIBRARY: so every CI run covers the backend's error paths.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <atomic>
#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/fault_injection.h"
#include "cuda/cuda_backend.h"
#include "cuda/driver_api.h"
#include "tests/backend/forwarding.h"
#include "tests/pressure/free_roots_cases.h"
#include "tests/uvm/fixtures.h"
#include "tests/uvm/snapshot.h"

using namespace uvm_test;
using uvm::cuda::driver_audit;
using uvm::cuda::DriverAudit;
using uvm::cuda::driver_fail_call;
using uvm::cuda::driver_fault_fired;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;

uvm_status_t create_cuda_manager(uvm_manager_t **out) {
    uvm_manager_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backend = UVM_BACKEND_CUDA;
    return uvm_manager_create(&p, out);
}

// Device bytes the stand-in driver holds (0 on the real driver, where the
// audit's counts are the check).
uint64_t fake_device_bytes() {
    void *lib = dlopen(uvm::cuda::driver_library_name(), RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
        return 0;
    auto used = reinterpret_cast<uint64_t (*)()>(dlsym(lib, "fake_cuda_device_bytes_used"));
    const uint64_t bytes = used ? used() : 0;
    dlclose(lib);
    return bytes;
}

// How many times the stand-in driver has `device`'s primary context retained
// now; -1 on the real driver, which keeps no such count.
int retained_contexts(int device) {
    void *lib = dlopen(uvm::cuda::driver_library_name(), RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
        return -1;
    auto retained = reinterpret_cast<int (*)(int)>(dlsym(lib, "fake_cuda_retained_contexts"));
    const int count = retained ? retained(device) : -1;
    dlclose(lib);
    return count;
}

struct World {
    uvm_manager_t *mgr = nullptr;
    uint32_t gpus = 0;
    uvm_mem_t *sys = nullptr;    // 300 KiB, shareable (user-mappable)
    uvm_mem_t *vid = nullptr;    // 3 MiB on GPU 0
    uvm_mem_t *remap = nullptr;  // 4 MiB on GPU 0, user-mappable: 2M remappable chunks
    uvm_mem_t *made = nullptr;   // what an alloc operation made
    uvm_stream_t *stream = nullptr;
    uint64_t range = 0;          // what a reserve operation made
    uint64_t user_va = 0;        // a GPU user address the driver can place a mapping at
    int socket[2] = {-1, -1};    // exports go into [0], imports come from [1]
};

struct Operation {
    const char *name;
    uint32_t gpus_needed;
    std::function<void(World &)> prepare;  // runs with nothing armed
    std::function<uvm_status_t(World &)> run;
};

uvm_status_t alloc_into(World &w, uvm_backing_t backing, uint64_t size, uint32_t flags, uint32_t gpu = 0) {
    const uvm_mem_alloc_params_t a = alloc_params(backing, size, gpu, 0, flags);
    return uvm_mem_alloc(w.mgr, &a, &w.made);
}

// The sharing operations' setup: a socket pair and `messages` exports of
// `what` queued on it, one for the operation and one for its retry. The
// manager imports from itself: the same driver calls as another process
// makes, on handles of its own.
void share_setup(World &w, uvm_mem_t *what, int messages) {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, w.socket), 0);
    for (int i = 0; i < messages; ++i)
        ASSERT_EQ(uvm_mem_export(w.mgr, what, w.socket[0]), UVM_OK);
}

std::vector<Operation> operations() {
    auto nothing = [](World &) {};
    return {
        {"alloc_vidmem", 1, nothing, [](World &w) { return alloc_into(w, UVM_BACKING_VIDMEM, 5 * M, 0); }},
        {"alloc_vidmem_zeroed", 1, nothing,
         [](World &w) { return alloc_into(w, UVM_BACKING_VIDMEM, 5 * M, UVM_MEM_ZERO); }},
        {"alloc_vidmem_small_chunks_gpu_mapped", 1, nothing,
         [](World &w) { return alloc_into(w, UVM_BACKING_VIDMEM, 200 * K, UVM_MEM_GPU_MAPPED | UVM_MEM_ZERO); }},
        {"alloc_vidmem_remappable", 1, nothing,
         [](World &w) { return alloc_into(w, UVM_BACKING_VIDMEM, 4 * M, UVM_MEM_USER_MAPPABLE); }},
        {"alloc_vidmem_on_second_gpu_zeroed", 2, nothing,
         [](World &w) { return alloc_into(w, UVM_BACKING_VIDMEM, 6 * M, UVM_MEM_ZERO, 1); }},
        {"alloc_sysmem_gpu_mapped", 1, nothing,
         [](World &w) { return alloc_into(w, UVM_BACKING_SYSMEM, 300 * K, UVM_MEM_GPU_MAPPED | UVM_MEM_ZERO); }},
        {"alloc_managed", 1, nothing, [](World &w) { return alloc_into(w, UVM_BACKING_MANAGED, 4 * M, 0); }},
        {"map_gpu_phys_sysmem", 1, nothing, [](World &w) { return uvm_mem_map_gpu_phys(w.mgr, w.sys, 0); }},
        {"map_gpu_kernel_sysmem", 1, nothing, [](World &w) { return uvm_mem_map_gpu_kernel(w.mgr, w.sys, 0); }},
        {"map_gpu_kernel_sysmem_on_second_gpu", 2,
         [](World &w) { ASSERT_EQ(uvm_mem_map_gpu_kernel(w.mgr, w.sys, 0), UVM_OK); },
         [](World &w) { return uvm_mem_map_gpu_kernel(w.mgr, w.sys, 1); }},
        {"map_gpu_user_sysmem_after_cpu_user", 1,
         [](World &w) { ASSERT_EQ(uvm_mem_map_cpu_user(w.mgr, w.sys, unused_range(300 * K, 4 * K)), UVM_OK); },
         [](World &w) { return uvm_mem_map_gpu_user(w.mgr, w.sys, 0, 0); }},
        {"map_gpu_user_vidmem_at_address", 1,
         [](World &w) {
             w.user_va = uvm::cuda::reservable_gpu_address(4 * M, 2 * M);
             ASSERT_NE(w.user_va, 0u);
         },
         [](World &w) { return uvm_mem_map_gpu_user(w.mgr, w.remap, 0, w.user_va); }},
        {"map_gpu_kernel_vidmem_on_peer", 2, nothing,
         [](World &w) { return uvm_mem_map_gpu_kernel(w.mgr, w.vid, 1); }},
        {"map_gpu_user_vidmem_on_peer_at_address", 2,
         [](World &w) {
             const uint64_t va = uvm::cuda::reservable_gpu_address(4 * M, 2 * M);
             ASSERT_EQ(uvm_mem_map_gpu_user(w.mgr, w.remap, 0, va), UVM_OK);
         },
         [](World &w) { return uvm_mem_map_gpu_user(w.mgr, w.remap, 1, 0); }},
        {"reserve_user_range", 1, nothing, [](World &w) { return uvm_user_range_reserve(w.mgr, 8 * M, &w.range); }},
        {"managed_advise_and_prefetch", 1,
         [](World &w) { ASSERT_EQ(alloc_into(w, UVM_BACKING_MANAGED, 4 * M, 0), UVM_OK); },
         [](World &w) {
             uvm_status_t s = uvm_mem_advise(w.mgr, w.made, UVM_ADVISE_SET_PREFERRED_LOCATION, 0);
             if (s == UVM_OK)
                 s = uvm_mem_prefetch(w.mgr, w.made, 0, 4 * M, 0);
             return s;
         }},
        {"copy_sysmem_to_vidmem", 1, [](World &w) { ASSERT_EQ(uvm_mem_map_gpu_phys(w.mgr, w.sys, 0), UVM_OK); },
         [](World &w) {
             uvm_mem_span_t d{w.vid, 0, UVM_VIEW_PHYSICAL}, s{w.sys, 0, UVM_VIEW_PHYSICAL};
             return uvm_mem_copy(w.mgr, 0, &d, &s, 300 * K);
         }},
        {"memset_vidmem", 1, nothing,
         [](World &w) {
             uvm_mem_span_t d{w.vid, 4 * K, UVM_VIEW_PHYSICAL};
             return uvm_mem_memset(w.mgr, 0, &d, 0x5a, 1 * M);
         }},
        {"stream_create", 1, nothing, [](World &w) { return uvm_stream_create(w.mgr, 0, nullptr, &w.stream); }},
        {"alloc_gpu_zeroed_on_legacy_stream", 1,
         [](World &w) { ASSERT_EQ(uvm_stream_create(w.mgr, 0, UVM_STREAM_LEGACY, &w.stream), UVM_OK); },
         [](World &w) {
             const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 3 * M, 0, 0, UVM_MEM_ZERO);
             uint64_t address = 0;
             return uvm_mem_alloc_gpu(w.mgr, &a, w.stream, &w.made, &address);
         }},
        {"memset_async", 1, [](World &w) { ASSERT_EQ(uvm_stream_create(w.mgr, 0, nullptr, &w.stream), UVM_OK); },
         [](World &w) {
             uvm_mem_span_t d{w.vid, 0, UVM_VIEW_PHYSICAL};
             uvm_status_t s = uvm_mem_memset_async(w.mgr, 0, &d, 1, 2 * M, w.stream);
             if (s == UVM_OK)
                 s = uvm_stream_synchronize(w.mgr, w.stream);
             return s;
         }},
        // Sharing vidmem (a sysmem import is its memfd mapped, registered on first
        // GPU use: no driver call to fail here).
        {"export_vidmem", 1, [](World &w) { share_setup(w, w.remap, 0); },
         [](World &w) { return uvm_mem_export(w.mgr, w.remap, w.socket[0]); }},
        {"import_vidmem", 1, [](World &w) { share_setup(w, w.remap, 2); },
         [](World &w) { return uvm_mem_import(w.mgr, w.socket[1], nullptr, &w.made); }},
    };
}


// Makes the world, or says why it cannot (no device, too few GPUs).
std::string make_world(World *w, uint32_t gpus_needed) {
    const uvm_status_t s = create_cuda_manager(&w->mgr);
    if (s == UVM_ERR_NO_DEVICE || s == UVM_ERR_NOT_SUPPORTED)
        return std::string("no CUDA driver with a GPU here (") + uvm::cuda::driver_library_name() + ")";
    EXPECT_EQ(s, UVM_OK) << uvm_status_string(s);
    if (s != UVM_OK)
        return "the manager failed";
    uvm_gpu_count(w->mgr, &w->gpus);
    if (w->gpus < gpus_needed)
        return "needs " + std::to_string(gpus_needed) + " GPUs";
    const uvm_mem_alloc_params_t sys = alloc_params(UVM_BACKING_SYSMEM, 300 * K, 0, 0, UVM_MEM_USER_MAPPABLE);
    const uvm_mem_alloc_params_t vid = alloc_params(UVM_BACKING_VIDMEM, 3 * M);
    const uvm_mem_alloc_params_t remap = alloc_params(UVM_BACKING_VIDMEM, 4 * M, 0, 0, UVM_MEM_USER_MAPPABLE);
    EXPECT_EQ(uvm_mem_alloc(w->mgr, &sys, &w->sys), UVM_OK);
    EXPECT_EQ(uvm_mem_alloc(w->mgr, &vid, &w->vid), UVM_OK);
    EXPECT_EQ(uvm_mem_alloc(w->mgr, &remap, &w->remap), UVM_OK);
    return "";
}

void destroy_world(World &w) {
    if (!w.mgr)
        return;
    for (uvm_mem_t *m : {w.made, w.sys, w.vid, w.remap})
        if (m)
            EXPECT_EQ(uvm_mem_free(w.mgr, m), UVM_OK);
    if (w.stream)
        EXPECT_EQ(uvm_stream_destroy(w.mgr, w.stream), UVM_OK);
    if (w.range)
        EXPECT_EQ(uvm_user_range_release(w.mgr, w.range), UVM_OK);
    for (int &fd : w.socket)
        if (fd >= 0)
            close(fd);  // and with it the fds of messages never imported: their memory goes
    EXPECT_EQ(uvm_manager_destroy(w.mgr), UVM_OK);
    w.mgr = nullptr;
}

// Trimmed first: memory the pools keep for later is not part of the state.
// Nor is the driver's free memory, which is every process's: a GPU that the
// operation opened stays open after a later step fails (holding nothing, as
// held_bytes says), and from then on its free memory is known, where before
// it read 0.
Snapshot settled(World &w) {
    for (uint32_t g = 0; g < w.gpus; ++g)
        EXPECT_EQ(uvm_gpu_trim(w.mgr, g, nullptr), UVM_OK);
    Snapshot s = Snapshot::take(w.mgr, {w.sys, w.vid, w.remap, w.made});
    for (uvm_gpu_stats_t &g : s.gpus)
        g.driver_free_bytes = 0;
    return s;
}

// One failed call (a transient error, which the manager may recover from by
// reclaiming memory and trying again where the error is OUT_OF_MEMORY), or
// every call from the Nth on (a driver out of memory for good: no retry can
// succeed, so the operation must fail).
struct Case {
    Operation op;
    CUresult result;
    bool persistent;
};

void PrintTo(const Case &c, std::ostream *os) {
    *os << c.op.name << "/" << c.result << (c.persistent ? "/persistent" : "");
}

std::vector<Case> cases() {
    std::vector<Case> out;
    for (const Operation &op : operations()) {
        out.push_back({op, CUDA_ERROR_OUT_OF_MEMORY, false});
        out.push_back({op, CUDA_ERROR_OUT_OF_MEMORY, true});
        out.push_back({op, CUDA_ERROR_UNKNOWN, false});
    }
    return out;
}

class DriverFaults : public ::testing::TestWithParam<Case> {};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Operations, DriverFaults, ::testing::ValuesIn(cases()), [](const auto &info) {
    return std::string(info.param.op.name) +
           (info.param.result == CUDA_ERROR_OUT_OF_MEMORY ? "_out_of_memory" : "_unknown_error") +
           (info.param.persistent ? "_from_then_on" : "");
});

TEST_P(DriverFaults, EveryFailedDriverCallLeavesTheManagerAsItWasAndLeaksNothing) {
    const Operation &op = GetParam().op;
    const CUresult result = GetParam().result;
    const bool persistent = GetParam().persistent;
    const uvm_status_t expected = result == CUDA_ERROR_OUT_OF_MEMORY ? UVM_ERR_OUT_OF_MEMORY : UVM_ERR_BACKEND;
    const DriverAudit start = driver_audit();
    const uint64_t device_start = fake_device_bytes();
    uint64_t failures_seen = 0, recovered = 0;
    for (uint64_t n = 1; n <= 200; ++n) {
        World w;
        const std::string why = make_world(&w, op.gpus_needed);
        if (!why.empty()) {
            destroy_world(w);
            GTEST_SKIP() << why;
        }
        op.prepare(w);
        const Snapshot before = settled(w);
        driver_fail_call(n, result, persistent);
        const uvm_status_t status = op.run(w);
        const std::string message = uvm_last_error_message();
        const bool fired = driver_fault_fired();
        driver_fail_call(0, CUDA_SUCCESS);
        if (fired && status == UVM_OK && result == CUDA_ERROR_OUT_OF_MEMORY && !persistent) {
            recovered++;  // the manager reclaimed memory and tried again: allowed
        } else if (fired) {
            failures_seen++;
            EXPECT_EQ(status, expected) << op.name << ": driver call " << n << " failed, the operation gave "
                                        << uvm_status_string(status);
            // The driver's words for it, and the call that failed (uvm_last_error_message).
            if (status == UVM_ERR_BACKEND)
                EXPECT_NE(message.find(" failed: "), std::string::npos)
                    << op.name << ": driver call " << n << " failed, the message is \"" << message << "\"";
            const Snapshot after = settled(w);
            EXPECT_TRUE(after == before) << op.name << ": failed driver call " << n << " left a trace: "
                                         << before.differences(after);
            EXPECT_EQ(op.run(w), UVM_OK) << op.name << ": retry after failing driver call " << n;
        } else {
            EXPECT_EQ(status, UVM_OK) << op.name;
        }
        destroy_world(w);
        const DriverAudit end = driver_audit();
        EXPECT_TRUE(end.balanced_with(start))
            << op.name << ", driver call " << n << ": driver objects leaked: handles " << end.handles - start.handles
            << ", reservations " << end.reservations - start.reservations << ", mappings "
            << end.mappings - start.mappings << ", registrations " << end.registrations - start.registrations
            << ", allocations " << end.allocations - start.allocations << ", streams " << end.streams - start.streams
            << ", events " << end.events - start.events << ", contexts " << end.contexts - start.contexts;
        EXPECT_EQ(fake_device_bytes(), device_start) << op.name << ", driver call " << n;
        if (!fired || ::testing::Test::HasFailure())
            break;
    }
    RecordProperty("failed", static_cast<int>(failures_seen));
    RecordProperty("recovered", static_cast<int>(recovered));
    EXPECT_GE(failures_seen + recovered, 1u) << op.name << " made no driver call to fail";
    if (persistent || result != CUDA_ERROR_OUT_OF_MEMORY)
        EXPECT_EQ(recovered, 0u);
}

// `body(mgr)` on a fresh CUDA manager, which is then destroyed: every
// driver object and device byte must be back. Skips without a GPU on the
// real driver.
template <typename Body>
void in_a_cuda_manager(Body &&body) {
    const DriverAudit start = driver_audit();
    const uint64_t device_start = fake_device_bytes();
    uvm_manager_t *mgr = nullptr;
    const uvm_status_t made = create_cuda_manager(&mgr);
    if (made == UVM_ERR_NO_DEVICE || made == UVM_ERR_NOT_SUPPORTED)
        GTEST_SKIP() << "no CUDA driver with a GPU here (" << uvm::cuda::driver_library_name() << ")";
    ASSERT_EQ(made, UVM_OK);
    body(mgr);
    driver_fail_call(0, CUDA_SUCCESS);
    ASSERT_EQ(uvm_manager_destroy(mgr), UVM_OK);
    EXPECT_TRUE(driver_audit().balanced_with(start)) << "driver objects leaked";
    EXPECT_EQ(fake_device_bytes(), device_start);
}

// A compaction's test under each driver failure in turn: `round(mgr, n,
// &fired)` runs in a fresh manager (in_a_cuda_manager), fails the driver's
// n-th failable call of the compaction (none for n = 0: compact_failing)
// and says whether that failure fired; the rounds end at the first n whose
// failure did not fire (every call has had its turn).
template <typename Round>
void each_compaction_failure(Round &&round) {
    for (uint64_t n = 0;; ++n) {
        SCOPED_TRACE(n);
        bool fired = false;
        in_a_cuda_manager([&](uvm_manager_t *mgr) { round(mgr, n, &fired); });
        if ((n && !fired) || ::testing::Test::HasFailure() || ::testing::Test::IsSkipped())
            break;
    }
}

// `count` objects of `size` in 64K chunks, side by side, all but every
// eighth freed; each kept one filled with pattern(., its index) and, where
// `kernel_mapped`, mapped on GPU 0's kernel space.
void keep_every_eighth(uvm_manager_t *mgr, int count, uint64_t size, bool kernel_mapped,
                       std::vector<uvm_mem_t *> *kept) {
    std::vector<uvm_mem_t *> all;
    for (int i = 0; i < count; ++i) {
        const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, size, 0, 64 * K, 0);
        uvm_mem_t *m = nullptr;
        ASSERT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_OK);
        all.push_back(m);
    }
    for (size_t i = 0; i < all.size(); ++i) {
        if (i % 8) {
            ASSERT_EQ(uvm_mem_free(mgr, all[i]), UVM_OK);
            continue;
        }
        ASSERT_EQ(write_pattern(mgr, all[i], size, static_cast<uint32_t>(i)), UVM_OK);
        if (kernel_mapped)
            ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, all[i], 0), UVM_OK);
        kept->push_back(all[i]);
    }
}

// uvm_gpu_compact(UVM_COMPACT_RELEASE) with the driver's n-th failable call
// failing (none for n = 0); *fired: whether it did.
uvm_status_t compact_failing(uvm_manager_t *mgr, uint64_t n, uvm_compact_result_t *r, bool *fired) {
    if (n)
        driver_fail_call(n, CUDA_ERROR_UNKNOWN);
    const uvm_status_t status = uvm_gpu_compact(mgr, 0, UVM_COMPACT_RELEASE, r);
    *fired = n && driver_fault_fired();
    driver_fail_call(0, CUDA_SUCCESS);
    return status;
}

// Compaction on the CUDA backend: objects the runtime reaches only by
// copies move on the copy engine (cuMemcpy, as eviction's), their bytes
// intact; one whose kernel address is a view of the physical window stays;
// the emptied driver handles go back. Then a driver failure at each call of
// a compaction in turn: the object of the failed move keeps its bytes and
// place, and nothing leaks. Skips without a GPU on the real driver.
TEST(CudaCompact, ObjectsWithoutViewsMoveAndTheEmptiedHandlesGoBack) {
    each_compaction_failure([](uvm_manager_t *mgr, uint64_t n, bool *fired_out) {
        std::vector<uvm_mem_t *> kept;
        keep_every_eighth(mgr, 256, 64 * K, false, &kept);
        if (::testing::Test::HasFatalFailure())
            return;
        uvm_mem_t *viewed = kept[kept.size() / 2];
        ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, viewed, 0), UVM_OK);
        uint64_t kernel_va = 0;
        ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr, viewed, 0, 0, &kernel_va), UVM_OK);
        std::vector<uint64_t> phys;
        for (uvm_mem_t *m : kept) {
            uvm_gpu_phys_address_t pa;
            ASSERT_EQ(uvm_mem_gpu_phys_address(mgr, m, 0, 0, 1, &pa), UVM_OK);
            phys.push_back(pa.address);
        }
        const uint64_t device_before = fake_device_bytes();
        uvm_compact_result_t r;
        const uvm_status_t status = compact_failing(mgr, n, &r, fired_out);
        const bool fired = *fired_out;
        EXPECT_EQ(status, fired ? UVM_ERR_BACKEND : UVM_OK);
        EXPECT_EQ(r.objects_pinned, 1u) << "the kernel mapping is a view of the window";
        uint64_t moved = 0;
        for (size_t i = 0; i < kept.size(); ++i) {
            EXPECT_EQ(wrong_bytes(mgr, kept[i], 64 * K, static_cast<uint32_t>(i * 8)), 0u) << i;
            uvm_gpu_phys_address_t pa;
            ASSERT_EQ(uvm_mem_gpu_phys_address(mgr, kept[i], 0, 0, 1, &pa), UVM_OK);
            moved += pa.address != phys[i];
        }
        EXPECT_EQ(moved, r.objects_moved);
        uint64_t va = 0;
        ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr, viewed, 0, 0, &va), UVM_OK);
        EXPECT_EQ(va, kernel_va);
        if (!fired) {
            EXPECT_GT(r.objects_moved, 0u);
            EXPECT_LT(r.held_after, r.held_before);
            EXPECT_GT(r.bytes_released, 0u);
            if (device_before)  // the stand-in driver: its handles' bytes
                EXPECT_LT(fake_device_bytes(), device_before) << "no driver handle went back";
        }
        for (uvm_mem_t *m : kept)
            ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    });
}

// Objects whose kernel address is a view of the physical window cannot
// move, but their driver handles still shrink around them: each live root
// chunk is copied into a handle of its own mapped at the same address, and
// the handle's free roots go back to the driver. Then a driver failure at
// each call of such a compaction in turn: every byte and address stays, and
// nothing leaks. Skips without a GPU on the real driver.
TEST(CudaCompact, HandlesShrinkAroundObjectsThatCannotMove) {
    each_compaction_failure([](uvm_manager_t *mgr, uint64_t n, bool *fired_out) {
        // 48 MiB of 1 MiB objects in pooled handles (2, 4, then 8 MiB), every
        // eighth kept: one live root chunk in every four.
        std::vector<uvm_mem_t *> kept;
        keep_every_eighth(mgr, 48, 1 * M, true, &kept);
        if (::testing::Test::HasFatalFailure())
            return;
        std::vector<uint64_t> va(kept.size()), phys(kept.size());
        std::set<uint64_t> live_roots;
        for (size_t i = 0; i < kept.size(); ++i) {
            ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr, kept[i], 0, 0, &va[i]), UVM_OK);
            uvm_gpu_phys_address_t pa;
            ASSERT_EQ(uvm_mem_gpu_phys_address(mgr, kept[i], 0, 0, 1, &pa), UVM_OK);
            phys[i] = pa.address;
            live_roots.insert(pa.address / (2 * M));
        }
        const uint64_t device_before = fake_device_bytes();
        uvm_compact_result_t r;
        const uvm_status_t status = compact_failing(mgr, n, &r, fired_out);
        const bool fired = *fired_out;
        EXPECT_EQ(status, fired ? UVM_ERR_BACKEND : UVM_OK);
        EXPECT_EQ(r.objects_pinned, kept.size()) << "every kernel mapping is a view of the window";
        EXPECT_EQ(r.objects_moved, 0u);
        for (size_t i = 0; i < kept.size(); ++i) {
            EXPECT_EQ(wrong_bytes(mgr, kept[i], 1 * M, static_cast<uint32_t>(i * 8)), 0u) << i;
            uint64_t now = 0;
            ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr, kept[i], 0, 0, &now), UVM_OK);
            EXPECT_EQ(now, va[i]);
            uvm_gpu_phys_address_t pa;
            ASSERT_EQ(uvm_mem_gpu_phys_address(mgr, kept[i], 0, 0, 1, &pa), UVM_OK);
            EXPECT_EQ(pa.address, phys[i]) << "nothing moves, the memory under it does";
            if (device_before) {
                // The stand-in's GPU addresses are host ones: the kernel view
                // itself reads the object's bytes.
                const auto *view = reinterpret_cast<const uint8_t *>(va[i]);
                uint64_t wrong = 0;
                for (uint64_t b = 0; b < 1 * M; ++b)
                    wrong += view[b] != pattern(b, static_cast<uint32_t>(i * 8));
                EXPECT_EQ(wrong, 0u) << i;
            }
        }
        if (!fired) {
            // The first handle (2 MiB) is its live root alone: nothing to shrink.
            EXPECT_EQ(r.bytes_rebacked, (live_roots.size() - 1) * 2 * M);
            EXPECT_EQ(r.driver_held_after, live_roots.size() * 2 * M) << "only the live roots' memory stays";
            EXPECT_LT(r.driver_held_after, r.driver_held_before);
            if (device_before)  // the stand-in driver: its handles' bytes
                EXPECT_EQ(fake_device_bytes(), device_before - (r.driver_held_before - r.driver_held_after));
            uvm_gpu_stats_t stats;
            ASSERT_EQ(uvm_gpu_stats(mgr, 0, &stats), UVM_OK);
            EXPECT_EQ(stats.compact_bytes_released, r.driver_held_before - r.driver_held_after)
                << "what the driver got back, not the roots the PMM gave back";
            EXPECT_EQ(stats.compact_bytes_rebacked, r.bytes_rebacked);
            const std::string metrics = fetch([&](char *buf, size_t size, size_t *needed) {
                return uvm_manager_metrics(mgr, buf, size, needed);
            });
            EXPECT_NE(metrics.find("uvm_gpu_compact_rebacked_bytes_total{gpu=\"0\"} " +
                                   std::to_string(r.bytes_rebacked) + "\n"),
                      std::string::npos);
            // The shrunk handles serve and give back as any.
            uvm_mem_t *more = nullptr;
            const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 8 * M, 0, 0, 0);
            ASSERT_EQ(uvm_mem_alloc(mgr, &a, &more), UVM_OK);
            ASSERT_EQ(write_pattern(mgr, more, 8 * M, 99), UVM_OK);
            EXPECT_EQ(wrong_bytes(mgr, more, 8 * M, 99), 0u);
            ASSERT_EQ(uvm_mem_free(mgr, more), UVM_OK);
        }
        for (uvm_mem_t *m : kept)
            ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    });
}

// An allocation that finds the driver full while its handles are three
// quarters free: the ladder gives the PMM's free roots back, but every
// handle keeps a live root, so the driver gets nothing until the compaction
// (on OOM, where the policy says) shrinks the handles around the live
// objects. Fills the GPU: on the stand-in's small one only.
TEST(CudaCompact, AnAllocationThatFindsTheDriverFullShrinksHandlesFirst) {
    in_a_cuda_manager([](uvm_manager_t *mgr) {
        uvm_gpu_info_t info;
        ASSERT_EQ(uvm_gpu_info(mgr, 0, &info), UVM_OK);
        if (info.memory_total > 4096 * M)
            GTEST_SKIP() << "fills the GPU: for the stand-in driver's small one";
        // Evicted first, restored at the end: a restore's ladder runs with
        // the object locked (the compaction must pass it by, not wait).
        const uvm_mem_alloc_params_t e = alloc_params(UVM_BACKING_VIDMEM, 64 * M, 0, 0, UVM_MEM_EVICTABLE);
        uvm_mem_t *evicted = nullptr;
        ASSERT_EQ(uvm_mem_alloc(mgr, &e, &evicted), UVM_OK);
        ASSERT_EQ(write_pattern(mgr, evicted, 64 * M, 5), UVM_OK);
        ASSERT_EQ(uvm_mem_evict(mgr, evicted), UVM_OK);
        std::vector<uvm_mem_t *> all, kept;
        for (;;) {
            const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 1 * M, 0, 64 * K, 0);
            uvm_mem_t *m = nullptr;
            const uvm_status_t status = uvm_mem_alloc(mgr, &a, &m);
            if (status == UVM_ERR_OUT_OF_MEMORY)
                break;
            ASSERT_EQ(status, UVM_OK);
            all.push_back(m);
        }
        ASSERT_GT(all.size(), 64u);
        for (size_t i = 0; i < all.size(); ++i) {
            if (i % 4) {
                ASSERT_EQ(uvm_mem_free(mgr, all[i]), UVM_OK);
                continue;
            }
            ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, all[i], 0), UVM_OK);
            ASSERT_EQ(write_pattern(mgr, all[i], 1 * M, static_cast<uint32_t>(i)), UVM_OK);
            kept.push_back(all[i]);
        }
        const uvm_mem_alloc_params_t big = alloc_params(UVM_BACKING_VIDMEM, 128 * M, 0, 0, 0);
        uvm_mem_t *m = nullptr;
        EXPECT_EQ(uvm_mem_alloc(mgr, &big, &m), UVM_ERR_OUT_OF_MEMORY) << "every handle keeps a live root";
        ASSERT_EQ(uvm_gpu_set_compact_on_oom(mgr, 0, 1), UVM_OK);
        ASSERT_EQ(uvm_mem_alloc(mgr, &big, &m), UVM_OK);
        ASSERT_EQ(write_pattern(mgr, m, 128 * M, 7), UVM_OK);
        EXPECT_EQ(wrong_bytes(mgr, m, 128 * M, 7), 0u);
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
        // The GPU full again, then the restore.
        std::vector<uvm_mem_t *> fill;
        for (;;) {
            const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 2 * M, 0, 0, 0);
            uvm_mem_t *f = nullptr;
            const uvm_status_t status = uvm_mem_alloc(mgr, &a, &f);
            if (status == UVM_ERR_OUT_OF_MEMORY)
                break;
            ASSERT_EQ(status, UVM_OK);
            fill.push_back(f);
        }
        // Whole roots free, but none of their handles whole: in the first
        // four handles one root in four live, in the others three. A shrink
        // needs the driver's memory for its copies first (the driver has
        // one or two roots free now), so the sparse ones go first and make
        // room for the dense ones.
        ASSERT_GT(fill.size(), 64u);
        auto freed = [](size_t i) { return i < 16 ? i % 4 != 0 : i % 4 == 0; };
        for (size_t i = 0; i < fill.size(); ++i)
            if (freed(i))
                ASSERT_EQ(uvm_mem_free(mgr, fill[i]), UVM_OK);
        if (uvm_mem_make_resident(mgr, evicted) != UVM_OK) {
            char text[8192];
            uvm_oom_report(mgr, UVM_REPORT_TEXT, text, sizeof(text), nullptr);
            ADD_FAILURE() << text;
        }
        EXPECT_EQ(wrong_bytes(mgr, evicted, 64 * M, 5), 0u);
        for (size_t i = 0; i < fill.size(); ++i)
            if (!freed(i))
                ASSERT_EQ(uvm_mem_free(mgr, fill[i]), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr, evicted), UVM_OK);
        uvm_gpu_stats_t stats;
        ASSERT_EQ(uvm_gpu_stats(mgr, 0, &stats), UVM_OK);
        EXPECT_GE(stats.compactions_on_oom_served, 2u);
        for (size_t k = 0; k < kept.size(); ++k)
            EXPECT_EQ(wrong_bytes(mgr, kept[k], 1 * M, static_cast<uint32_t>(k * 4)), 0u) << k;
        for (uvm_mem_t *k : kept)
            ASSERT_EQ(uvm_mem_free(mgr, k), UVM_OK);
    });
}

// Eight threads allocate, fill, check and free kernel-mapped objects while
// another compacts with UVM_COMPACT_RELEASE over and over: a handle shrinks
// only where every chunk in it is an object the compaction holds, so no
// thread's object loses a byte, and nothing leaks.
TEST(CudaCompact, ThreadsAllocateWhileHandlesShrink) {
    in_a_cuda_manager([](uvm_manager_t *mgr) {
        std::atomic<bool> stop{false};
        std::atomic<uint64_t> wrong{0}, failed{0}, checked{0};
        std::vector<std::thread> threads;
        for (uint32_t t = 0; t < 8; ++t)
            threads.emplace_back([&, t] {
                struct Held {
                    uvm_mem_t *mem;
                    uint32_t seed;
                    uint64_t size;
                };
                std::vector<Held> ring;
                for (uint32_t i = 0; !stop.load() || i < 16; ++i) {
                    const uint64_t size = (1 + (i + t) % 3) * 256 * K;
                    const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, size, 0, 64 * K, 0);
                    uvm_mem_t *m = nullptr;
                    const uint32_t seed = t * 100000 + i;
                    if (uvm_mem_alloc(mgr, &a, &m) != UVM_OK || uvm_mem_map_gpu_kernel(mgr, m, 0) != UVM_OK ||
                        write_pattern(mgr, m, size, seed) != UVM_OK) {
                        failed++;
                        if (m)
                            uvm_mem_free(mgr, m);
                        break;
                    }
                    ring.push_back({m, seed, size});
                    if (ring.size() > 6) {
                        const Held old = ring.front();
                        wrong += wrong_bytes(mgr, old.mem, old.size, old.seed);
                        checked++;
                        uvm_mem_free(mgr, old.mem);
                        ring.erase(ring.begin());
                    }
                }
                for (const Held &h : ring) {
                    wrong += wrong_bytes(mgr, h.mem, h.size, h.seed);
                    uvm_mem_free(mgr, h.mem);
                }
            });
        uint64_t rebacked = 0;
        int compactions = 0;
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        for (; compactions < 40 || (checked.load() < 800 && failed.load() == 0 &&
                                    std::chrono::steady_clock::now() < until); ++compactions) {
            uvm_compact_result_t r;
            EXPECT_EQ(uvm_gpu_compact(mgr, 0, UVM_COMPACT_RELEASE, &r), UVM_OK);
            rebacked += r.bytes_rebacked;
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        stop = true;
        for (std::thread &th : threads)
            th.join();
        EXPECT_EQ(failed.load(), 0u);
        EXPECT_EQ(wrong.load(), 0u);
        EXPECT_GT(checked.load(), 0u);
        std::printf("threads: %llu objects checked; %llu bytes re-backed by %d compactions\n",
                    static_cast<unsigned long long>(checked.load()), static_cast<unsigned long long>(rebacked),
                    compactions);
    });
}

// A stitched object (chunk/pmm.h): 32 MiB of kernel-mapped vidmem where
// only two free 16 MiB driver handles apart are held, around a live object.
// Its kernel view maps both handles side by side; the stand-in's GPU
// addresses are host ones, so the view itself is read. Then a driver failure
// at each call of the allocation in turn: a clear status, the free roots as
// they were, and the retry stitched; nothing leaks.
TEST(CudaStitched, AKernelViewJoinsFreeHandlesAroundALiveObject) {
    const StitchingOn on;
    for (uint64_t n = 0;; ++n) {
        SCOPED_TRACE(n);
        bool fired = false;
        in_a_cuda_manager([&](uvm_manager_t *mgr) {
            uvm_mem_t *middle = nullptr;
            two_holes(mgr, &middle);
            if (::testing::Test::HasFatalFailure())
                return;
            uvm_gpu_stats_t before, after;
            ASSERT_EQ(uvm_gpu_stats(mgr, 0, &before), UVM_OK);
            const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 32 * M, 0, 0, UVM_MEM_GPU_MAPPED);
            uvm_mem_t *d = nullptr;
            if (n)
                driver_fail_call(n, CUDA_ERROR_UNKNOWN);
            uvm_status_t status = uvm_mem_alloc(mgr, &a, &d);
            fired = n && driver_fault_fired();
            driver_fail_call(0, CUDA_SUCCESS);
            ASSERT_EQ(uvm_gpu_stats(mgr, 0, &after), UVM_OK);
            if (fired) {
                EXPECT_EQ(status, UVM_ERR_BACKEND);
                EXPECT_EQ(after.bytes_free[2], before.bytes_free[2]) << "the free roots as they were";
                EXPECT_EQ(after.held_bytes, before.held_bytes);
                status = uvm_mem_alloc(mgr, &a, &d);
                ASSERT_EQ(uvm_gpu_stats(mgr, 0, &after), UVM_OK);
            }
            ASSERT_EQ(status, UVM_OK);
            EXPECT_EQ(after.root_chunks_grown, before.root_chunks_grown) << "stitched, nothing grown";
            ASSERT_EQ(write_pattern(mgr, d, 32 * M, 9), UVM_OK);
            EXPECT_EQ(wrong_bytes(mgr, d, 32 * M, 9, UVM_VIEW_KERNEL), 0u);
            uint64_t va = 0;
            ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr, d, 0, 0, &va), UVM_OK);
            uvm_gpu_phys_address_t first, second;
            ASSERT_EQ(uvm_mem_gpu_phys_address(mgr, d, 0, 0, 1, &first), UVM_OK);
            ASSERT_EQ(uvm_mem_gpu_phys_address(mgr, d, 0, 16 * M, 1, &second), UVM_OK);
            EXPECT_NE(second.address, first.address + 16 * M) << "two runs";
            if (fake_device_bytes()) {
                const auto *view = reinterpret_cast<const uint8_t *>(va);
                uint64_t wrong = 0;
                for (uint64_t b = 0; b < 32 * M; ++b)
                    wrong += view[b] != pattern(b, 9);
                EXPECT_EQ(wrong, 0u);
            }
            ASSERT_EQ(uvm_mem_free(mgr, d), UVM_OK);
            ASSERT_EQ(uvm_mem_free(mgr, middle), UVM_OK);
        });
        if ((n && !fired) || ::testing::Test::HasFailure() || ::testing::Test::IsSkipped())
            break;
        EXPECT_LT(n, 50u);
    }
}

// Threads make and free stitched objects (and the live ones between their
// pieces) at once, on streams of their own and without: every byte read back
// through each kernel view, and every view's driver mapping gone at the end.
TEST(CudaStitched, ThreadsMakeAndFreeStitchedObjects) {
    const StitchingOn on;
    in_a_cuda_manager([](uvm_manager_t *mgr) {
        std::atomic<uint64_t> wrong{0}, failed{0}, made{0};
        std::vector<std::thread> threads;
        for (uint32_t t = 0; t < 4; ++t)
            threads.emplace_back([&, t] {
                uvm_stream_t *stream = nullptr;
                if (t % 2 && uvm_stream_create(mgr, 0, nullptr, &stream) != UVM_OK) {
                    failed++;
                    return;
                }
                for (uint32_t i = 0; i < 12; ++i) {
                    const uvm_mem_alloc_params_t small = alloc_params(UVM_BACKING_VIDMEM, (10 + 2 * (i % 3)) * M, 0,
                                                                      0, UVM_MEM_GPU_MAPPED);
                    const uvm_mem_alloc_params_t big = alloc_params(UVM_BACKING_VIDMEM, (24 + 2 * t) * M, 0, 0,
                                                                    UVM_MEM_GPU_MAPPED);
                    uvm_mem_t *s[3] = {}, *b = nullptr;
                    uint64_t address = 0;
                    bool ok = true;
                    for (uvm_mem_t *&m : s)
                        ok = ok && uvm_mem_alloc(mgr, &small, &m) == UVM_OK;
                    ok = ok && uvm_mem_free(mgr, s[0]) == UVM_OK && uvm_mem_free(mgr, s[2]) == UVM_OK;
                    s[0] = s[2] = nullptr;
                    ok = ok && (stream ? uvm_mem_alloc_gpu(mgr, &big, stream, &b, &address)
                                       : uvm_mem_alloc(mgr, &big, &b)) == UVM_OK;
                    const uint32_t seed = t * 1000 + i;
                    ok = ok && write_pattern(mgr, b, big.size, seed) == UVM_OK;
                    if (ok) {
                        wrong += wrong_bytes(mgr, b, big.size, seed, UVM_VIEW_KERNEL);
                        made++;
                    } else {
                        failed++;
                    }
                    if (b)
                        stream ? uvm_mem_free_async(mgr, b, stream) : uvm_mem_free(mgr, b);
                    for (uvm_mem_t *m : s)
                        if (m)
                            uvm_mem_free(mgr, m);
                }
                if (stream)
                    uvm_stream_destroy(mgr, stream);
            });
        for (std::thread &th : threads)
            th.join();
        EXPECT_EQ(failed.load(), 0u);
        EXPECT_EQ(wrong.load(), 0u);
        EXPECT_EQ(made.load(), 48u);
    });
}

// The manager's creation: every failed driver call there gives a clear
// status and releases what creation had made.
TEST(DriverFaultsCreate, EveryFailedDriverCallInCreationReleasesWhatItMade) {
    const DriverAudit start = driver_audit();
    uint64_t failures_seen = 0;
    for (uint64_t n = 1; n <= 400; ++n) {
        uvm_manager_t *mgr = nullptr;
        driver_fail_call(n, CUDA_ERROR_OUT_OF_MEMORY);
        const uvm_status_t status = create_cuda_manager(&mgr);
        const bool fired = driver_fault_fired();
        driver_fail_call(0, CUDA_SUCCESS);
        if (!fired && (status == UVM_ERR_NO_DEVICE || status == UVM_ERR_NOT_SUPPORTED))
            GTEST_SKIP() << "no CUDA driver with a GPU here (" << uvm::cuda::driver_library_name() << ")";
        if (fired) {
            failures_seen++;
            EXPECT_TRUE(status == UVM_ERR_OUT_OF_MEMORY || status == UVM_ERR_BACKEND || status == UVM_ERR_NO_DEVICE)
                << "driver call " << n << ": " << uvm_status_string(status);
            EXPECT_EQ(mgr, nullptr);
        } else {
            ASSERT_EQ(status, UVM_OK);
        }
        if (mgr)
            EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
        EXPECT_TRUE(driver_audit().balanced_with(start)) << "creation failing at driver call " << n << " leaked";
        if (!fired || ::testing::Test::HasFailure())
            break;
    }
    RecordProperty("failed", static_cast<int>(failures_seen));
    EXPECT_GE(failures_seen, 3u);
}

// The caller's current context is the caller's: every call that sets one
// puts back what the thread had (none, or another GPU's), as a runtime on
// the same thread (PyTorch, CuPy) relies on.
TEST(CudaContext, EveryCallPutsBackTheCallersContext) {
    const uvm::cuda::DriverApi *api = uvm::cuda::driver_api();
    if (!api || api->cuInit(0) != CUDA_SUCCESS)
        GTEST_SKIP() << "no CUDA driver here";
    int devices = 0;
    ASSERT_EQ(api->cuDeviceGetCount(&devices), CUDA_SUCCESS);
    if (devices == 0)
        GTEST_SKIP() << "no GPU here";
    std::vector<CUcontext> callers = {nullptr};
    CUdevice last = 0;
    CUcontext last_ctx = nullptr;
    if (devices > 1) {  // another GPU's context, as a runtime on device 1 has it
        ASSERT_EQ(api->cuDeviceGet(&last, devices - 1), CUDA_SUCCESS);
        ASSERT_EQ(api->cuDevicePrimaryCtxRetain(&last_ctx, last), CUDA_SUCCESS);
        callers.push_back(last_ctx);
    }
    for (CUcontext mine : callers) {
        ASSERT_EQ(api->cuCtxSetCurrent(mine), CUDA_SUCCESS);
        auto still_mine = [&](const char *after) {
            CUcontext now = reinterpret_cast<CUcontext>(uintptr_t{0xbad});
            ASSERT_EQ(api->cuCtxGetCurrent(&now), CUDA_SUCCESS);
            EXPECT_EQ(now, mine) << "after " << after;
        };
        uvm_manager_t *mgr = nullptr;
        ASSERT_EQ(create_cuda_manager(&mgr), UVM_OK);
        still_mine("uvm_manager_create");
        uvm_stream_t *s = nullptr;
        ASSERT_EQ(uvm_stream_create(mgr, 0, UVM_STREAM_LEGACY, &s), UVM_OK);
        still_mine("uvm_stream_create");
        const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 3 * M, 0, 0, UVM_MEM_ZERO);
        uvm_mem_t *m = nullptr, *n = nullptr;
        uint64_t address = 0;
        ASSERT_EQ(uvm_mem_alloc_gpu(mgr, &a, s, &m, &address), UVM_OK);
        still_mine("uvm_mem_alloc_gpu");
        ASSERT_EQ(uvm_mem_alloc(mgr, &a, &n), UVM_OK);
        still_mine("uvm_mem_alloc");
        uvm_mem_span_t d{m, 0, UVM_VIEW_KERNEL};
        ASSERT_EQ(uvm_mem_memset_async(mgr, 0, &d, 3, 1 * M, s), UVM_OK);
        still_mine("uvm_mem_memset_async");
        uvm_mem_span_t to{n, 0, UVM_VIEW_PHYSICAL}, from{m, 0, UVM_VIEW_KERNEL};
        ASSERT_EQ(uvm_mem_copy(mgr, 0, &to, &from, 1 * M), UVM_OK);
        still_mine("uvm_mem_copy");
        ASSERT_EQ(uvm_mem_free_async(mgr, m, s), UVM_OK);
        still_mine("uvm_mem_free_async");
        ASSERT_EQ(uvm_stream_synchronize(mgr, s), UVM_OK);
        still_mine("uvm_stream_synchronize");
        ASSERT_EQ(uvm_mem_free(mgr, n), UVM_OK);
        ASSERT_EQ(uvm_stream_destroy(mgr, s), UVM_OK);
        still_mine("uvm_stream_destroy");
        ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
        still_mine("uvm_gpu_trim");
        uvm_gpu_info_t gi;
        ASSERT_EQ(uvm_gpu_info(mgr, 0, &gi), UVM_OK);
        still_mine("uvm_gpu_info");
        ASSERT_EQ(uvm_manager_destroy(mgr), UVM_OK);
        still_mine("uvm_manager_destroy");
        ASSERT_NE(uvm::cuda::reservable_gpu_address(2 * M, 2 * M), 0u);
        still_mine("reservable_gpu_address");
    }
    ASSERT_EQ(api->cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
    if (last_ctx)
        ASSERT_EQ(api->cuDevicePrimaryCtxRelease(last), CUDA_SUCCESS);
}

// The audit counts what it should: a handle made is one live handle.
TEST(DriverAudit, CountsWhatIsMadeAndReleased) {
    uvm_manager_t *mgr = nullptr;
    const DriverAudit start = driver_audit();
    const uvm_status_t s = create_cuda_manager(&mgr);
    if (s == UVM_ERR_NO_DEVICE || s == UVM_ERR_NOT_SUPPORTED)
        GTEST_SKIP() << "no CUDA driver with a GPU here";
    ASSERT_EQ(s, UVM_OK);
    // Creation opens no GPU (uvm.h, uvm_gpu_info): the first use does.
    EXPECT_TRUE(driver_audit().balanced_with(start));
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);  // a GPU not open has nothing to give back
    EXPECT_TRUE(driver_audit().balanced_with(start));
    uvm_gpu_info_t gi;
    ASSERT_EQ(uvm_gpu_info(mgr, 0, &gi), UVM_OK);
    EXPECT_EQ(driver_audit().contexts, start.contexts + 1);
    EXPECT_EQ(driver_audit().streams, start.streams + 1);      // the copy stream
    EXPECT_EQ(driver_audit().reservations, start.reservations + 1);  // the physical window
    const DriverAudit before = driver_audit();
    uvm_mem_t *m = nullptr;
    const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 2 * M, 0, 0, UVM_MEM_USER_MAPPABLE);
    ASSERT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_OK);
    EXPECT_EQ(driver_audit().contexts, before.contexts);  // open already
    EXPECT_EQ(driver_audit().handles, before.handles + 1);  // a remappable root chunk is its own handle
    EXPECT_EQ(driver_audit().mappings, before.mappings + 1);
    ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
    EXPECT_EQ(driver_audit().handles, before.handles);
    ASSERT_EQ(uvm_manager_destroy(mgr), UVM_OK);
    EXPECT_TRUE(driver_audit().balanced_with(start));
    // An armed failure that is never reached does not fire.
    driver_fail_call(1000000, CUDA_ERROR_UNKNOWN);
    EXPECT_FALSE(driver_fault_fired());
    driver_fail_call(0, CUDA_SUCCESS);
}

// Each GPU is opened by the first call that uses it (uvm.h, uvm_gpu_info): a
// process that uses GPU 0 of two, as a DistributedDataParallel rank does,
// holds no context, stream or window on GPU 1. On the stand-in driver, which
// counts each GPU's retained context; real GPUs: LazyGpus in driver_costs_test.cpp.
class LazyGpus : public ::testing::Test {
protected:
    void SetUp() override {
        // The driver loaded and initialised, whose counts are read below.
        const uvm::cuda::DriverApi *api = uvm::cuda::driver_api();
        if (!api || api->cuInit(0) != CUDA_SUCCESS || retained_contexts(1) < 0)
            GTEST_SKIP() << "needs the stand-in driver with two GPUs (FAKE_CUDA_GPUS >= 2)";
        ASSERT_EQ(retained_contexts(0), 0);
        ASSERT_EQ(retained_contexts(1), 0);
        start_ = driver_audit();
        ASSERT_EQ(create_cuda_manager(&mgr_), UVM_OK);
        uvm_gpu_count(mgr_, &gpus_);
        checked_ = true;
    }
    void TearDown() override {
        if (!checked_)
            return;  // skipped
        if (mgr_)
            EXPECT_EQ(uvm_manager_destroy(mgr_), UVM_OK);
        // Destruction released what was opened, and nothing else.
        EXPECT_EQ(retained_contexts(0), 0);
        EXPECT_EQ(retained_contexts(1), 0);
        EXPECT_TRUE(driver_audit().balanced_with(start_));
    }
    uvm_mem_t *alloc(uvm_backing_t backing, uint64_t size, uint32_t gpu, uint32_t flags = 0) {
        const uvm_mem_alloc_params_t a = alloc_params(backing, size, gpu, 0, flags);
        uvm_mem_t *m = nullptr;
        EXPECT_EQ(uvm_mem_alloc(mgr_, &a, &m), UVM_OK);
        return m;
    }
    uvm_manager_t *mgr_ = nullptr;
    uint32_t gpus_ = 0;
    DriverAudit start_;
    bool checked_ = false;
};

TEST_F(LazyGpus, AManagerUsedOnGpu0RetainsNoContextOnGpu1) {
    EXPECT_EQ(retained_contexts(0), 0) << "creation opened GPU 0";
    EXPECT_EQ(retained_contexts(1), 0) << "creation opened GPU 1";
    EXPECT_TRUE(driver_audit().balanced_with(start_)) << "creation made driver objects";
    // Every kind of work on GPU 0: objects of each backing, a stream, copies,
    // a user range, managed advice ...
    uvm_stream_t *stream = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr_, 0, nullptr, &stream), UVM_OK);
    uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, 3 * M, 0, UVM_MEM_ZERO);
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, 300 * K, 0, UVM_MEM_GPU_MAPPED | UVM_MEM_ZERO);
    uvm_mem_t *managed = alloc(UVM_BACKING_MANAGED, 4 * M, 0);
    EXPECT_EQ(uvm_mem_advise(mgr_, managed, UVM_ADVISE_SET_PREFERRED_LOCATION, UVM_PROCESSOR_CPU), UVM_OK);
    EXPECT_EQ(uvm_mem_prefetch(mgr_, managed, 0, 4 * M, UVM_PROCESSOR_CPU), UVM_OK);
    uvm_mem_span_t d{vid, 0, UVM_VIEW_PHYSICAL}, from{sys, 0, UVM_VIEW_PHYSICAL};
    EXPECT_EQ(uvm_mem_copy(mgr_, 0, &d, &from, 300 * K), UVM_OK);
    EXPECT_EQ(uvm_mem_memset_async(mgr_, 0, &d, 7, 1 * M, stream), UVM_OK);
    EXPECT_EQ(uvm_stream_synchronize(mgr_, stream), UVM_OK);
    uint64_t range = 0;
    ASSERT_EQ(uvm_user_range_reserve(mgr_, 8 * M, &range), UVM_OK);
    EXPECT_EQ(uvm_user_range_release(mgr_, range), UVM_OK);
    // ... and the calls that walk every GPU: statistics, reports, trims.
    std::string text(1 << 20, '\0');
    size_t needed = 0;
    for (uint32_t g = 0; g < gpus_; ++g) {
        uvm_gpu_stats_t gs;
        EXPECT_EQ(uvm_gpu_stats(mgr_, g, &gs), UVM_OK);
        EXPECT_EQ(uvm_gpu_trim(mgr_, g, nullptr), UVM_OK);
        if (g == 1)
            EXPECT_EQ(gs.held_bytes, 0u);
    }
    EXPECT_EQ(uvm_manager_snapshot(mgr_, &text[0], text.size(), &needed), UVM_OK);
    uvm_mem_t *too_large = nullptr;  // the OOM report describes every GPU
    const uvm_mem_alloc_params_t all = alloc_params(UVM_BACKING_VIDMEM, 64ull << 30, 0);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &all, &too_large), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(uvm_oom_report(mgr_, UVM_REPORT_JSON, &text[0], text.size(), &needed), UVM_OK);
    EXPECT_EQ(retained_contexts(0), 1);
    EXPECT_EQ(retained_contexts(1), 0) << "work on GPU 0 opened GPU 1";

    // The first use of GPU 1 opens it, once.
    uvm_mem_t *on1 = alloc(UVM_BACKING_VIDMEM, 2 * M, 1);
    EXPECT_EQ(retained_contexts(1), 1);
    uvm_mem_t *more = alloc(UVM_BACKING_VIDMEM, 4 * M, 1);
    EXPECT_EQ(retained_contexts(1), 1);
    for (uvm_mem_t *m : {vid, sys, managed, on1, more})
        EXPECT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    EXPECT_EQ(uvm_stream_destroy(mgr_, stream), UVM_OK);
}

// uvm_gpu_info tells the driver's free memory, which needs the GPU open: it
// opens it (the documented cost), where uvm_gpu_stats does not.
TEST_F(LazyGpus, GpuInfoOpensTheGpuItAsksAbout) {
    uvm_gpu_stats_t gs;
    ASSERT_EQ(uvm_gpu_stats(mgr_, 1, &gs), UVM_OK);
    EXPECT_EQ(gs.driver_free_bytes, 0u);  // not known before the GPU is open
    EXPECT_EQ(retained_contexts(1), 0);
    uvm_gpu_info_t gi;
    ASSERT_EQ(uvm_gpu_info(mgr_, 1, &gi), UVM_OK);
    EXPECT_EQ(retained_contexts(1), 1);
    EXPECT_EQ(retained_contexts(0), 0);
    EXPECT_EQ(gi.memory_free, gi.memory_total);  // the stand-in's GPU 1 is all free
    ASSERT_EQ(uvm_gpu_stats(mgr_, 1, &gs), UVM_OK);
    EXPECT_EQ(gs.driver_free_bytes, gi.memory_total);
}

// Should the driver want a context for the granularity query after all (its
// reference lists no context error), creation asks again under the GPU's
// primary context, held for the query only: still nothing open after it.
TEST(LazyGpusCreation, AGranularityQueryThatWantsAContextHoldsOneForTheQueryOnly) {
    const uvm::cuda::DriverApi *api = uvm::cuda::driver_api();
    if (!api || api->cuInit(0) != CUDA_SUCCESS || retained_contexts(1) < 0)
        GTEST_SKIP() << "needs the stand-in driver with two GPUs (FAKE_CUDA_GPUS >= 2)";
    const DriverAudit start = driver_audit();
    uvm_manager_t *mgr = nullptr;
    ASSERT_EQ(setenv("FAKE_CUDA_GRANULARITY_NEEDS_CONTEXT", "1", 1), 0);
    const uvm_status_t status = create_cuda_manager(&mgr);
    unsetenv("FAKE_CUDA_GRANULARITY_NEEDS_CONTEXT");
    ASSERT_EQ(status, UVM_OK);
    EXPECT_EQ(retained_contexts(0), 0);
    EXPECT_EQ(retained_contexts(1), 0);
    EXPECT_TRUE(driver_audit().balanced_with(start));
    uvm_gpu_info_t gi;
    ASSERT_EQ(uvm_gpu_info(mgr, 1, &gi), UVM_OK);
    EXPECT_EQ(gi.granularity, 2 * M);
    ASSERT_EQ(uvm_manager_destroy(mgr), UVM_OK);
    EXPECT_TRUE(driver_audit().balanced_with(start));
}

// Granting GPU 1 access to GPU 0's memory uses both.
TEST_F(LazyGpus, PeerAccessOpensBothGpus) {
    ASSERT_EQ(uvm_gpu_enable_peer_access(mgr_, 1, 0), UVM_OK);
    EXPECT_EQ(retained_contexts(0), 1);
    EXPECT_EQ(retained_contexts(1), 1);
    uvm_mem_t *m = alloc(UVM_BACKING_VIDMEM, 2 * M, 0);
    EXPECT_EQ(uvm_mem_map_gpu_kernel(mgr_, m, 1), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
}

// Two threads whose first calls on GPU 1 come at once (an allocation and a
// stream) open it once: one context retained, one copy stream, one window.
TEST_F(LazyGpus, TwoThreadsFirstUsingAGpuAtOnceOpenItOnce) {
    for (int round = 0; round < 50 && !HasFailure(); ++round) {
        if (round > 0) {
            ASSERT_EQ(uvm_manager_destroy(mgr_), UVM_OK);
            mgr_ = nullptr;
            ASSERT_TRUE(driver_audit().balanced_with(start_));
            ASSERT_EQ(create_cuda_manager(&mgr_), UVM_OK);
        }
        std::atomic<int> ready{0};
        uvm_mem_t *m = nullptr;
        uvm_stream_t *s = nullptr;
        uvm_status_t alloc_status = UVM_ERR_BACKEND, stream_status = UVM_ERR_BACKEND;
        auto together = [&] {
            ready++;
            while (ready.load() < 2) {
            }
        };
        std::thread a([&] {
            together();
            const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 2 * M, 1);
            alloc_status = uvm_mem_alloc(mgr_, &p, &m);
        });
        std::thread b([&] {
            together();
            stream_status = uvm_stream_create(mgr_, 1, nullptr, &s);
        });
        a.join();
        b.join();
        ASSERT_EQ(alloc_status, UVM_OK);
        ASSERT_EQ(stream_status, UVM_OK);
        EXPECT_EQ(retained_contexts(1), 1) << "round " << round;
        EXPECT_EQ(retained_contexts(0), 0) << "round " << round;
        const DriverAudit now = driver_audit();
        EXPECT_EQ(now.contexts, start_.contexts + 1) << "round " << round;
        EXPECT_EQ(now.streams, start_.streams + 2) << "round " << round;  // the copy stream and the caller's
        EXPECT_EQ(now.reservations, start_.reservations + 1) << "round " << round;  // the window
        EXPECT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
        EXPECT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);
    }
}

// The versioned symbol cuda.h names for an entry point (as driver_api.cpp).
#define DRIVER_SYMBOL_TEXT(x) #x
#define DRIVER_SYMBOL(x) DRIVER_SYMBOL_TEXT(x)

// A GPU's first use while a stream of another GPU captures in global mode
// (a CUDA graph being recorded on GPU 0 as GPU 1 is first used) opens it
// without breaking the capture: the window's reservation is allowed then, as
// growth during a capture is (relaxed_capture_mode.h).
TEST_F(LazyGpus, AFirstUseDuringAnotherGpusCaptureLeavesTheCaptureIntact) {
    const uvm::cuda::DriverApi *api = uvm::cuda::driver_api();
    void *lib = dlopen(uvm::cuda::driver_library_name(), RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(lib, nullptr);
    auto begin = reinterpret_cast<decltype(&::cuStreamBeginCapture)>(dlsym(lib, DRIVER_SYMBOL(cuStreamBeginCapture)));
    auto end = reinterpret_cast<decltype(&::cuStreamEndCapture)>(dlsym(lib, DRIVER_SYMBOL(cuStreamEndCapture)));
    auto graph_destroy = reinterpret_cast<decltype(&::cuGraphDestroy)>(dlsym(lib, DRIVER_SYMBOL(cuGraphDestroy)));
    dlclose(lib);
    ASSERT_TRUE(begin && end && graph_destroy);
    CUdevice first = 0;
    CUcontext ctx = nullptr;
    ASSERT_EQ(api->cuDeviceGet(&first, 0), CUDA_SUCCESS);
    ASSERT_EQ(api->cuDevicePrimaryCtxRetain(&ctx, first), CUDA_SUCCESS);  // the runtime's, on GPU 0
    ASSERT_EQ(api->cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    CUstream capturing = nullptr;
    ASSERT_EQ(api->cuStreamCreate(&capturing, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(begin(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    uvm_mem_t *m = alloc(UVM_BACKING_VIDMEM, 2 * M, 1);
    EXPECT_EQ(retained_contexts(1), 1);
    CUgraph graph = nullptr;
    EXPECT_EQ(end(capturing, &graph), CUDA_SUCCESS) << "GPU 1's opening broke GPU 0's capture";
    if (graph)
        graph_destroy(graph);
    EXPECT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    EXPECT_EQ(api->cuStreamDestroy(capturing), CUDA_SUCCESS);
    ASSERT_EQ(api->cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
    ASSERT_EQ(api->cuDevicePrimaryCtxRelease(first), CUDA_SUCCESS);
}

// An open that fails at any of its driver calls is the status of the call
// that needed it, leaves nothing behind, and the next call opens the GPU.
TEST_F(LazyGpus, AFailedOpenLeavesNothingAndTheNextCallOpensTheGpu) {
    uint64_t failed = 0;
    for (uint64_t n = 1; n <= 20; ++n) {
        uvm_stream_t *s = nullptr;
        driver_fail_call(n, CUDA_ERROR_UNKNOWN);
        const uvm_status_t status = uvm_stream_create(mgr_, 1, nullptr, &s);
        const bool fired = driver_fault_fired();
        driver_fail_call(0, CUDA_SUCCESS);
        const bool open = retained_contexts(1) == 1;
        if (fired && !open) {
            failed++;
            EXPECT_EQ(status, UVM_ERR_BACKEND) << "driver call " << n;
            EXPECT_TRUE(driver_audit().balanced_with(start_)) << "a failed open at driver call " << n << " leaked";
            continue;  // and the next round's call tries again
        }
        // The open went through (the failed call, if any, came after it).
        if (status == UVM_OK)
            EXPECT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);
        break;
    }
    EXPECT_GE(failed, 3u);  // the context, the copy stream, the window
    EXPECT_EQ(retained_contexts(1), 1);
}

// Free memory one pool holds goes to another pool's allocation before it
// fails (tests/pressure/free_roots_cases.h), on the CUDA backend: the
// driver's memory taken by a ballast of another manager but kRoom.
namespace {
template <typename Case>
void beside_a_ballast(Case run) {
    uvm_manager_t *mgr = nullptr, *other = nullptr;
    const uvm_status_t s = create_cuda_manager(&mgr);
    if (s == UVM_ERR_NO_DEVICE || s == UVM_ERR_NOT_SUPPORTED)
        GTEST_SKIP() << "no CUDA driver with a GPU here";
    ASSERT_EQ(s, UVM_OK);
    ASSERT_EQ(create_cuda_manager(&other), UVM_OK);
    const uint64_t free_now = free_roots::gpu0_info(mgr).memory_free;
    ASSERT_GT(free_now, 2 * free_roots::kRoom);
    const uvm_mem_alloc_params_t a =
        alloc_params(UVM_BACKING_VIDMEM, (free_now - free_roots::kRoom) & ~(2 * M - 1), 0, 2 * M, 0);
    uvm_mem_t *ballast = nullptr;
    ASSERT_EQ(uvm_mem_alloc(other, &a, &ballast), UVM_OK);
    run(mgr);
    EXPECT_EQ(uvm_mem_free(other, ballast), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(other), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
}  // namespace

TEST(FreeRootsAcrossPools, TheGpusPoolGivesToAUserMappableObject) {
    beside_a_ballast(free_roots::gpu_pool_to_user_mappable);
}
TEST(FreeRootsAcrossPools, TheGpusPoolGivesToASleepableClient) {
    beside_a_ballast(free_roots::gpu_pool_to_sleepable_client);
}
TEST(FreeRootsAcrossPools, ASleepersRootsGiveToTheDefaultClient) {
    beside_a_ballast(free_roots::sleepers_roots_to_default_client);
}
TEST(FreeRootsAcrossPools, TheRemappablePoolGivesToTheDefaultClient) {
    beside_a_ballast(free_roots::remappable_pool_to_default_client);
}
TEST(FreeRootsAcrossPools, TheGpusPoolGivesToAWokenClient) {
    beside_a_ballast(free_roots::after_a_wake);
}

// A CUDA manager with a sleepable client, its GPU opened (an object of the
// default client's made, which opens the GPU and reserves its window).
class SleepHandles : public ::testing::Test {
protected:
    void SetUp() override {
        const uvm_status_t s = create_cuda_manager(&mgr);
        if (s == UVM_ERR_NO_DEVICE || s == UVM_ERR_NOT_SUPPORTED)
            GTEST_SKIP() << "no CUDA driver with a GPU here";
        ASSERT_EQ(s, UVM_OK);
        ASSERT_EQ(uvm_client_create_sleepable(mgr, "model", &model), UVM_OK);
        const uvm_mem_alloc_params_t w = alloc_params(UVM_BACKING_VIDMEM, 2 * M, 0);
        ASSERT_EQ(uvm_mem_alloc(mgr, &w, &warm), UVM_OK);
    }
    void TearDown() override {
        if (!mgr)
            return;
        if (model)
            EXPECT_EQ(uvm_client_destroy(mgr, model), UVM_OK);
        if (warm)
            EXPECT_EQ(uvm_mem_free(mgr, warm), UVM_OK);
        EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
    }
    uvm_manager_t *mgr = nullptr;
    uvm_client_t *model = nullptr;
    uvm_mem_t *warm = nullptr;
};

// A sleepable client's roots grow in long driver handles (the client's
// alone), so its first sleep gives back as few handles as a later one: the
// driver's cost of giving memory back is per handle (0.2 s for 10 GiB in 2
// MiB handles on an H200, 0.01 s in 64 MiB ones). Before, every root was a
// 2 MiB handle of its own until the first wake.
TEST_F(SleepHandles, TheFirstSleepGivesBackFewHandlesAsLaterOnesDo) {
    const DriverAudit start = driver_audit();
    std::vector<uvm_mem_t *> objects;
    for (int i = 0; i < 20; ++i) {  // 160 MiB: 80 roots
        uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 8 * M, 0, 2 * M, 0);
        a.client = model;
        uvm_mem_t *m = nullptr;
        ASSERT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_OK);
        ASSERT_EQ(write_pattern(mgr, m, 8 * M, static_cast<uint8_t>(i)), UVM_OK);
        objects.push_back(m);
    }
    const int64_t grown = driver_audit().handles - start.handles;
    EXPECT_GE(grown, 3);
    EXPECT_LE(grown, 10) << "a handle per root: the first sleep would give back " << grown;
    for (int round = 0; round < 2; ++round) {
        ASSERT_EQ(uvm_client_sleep(mgr, model, nullptr), UVM_OK);
        EXPECT_EQ(driver_audit().handles, start.handles) << "round " << round << ": the reserve too goes back";
        ASSERT_EQ(uvm_client_wake(mgr, model), UVM_OK);
        EXPECT_LE(driver_audit().handles - start.handles, 10) << "round " << round;
        for (int i = 0; i < 20; ++i)
            EXPECT_EQ(wrong_bytes(mgr, objects[i], 8 * M, static_cast<uint8_t>(i)), 0u) << "round " << round;
    }
    for (uvm_mem_t *m : objects)
        EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr, model), UVM_OK);
    model = nullptr;
    EXPECT_EQ(driver_audit().handles, start.handles);  // each handle back with its last root
}

// A trim of an awake sleepable client gives back the driver handles whose
// every root is free, and keeps the free roots of a handle that still holds
// a live object for the client's next allocations: given back alone, they
// would stay in their handle, neither the driver's memory nor the client's.
TEST_F(SleepHandles, ATrimGivesBackWholeHandlesAndTheRestServesTheClient) {
    const int64_t start = driver_audit().handles;
    auto alloc_2m = [&] {
        uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 2 * M, 0, 2 * M, 0);
        a.client = model;
        uvm_mem_t *m = nullptr;
        EXPECT_EQ(uvm_mem_alloc(mgr, &a, &m), UVM_OK);
        return m;
    };
    // 40 roots, one at a time: growths of 1, 2, 4, ... 32 roots, a handle
    // each; the last holds objects 31-39 and 23 roots in the reserve.
    std::vector<uvm_mem_t *> objects;
    for (int i = 0; i < 40; ++i)
        objects.push_back(alloc_2m());
    ASSERT_FALSE(::testing::Test::HasFailure());
    EXPECT_EQ(driver_audit().handles - start, 6);
    for (int i = 0; i < 39; ++i)
        ASSERT_EQ(uvm_mem_free(mgr, objects[i]), UVM_OK);
    uvm_gpu_info_t before;
    ASSERT_EQ(uvm_gpu_info(mgr, 0, &before), UVM_OK);
    uint64_t trimmed = 0;
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, &trimmed), UVM_OK);
    EXPECT_EQ(trimmed, 31 * 2 * M) << "what went back to the driver, not what stays in a handle";
    EXPECT_EQ(driver_audit().handles - start, 1) << "the handle of the live object stays, the others go";
    uvm_gpu_info_t after;
    ASSERT_EQ(uvm_gpu_info(mgr, 0, &after), UVM_OK);
    EXPECT_EQ(after.memory_free - before.memory_free, 31 * 2 * M) << "1 + 2 + 4 + 8 + 16 roots back";
    // The kept handle's free roots serve the client: no new handle.
    std::vector<uvm_mem_t *> again;
    for (int i = 0; i < 20; ++i)
        again.push_back(alloc_2m());
    EXPECT_EQ(driver_audit().handles - start, 1) << "grew beside free roots of its own";
    for (uvm_mem_t *m : again)
        EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, objects[39]), UVM_OK);
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, &trimmed), UVM_OK);
    EXPECT_EQ(trimmed, 32 * 2 * M);
    EXPECT_EQ(driver_audit().handles, start) << "its last root free, the handle goes";
}

// The fault-injecting adaptor over the CUDA backend, which has every
// capability, forwards each of them (the sim has only two).
TEST(FaultInjection, ForwardsEveryCapabilityOfTheCudaBackend) {
    std::unique_ptr<uvm::backend::Backend> cuda;
    const uvm_status_t s = uvm::cuda::create_cuda_backend(&cuda);
    if (s == UVM_ERR_NO_DEVICE || s == UVM_ERR_NOT_SUPPORTED)
        GTEST_SKIP() << "no CUDA driver with a GPU here (" << uvm::cuda::driver_library_name() << ")";
    ASSERT_EQ(s, UVM_OK);
    uvm::backend::Backend *inner = cuda.get();
    EXPECT_NE(inner->streams(), nullptr);
    EXPECT_NE(inner->sharing(), nullptr);
    EXPECT_NE(inner->managed(), nullptr);
    EXPECT_NE(inner->placement(), nullptr);
    uvm::backend::FaultInjectingBackend faults(std::move(cuda));
    expect_forwards_every_capability(*inner, faults);
}
