// Compaction (compact/compact.h, uvm_gpu_compact): live vidmem objects move
// behind their addresses with every byte, free memory comes whole and goes
// back; pinned and busy objects stay; a failure at any step of a move leaves
// the object where it was; allocations that find the memory in pieces
// compact before they fail where the policy says so.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/fault_injection.h"
#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;

uvm_mem_t *alloc_vid(uvm_manager_t *mgr, uint64_t size, uint64_t chunk = 0, uint32_t gpu = 0) {
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size, gpu, chunk, 0);
    uvm_mem_t *m = nullptr;
    return uvm_mem_alloc(mgr, &p, &m) == UVM_OK ? m : nullptr;
}

uvm_gpu_stats_t gpu_stats(uvm_manager_t *mgr, uint32_t gpu = 0) {
    uvm_gpu_stats_t s;
    std::memset(&s, 0, sizeof(s));
    EXPECT_EQ(uvm_gpu_stats(mgr, gpu, &s), UVM_OK);
    return s;
}

uint64_t phys_of(uvm_manager_t *mgr, uvm_mem_t *m) {
    uvm_gpu_phys_address_t pa;
    std::memset(&pa, 0, sizeof(pa));
    EXPECT_EQ(uvm_mem_gpu_phys_address(mgr, m, 0, 0, 1, &pa), UVM_OK);
    return pa.address;
}

// One live object as the test knows it: its pattern and every address it has.
struct Kept {
    uvm_mem_t *mem = nullptr;
    uint64_t size = 0;
    uint32_t seed = 0;
    uint64_t kernel = 0;  // 0: no kernel mapping
    uint64_t user = 0;    // 0: no user mapping
    uint64_t phys = 0;
};

// GPU 0 of `mgr` filled with objects of `size` (64K chunks), all but every
// `keep_every`th freed: every root holds a few live objects and no whole
// root is free. Every kept object has its pattern; every second one a
// kernel mapping, every fourth a user mapping too.
std::vector<Kept> fragment(uvm_manager_t *mgr, uint64_t size, size_t keep_every) {
    std::vector<uvm_mem_t *> all;
    for (;;) {
        uvm_mem_t *m = alloc_vid(mgr, size, 64 * K);
        if (!m)
            break;
        all.push_back(m);
    }
    std::vector<Kept> kept;
    for (size_t i = 0; i < all.size(); ++i) {
        if (i % keep_every) {
            EXPECT_EQ(uvm_mem_free(mgr, all[i]), UVM_OK);
            continue;
        }
        Kept k;
        k.mem = all[i];
        k.size = size;
        k.seed = static_cast<uint32_t>(kept.size() + 1);
        EXPECT_EQ(write_pattern(mgr, k.mem, size, k.seed), UVM_OK);
        if (kept.size() % 2 == 0) {
            EXPECT_EQ(uvm_mem_map_gpu_kernel(mgr, k.mem, 0), UVM_OK);
            EXPECT_EQ(uvm_mem_gpu_kernel_address(mgr, k.mem, 0, 0, &k.kernel), UVM_OK);
        }
        if (kept.size() % 4 == 0) {
            EXPECT_EQ(uvm_mem_map_gpu_user(mgr, k.mem, 0, 0), UVM_OK);
            EXPECT_EQ(uvm_mem_gpu_user_address(mgr, k.mem, 0, 0, &k.user), UVM_OK);
        }
        k.phys = phys_of(mgr, k.mem);
        kept.push_back(k);
    }
    return kept;
}

// Every byte and every address of `kept` as it was; returns how many moved.
uint64_t check_kept(uvm_manager_t *mgr, const std::vector<Kept> &kept) {
    uint64_t moved = 0;
    for (const Kept &k : kept) {
        SCOPED_TRACE(k.seed);
        EXPECT_EQ(wrong_bytes(mgr, k.mem, k.size, k.seed), 0u);
        if (k.kernel) {
            uint64_t va = 0;
            EXPECT_EQ(uvm_mem_gpu_kernel_address(mgr, k.mem, 0, 0, &va), UVM_OK);
            EXPECT_EQ(va, k.kernel) << "the kernel address changed";
            EXPECT_EQ(wrong_bytes(mgr, k.mem, k.size, k.seed, UVM_VIEW_KERNEL), 0u) << "through the kernel mapping";
        }
        if (k.user) {
            uint64_t va = 0;
            EXPECT_EQ(uvm_mem_gpu_user_address(mgr, k.mem, 0, 0, &va), UVM_OK);
            EXPECT_EQ(va, k.user) << "the user address changed";
            EXPECT_EQ(wrong_bytes(mgr, k.mem, k.size, k.seed, UVM_VIEW_USER), 0u) << "through the user mapping";
        }
        moved += phys_of(mgr, k.mem) != k.phys;
    }
    return moved;
}

std::string oom_text(uvm_manager_t *mgr) {
    return fetch([&](char *buf, size_t size, size_t *needed) {
        return uvm_oom_report(mgr, UVM_REPORT_TEXT, buf, size, needed);
    });
}

}  // namespace

TEST(Compact, MovesLiveObjectsBehindTheirAddresses) {
    uvm_manager_t *mgr = small_sim(1, 8 * M);
    ASSERT_NE(mgr, nullptr);
    std::vector<Kept> kept = fragment(mgr, 64 * K, 8);
    ASSERT_EQ(kept.size(), 16u);  // four roots of 32, four live objects in each
    uvm_gpu_stats_t s = gpu_stats(mgr);
    ASSERT_EQ(s.root_chunks, 4u);
    EXPECT_LT(s.largest_free_block, 2 * M);
    EXPECT_EQ(alloc_vid(mgr, 2 * M), nullptr) << "6 MiB free in pieces, and no whole root";
    EXPECT_NE(oom_text(mgr).find("compaction is off"), std::string::npos) << oom_text(mgr);

    uvm_compact_result_t r;
    std::memset(&r, 0xff, sizeof(r));
    ASSERT_EQ(uvm_gpu_compact(mgr, 0, UVM_COMPACT_RELEASE, &r), UVM_OK);
    EXPECT_EQ(r.objects_moved, 12u) << "three roots emptied into the fourth";
    EXPECT_EQ(r.bytes_moved, 12 * 64 * K);
    EXPECT_EQ(r.objects_pinned, 0u);
    EXPECT_EQ(r.objects_busy, 0u);
    EXPECT_EQ(r.objects_kept, 4u);
    EXPECT_EQ(r.held_before, 8 * M);
    EXPECT_EQ(r.held_after, 2 * M);
    EXPECT_EQ(r.bytes_released, 6 * M);
    EXPECT_EQ(r.free_whole_after, 0u) << "given back";
    EXPECT_LT(r.largest_free_before, 2 * M);
    EXPECT_EQ(r.free_whole_before, 0u);
    EXPECT_EQ(check_kept(mgr, kept), 12u);

    s = gpu_stats(mgr);
    EXPECT_EQ(s.root_chunks, 1u);
    EXPECT_EQ(s.compactions, 1u);
    EXPECT_EQ(s.compact_objects_moved, 12u);
    EXPECT_EQ(s.compact_bytes_moved, 12 * 64 * K);
    EXPECT_EQ(s.compact_bytes_released, 6 * M);
    EXPECT_EQ(s.kernel_mappings, 8u);
    EXPECT_EQ(s.user_mappings, 4u);
    const std::string metrics = fetch([&](char *buf, size_t size, size_t *needed) {
        return uvm_manager_metrics(mgr, buf, size, needed);
    });
    EXPECT_NE(metrics.find("uvm_gpu_compact_released_bytes_total{gpu=\"0\"} 6291456"), std::string::npos) << metrics;

    // The memory given back serves what it could not before.
    uvm_mem_t *big = alloc_vid(mgr, 6 * M);
    ASSERT_NE(big, nullptr);
    // A second compaction finds nothing to gain.
    ASSERT_EQ(uvm_gpu_compact(mgr, 0, 0, nullptr), UVM_OK);
    EXPECT_EQ(check_kept(mgr, kept), 12u);
    EXPECT_EQ(gpu_stats(mgr).compact_objects_moved, 12u);
    ASSERT_EQ(uvm_mem_free(mgr, big), UVM_OK);
    for (const Kept &k : kept)
        ASSERT_EQ(uvm_mem_free(mgr, k.mem), UVM_OK);
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
    EXPECT_EQ(gpu_stats(mgr).root_chunks, 0u);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Without UVM_COMPACT_RELEASE the free roots stay held (the default release
// policy keeps them), whole, for the next long run.
TEST(Compact, KeepsWholeRootsUnderTheReleasePolicy) {
    uvm_manager_t *mgr = small_sim(1, 8 * M);
    ASSERT_NE(mgr, nullptr);
    std::vector<Kept> kept = fragment(mgr, 4 * 64 * K, 8);  // 256 KiB objects: one of every eight kept
    ASSERT_EQ(kept.size(), 4u);
    uvm_compact_result_t r;
    ASSERT_EQ(uvm_gpu_compact(mgr, 0, 0, &r), UVM_OK);
    EXPECT_EQ(r.objects_moved, 3u);
    EXPECT_EQ(r.held_after, 8 * M);
    EXPECT_EQ(r.free_whole_after, 6 * M);
    EXPECT_EQ(r.bytes_released, 0u);
    EXPECT_EQ(check_kept(mgr, kept), 3u);
    // Three whole roots held for requests of a root each, with nothing new
    // from the driver (which has none left).
    uvm_mem_t *roots[3];
    for (uvm_mem_t *&m : roots)
        ASSERT_NE(m = alloc_vid(mgr, 2 * M), nullptr);
    EXPECT_EQ(gpu_stats(mgr).root_chunks, 4u) << "served from the roots held";
    for (uvm_mem_t *m : roots)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    // Under a release threshold of 0 they go back as they come free.
    for (const Kept &k : kept)
        ASSERT_EQ(uvm_mem_free(mgr, k.mem), UVM_OK);
    kept = fragment(mgr, 4 * 64 * K, 8);
    ASSERT_EQ(uvm_gpu_set_release_threshold(mgr, 0, 0), UVM_OK);
    ASSERT_EQ(uvm_gpu_compact(mgr, 0, 0, &r), UVM_OK);
    EXPECT_EQ(r.objects_moved, 3u);
    EXPECT_EQ(r.bytes_released, 6 * M);
    EXPECT_EQ(check_kept(mgr, kept), 3u);
    for (const Kept &k : kept)
        ASSERT_EQ(uvm_mem_free(mgr, k.mem), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Compact, BadInputChangesNothing) {
    uvm_manager_t *mgr = small_sim(1, 8 * M);
    ASSERT_NE(mgr, nullptr);
    std::vector<Kept> kept = fragment(mgr, 64 * K, 8);
    uvm_compact_result_t r;
    EXPECT_EQ(uvm_gpu_compact(nullptr, 0, 0, &r), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_compact(mgr, 1, 0, &r), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(uvm_gpu_compact(mgr, 0, 0x80, &r), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_set_compact_on_oom(nullptr, 0, 1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_gpu_set_compact_on_oom(mgr, 1, 1), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(check_kept(mgr, kept), 0u) << "a refused call moved something";
    const uvm_gpu_stats_t s = gpu_stats(mgr);
    EXPECT_EQ(s.compactions, 0u);
    EXPECT_EQ(s.root_chunks, 4u);
    EXPECT_EQ(alloc_vid(mgr, 2 * M), nullptr) << "a refused policy call turned compaction on";
    for (const Kept &k : kept)
        ASSERT_EQ(uvm_mem_free(mgr, k.mem), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// CPU mappings and peer mappings name the memory itself: those objects
// stay. Tracked stream work not done keeps an object until it is done.
TEST(Compact, PinnedAndBusyObjectsStay) {
    uvm_manager_params_t p = sim_params(2, 8 * M);
    p.sim.cpu_coherent = 1;
    uvm_manager_t *mgr = nullptr;
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    std::vector<Kept> kept = fragment(mgr, 64 * K, 8);
    ASSERT_EQ(kept.size(), 16u);
    // One of each in the last root (the sparsest are emptied first: all are equal).
    uvm_mem_t *cpu = kept[15].mem, *peer = kept[14].mem, *busy = kept[13].mem;
    ASSERT_EQ(uvm_mem_map_cpu_kernel(mgr, cpu), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_phys(mgr, peer, 1), UVM_OK);
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &s), UVM_OK);
    ASSERT_EQ(uvm_sim_stream_hold(mgr, s), UVM_OK);
    ASSERT_EQ(uvm_mem_record_use(mgr, busy, s), UVM_OK);

    uvm_compact_result_t r;
    ASSERT_EQ(uvm_gpu_compact(mgr, 0, UVM_COMPACT_WAIT, &r), UVM_OK);  // the held work cannot finish
    EXPECT_EQ(r.objects_pinned, 2u);
    EXPECT_EQ(r.objects_busy, 1u);
    EXPECT_EQ(phys_of(mgr, cpu), kept[15].phys);
    EXPECT_EQ(phys_of(mgr, peer), kept[14].phys);
    EXPECT_EQ(phys_of(mgr, busy), kept[13].phys);
    EXPECT_EQ(check_kept(mgr, kept), r.objects_moved);

    ASSERT_EQ(uvm_sim_stream_release(mgr, s), UVM_OK);
    ASSERT_EQ(uvm_mem_unmap_cpu_kernel(mgr, cpu), UVM_OK);
    ASSERT_EQ(uvm_mem_unmap_gpu_phys(mgr, peer, 1), UVM_OK);
    const uint64_t before = r.objects_moved;
    ASSERT_EQ(uvm_gpu_compact(mgr, 0, UVM_COMPACT_RELEASE, &r), UVM_OK);
    EXPECT_EQ(r.objects_pinned, 0u);
    EXPECT_EQ(r.objects_busy, 0u);
    EXPECT_EQ(r.held_after, 2 * M) << "the last root emptied too, once nothing pinned it";
    EXPECT_EQ(check_kept(mgr, kept), before + r.objects_moved);
    ASSERT_EQ(uvm_stream_destroy(mgr, s), UVM_OK);
    for (const Kept &k : kept)
        ASSERT_EQ(uvm_mem_free(mgr, k.mem), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A backend failure at each failable call of a compaction in turn (copies,
// page-table updates): the object of the failed move is where it was with
// every byte and address, those moved before stay moved, and a compaction
// after it finishes the job.
TEST(CompactFaults, EveryFailureAlongAMoveLeavesTheObjectWhereItWas) {
    for (uint64_t n = 1;; ++n) {
        SCOPED_TRACE(n);
        uvm::backend::FaultInjectingBackend *faults = nullptr;
        uvm_manager_t *mgr = faulty_sim(sim_params(1, 8 * M).sim, &faults);
        ASSERT_NE(mgr, nullptr);
        std::vector<Kept> kept = fragment(mgr, 64 * K, 8);
        ASSERT_EQ(kept.size(), 16u);
        uvm_compact_result_t r;
        faults->fail_call(n);
        const uvm_status_t status = uvm_gpu_compact(mgr, 0, UVM_COMPACT_RELEASE, &r);
        const bool fired = faults->fired();
        faults->fail_call(0);
        if (fired) {
            EXPECT_EQ(status, UVM_ERR_BACKEND);
            EXPECT_LT(r.objects_moved, 12u);
        } else {
            EXPECT_EQ(status, UVM_OK);
        }
        EXPECT_EQ(check_kept(mgr, kept), r.objects_moved) << "an object moved without being counted, or lost";
        const uint64_t first = r.objects_moved;
        ASSERT_EQ(uvm_gpu_compact(mgr, 0, UVM_COMPACT_RELEASE, &r), UVM_OK);
        EXPECT_EQ(r.held_after, 2 * M) << "nothing left behind by the failed move";
        EXPECT_GE(check_kept(mgr, kept), first);
        for (const Kept &k : kept)
            ASSERT_EQ(uvm_mem_free(mgr, k.mem), UVM_OK);
        ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
        EXPECT_EQ(gpu_stats(mgr).root_chunks, 0u);
        EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
        if (!fired)
            break;
    }
}

// The policy: an allocation that fails only because the free memory is in
// pieces compacts and is served; one that no compaction could serve fails
// and the report says why.
TEST(Compact, OnOomCompactsBeforeFailing) {
    uvm_manager_t *mgr = small_sim(1, 8 * M);
    ASSERT_NE(mgr, nullptr);
    std::vector<Kept> kept = fragment(mgr, 64 * K, 2);  // every root half used: 4 MiB free in pieces
    ASSERT_EQ(kept.size(), 64u);
    ASSERT_EQ(uvm_gpu_set_compact_on_oom(mgr, 0, 1), UVM_OK);
    EXPECT_EQ(alloc_vid(mgr, 6 * M), nullptr);
    const std::string why = oom_text(mgr);
    EXPECT_NE(why.find("compaction could not help"), std::string::npos) << why;
    EXPECT_EQ(gpu_stats(mgr).compactions, 0u) << "tried where it could not help";

    uvm_mem_t *big = alloc_vid(mgr, 2 * M);
    ASSERT_NE(big, nullptr) << "a root emptied for it";
    uvm_gpu_stats_t s = gpu_stats(mgr);
    EXPECT_EQ(s.compactions, 1u);
    EXPECT_EQ(s.compactions_on_oom, 1u);
    EXPECT_EQ(s.compactions_on_oom_served, 1u);
    EXPECT_EQ(s.compact_objects_moved, 32u);
    EXPECT_EQ(check_kept(mgr, kept), 32u);
    ASSERT_EQ(uvm_mem_free(mgr, big), UVM_OK);

    // Off again: a request the pieces cannot serve fails, and says so.
    for (size_t i = 0; i < kept.size(); i += 2)
        ASSERT_EQ(uvm_mem_free(mgr, kept[i].mem), UVM_OK);
    ASSERT_EQ(uvm_gpu_set_compact_on_oom(mgr, 0, 0), UVM_OK);
    big = alloc_vid(mgr, 8 * M);
    EXPECT_EQ(big, nullptr);
    EXPECT_NE(oom_text(mgr).find("compaction is off"), std::string::npos);
    for (size_t i = 1; i < kept.size(); i += 2)
        ASSERT_EQ(uvm_mem_free(mgr, kept[i].mem), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Eight threads allocate, fill, check and free objects of 4K and 64K chunks
// while another compacts over and over: every byte survives every move.
TEST(CompactStress, EightThreadsAllocateWhileAnotherCompacts) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    ASSERT_NE(mgr, nullptr);
    std::atomic<bool> done{false};
    std::atomic<uint64_t> failures{0}, compactions{0}, moved{0};
    std::thread compactor([&] {
        while (!done.load()) {
            uvm_compact_result_t r;
            const uvm_status_t s = uvm_gpu_compact(mgr, 0, compactions % 3 ? 0 : UVM_COMPACT_RELEASE, &r);
            failures += s != UVM_OK;
            moved += r.objects_moved;
            compactions++;
        }
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937 rng(static_cast<uint32_t>(t) * 7919u + 1);
            const uvm_mem_alloc_params_t hp = alloc_params(UVM_BACKING_SYSMEM, 256 * K, 0, 0, 0);
            uvm_mem_t *host = nullptr;
            void *cpu = nullptr;
            if (uvm_mem_alloc(mgr, &hp, &host) != UVM_OK || uvm_mem_map_gpu_phys(mgr, host, 0) != UVM_OK ||
                uvm_mem_map_cpu_kernel(mgr, host) != UVM_OK || uvm_mem_cpu_kernel_address(mgr, host, 0, &cpu) != UVM_OK) {
                failures++;
                return;
            }
            struct Obj {
                uvm_mem_t *mem;
                uint64_t size;
                uint8_t value;
            };
            std::vector<Obj> live;
            auto check = [&](const Obj &o) {
                uvm_mem_span_t d{host, 0, UVM_VIEW_PHYSICAL}, src{o.mem, 0, UVM_VIEW_PHYSICAL};
                if (uvm_mem_copy(mgr, 0, &d, &src, o.size) != UVM_OK) {
                    failures++;
                    return;
                }
                for (uint64_t i = 0; i < o.size; i += 509)
                    if (static_cast<uint8_t *>(cpu)[i] != o.value) {
                        failures++;
                        return;
                    }
            };
            for (int i = 0; i < 300; ++i) {
                if (live.size() < 24 && rng() % 3) {
                    const uint64_t size = (rng() % 2 ? 4 * K : 64 * K) * (1 + rng() % 4);
                    uvm_mem_t *m = alloc_vid(mgr, size);
                    if (!m)
                        continue;  // the GPU may be full for a moment
                    const uint8_t value = static_cast<uint8_t>(rng());
                    uvm_mem_span_t d{m, 0, UVM_VIEW_PHYSICAL};
                    if (uvm_mem_memset(mgr, 0, &d, value, size) != UVM_OK)
                        failures++;
                    live.push_back({m, size, value});
                } else if (!live.empty()) {
                    const size_t at = rng() % live.size();
                    check(live[at]);
                    if (uvm_mem_free(mgr, live[at].mem) != UVM_OK)
                        failures++;
                    live[at] = live.back();
                    live.pop_back();
                }
            }
            for (const Obj &o : live) {
                check(o);
                if (uvm_mem_free(mgr, o.mem) != UVM_OK)
                    failures++;
            }
            uvm_mem_free(mgr, host);
        });
    }
    for (std::thread &t : threads)
        t.join();
    done = true;
    compactor.join();
    EXPECT_EQ(failures.load(), 0u);
    EXPECT_GT(compactions.load(), 0u);
    const uvm_gpu_stats_t s = gpu_stats(mgr);
    EXPECT_EQ(s.compact_objects_moved, moved.load());
    EXPECT_EQ(s.vidmem_objects, 0u);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A child of fork() gets UVM_ERR_FORKED from both calls (fork_test.cpp
// walks every entry point); here the parent's compaction after the child's
// refusal still finds everything as it was.
TEST(Compact, AForkedChildIsRefused) {
    uvm_manager_t *mgr = small_sim(1, 8 * M);
    ASSERT_NE(mgr, nullptr);
    std::vector<Kept> kept = fragment(mgr, 64 * K, 8);
    const pid_t pid = fork();
    if (pid == 0) {
        uvm_compact_result_t r;
        const bool ok = uvm_gpu_compact(mgr, 0, 0, &r) == UVM_ERR_FORKED &&
                        uvm_gpu_set_compact_on_oom(mgr, 0, 1) == UVM_ERR_FORKED;
        _exit(ok ? 0 : 1);
    }
    ASSERT_GT(pid, 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_EQ(check_kept(mgr, kept), 0u);
    uvm_compact_result_t r;
    ASSERT_EQ(uvm_gpu_compact(mgr, 0, UVM_COMPACT_RELEASE, &r), UVM_OK);
    EXPECT_EQ(check_kept(mgr, kept), 12u);
    for (const Kept &k : kept)
        ASSERT_EQ(uvm_mem_free(mgr, k.mem), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
