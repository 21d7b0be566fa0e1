// The operations the failure-injection tests drive, each on a fresh world:
// a manager of two simulated GPUs behind a backend that can fail its Nth
// call, with a sysmem and a vidmem object made. Shared by the backend
// failure tests and the host allocation failure tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "backend/fault_injection.h"
#include "sim/sim_backend.h"
#include "tests/uvm/fixtures.h"
#include "api/handles.h"
#include "uvm/manager.h"

namespace uvm_test {


constexpr uint64_t K = 1024, M = 1024 * 1024;

struct World {
    uvm_manager_t *mgr = nullptr;
    uvm::backend::FaultInjectingBackend *faults = nullptr;
    uvm_mem_t *sys = nullptr;  // 100 KiB, 4K chunks
    uvm_mem_t *vid = nullptr;  // 3 MiB on GPU 0, 2M chunks
    uvm_mem_t *made = nullptr; // what an alloc operation made
    uvm_stream_t *stream = nullptr;
    uvm_client_t *client = nullptr;
    uvm_mem_t *shared = nullptr;  // a shareable vidmem object (the sharing operations), or the sleeper's
    int socket[2] = {-1, -1};     // exports go into [0], imports come from [1]
};

inline World make_world(bool coherent) {
    World w;
    uvm_sim_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.gpu_count = 2;
    p.vidmem_size = 256 * M;
    p.cpu_coherent = coherent;
    std::unique_ptr<uvm::backend::Backend> sim;
    EXPECT_EQ(uvm::sim::create_sim_backend(p, &sim), UVM_OK);
    auto faults = std::make_unique<uvm::backend::FaultInjectingBackend>(std::move(sim));
    w.faults = faults.get();
    EXPECT_EQ(uvm::create_manager(std::move(faults), &w.mgr), UVM_OK);
    const uvm_mem_alloc_params_t sys = alloc_params(UVM_BACKING_SYSMEM, 100 * K, 0, 0, UVM_MEM_USER_MAPPABLE);
    const uvm_mem_alloc_params_t vid = alloc_params(UVM_BACKING_VIDMEM, 3 * M);
    EXPECT_EQ(uvm_mem_alloc(w.mgr, &sys, &w.sys), UVM_OK);
    EXPECT_EQ(uvm_mem_alloc(w.mgr, &vid, &w.vid), UVM_OK);
    return w;
}

struct Operation {
    const char *name;
    bool coherent;
    std::function<void(World &)> prepare;  // runs without faults
    std::function<uvm_status_t(World &)> run;
    // The sim makes no backend call for it (the manager does it all), so
    // the backend failure test has nothing to fail; the host allocation
    // failure test still drives it.
    bool no_backend_call = false;
};

inline uvm_status_t alloc_into(World &w, uvm_backing_t backing, uint64_t size, uint32_t flags) {
    const uvm_mem_alloc_params_t a = alloc_params(backing, size, 0, 0, flags);
    return uvm_mem_alloc(w.mgr, &a, &w.made);
}

// The sharing operations' setup: a socket pair, a shareable vidmem object of
// two root chunks where `vidmem`, and `messages` exports of `what` (or of
// that object) queued on the socket, one for the operation and one for its
// retry. The manager imports from itself: the same calls as from another
// process, the fds being the exporter's own.
inline void share_setup(World &w, bool vidmem, uvm_mem_t *what, int messages) {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, w.socket), 0);
    if (vidmem) {
        const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 4 * M, 0, 2 * M, UVM_MEM_USER_MAPPABLE);
        ASSERT_EQ(uvm_mem_alloc(w.mgr, &a, &w.shared), UVM_OK);
        what = w.shared;
    }
    for (int i = 0; i < messages; ++i)
        ASSERT_EQ(uvm_mem_export(w.mgr, what, w.socket[0]), UVM_OK);
}

// The sleep operations' setup: a sleepable client with two vidmem objects
// (2M chunks with a kernel mapping, w.shared, and 64K chunks, w.made),
// asleep where `asleep`.
inline void sleep_setup(World &w, bool asleep) {
    ASSERT_EQ(uvm_client_create_sleepable(w.mgr, "sleeper", &w.client), UVM_OK);
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 3 * M, 0, 0, UVM_MEM_GPU_MAPPED);
    p.client = w.client;
    ASSERT_EQ(uvm_mem_alloc(w.mgr, &p, &w.shared), UVM_OK);
    p = alloc_params(UVM_BACKING_VIDMEM, 192 * K, 0, 0, 0);
    p.client = w.client;
    ASSERT_EQ(uvm_mem_alloc(w.mgr, &p, &w.made), UVM_OK);
    if (asleep)
        ASSERT_EQ(uvm_client_sleep(w.mgr, w.client, nullptr), UVM_OK);
}

inline std::vector<Operation> operations() {
    auto nothing = [](World &) {};
    return {
        {"alloc_vidmem_zeroed", false, nothing,
         [](World &w) { return alloc_into(w, UVM_BACKING_VIDMEM, 5 * M, UVM_MEM_ZERO); }},
        {"alloc_vidmem_growing", false, nothing,
         [](World &w) { return alloc_into(w, UVM_BACKING_VIDMEM, 5 * M, 0); }},
        {"alloc_sysmem", false, nothing,
         [](World &w) { return alloc_into(w, UVM_BACKING_SYSMEM, 6 * M, UVM_MEM_ZERO); }},
        {"map_cpu_user", false, nothing,
         [](World &w) { return uvm_mem_map_cpu_user(w.mgr, w.sys, unused_range(100 * K, 4 * K)); }},
        {"map_gpu_phys_sysmem", false, nothing, [](World &w) { return uvm_mem_map_gpu_phys(w.mgr, w.sys, 1); }},
        {"map_gpu_kernel_sysmem", false, nothing,
         [](World &w) { return uvm_mem_map_gpu_kernel(w.mgr, w.sys, 1); }},
        {"map_gpu_user_sysmem_after_cpu_user", false,
         [](World &w) { ASSERT_EQ(uvm_mem_map_cpu_user(w.mgr, w.sys, unused_range(100 * K, 4 * K)), UVM_OK); },
         [](World &w) { return uvm_mem_map_gpu_user(w.mgr, w.sys, 0, 0); }},
        {"map_gpu_user_vidmem", false, nothing,
         [](World &w) {
             return uvm_mem_map_gpu_user(w.mgr, w.vid, 0, reinterpret_cast<uint64_t>(unused_range(4 * M, 2 * M)));
         }},
        {"map_gpu_user_vidmem_picked", false, nothing,
         [](World &w) { return uvm_mem_map_gpu_user(w.mgr, w.vid, 1, 0); }},
        // The sim has no placement capability: the manager reserves on the
        // CPU itself (CUDA's driver reservation failing: DriverFaults.reserve_user_range).
        {"alloc_gpu", false, nothing,
         [](World &w) {
             const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 5 * M, 0, 0, UVM_MEM_ZERO);
             uint64_t address = 0;
             return uvm_mem_alloc_gpu(w.mgr, &a, nullptr, &w.made, &address);
         }},
        {"alloc_gpu_on_legacy_stream", false,
         [](World &w) { ASSERT_EQ(uvm_stream_create(w.mgr, 0, UVM_STREAM_LEGACY, &w.stream), UVM_OK); },
         [](World &w) {
             const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 64 * K, 0, 0, UVM_MEM_ZERO);
             uint64_t address = 0;
             return uvm_mem_alloc_gpu(w.mgr, &a, w.stream, &w.made, &address);
         }},
        {"stream_create_legacy", false, nothing,
         [](World &w) { return uvm_stream_create(w.mgr, 0, UVM_STREAM_LEGACY, &w.stream); }},
        {"reserve_user_range", false, nothing,
         [](World &w) {
             uint64_t range = 0;
             return uvm_user_range_reserve(w.mgr, 8 * M, &range);  // left to the manager's teardown
         },
         true},
        {"alloc_vidmem_gpu_mapped", false, nothing,
         [](World &w) { return alloc_into(w, UVM_BACKING_VIDMEM, 5 * M, UVM_MEM_ZERO | UVM_MEM_GPU_MAPPED); }},
        {"alloc_vidmem_one_chunk_zeroed_gpu_mapped", false, nothing,  // through the thread's cache
         [](World &w) { return alloc_into(w, UVM_BACKING_VIDMEM, 64 * K, UVM_MEM_ZERO | UVM_MEM_GPU_MAPPED); }},
        {"alloc_vidmem_one_chunk_gpu_mapped", false, nothing,
         [](World &w) { return alloc_into(w, UVM_BACKING_VIDMEM, 12 * K, UVM_MEM_GPU_MAPPED); }},
        {"alloc_sysmem_gpu_mapped", false, nothing,
         [](World &w) { return alloc_into(w, UVM_BACKING_SYSMEM, 300 * K, UVM_MEM_GPU_MAPPED); }},
        // Tagged, with the trace on: a failure records nothing and keeps no tag.
        {"alloc_vidmem_tagged_traced", false,
         [](World &w) { ASSERT_EQ(uvm_trace_start(w.mgr, 0), UVM_OK); },
         [](World &w) {
             uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 5 * M, 0, 0, UVM_MEM_ZERO | UVM_MEM_GPU_MAPPED);
             a.tag = "fault-injected";
             return uvm_mem_alloc(w.mgr, &a, &w.made);
         }},
        {"map_gpu_kernel_sysmem_traced", false,
         [](World &w) { ASSERT_EQ(uvm_trace_start(w.mgr, 0), UVM_OK); },
         [](World &w) { return uvm_mem_map_gpu_kernel(w.mgr, w.sys, 1); }},
        {"map_gpu_kernel_vidmem_on_peer", false, nothing,
         [](World &w) { return uvm_mem_map_gpu_kernel(w.mgr, w.vid, 1); }},
        {"map_cpu_kernel_vidmem_coherent", true, nothing,
         [](World &w) { return uvm_mem_map_cpu_kernel(w.mgr, w.vid); }},
        {"copy_kernel_views", false,
         [](World &w) {
             ASSERT_EQ(uvm_mem_map_gpu_kernel(w.mgr, w.sys, 0), UVM_OK);
             ASSERT_EQ(uvm_mem_map_gpu_kernel(w.mgr, w.vid, 0), UVM_OK);
         },
         [](World &w) {
             uvm_mem_span_t d{w.vid, 0, UVM_VIEW_KERNEL}, s{w.sys, 0, UVM_VIEW_KERNEL};
             return uvm_mem_copy(w.mgr, 0, &d, &s, 100 * K);
         }},
        {"copy_physical_views_in_pieces", false,
         [](World &w) { ASSERT_EQ(uvm_mem_map_gpu_phys(w.mgr, w.sys, 0), UVM_OK); },
         [](World &w) {
             uvm_mem_span_t d{w.sys, 0, UVM_VIEW_PHYSICAL}, s{w.vid, 2 * M - 50 * K, UVM_VIEW_PHYSICAL};
             return uvm_mem_copy(w.mgr, 0, &d, &s, 100 * K);
         }},
        // Sharing: every root chunk's export, and the import of vidmem roots and of sysmem pages
        // (a sysmem export is a dup of its memfd: no backend call).
        {"export_vidmem", false, [](World &w) { share_setup(w, true, nullptr, 0); },
         [](World &w) { return uvm_mem_export(w.mgr, w.shared, w.socket[0]); }},
        {"import_vidmem", false, [](World &w) { share_setup(w, true, nullptr, 2); },
         [](World &w) { return uvm_mem_import(w.mgr, w.socket[1], nullptr, &w.made); }},
        {"import_sysmem", false, [](World &w) { share_setup(w, false, w.sys, 2); },
         [](World &w) { return uvm_mem_import(w.mgr, w.socket[1], nullptr, &w.made); }},
        // Sleep and wake: every offload, restore and copy of a client's memory.
        {"client_sleep", false, [](World &w) { sleep_setup(w, false); },
         [](World &w) { return uvm_client_sleep(w.mgr, w.client, nullptr); }},
        // A client whose roots include a whole free one: a sleep that fails
        // gives it back no more than the rest.
        {"client_sleep_beside_a_free_root", false,
         [](World &w) {
             sleep_setup(w, false);
             uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 2 * M, 0, 2 * M, 0);
             p.client = w.client;
             uvm_mem_t *freed = nullptr;
             ASSERT_EQ(uvm_mem_alloc(w.mgr, &p, &freed), UVM_OK);
             ASSERT_EQ(uvm_mem_free(w.mgr, freed), UVM_OK);
         },
         [](World &w) { return uvm_client_sleep(w.mgr, w.client, nullptr); }},
        // The backup, in pieces of 2 MiB (many pieces of little memory): a
        // reserve made ready by three threads, and a first sleep's growth
        // made ready by the default threads while the copies wait on each
        // piece (a failure in any piece undoes the others).
        {"client_sleep_policy_reserve", false,
         [](World &w) {
             sleep_setup(w, false);
             uvm::from_handle(w.mgr)->sleep_piece_bytes = 2 * M;
         },
         [](World &w) {
             const uvm_sleep_policy_t p = {UVM_SLEEP_HOST_RELEASE, 9 * M + 8 * K, 3};
             return uvm_client_set_sleep_policy(w.mgr, w.client, &p);
         }},
        {"client_sleep_in_pieces", false,
         [](World &w) {
             sleep_setup(w, false);
             uvm::from_handle(w.mgr)->sleep_piece_bytes = 2 * M;
             uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 5 * M + 64 * K, 0, 64 * K, 0);
             p.client = w.client;
             ASSERT_EQ(uvm_mem_free(w.mgr, w.made), UVM_OK);
             ASSERT_EQ(uvm_mem_alloc(w.mgr, &p, &w.made), UVM_OK);
         },
         [](World &w) { return uvm_client_sleep(w.mgr, w.client, nullptr); }},
        {"client_wake", false, [](World &w) { sleep_setup(w, true); },
         [](World &w) { return uvm_client_wake(w.mgr, w.client); }},
    };
}

// Everything a world holds, freed; the manager destroyed.
inline void destroy_world(World &w) {
    if (w.made)
        EXPECT_EQ(uvm_mem_free(w.mgr, w.made), UVM_OK);
    if (w.stream)
        EXPECT_EQ(uvm_stream_destroy(w.mgr, w.stream), UVM_OK);
    if (w.shared)
        EXPECT_EQ(uvm_mem_free(w.mgr, w.shared), UVM_OK);
    if (w.client)  // after its objects
        EXPECT_EQ(uvm_client_destroy(w.mgr, w.client), UVM_OK);
    for (int fd : w.socket)
        if (fd >= 0)
            close(fd);  // and with it the fds of messages never imported
    EXPECT_EQ(uvm_mem_free(w.mgr, w.sys), UVM_OK);
    EXPECT_EQ(uvm_mem_free(w.mgr, w.vid), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(w.mgr), UVM_OK);
}

inline void PrintTo(const Operation &op, std::ostream *os) { *os << op.name; }

}  // namespace uvm_test
