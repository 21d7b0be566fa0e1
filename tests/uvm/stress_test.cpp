// 8 threads allocating (sysmem with every placement, objects mapped at
// allocation), mapping (user mappings at addresses the manager picks and in
// ranges reserved for the caller), copying, freeing and querying at random
// for several seconds, on private objects and on objects they share.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {
constexpr uint64_t K = 1024, M = 1024 * 1024;

bool allowed(uvm_status_t s) {
    // Races between threads on shared objects may legitimately give these.
    return s == UVM_OK || s == UVM_ERR_ALREADY_MAPPED || s == UVM_ERR_NOT_MAPPED ||
           s == UVM_ERR_INVALID_HANDLE || s == UVM_ERR_OUT_OF_MEMORY;
}
}  // namespace

TEST(Stress, EightThreadsAllocMapFreeAtRandom) {
    uvm_manager_params_t p = sim_params(2, 512 * M);
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);

    // Shared objects that every thread maps, unmaps and copies into at once.
    constexpr int kShared = 4;
    uvm_mem_t *shared[kShared];
    for (int i = 0; i < kShared; ++i) {
        const uvm_mem_alloc_params_t a = alloc_params(i % 2 ? UVM_BACKING_VIDMEM : UVM_BACKING_SYSMEM, 256 * K);
        ASSERT_EQ(uvm_mem_alloc(mgr, &a, &shared[i]), UVM_OK);
    }

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    std::atomic<uint64_t> operations{0};
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937_64 rng(1000 + t);
            std::vector<uvm_mem_t *> mine;
            auto check = [&](uvm_status_t s, const char *what) {
                if (!allowed(s)) {
                    bad++;
                    std::fprintf(stderr, "thread %d: %s -> %s\n", t, what, uvm_status_string(s));
                }
            };
            while (std::chrono::steady_clock::now() < deadline) {
                operations++;
                const uint32_t gpu = rng() % 2;
                switch (rng() % 12) {
                    case 0:
                    case 1: {
                        uvm_mem_alloc_params_t a =
                            alloc_params(rng() % 3 ? UVM_BACKING_VIDMEM : UVM_BACKING_SYSMEM,
                                         1 + rng() % (rng() % 4 ? 256 * K : 5 * M), gpu);
#ifdef UVM_HAVE_LIBNUMA
                        if (a.backing == UVM_BACKING_SYSMEM)  // every placement kind, node 0 exists
                            a.placement.kind = static_cast<uvm_placement_kind_t>(rng() % 4);
#else
                        if (a.backing == UVM_BACKING_SYSMEM)  // the kinds that bind nothing here
                            a.placement.kind = rng() % 2 ? UVM_PLACEMENT_GPU_LOCAL : UVM_PLACEMENT_ANY;
#endif
                        if (rng() % 4 == 0)
                            a.flags |= UVM_MEM_GPU_MAPPED;
                        uvm_mem_t *m;
                        const uvm_status_t s = uvm_mem_alloc(mgr, &a, &m);
                        check(s, "alloc");
                        if (s == UVM_OK)
                            mine.push_back(m);
                        break;
                    }
                    case 2:
                        if (!mine.empty()) {
                            const size_t i = rng() % mine.size();
                            check(uvm_mem_free(mgr, mine[i]), "free");
                            mine[i] = mine.back();
                            mine.pop_back();
                        }
                        break;
                    case 3:
                    case 4:
                        if (!mine.empty())
                            check(uvm_mem_map_gpu_kernel(mgr, mine[rng() % mine.size()], gpu), "map own");
                        break;
                    case 5:
                        check(uvm_mem_map_gpu_kernel(mgr, shared[rng() % kShared], gpu), "map shared");
                        break;
                    case 6:
                        check(uvm_mem_unmap_gpu_kernel(mgr, shared[rng() % kShared], gpu), "unmap shared");
                        break;
                    case 7: {
                        uvm_mem_span_t d{shared[rng() % kShared], 0, UVM_VIEW_PHYSICAL};
                        uvm_mem_span_t s{shared[rng() % kShared], 128 * K, UVM_VIEW_PHYSICAL};
                        if (d.mem == s.mem)
                            break;
                        const uvm_status_t st = uvm_mem_copy(mgr, gpu, &d, &s, 128 * K);
                        // Sysmem not physically mapped on this GPU right now is NOT_MAPPED.
                        check(st, "copy shared");
                        break;
                    }
                    case 8:
                        check(uvm_mem_map_gpu_phys(mgr, shared[0], gpu), "phys shared");
                        break;
                    case 9:
                        if (!mine.empty())
                            check(uvm_mem_map_gpu_user(mgr, mine[rng() % mine.size()], gpu, 0), "map user, picked");
                        break;
                    case 10: {
                        // A range of the caller's, an object placed in it, all given back.
                        uint64_t range = 0;
                        const uvm_status_t r = uvm_user_range_reserve(mgr, 8 * M, &range);
                        check(r, "reserve");
                        if (r != UVM_OK)
                            break;
                        const uvm_mem_alloc_params_t a =
                            alloc_params(UVM_BACKING_VIDMEM, 2 * M, gpu, 0, UVM_MEM_USER_MAPPABLE);
                        uvm_mem_t *m;
                        const uvm_status_t st = uvm_mem_alloc(mgr, &a, &m);
                        check(st, "alloc placed");
                        if (st == UVM_OK) {
                            check(uvm_mem_map_gpu_user(mgr, m, gpu, range + 2 * M), "map user, placed");
                            check(uvm_user_range_release(mgr, range) == UVM_ERR_ADDRESS_IN_USE ? UVM_OK
                                                                                            : UVM_ERR_BACKEND,
                                  "release of a used range");
                            check(uvm_mem_free(mgr, m), "free placed");
                        }
                        check(uvm_user_range_release(mgr, range), "release");
                        break;
                    }
                    default: {
                        // The queries, against everything above.
                        uvm_gpu_stats_t gs;
                        uvm_host_pages_t hp;
                        uvm_host_info_t hi;
                        uvm_numa_node_info_t ni;
                        uvm_gpu_path_t path;
                        switch (rng() % 4) {
                            case 0: check(uvm_gpu_stats(mgr, gpu, &gs), "stats"); break;
                            case 1: check(uvm_mem_host_pages(mgr, shared[0], &hp), "host pages"); break;
                            case 2:
                                check(uvm_host_info(mgr, &hi), "host info");
                                check(uvm_numa_node_info(mgr, 0, &ni), "node info");
                                break;
                            default: {
                                check(uvm_gpu_path(mgr, 0, 1, &path), "path");
                                const uint32_t a = static_cast<uint32_t>(rng() % 2);
                                check(uvm_gpu_enable_peer_access(mgr, a, 1 - a), "peer access");
                                break;
                            }
                        }
                        break;
                    }
                }
            }
            for (uvm_mem_t *m : mine)
                check(uvm_mem_free(mgr, m), "final free");
        });
    }
    for (auto &t : threads)
        t.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_GT(operations.load(), 1000u);
    for (uvm_mem_t *m : shared)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    for (uint32_t g = 0; g < 2; ++g) {
        uvm_gpu_stats_t s;
        ASSERT_EQ(uvm_gpu_stats(mgr, g, &s), UVM_OK);
        EXPECT_EQ(s.vidmem_objects, 0u);
        EXPECT_EQ(s.kernel_mappings + s.user_mappings + s.phys_mappings, 0u);
        EXPECT_EQ(s.bytes_free[2], s.root_chunks * 2 * M);  // every root whole again
        EXPECT_EQ(s.bytes_pinned[0] + s.bytes_pinned[1] + s.bytes_pinned[2], 0u);
    }
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Parked objects (uvm/manager.h) under threads: four threads run held pairs
// of every chunk size, which park and take objects in their chunk caches,
// while one trims (which gives every parked chunk back) and one reads the
// statistics and the object report (which mark what they see as touched).
// Nothing is lost, counted twice or handed out twice (in the TSan job too).
TEST(Stress, ThreadsPairWhileOthersTrimAndReport) {
    uvm_manager_params_t p = sim_params(1, 256 * M);
    uvm_manager_t *mgr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    std::atomic<bool> stop{false};
    std::atomic<int> bad{0}, alloc_failed{0}, over_budget{0};
    // Threads 2 and 3 allocate for a client with a budget that their live
    // objects fit (4 x 2 MiB each at most) beside some of what they park
    // (up to 9.3 MiB each): its parked objects must make way, and no
    // allocation of theirs may fail.
    uvm_client_t *client = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "pairs", &client), UVM_OK);
    const uint64_t budget = 24 * M;
    ASSERT_EQ(uvm_client_set_budget(mgr, client, 0, budget), UVM_OK);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            const uint64_t chunks[3] = {UVM_PAGE_SIZE_4K, UVM_PAGE_SIZE_64K, UVM_PAGE_SIZE_2M};
            std::vector<uvm_mem_t *> held;
            for (int i = 0; i < 3000; ++i) {
                const uint64_t c = chunks[(i + t) % 3];
                uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, c, 0, c);
                a.client = t >= 2 ? client : nullptr;
                uvm_mem_t *m = nullptr;
                if (uvm_mem_alloc(mgr, &a, &m) != UVM_OK) {
                    alloc_failed++;
                    continue;
                }
                uvm_mem_info_t info;  // looked at now and then: an object a call reached is never parked
                if (i % 5 == 0 && (uvm_mem_info(mgr, m, &info) != UVM_OK || info.size != c || info.chunk_size != c))
                    bad++;
                held.push_back(m);
                if (held.size() > 3 || i % 7 == 0) {
                    if (uvm_mem_free(mgr, held.front()) != UVM_OK)
                        bad++;
                    held.erase(held.begin());
                }
            }
            for (uvm_mem_t *m : held)
                if (uvm_mem_free(mgr, m) != UVM_OK)
                    bad++;
        });
    std::thread trimmer([&] {
        while (!stop)
            if (uvm_gpu_trim(mgr, 0, nullptr) != UVM_OK)
                bad++;
    });
    std::thread reader([&] {
        std::vector<char> buf(1 << 20);
        while (!stop) {
            uvm_gpu_stats_t s;
            size_t needed = 0;
            if (uvm_gpu_stats(mgr, 0, &s) != UVM_OK ||
                uvm_objects_report(mgr, UVM_REPORT_JSON, buf.data(), buf.size(), &needed) != UVM_OK)
                bad++;
            uvm_client_info_t ci;
            if (uvm_client_info(mgr, client, &ci) != UVM_OK)
                bad++;
            else if (ci.vidmem_used[0] > budget)
                over_budget++;
        }
    });
    for (auto &t : threads)
        t.join();
    stop = true;
    trimmer.join();
    reader.join();
    EXPECT_EQ(bad.load(), 0) << "a call failed";
    EXPECT_EQ(alloc_failed.load(), 0);
    EXPECT_EQ(over_budget.load(), 0);
    uvm_gpu_stats_t s;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &s), UVM_OK);
    EXPECT_EQ(s.vidmem_objects, 0u);
    EXPECT_EQ(s.held_live_bytes, 0u);
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &s), UVM_OK);
    EXPECT_EQ(s.held_bytes, 0u) << "every parked chunk went back";
    uvm_client_info_t ci;
    ASSERT_EQ(uvm_client_info(mgr, client, &ci), UVM_OK);
    EXPECT_EQ(ci.vidmem_used[0], 0u) << "every parked object's charge went back";
    EXPECT_EQ(ci.vidmem_cached[0], 0u);
    EXPECT_EQ(ci.objects, 0u);
    EXPECT_EQ(uvm_client_destroy(mgr, client), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
