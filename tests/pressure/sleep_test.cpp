// Sleep and wake of a client (pressure/sleep.h): its GPU memory goes back to
// the driver and comes back under the same addresses, every kept byte intact,
// discarded ones zeroed; what cannot go is refused with nothing moved; the
// budget, the statistics and the driver's count follow.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;

uvm_gpu_stats_t gpu_stats(uvm_manager_t *mgr, uint32_t gpu = 0) {
    uvm_gpu_stats_t s;
    std::memset(&s, 0, sizeof(s));
    EXPECT_EQ(uvm_gpu_stats(mgr, gpu, &s), UVM_OK);
    return s;
}

uvm_client_t *sleepable(uvm_manager_t *mgr, const char *name = "model") {
    uvm_client_t *c = nullptr;
    EXPECT_EQ(uvm_client_create_sleepable(mgr, name, &c), UVM_OK);
    return c;
}

// A vidmem object of `client` with its kernel address (uvm_mem_alloc_gpu).
struct Placed {
    uvm_mem_t *mem = nullptr;
    uint64_t size = 0;
    uint64_t kernel = 0;
    uint64_t phys = 0;
};

Placed place(uvm_manager_t *mgr, uvm_client_t *client, uint64_t size, uint64_t chunk, const char *tag = nullptr,
             uint32_t flags = 0) {
    Placed p;
    p.size = size;
    uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, size, 0, chunk, flags);
    a.client = client;
    a.tag = tag;
    EXPECT_EQ(uvm_mem_alloc_gpu(mgr, &a, nullptr, &p.mem, &p.kernel), UVM_OK);
    uvm_gpu_phys_address_t pa;
    std::memset(&pa, 0, sizeof(pa));
    EXPECT_EQ(uvm_mem_gpu_phys_address(mgr, p.mem, 0, 0, 1, &pa), UVM_OK);
    p.phys = pa.address;
    return p;
}

class Sleep : public ManagerTest {};

INSTANTIATE_TEST_SUITE_P(Backends, Sleep, ::testing::ValuesIn(backend_names()),
                         [](const auto &info) { return info.param; });

}  // namespace

TEST_P(Sleep, KeptBytesComeBackAtEveryChunkSizeUnderTheSameAddresses) {
    uvm_client_t *c = sleepable(mgr_);
    ASSERT_NE(c, nullptr);
    std::vector<Placed> objects;
    uint32_t seed = 1;
    for (uint64_t chunk : {4 * K, 64 * K, 2 * M})
        for (uint64_t size : {chunk, 3 * M + 8 * K}) {
            objects.push_back(place(mgr_, c, size, chunk));
            ASSERT_EQ(write_pattern(mgr_, objects.back().mem, size, seed++), UVM_OK);
        }
    // A user mapping where the manager picks the address, and a peer's
    // kernel mapping, both of which must survive.
    ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, objects[5].mem, 0, 0), UVM_OK);
    uvm_mem_info_t before_info;
    ASSERT_EQ(uvm_mem_info(mgr_, objects[5].mem, &before_info), UVM_OK);
    uint64_t peer_va = 0;
    const bool peer = gpus_ > 1 && uvm_mem_map_gpu_kernel(mgr_, objects[4].mem, 1) == UVM_OK;
    if (peer)
        ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, objects[4].mem, 1, 0, &peer_va), UVM_OK);

    uint64_t bytes = 0;
    for (const Placed &p : objects)
        bytes += info(p.mem).alloc_size;
    const uvm_gpu_stats_t awake = gpu_stats(mgr_);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    const uvm_gpu_stats_t slept = gpu_stats(mgr_);
    // The memory went back to the driver: the client's roots, every byte.
    EXPECT_GE(slept.driver_free_bytes, awake.driver_free_bytes + bytes * 99 / 100);
    EXPECT_LE(slept.held_bytes + bytes, awake.held_bytes);
    uvm_client_info_t ci = client_info(mgr_, c);
    EXPECT_EQ(ci.sleepable, 1);
    EXPECT_EQ(ci.asleep, 1);
    EXPECT_EQ(ci.vidmem_asleep[0], bytes);
    EXPECT_EQ(ci.vidmem_used[0], 0u) << "out of the budget while asleep";
    EXPECT_GE(ci.sleep_host_bytes, bytes);
    // What an operator scrapes says so too.
    const std::string metrics =
        fetch([&](char *b, size_t n, size_t *need) { return uvm_manager_metrics(mgr_, b, n, need); });
    EXPECT_NE(metrics.find("uvm_client_asleep_bytes{client=\"model\",gpu=\"0\"} " + std::to_string(bytes)),
              std::string::npos);
    const std::string snapshot =
        fetch([&](char *b, size_t n, size_t *need) { return uvm_manager_snapshot(mgr_, b, n, need); });
    EXPECT_NE(snapshot.find("\"asleep\":" + std::to_string(bytes)), std::string::npos);
    EXPECT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK) << "asleep already: nothing changes";

    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(uvm_client_wake(mgr_, c), UVM_OK) << "awake already: nothing changes";
    ci = client_info(mgr_, c);
    EXPECT_EQ(ci.asleep, 0);
    EXPECT_EQ(ci.vidmem_asleep[0], 0u);
    EXPECT_EQ(ci.vidmem_used[0], bytes);
    EXPECT_EQ(ci.sleep_host_bytes, 0u);
    seed = 1;
    for (const Placed &p : objects) {
        EXPECT_EQ(wrong_bytes(mgr_, p.mem, p.size, seed++), 0u) << p.size;
        uint64_t va = 0;
        ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, p.mem, 0, 0, &va), UVM_OK);
        EXPECT_EQ(va, p.kernel) << "the kernel address is the one the caller was given";
        uvm_gpu_phys_address_t pa;
        ASSERT_EQ(uvm_mem_gpu_phys_address(mgr_, p.mem, 0, 0, 1, &pa), UVM_OK);
        EXPECT_EQ(pa.address, p.phys);
        uvm_mem_t *found = nullptr;
        uint64_t offset = 1;
        ASSERT_EQ(uvm_mem_lookup_gpu_kernel(mgr_, 0, p.kernel, &found, &offset), UVM_OK);
        EXPECT_EQ(found, p.mem);
        EXPECT_EQ(offset, 0u);
    }
    uvm_mem_info_t after_info;
    ASSERT_EQ(uvm_mem_info(mgr_, objects[5].mem, &after_info), UVM_OK);
    EXPECT_EQ(after_info.user_address, before_info.user_address);
    EXPECT_EQ(after_info.gpu_user_mask, before_info.gpu_user_mask);
    if (peer) {
        uint64_t va = 0;
        ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, objects[4].mem, 1, 0, &va), UVM_OK);
        EXPECT_EQ(va, peer_va);
    }
    // A second sleep and wake, as a serving engine does between phases.
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    seed = 1;
    for (const Placed &p : objects)
        EXPECT_EQ(wrong_bytes(mgr_, p.mem, p.size, seed++), 0u);
    for (const Placed &p : objects)
        ASSERT_EQ(uvm_mem_free(mgr_, p.mem), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

TEST_P(Sleep, DiscardedObjectsComeBackZeroedByTheirModeTheirTagOrTheSleeps) {
    uvm_client_t *c = sleepable(mgr_);
    Placed weights = place(mgr_, c, 4 * M, 0, "weights");
    Placed kv = place(mgr_, c, 4 * M, 0, "kv-cache");
    Placed scratch = place(mgr_, c, 256 * K, 0);
    Placed pinned_keep = place(mgr_, c, 256 * K, 0, "kv-cache");
    ASSERT_EQ(uvm_mem_set_sleep_mode(mgr_, pinned_keep.mem, UVM_SLEEP_KEEP), UVM_OK);
    uint32_t seed = 3;
    for (const Placed *p : {&weights, &kv, &scratch, &pinned_keep})
        ASSERT_EQ(write_pattern(mgr_, p->mem, p->size, seed++), UVM_OK);
    // vLLM's level 1: the KV cache is dropped, the weights kept; the
    // object's own mode wins over its tag.
    const char *tags[] = {"kv-cache"};
    uvm_sleep_params_t params;
    std::memset(&params, 0, sizeof(params));
    params.tags = tags;
    params.tag_count = 1;
    params.tags_mode = UVM_SLEEP_DISCARD;
    ASSERT_EQ(uvm_client_sleep(mgr_, c, &params), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_bytes, 4 * M + 2 * 256 * K) << "only the kept bytes go to the host";
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr_, weights.mem, weights.size, 3), 0u);
    EXPECT_EQ(wrong_bytes(mgr_, kv.mem, kv.size, UINT32_MAX), 0u) << "discarded: back zeroed";
    EXPECT_EQ(wrong_bytes(mgr_, scratch.mem, scratch.size, 5), 0u);
    EXPECT_EQ(wrong_bytes(mgr_, pinned_keep.mem, pinned_keep.size, 6), 0u);
    // Level 2: everything dropped but what says otherwise.
    params.mode = UVM_SLEEP_DISCARD;
    params.tag_count = 0;
    params.tags = nullptr;
    ASSERT_EQ(uvm_client_sleep(mgr_, c, &params), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).sleep_host_bytes, 256 * K);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr_, weights.mem, weights.size, UINT32_MAX), 0u);
    EXPECT_EQ(wrong_bytes(mgr_, pinned_keep.mem, pinned_keep.size, 6), 0u);
    for (const Placed *p : {&weights, &kv, &scratch, &pinned_keep})
        ASSERT_EQ(uvm_mem_free(mgr_, p->mem), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

TEST_P(Sleep, WhileAsleepCallsThatNeedTheMemorySayAsleepAndTheRestWork) {
    uvm_client_t *c = sleepable(mgr_);
    Placed a = place(mgr_, c, 2 * M, 0);
    Placed b = place(mgr_, c, 64 * K, 0);
    uvm_mem_t *host = alloc_owned(mgr_, UVM_BACKING_SYSMEM, 64 * K, c);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    uvm_mem_span_t dst{a.mem, 0, UVM_VIEW_KERNEL}, src{b.mem, 0, UVM_VIEW_KERNEL};
    EXPECT_EQ(uvm_mem_copy(mgr_, 0, &dst, &src, 4 * K), UVM_ERR_ASLEEP);
    EXPECT_EQ(uvm_mem_memset(mgr_, 0, &dst, 1, 4 * K), UVM_ERR_ASLEEP);
    uvm_gpu_phys_address_t pa;
    EXPECT_EQ(uvm_mem_gpu_phys_address(mgr_, a.mem, 0, 0, 1, &pa), UVM_ERR_ASLEEP);
    uint64_t va = 0;
    EXPECT_EQ(uvm_mem_gpu_kernel_address(mgr_, a.mem, 0, 0, &va), UVM_ERR_ASLEEP);
    EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, a.mem, 0, 0), UVM_ERR_ASLEEP);
    EXPECT_EQ(uvm_mem_evict(mgr_, a.mem), UVM_ERR_ASLEEP);
    uvm_mem_t *more = nullptr;
    EXPECT_EQ(alloc_in_client(mgr_, c, UVM_BACKING_VIDMEM, 64 * K, 0, &more), UVM_ERR_ASLEEP);
    EXPECT_EQ(more, nullptr);
    // Host memory of the client, reading about objects, other clients: all as usual.
    uvm_mem_t *more_host = nullptr;
    EXPECT_EQ(alloc_in_client(mgr_, c, UVM_BACKING_SYSMEM, 64 * K, 0, &more_host), UVM_OK);
    EXPECT_EQ(info(a.mem).size, 2 * M);
    uvm_mem_t *other = alloc(UVM_BACKING_VIDMEM, 64 * K);
    ASSERT_NE(other, nullptr);
    // Freeing an asleep object takes it out of what the sleep gave back.
    ASSERT_EQ(uvm_mem_free(mgr_, b.mem), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).vidmem_asleep[0], 2 * M);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(uvm_mem_memset(mgr_, 0, &dst, 1, 4 * K), UVM_OK);
    for (uvm_mem_t *m : {a.mem, host, more_host, other})
        ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

// Export needs the object's memory: while asleep it says so (ASLEEP, as
// every such call) and sends nothing; the client's host memory is not asleep.
TEST_P(Sleep, ExportingAnAsleepObjectSaysAsleepAndSendsNothing) {
    uvm_client_t *c = sleepable(mgr_);
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 2 * M, 0, 2 * M, UVM_MEM_USER_MAPPABLE);
    p.client = c;
    uvm_mem_t *remappable = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &remappable), UVM_OK);
    Placed plain = place(mgr_, c, 64 * K, 0);
    uvm_mem_t *host = alloc_owned(mgr_, UVM_BACKING_SYSMEM, 64 * K, c, nullptr, UVM_MEM_USER_MAPPABLE);
    ASSERT_NE(host, nullptr);
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    EXPECT_EQ(uvm_mem_export(mgr_, remappable, sv[0]), UVM_ERR_ASLEEP);
    EXPECT_EQ(uvm_mem_export(mgr_, plain.mem, sv[0]), UVM_ERR_ASLEEP);
    char byte = 0;
    EXPECT_EQ(recv(sv[1], &byte, 1, MSG_DONTWAIT), -1) << "a message was sent";
    EXPECT_EQ(uvm_mem_export(mgr_, host, sv[0]), UVM_OK) << "the client's host memory is not asleep";
    close(sv[0]);
    close(sv[1]);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    for (uvm_mem_t *m : {remappable, plain.mem, host})
        ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

// An asleep object's GPU mappings can be removed, as its CPU ones can (the
// header: asleep objects can be unmapped): the owner's kernel and user
// mappings, a peer's kernel mapping and its physical one. The counts fall
// at once, the addresses are no longer found, and the wake brings back
// only what is still mapped, with every kept byte.
TEST_P(Sleep, GpuMappingsOfAnAsleepObjectCanBeRemovedAndTheWakeLeavesThemRemoved) {
    uvm_client_t *c = sleepable(mgr_);
    Placed a = place(mgr_, c, 4 * M, 0);
    Placed b = place(mgr_, c, 256 * K, 0);
    ASSERT_EQ(write_pattern(mgr_, a.mem, a.size, 41), UVM_OK);
    ASSERT_EQ(write_pattern(mgr_, b.mem, b.size, 42), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, a.mem, 0, 0), UVM_OK);
    const bool peer = peers();
    if (peer)
        ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, a.mem, 1), UVM_OK);
    const uvm_gpu_stats_t awake0 = gpu_stats(mgr_, 0);
    const uvm_gpu_stats_t awake1 = peer ? gpu_stats(mgr_, 1) : awake0;
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);

    EXPECT_EQ(uvm_mem_unmap_gpu_user(mgr_, a.mem, 0), UVM_OK);
    EXPECT_EQ(uvm_mem_unmap_gpu_kernel(mgr_, a.mem, 0), UVM_OK);
    EXPECT_EQ(uvm_mem_unmap_gpu_user(mgr_, a.mem, 0), UVM_ERR_NOT_MAPPED) << "unmapped once only";
    EXPECT_EQ(uvm_mem_unmap_gpu_kernel(mgr_, a.mem, 0), UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(uvm_mem_unmap_gpu_phys(mgr_, a.mem, 0), UVM_ERR_NOT_SUPPORTED) << "vidmem is always on its owner";
    if (peer) {
        EXPECT_EQ(uvm_mem_unmap_gpu_phys(mgr_, a.mem, 1), UVM_OK);  // and with it the peer's kernel mapping
        EXPECT_EQ(uvm_mem_unmap_gpu_kernel(mgr_, a.mem, 1), UVM_ERR_NOT_MAPPED);
    }
    uvm_mem_info_t i = info(a.mem);
    EXPECT_EQ(i.gpu_kernel_mask, 0u);
    EXPECT_EQ(i.gpu_user_mask, 0u);
    EXPECT_EQ(i.gpu_phys_mask, 1u) << "its owner only";
    const uvm_gpu_stats_t asleep0 = gpu_stats(mgr_, 0);
    EXPECT_EQ(asleep0.kernel_mappings + 1, awake0.kernel_mappings);
    EXPECT_EQ(asleep0.user_mappings + 1, awake0.user_mappings);
    if (peer) {
        const uvm_gpu_stats_t asleep1 = gpu_stats(mgr_, 1);
        EXPECT_EQ(asleep1.kernel_mappings + 1, awake1.kernel_mappings);
        EXPECT_EQ(asleep1.phys_mappings + 1, awake1.phys_mappings);
        EXPECT_EQ(asleep1.peer_mappings + 1, awake1.peer_mappings);
    }
    uvm_mem_t *found = nullptr;
    uint64_t offset = 0;
    EXPECT_EQ(uvm_mem_lookup_gpu_kernel(mgr_, 0, a.kernel, &found, &offset), UVM_ERR_NOT_FOUND);

    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    i = info(a.mem);
    EXPECT_EQ(i.gpu_kernel_mask, 0u) << "the wake made an unmapped mapping again";
    EXPECT_EQ(i.gpu_user_mask, 0u);
    EXPECT_EQ(i.gpu_phys_mask, 1u);
    const uvm_gpu_stats_t woke0 = gpu_stats(mgr_, 0);
    EXPECT_EQ(woke0.kernel_mappings, asleep0.kernel_mappings);
    EXPECT_EQ(woke0.user_mappings, asleep0.user_mappings);
    uint64_t va = 0;
    EXPECT_EQ(uvm_mem_gpu_kernel_address(mgr_, a.mem, 0, 0, &va), UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(uvm_mem_lookup_gpu_kernel(mgr_, 0, a.kernel, &found, &offset), UVM_ERR_NOT_FOUND);
    // The other object kept its mapping; both kept their bytes; and the
    // unmapped one maps again as any.
    ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, b.mem, 0, 0, &va), UVM_OK);
    EXPECT_EQ(va, b.kernel);
    EXPECT_EQ(wrong_bytes(mgr_, a.mem, a.size, 41), 0u);
    EXPECT_EQ(wrong_bytes(mgr_, b.mem, b.size, 42), 0u);
    EXPECT_EQ(uvm_mem_map_gpu_kernel(mgr_, a.mem, 0), UVM_OK);
    EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, a.mem, 0, 0), UVM_OK);
    for (const Placed *p : {&a, &b})
        ASSERT_EQ(uvm_mem_free(mgr_, p->mem), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

// An evicted object of a client that then sleeps has no mappings, only the
// owner's kernel and user mappings its restore would make again: unmapping
// them while asleep forgets them, and neither the wake nor the restore
// makes them again; the held user address goes with the user mapping. (On
// CUDA an object with a user address the manager placed cannot be evicted:
// the kernel mapping alone there.)
TEST_P(Sleep, AnEvictedAsleepObjectsMappingsAreForgottenByItsUnmap) {
    uvm_client_t *c = sleepable(mgr_);
    Placed a = place(mgr_, c, 2 * M, 0, nullptr, UVM_MEM_EVICTABLE);
    ASSERT_EQ(write_pattern(mgr_, a.mem, a.size, 43), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, a.mem, 0, 0), UVM_OK);
    uvm_status_t evicted = uvm_mem_evict(mgr_, a.mem);
    const bool with_user = evicted != UVM_ERR_NOT_SUPPORTED;
    if (!with_user) {
        ASSERT_TRUE(on_cuda()) << "the sim evicts an object with a user mapping";
        ASSERT_EQ(uvm_mem_unmap_gpu_user(mgr_, a.mem, 0), UVM_OK);
        evicted = uvm_mem_evict(mgr_, a.mem);
    }
    ASSERT_EQ(evicted, UVM_OK);
    EXPECT_EQ(info(a.mem).user_address != 0, with_user) << "an evicted object holds its user address";
    const uvm_gpu_stats_t out = gpu_stats(mgr_, 0);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    EXPECT_EQ(uvm_mem_unmap_gpu_kernel(mgr_, a.mem, 0), UVM_OK);
    EXPECT_EQ(uvm_mem_unmap_gpu_user(mgr_, a.mem, 0), with_user ? UVM_OK : UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(uvm_mem_unmap_gpu_kernel(mgr_, a.mem, 0), UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(uvm_mem_unmap_gpu_user(mgr_, a.mem, 0), UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(uvm_mem_unmap_gpu_phys(mgr_, a.mem, 0), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(info(a.mem).user_address, 0u) << "the held user address stayed";
    const uvm_gpu_stats_t asleep = gpu_stats(mgr_, 0);
    EXPECT_EQ(asleep.kernel_mappings, out.kernel_mappings) << "nothing was counted for what was not mapped";
    EXPECT_EQ(asleep.user_mappings, out.user_mappings);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    ASSERT_EQ(uvm_mem_make_resident(mgr_, a.mem), UVM_OK);
    const uvm_mem_info_t i = info(a.mem);
    EXPECT_EQ(i.gpu_kernel_mask, 0u) << "the restore made an unmapped mapping again";
    EXPECT_EQ(i.gpu_user_mask, 0u);
    EXPECT_EQ(i.user_address, 0u);
    uint64_t va = 0;
    EXPECT_EQ(uvm_mem_gpu_kernel_address(mgr_, a.mem, 0, 0, &va), UVM_ERR_NOT_MAPPED);
    const uvm_gpu_stats_t back = gpu_stats(mgr_, 0);
    EXPECT_EQ(back.kernel_mappings, out.kernel_mappings);
    EXPECT_EQ(back.user_mappings, out.user_mappings);
    EXPECT_EQ(wrong_bytes(mgr_, a.mem, a.size, 43), 0u);
    ASSERT_EQ(uvm_mem_free(mgr_, a.mem), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

TEST_P(Sleep, FreedAndDestroyedWhileAsleepEverythingGoesBack) {
    const uvm_gpu_stats_t start = gpu_stats(mgr_);
    uvm_client_t *c = sleepable(mgr_);
    Placed a = place(mgr_, c, 6 * M, 0);
    Placed b = place(mgr_, c, 128 * K, 0);
    ASSERT_EQ(write_pattern(mgr_, a.mem, a.size, 8), UVM_OK);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_ERR_BUSY) << "it owns objects";
    ASSERT_EQ(uvm_mem_free(mgr_, a.mem), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, b.mem), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).vidmem_asleep[0], 0u);
    ASSERT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);  // asleep, its host image goes with it
    ASSERT_EQ(uvm_gpu_trim(mgr_, 0, nullptr), UVM_OK);
    const uvm_gpu_stats_t end = gpu_stats(mgr_);
    EXPECT_LE(end.held_bytes, start.held_bytes);
    EXPECT_EQ(end.root_chunks, start.root_chunks);
    // A client that woke with fewer objects than it slept with.
    c = sleepable(mgr_, "second");
    a = place(mgr_, c, 6 * M, 0);
    b = place(mgr_, c, 128 * K, 0);
    ASSERT_EQ(write_pattern(mgr_, b.mem, b.size, 9), UVM_OK);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, a.mem), UVM_OK);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr_, b.mem, b.size, 9), 0u);
    uint64_t va = 0;
    ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, b.mem, 0, 0, &va), UVM_OK);
    EXPECT_EQ(va, b.kernel);
    ASSERT_EQ(uvm_mem_free(mgr_, b.mem), UVM_OK);
    ASSERT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

TEST_P(Sleep, TheBudgetLeavesWhileAsleepAndTheWakeKeepsToIt) {
    uvm_client_t *c = sleepable(mgr_);
    ASSERT_EQ(uvm_client_set_budget(mgr_, c, 0, 8 * M), UVM_OK);
    Placed a = place(mgr_, c, 6 * M, 0);
    ASSERT_EQ(write_pattern(mgr_, a.mem, a.size, 4), UVM_OK);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).vidmem_used[0], 0u);
    ASSERT_EQ(uvm_client_set_budget(mgr_, c, 0, 4 * M), UVM_OK);
    EXPECT_EQ(uvm_client_wake(mgr_, c), UVM_ERR_OUT_OF_MEMORY) << "over its budget now";
    uvm_client_info_t ci = client_info(mgr_, c);
    EXPECT_EQ(ci.asleep, 1) << "a failed wake leaves it asleep";
    EXPECT_EQ(ci.vidmem_used[0], 0u);
    EXPECT_EQ(ci.vidmem_asleep[0], 6 * M);
    ASSERT_EQ(uvm_client_set_budget(mgr_, c, 0, 6 * M), UVM_OK);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    EXPECT_EQ(client_info(mgr_, c).vidmem_used[0], 6 * M);
    EXPECT_EQ(wrong_bytes(mgr_, a.mem, a.size, 4), 0u);
    ASSERT_EQ(uvm_mem_free(mgr_, a.mem), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

TEST_P(Sleep, StreamWorkIsWaitedForAndWorkThatCannotFinishRefusesTheSleep) {
    warm_up_streams();
    uvm_client_t *c = sleepable(mgr_);
    Placed a = place(mgr_, c, 2 * M, 0);
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr_, 0, nullptr, &s), UVM_OK);
    uvm_mem_span_t dst{a.mem, 0, UVM_VIEW_KERNEL};
    if (!on_cuda()) {
        // Held work (sim) cannot finish: the sleep says so and moves nothing.
        ASSERT_EQ(uvm_sim_stream_hold(mgr_, s), UVM_OK);
        ASSERT_EQ(uvm_mem_memset_async(mgr_, 0, &dst, 0x5A, a.size, s), UVM_OK);
        const uvm_gpu_stats_t before = gpu_stats(mgr_);
        EXPECT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_ERR_BUSY);
        EXPECT_EQ(client_info(mgr_, c).asleep, 0);
        EXPECT_EQ(gpu_stats(mgr_).held_bytes, before.held_bytes);
        EXPECT_EQ(uvm_mem_memset(mgr_, 0, &dst, 0, 4 * K), UVM_OK) << "still awake";
        ASSERT_EQ(uvm_sim_stream_release(mgr_, s), UVM_OK);
    }
    // Work queued right before the sleep lands before the bytes are taken.
    ASSERT_EQ(uvm_mem_memset_async(mgr_, 0, &dst, 0x00, a.size, s), UVM_OK);
    ASSERT_EQ(uvm_mem_memset_async(mgr_, 0, &dst, 0x5A, a.size, s), UVM_OK);
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    const uvm_mem_alloc_params_t hp = alloc_params(UVM_BACKING_SYSMEM, a.size, 0, 0, 0);
    uvm_mem_t *host = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr_, &hp, &host), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_phys(mgr_, host, 0), UVM_OK);
    uvm_mem_span_t to{host, 0, UVM_VIEW_PHYSICAL}, from{a.mem, 0, UVM_VIEW_PHYSICAL};
    ASSERT_EQ(uvm_mem_copy(mgr_, 0, &to, &from, a.size), UVM_OK);
    ASSERT_EQ(uvm_mem_map_cpu_kernel(mgr_, host), UVM_OK);
    void *cpu = nullptr;
    ASSERT_EQ(uvm_mem_cpu_kernel_address(mgr_, host, 0, &cpu), UVM_OK);
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < a.size; ++i)
        wrong += static_cast<uint8_t *>(cpu)[i] != 0x5A;
    EXPECT_EQ(wrong, 0u);
    ASSERT_EQ(uvm_mem_free(mgr_, host), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, a.mem), UVM_OK);
    ASSERT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

// On CUDA a sleepable client's vidmem is in driver handles of its own of
// up to 64 MiB (few for a sleep to give back): never mapped at a caller's
// address nor exported, before a sleep as after it (uvm_pressure.h). The
// sim has no handles: both work there. Addresses the manager picks work on
// both.
TEST_P(Sleep, ASleepableClientsVidmemTakesACallersAddressAndAnExportOnlyWhereTheBackendCan) {
    uvm_client_t *c = sleepable(mgr_);
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 4 * M, 0, 2 * M, UVM_MEM_USER_MAPPABLE);
    p.client = c;
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_OK);
    const uint64_t addr = gpu_user_range(4 * M, 2 * M);
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    if (on_cuda()) {
        EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, m, 0, addr), UVM_ERR_NOT_SUPPORTED);
        EXPECT_EQ(info(m).user_address, 0u);
        EXPECT_EQ(uvm_mem_export(mgr_, m, sv[0]), UVM_ERR_NOT_SUPPORTED);
        ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, m, 0, 0), UVM_OK);  // the manager's pick
        ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
        ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    } else {
        EXPECT_EQ(uvm_mem_map_gpu_user(mgr_, m, 0, addr), UVM_OK);
        EXPECT_EQ(info(m).user_address, addr);
    }
    close(sv[0]);
    close(sv[1]);
    ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

TEST_P(Sleep, AnObjectSharedWithAnotherProcessRefusesTheSleep) {
    if (on_cuda())
        GTEST_SKIP() << "exporting needs a second manager's import here; the sim shows the refusal";
    uvm_client_t *c = sleepable(mgr_);
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 2 * M, 0, 2 * M, UVM_MEM_USER_MAPPABLE);
    p.client = c;
    uvm_mem_t *shared = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &shared), UVM_OK);
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    const uvm_status_t exported = uvm_mem_export(mgr_, shared, sv[0]);
    if (exported == UVM_OK) {
        const uvm_gpu_stats_t before = gpu_stats(mgr_);
        EXPECT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_ERR_BUSY);
        EXPECT_EQ(client_info(mgr_, c).asleep, 0);
        EXPECT_EQ(gpu_stats(mgr_).held_bytes, before.held_bytes);
    } else {
        ADD_FAILURE() << "export: " << uvm_status_string(exported);
    }
    close(sv[0]);
    close(sv[1]);
    ASSERT_EQ(uvm_mem_free(mgr_, shared), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

// On a small GPU: what the sleep gives back is what another tenant uses.
TEST(SleepOnAFullGpu, AnotherClientUsesTheMemoryAndTheWakeWaitsForItsReturn) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_client_t *model = sleepable(mgr);
    std::vector<Placed> weights;
    for (int i = 0; i < 5; ++i) {
        weights.push_back(place(mgr, model, 4 * M, 0));
        ASSERT_EQ(write_pattern(mgr, weights.back().mem, 4 * M, 20 + i), UVM_OK);
    }
    uvm_client_t *other = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "other", &other), UVM_OK);
    uvm_mem_t *big = nullptr;
    EXPECT_EQ(alloc_in_client(mgr, other, UVM_BACKING_VIDMEM, 20 * M, 0, &big), UVM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(uvm_client_sleep(mgr, model, nullptr), UVM_OK);
    ASSERT_EQ(alloc_in_client(mgr, other, UVM_BACKING_VIDMEM, 20 * M, 0, &big), UVM_OK);
    ASSERT_EQ(write_pattern(mgr, big, 20 * M, 77), UVM_OK);
    EXPECT_EQ(uvm_client_wake(mgr, model), UVM_ERR_OUT_OF_MEMORY) << "the other tenant holds the memory";
    EXPECT_EQ(client_info(mgr, model).asleep, 1);
    EXPECT_EQ(wrong_bytes(mgr, big, 20 * M, 77), 0u) << "a failed wake touches nobody else";
    ASSERT_EQ(uvm_mem_free(mgr, big), UVM_OK);
    ASSERT_EQ(uvm_client_wake(mgr, model), UVM_OK);
    for (size_t i = 0; i < weights.size(); ++i) {
        EXPECT_EQ(wrong_bytes(mgr, weights[i].mem, 4 * M, 20 + static_cast<uint32_t>(i)), 0u);
        uint64_t va = 0;
        ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr, weights[i].mem, 0, 0, &va), UVM_OK);
        EXPECT_EQ(va, weights[i].kernel);
        ASSERT_EQ(uvm_mem_free(mgr, weights[i].mem), UVM_OK);
    }
    EXPECT_EQ(uvm_client_destroy(mgr, model), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr, other), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(SleepOnAFullGpu, TheWakeEvictsOtherClientsEvictableObjectsToComeBack) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_client_t *model = sleepable(mgr);
    Placed w = place(mgr, model, 16 * M, 0);
    ASSERT_EQ(write_pattern(mgr, w.mem, w.size, 31), UVM_OK);
    ASSERT_EQ(uvm_client_sleep(mgr, model, nullptr), UVM_OK);
    std::vector<uvm_mem_t *> cache;
    for (int i = 0; i < 7; ++i) {
        uvm_mem_t *m = nullptr;
        ASSERT_EQ(alloc_in_client(mgr, nullptr, UVM_BACKING_VIDMEM, 4 * M, UVM_MEM_EVICTABLE, &m), UVM_OK);
        ASSERT_EQ(write_pattern(mgr, m, 4 * M, 40 + i), UVM_OK);
        cache.push_back(m);
    }
    ASSERT_EQ(uvm_client_wake(mgr, model), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr, w.mem, w.size, 31), 0u);
    EXPECT_GE(gpu_stats(mgr).evicted_objects, 3u);
    for (size_t i = 0; i < cache.size(); ++i) {
        EXPECT_EQ(wrong_bytes(mgr, cache[i], 4 * M, 40 + static_cast<uint32_t>(i)), 0u);
        ASSERT_EQ(uvm_mem_free(mgr, cache[i]), UVM_OK);
    }
    ASSERT_EQ(uvm_mem_free(mgr, w.mem), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr, model), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(SleepBadInput, EveryBadArgumentIsRefusedAndChangesNothing) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_client_t *c = nullptr;
    EXPECT_EQ(uvm_client_create_sleepable(nullptr, "x", &c), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_create_sleepable(mgr, nullptr, &c), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_create_sleepable(mgr, "", &c), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_create_sleepable(mgr, "x", nullptr), UVM_ERR_INVALID_ARGUMENT);
    c = sleepable(mgr);
    uvm_client_t *plain = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "plain", &plain), UVM_OK);
    EXPECT_EQ(uvm_client_sleep(nullptr, c, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_sleep(mgr, nullptr, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_wake(nullptr, c), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_wake(mgr, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_client_sleep(mgr, plain, nullptr), UVM_ERR_NOT_SUPPORTED) << "not created sleepable";
    EXPECT_EQ(uvm_client_wake(mgr, plain), UVM_ERR_NOT_SUPPORTED);
    Placed a = place(mgr, c, 64 * K, 0, "t");
    uvm_sleep_params_t bad;
    std::memset(&bad, 0, sizeof(bad));
    const int unknown = 7;
    std::memcpy(&bad.mode, &unknown, sizeof(unknown));
    EXPECT_EQ(uvm_client_sleep(mgr, c, &bad), UVM_ERR_INVALID_ARGUMENT);
    std::memset(&bad, 0, sizeof(bad));
    std::memcpy(&bad.tags_mode, &unknown, sizeof(unknown));
    EXPECT_EQ(uvm_client_sleep(mgr, c, &bad), UVM_ERR_INVALID_ARGUMENT);
    std::memset(&bad, 0, sizeof(bad));
    bad.tag_count = 1;  // and no tags
    EXPECT_EQ(uvm_client_sleep(mgr, c, &bad), UVM_ERR_INVALID_ARGUMENT);
    const char *null_tag[] = {nullptr};
    bad.tags = null_tag;
    EXPECT_EQ(uvm_client_sleep(mgr, c, &bad), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(client_info(mgr, c).asleep, 0) << "nothing moved";
    // Passed by value, the enum may only hold what its range allows (3 is
    // in it, and no mode): a C caller's 7 is read the same way inside.
    EXPECT_EQ(uvm_mem_set_sleep_mode(mgr, a.mem, static_cast<uvm_sleep_mode_t>(3)), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_set_sleep_mode(mgr, nullptr, UVM_SLEEP_KEEP), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_set_sleep_mode(nullptr, a.mem, UVM_SLEEP_KEEP), UVM_ERR_INVALID_ARGUMENT);
    // Handles of another manager, or destroyed.
    uvm_manager_t *other = small_sim(1, 64 * M);
    EXPECT_EQ(uvm_client_sleep(other, c, nullptr), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_client_wake(other, c), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_mem_set_sleep_mode(other, a.mem, UVM_SLEEP_KEEP), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_manager_destroy(other), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr, a.mem), UVM_OK);
    EXPECT_EQ(uvm_mem_set_sleep_mode(mgr, a.mem, UVM_SLEEP_KEEP), UVM_ERR_INVALID_HANDLE);
    ASSERT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    EXPECT_EQ(uvm_client_sleep(mgr, c, nullptr), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_client_wake(mgr, c), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_client_destroy(mgr, plain), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// In the TSan job: threads allocating and freeing in other clients (and one
// in the sleeper's, which waits at the gate or is told ASLEEP) while one
// client sleeps and wakes over and over; every byte of the sleeper's kept.
TEST(SleepThreads, EightThreadsAllocateInOtherClientsWhileOneSleepsAndWakes) {
    uvm_manager_t *mgr = small_sim(1, 512 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_client_t *model = sleepable(mgr);
    std::vector<Placed> weights;
    for (int i = 0; i < 4; ++i) {
        weights.push_back(place(mgr, model, (i + 1) * 512 * K, 0));
        ASSERT_EQ(write_pattern(mgr, weights.back().mem, weights.back().size, 60 + i), UVM_OK);
    }
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> failures{0}, asleep_refusals{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            uvm_client_t *mine = t == 0 ? model : nullptr;
            if (t > 0 && uvm_client_create(mgr, ("tenant" + std::to_string(t)).c_str(), &mine) != UVM_OK) {
                failures++;
                return;
            }
            for (int i = 0; !stop.load() || i < 50; ++i) {
                uvm_mem_t *m = nullptr;
                const uint64_t size = (64 * K) << (i % 5);
                const uvm_status_t s = alloc_in_client(mgr, mine, UVM_BACKING_VIDMEM, size, 0, &m);
                if (s == UVM_ERR_ASLEEP && t == 0) {
                    asleep_refusals++;
                    continue;
                }
                if (s != UVM_OK || uvm_mem_free(mgr, m) != UVM_OK)
                    failures++;
            }
            if (t > 0 && uvm_client_destroy(mgr, mine) != UVM_OK)
                failures++;
        });
    for (int round = 0; round < 20; ++round) {
        ASSERT_EQ(uvm_client_sleep(mgr, model, nullptr), UVM_OK);
        ASSERT_EQ(uvm_client_wake(mgr, model), UVM_OK);
    }
    stop = true;
    for (auto &t : threads)
        t.join();
    EXPECT_EQ(failures.load(), 0u);
    for (size_t i = 0; i < weights.size(); ++i) {
        EXPECT_EQ(wrong_bytes(mgr, weights[i].mem, weights[i].size, 60 + static_cast<uint32_t>(i)), 0u);
        ASSERT_EQ(uvm_mem_free(mgr, weights[i].mem), UVM_OK);
    }
    EXPECT_EQ(client_info(mgr, model).vidmem_used[0], 0u);
    EXPECT_EQ(uvm_client_destroy(mgr, model), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Torn down while a client sleeps with objects: the objects are freed as
// leaks, the host image and the roots' addresses go back, nothing crashes
// (the ASan job checks that nothing is left behind).
TEST(SleepOnAFullGpu, TheManagerTornDownWhileAClientSleepsGivesEverythingBack) {
    uvm_manager_t *mgr = small_sim(2, 64 * M);
    ASSERT_NE(mgr, nullptr);
    uvm_client_t *model = sleepable(mgr);
    Placed a = place(mgr, model, 6 * M, 0);
    Placed b = place(mgr, model, 64 * K, 0, "kv-cache");
    ASSERT_EQ(write_pattern(mgr, a.mem, a.size, 5), UVM_OK);
    ASSERT_EQ(uvm_client_sleep(mgr, model, nullptr), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_ERR_LEAKED_OBJECTS) << "its two objects were still alive";
    (void)b;
}

namespace {

// `size` bytes of pattern(i, seed) written into `mem` through a host object
// on GPU `gpu`'s copy engine (the fixture's write_pattern uses GPU 0's).
uvm_status_t write_on(uvm_manager_t *mgr, uint32_t gpu, uvm_mem_t *mem, uint64_t size, uint32_t seed) {
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, size, gpu, 0, 0);
    uvm_mem_t *host = nullptr;
    uvm_status_t s = uvm_mem_alloc(mgr, &p, &host);
    if (s != UVM_OK)
        return s;
    void *cpu = nullptr;
    s = uvm_mem_map_cpu_kernel(mgr, host);
    if (s == UVM_OK)
        s = uvm_mem_cpu_kernel_address(mgr, host, 0, &cpu);
    if (s == UVM_OK) {
        for (uint64_t i = 0; i < size; ++i)
            static_cast<uint8_t *>(cpu)[i] = pattern(i, seed);
        s = uvm_mem_map_gpu_phys(mgr, host, gpu);
    }
    uvm_mem_span_t d{mem, 0, UVM_VIEW_PHYSICAL}, src{host, 0, UVM_VIEW_PHYSICAL};
    if (s == UVM_OK)
        s = uvm_mem_copy(mgr, gpu, &d, &src, size);
    uvm_mem_free(mgr, host);
    return s;
}

}  // namespace

// Item 3 of the two-GPU issue: one model across two GPUs in one process.
// A sleepable client holds objects on both GPUs (every chunk size), each
// mapped on its owner and on the other GPU (peer mappings both ways), with
// a copy each way between them and a budget per GPU; the client sleeps and
// wakes, and every address (kernel on the owner and the peer, physical)
// and every byte, read through the owner and through the peer, is as
// before. Sim's two simulated GPUs in CI; the CUDA case on a pair.
TEST_P(Sleep, AModelOnTwoGpusSleepsAndWakesWithEveryAddressAndByteOnBoth) {
    if (gpus_ < 2)
        GTEST_SKIP() << "one GPU here";
    uvm_gpu_info_t g0, g1;
    ASSERT_EQ(uvm_gpu_info(mgr_, 0, &g0), UVM_OK);
    ASSERT_EQ(uvm_gpu_info(mgr_, 1, &g1), UVM_OK);
    const bool peer = (g1.peer_mask & 1u) && (g0.peer_mask & 2u);
    uvm_client_t *c = sleepable(mgr_);
    ASSERT_NE(c, nullptr);
    const uint64_t budget[2] = {64 * M, 32 * M};
    for (uint32_t g = 0; g < 2; ++g)
        ASSERT_EQ(uvm_client_set_budget(mgr_, c, g, budget[g]), UVM_OK);

    struct Obj {
        uvm_mem_t *mem = nullptr;
        uint32_t gpu = 0;
        uint64_t size = 0;
        uint32_t seed = 0;
        uint64_t kernel = 0;       // on its owner
        uint64_t peer_kernel = 0;  // on the other GPU (0: not mapped there)
        uint64_t phys = 0;
    };
    std::vector<Obj> objects;
    uint64_t bytes[2] = {0, 0};
    uint32_t seed = 100;
    for (uint32_t g = 0; g < 2; ++g)
        for (uint64_t chunk : {4 * K, 64 * K, 2 * M}) {
            Obj o;
            o.gpu = g;
            o.size = chunk == 2 * M ? 4 * M : 256 * K + 8 * K;
            o.seed = seed++;
            uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, o.size, g, chunk, 0);
            a.client = c;
            ASSERT_EQ(uvm_mem_alloc_gpu(mgr_, &a, nullptr, &o.mem, &o.kernel), UVM_OK);
            uvm_gpu_phys_address_t pa;
            ASSERT_EQ(uvm_mem_gpu_phys_address(mgr_, o.mem, g, 0, 1, &pa), UVM_OK);
            o.phys = pa.address;
            ASSERT_EQ(write_on(mgr_, g, o.mem, o.size, o.seed), UVM_OK);
            if (peer) {
                ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, o.mem, 1 - g), UVM_OK);
                ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, o.mem, 1 - g, 0, &o.peer_kernel), UVM_OK);
            }
            bytes[g] += info(o.mem).alloc_size;
            objects.push_back(o);
        }
    // Bytes of `o` that differ from its pattern, read on GPU `gpu` through
    // its kernel mapping there (the peer's, where `gpu` is not its owner).
    auto wrong_on = [&](const Obj &o, uint32_t gpu) -> uint64_t {
        uvm_mem_t *host = alloc(UVM_BACKING_SYSMEM, o.size, gpu);
        if (!host || uvm_mem_map_gpu_phys(mgr_, host, gpu) != UVM_OK ||
            copy(gpu, host, UVM_VIEW_PHYSICAL, o.mem, UVM_VIEW_KERNEL, o.size) != UVM_OK)
            return UINT64_MAX;
        const uint8_t *p = cpu(host);
        uint64_t wrong = 0;
        for (uint64_t i = 0; i < o.size; ++i)
            wrong += p[i] != pattern(i, o.seed);
        EXPECT_EQ(uvm_mem_free(mgr_, host), UVM_OK);
        return wrong;
    };
    // A copy each way between the GPUs, on the reading GPU's copy engine
    // through its peer mapping: object i of GPU 0 into object i of GPU 1 on
    // GPU 1, and the next back on GPU 0, as a pipeline hands activations on.
    auto copy_across = [&]() {
        if (!peer)
            return;
        for (int i = 0; i < 3; i += 2) {
            Obj &src = objects[static_cast<size_t>(i)], &dst = objects[static_cast<size_t>(i + 3)];
            const uint32_t on = dst.gpu;
            ASSERT_EQ(copy(on, dst.mem, UVM_VIEW_KERNEL, src.mem, UVM_VIEW_KERNEL, src.size), UVM_OK);
            dst.seed = src.seed;  // the same size by construction
        }
        Obj &src = objects[4], &dst = objects[1];  // GPU 1's object of 64K chunks into GPU 0's, on GPU 0
        ASSERT_EQ(copy(0, dst.mem, UVM_VIEW_KERNEL, src.mem, UVM_VIEW_KERNEL, src.size), UVM_OK);
        dst.seed = src.seed;
    };
    copy_across();
    for (const Obj &o : objects) {
        EXPECT_EQ(wrong_on(o, o.gpu), 0u) << "GPU " << o.gpu << ", " << o.size << " bytes";
        if (peer)
            EXPECT_EQ(wrong_on(o, 1 - o.gpu), 0u) << "through GPU " << 1 - o.gpu << "'s peer mapping";
    }

    // Budgets per GPU: what GPU 1's budget refuses, GPU 0's still takes,
    // and the report says which GPU and whose budget.
    uvm_client_info_t ci = client_info(mgr_, c);
    for (uint32_t g = 0; g < 2; ++g)
        EXPECT_EQ(ci.vidmem_used[g], bytes[g]) << "GPU " << g;
    const uint64_t over = budget[1] - bytes[1] + 2 * M;
    uvm_mem_t *refused = nullptr, *taken = nullptr;
    EXPECT_EQ(alloc_in_client(mgr_, c, UVM_BACKING_VIDMEM, over, 0, &refused, 1), UVM_ERR_OUT_OF_MEMORY);
    const std::string report =
        fetch([&](char *b, size_t n, size_t *need) { return uvm_oom_report(mgr_, UVM_REPORT_TEXT, b, n, need); });
    EXPECT_NE(report.find("GPU 1,"), std::string::npos) << report;
    EXPECT_NE(report.find("in client model (budget 32"), std::string::npos) << report;
    ASSERT_EQ(alloc_in_client(mgr_, c, UVM_BACKING_VIDMEM, over, 0, &taken, 0), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, taken), UVM_OK);

    // Sleep: both GPUs' memory back to the driver, out of both budgets.
    const uvm_gpu_stats_t awake[2] = {gpu_stats(mgr_, 0), gpu_stats(mgr_, 1)};
    ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
    ci = client_info(mgr_, c);
    EXPECT_EQ(ci.asleep, 1);
    for (uint32_t g = 0; g < 2; ++g) {
        EXPECT_EQ(ci.vidmem_asleep[g], bytes[g]) << "GPU " << g;
        EXPECT_EQ(ci.vidmem_used[g], 0u) << "GPU " << g;
        const uvm_gpu_stats_t slept = gpu_stats(mgr_, g);
        EXPECT_GE(slept.driver_free_bytes, awake[g].driver_free_bytes + bytes[g] * 99 / 100) << "GPU " << g;
        EXPECT_LE(slept.held_bytes + bytes[g], awake[g].held_bytes) << "GPU " << g;
    }
    if (peer) {
        uvm_mem_span_t d{objects[3].mem, 0, UVM_VIEW_KERNEL}, s{objects[0].mem, 0, UVM_VIEW_KERNEL};
        EXPECT_EQ(uvm_mem_copy(mgr_, 1, &d, &s, 4 * K), UVM_ERR_ASLEEP) << "a copy across while asleep";
    }

    ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    ci = client_info(mgr_, c);
    EXPECT_EQ(ci.asleep, 0);
    for (uint32_t g = 0; g < 2; ++g)
        EXPECT_EQ(ci.vidmem_used[g], bytes[g]) << "GPU " << g;
    for (const Obj &o : objects) {
        uint64_t va = 0;
        ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, o.mem, o.gpu, 0, &va), UVM_OK);
        EXPECT_EQ(va, o.kernel) << "GPU " << o.gpu << ": the kernel address the caller was given";
        uvm_gpu_phys_address_t pa;
        ASSERT_EQ(uvm_mem_gpu_phys_address(mgr_, o.mem, o.gpu, 0, 1, &pa), UVM_OK);
        EXPECT_EQ(pa.address, o.phys);
        if (peer) {
            ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, o.mem, 1 - o.gpu, 0, &va), UVM_OK);
            EXPECT_EQ(va, o.peer_kernel) << "the peer's mapping on GPU " << 1 - o.gpu;
        }
        EXPECT_EQ(wrong_on(o, o.gpu), 0u) << "GPU " << o.gpu << ", " << o.size << " bytes, after the wake";
        if (peer)
            EXPECT_EQ(wrong_on(o, 1 - o.gpu), 0u) << "through GPU " << 1 - o.gpu << "'s peer mapping, after the wake";
    }
    // The mappings work for copies across again.
    copy_across();
    for (const Obj &o : objects)
        EXPECT_EQ(wrong_on(o, o.gpu), 0u) << "GPU " << o.gpu << " after copies across the woken mappings";
    for (const Obj &o : objects)
        ASSERT_EQ(uvm_mem_free(mgr_, o.mem), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

// Another thread allocates in the client, and writes what it got, while the
// client goes to sleep and wakes, round after round. As the header says: an
// allocation either comes before the sleep (its object goes to sleep with
// the rest, its bytes kept) or after it (UVM_ERR_ASLEEP, nothing made); a
// write either lands before the sleep or is refused (ASLEEP, nothing
// written). Every byte written comes back; the accounts agree to the byte.
TEST_P(Sleep, AllocationsRacingTheSleepAreAsleepWithItOrRefused) {
    uvm_client_t *c = sleepable(mgr_);
    struct Made {
        uvm_mem_t *mem;
        uint64_t alloc_size;
        uint32_t seed;  // 0: its write was refused
    };
    std::vector<Made> made;  // the allocating thread's, read by this one only while it waits
    std::mutex made_lock;
    std::atomic<bool> stop{false};
    std::atomic<int> failed{0};
    std::atomic<uint64_t> refused{0};
    std::atomic<uint32_t> round_seen{0};  // the last round in which the thread was told ASLEEP
    std::atomic<uint32_t> round{0};
    std::thread allocator([&] {
        for (uint32_t i = 1; !stop.load(); ++i) {
            uvm_mem_t *m = nullptr;
            const uint64_t size = (4 * K) << (i % 6);
            const uvm_status_t s = alloc_in_client(mgr_, c, UVM_BACKING_VIDMEM, size, 0, &m);
            if (s == UVM_ERR_ASLEEP) {
                refused++;
                failed += m != nullptr;
                round_seen = round.load();
                std::this_thread::yield();
                continue;
            }
            if (s != UVM_OK) {
                failed++;
                continue;
            }
            const uvm_status_t w = write_pattern(mgr_, m, size, i);
            failed += w != UVM_OK && w != UVM_ERR_ASLEEP;
            std::lock_guard<std::mutex> guard(made_lock);
            made.push_back({m, info(m).alloc_size, w == UVM_OK ? i : 0});
        }
    });
    const int rounds = on_cuda() ? 10 : 25;
    for (int r = 1; r <= rounds; ++r) {
        while (true) {  // some allocations in this round first
            std::lock_guard<std::mutex> guard(made_lock);
            if (made.size() >= static_cast<size_t>(4 * r))
                break;
        }
        round = r;
        ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK);
        // Once the thread was refused this round, everything it made is on
        // the list and asleep: given back whole.
        while (round_seen.load() != static_cast<uint32_t>(r))
            std::this_thread::yield();
        {
            std::lock_guard<std::mutex> guard(made_lock);
            uint64_t bytes = 0;
            for (const Made &m : made)
                bytes += m.alloc_size;
            const uvm_client_info_t ci = client_info(mgr_, c);
            EXPECT_EQ(ci.vidmem_asleep[0], bytes) << "round " << r;
            EXPECT_EQ(ci.vidmem_used[0], 0u);
        }
        ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK);
    }
    stop = true;
    allocator.join();
    EXPECT_EQ(failed.load(), 0);
    EXPECT_GE(refused.load(), static_cast<uint64_t>(rounds));
    uint64_t bytes = 0;
    for (const Made &m : made) {
        if (m.seed)
            EXPECT_EQ(wrong_bytes(mgr_, m.mem, m.alloc_size, m.seed), 0u);
        bytes += m.alloc_size;
    }
    EXPECT_EQ(client_info(mgr_, c).vidmem_used[0], bytes);
    for (const Made &m : made)
        ASSERT_EQ(uvm_mem_free(mgr_, m.mem), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
}

// Many sleep and wake cycles of a small client, both host policies: every
// byte back each time, and nothing left behind at the end (the ASan job runs
// it on sim and on the stand-in driver, which checks every driver object
// was released). UVM_SLEEP_SOAK_CYCLES sets the count (1000 by default).
TEST_P(Sleep, ManyCyclesLeaveNothingBehind) {
    const char *soak = std::getenv("UVM_SLEEP_SOAK_CYCLES");
    const int cycles = soak ? std::atoi(soak) : 1000;
    const uvm_gpu_stats_t start = gpu_stats(mgr_);
    uvm_client_t *c = sleepable(mgr_);
    uvm_sleep_policy_t release;
    std::memset(&release, 0, sizeof(release));
    release.host = UVM_SLEEP_HOST_RELEASE;
    // One root's worth: each cycle gives back and takes again a root.
    Placed a = place(mgr_, c, 64 * K, 64 * K);
    Placed b = place(mgr_, c, 256 * K, 4 * K);
    uvm_mem_t *dropped = place(mgr_, c, 12 * K, 4 * K).mem;
    ASSERT_EQ(uvm_mem_set_sleep_mode(mgr_, dropped, UVM_SLEEP_DISCARD), UVM_OK);
    ASSERT_EQ(write_pattern(mgr_, a.mem, a.size, 71), UVM_OK);
    ASSERT_EQ(write_pattern(mgr_, b.mem, b.size, 72), UVM_OK);
    for (int i = 0; i < cycles; ++i) {
        if (i == cycles / 2)
            ASSERT_EQ(uvm_client_set_sleep_policy(mgr_, c, &release), UVM_OK);
        ASSERT_EQ(uvm_client_sleep(mgr_, c, nullptr), UVM_OK) << "cycle " << i;
        ASSERT_EQ(uvm_client_wake(mgr_, c), UVM_OK) << "cycle " << i;
    }
    EXPECT_EQ(wrong_bytes(mgr_, a.mem, a.size, 71), 0u);
    EXPECT_EQ(wrong_bytes(mgr_, b.mem, b.size, 72), 0u);
    EXPECT_EQ(wrong_bytes(mgr_, dropped, 12 * K, UINT32_MAX), 0u);
    const uvm_client_info_t ci = client_info(mgr_, c);
    EXPECT_EQ(ci.sleep_host_held, 0u);
    EXPECT_EQ(ci.vidmem_used[0], a.size + b.size + 12 * K);
    for (uvm_mem_t *m : {a.mem, b.mem, dropped})
        ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    ASSERT_EQ(uvm_client_destroy(mgr_, c), UVM_OK);
    ASSERT_EQ(uvm_gpu_trim(mgr_, 0, nullptr), UVM_OK);
    const uvm_gpu_stats_t end = gpu_stats(mgr_);
    EXPECT_EQ(end.held_bytes, start.held_bytes);
    EXPECT_EQ(end.root_chunks, start.root_chunks);
}
