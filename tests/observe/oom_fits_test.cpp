// The OOM report's "largest request that fits" (uvm_observe.h, pressure/fits.h):
// each of its four figures is taken at its word. The test allocates exactly
// the figure (it must succeed; the one with eviction by evicting) and the
// figure and one 2 MiB chunk more (OUT_OF_MEMORY), for the GPU and for a
// client with a budget, on small simulated GPUs.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "api/handles.h"
#include "tests/uvm/fixtures.h"
#if defined(UVM_HAVE_NLOHMANN_JSON)
#include <nlohmann/json.hpp>
#endif

using namespace uvm_test;

#if defined(UVM_HAVE_NLOHMANN_JSON)

namespace {

constexpr uint64_t M = 1024 * 1024;

uvm_mem_t *alloc_2m(uvm_manager_t *mgr, uint64_t size, uint32_t flags = 0, uvm_client_t *client = nullptr) {
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size, 0, UVM_PAGE_SIZE_2M, flags);
    p.client = client;
    uvm_mem_t *m = nullptr;
    EXPECT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_OK) << size / M << " MiB";
    return m;
}

// uvm_mem_alloc of `size` in 2M chunks, the object freed at once where it was made.
uvm_status_t try_alloc(uvm_manager_t *mgr, uint64_t size, uvm_client_t *client = nullptr) {
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size, 0, UVM_PAGE_SIZE_2M, 0);
    p.client = client;
    uvm_mem_t *m = nullptr;
    const uvm_status_t s = uvm_mem_alloc(mgr, &p, &m);
    if (s == UVM_OK)
        EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    return s;
}

void set_eviction(uvm_manager_t *mgr, bool on, uint64_t sysmem_limit = 0) {
    uvm_eviction_policy_t p;
    std::memset(&p, 0, sizeof(p));
    p.disabled = on ? 0 : 1;
    p.sysmem_limit = sysmem_limit;
    ASSERT_EQ(uvm_manager_set_eviction_policy(mgr, &p), UVM_OK);
}

uint64_t evictions(uvm_manager_t *mgr) {
    uvm_gpu_stats_t s;
    EXPECT_EQ(uvm_gpu_stats(mgr, 0, &s), UVM_OK);
    return s.evictions;
}

nlohmann::json oom_json(uvm_manager_t *mgr) {
    return nlohmann::json::parse(fetch([&](char *b, size_t n, size_t *need) {
        return uvm_oom_report(mgr, UVM_REPORT_JSON, b, n, need);
    }));
}

std::string oom_text(uvm_manager_t *mgr) {
    return fetch([&](char *b, size_t n, size_t *need) { return uvm_oom_report(mgr, UVM_REPORT_TEXT, b, n, need); });
}

// The figure "now" at its word: with eviction off (so that nothing can move)
// the figure fits and one chunk more does not.
void expect_fits_now(uvm_manager_t *mgr, uint64_t figure, uvm_client_t *client = nullptr) {
    set_eviction(mgr, false);
    const uint64_t before = evictions(mgr);
    if (figure)
        EXPECT_EQ(try_alloc(mgr, figure, client), UVM_OK) << figure / M << " MiB";
    EXPECT_EQ(try_alloc(mgr, figure + 2 * M, client), UVM_ERR_OUT_OF_MEMORY) << figure / M << " MiB + 2 MiB";
    EXPECT_EQ(evictions(mgr), before);
    set_eviction(mgr, true);
}

// Free the objects, then the manager: nothing leaks.
void destroy(uvm_manager_t *mgr, const std::vector<uvm_mem_t *> &objs) {
    for (uvm_mem_t *m : objs)
        EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// A GPU of 64 MiB, full of 4 MiB objects in groups of four: pinned,
// evictable, freed, evictable. Holes of 4 MiB now; 12 MiB between the pinned
// ones once the evictable ones go.
uvm_manager_t *fragmented_gpu(std::vector<uvm_mem_t *> *kept) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    std::vector<uvm_mem_t *> all;
    for (int i = 0; i < 16; ++i)
        all.push_back(alloc_2m(mgr, 4 * M, i % 4 == 1 || i % 4 == 3 ? UVM_MEM_EVICTABLE : 0));
    for (int i = 0; i < 16; ++i) {
        if (i % 4 == 2)
            EXPECT_EQ(uvm_mem_free(mgr, all[i]), UVM_OK);
        else
            kept->push_back(all[i]);
    }
    return mgr;
}

}  // namespace

// The case: every other 4 MiB object freed, only 4 MiB holes; the
// report said 32 MiB would fit.
TEST(OomFits, FreeingEveryOtherObjectLeavesOnlyItsHolesToFit) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    std::vector<uvm_mem_t *> objs;
    for (int i = 0; i < 16; ++i)
        objs.push_back(alloc_2m(mgr, 4 * M));
    for (int i = 0; i < 16; i += 2)
        ASSERT_EQ(uvm_mem_free(mgr, objs[i]), UVM_OK);
    EXPECT_EQ(try_alloc(mgr, 8 * M), UVM_ERR_OUT_OF_MEMORY);
    const auto j = oom_json(mgr);
    EXPECT_EQ(j["gpu"]["largest_request_that_fits"], 4 * M) << j.dump();
    EXPECT_EQ(j["fits"]["chunk_size"], 2 * M);
    EXPECT_EQ(j["fits"]["gpu"]["now"], 4 * M);
    EXPECT_EQ(j["fits"]["gpu"]["with_eviction"], 4 * M);  // nothing is evictable
    EXPECT_EQ(j["fits"]["client"]["name"], "default");
    EXPECT_EQ(j["fits"]["client"]["now"], 4 * M);
    EXPECT_EQ(j["fits"]["client"]["with_eviction"], 4 * M);
    EXPECT_NE(oom_text(mgr).find("the largest request that would fit (vidmem of 2M chunks): GPU 0 4.00 MiB now, "
                                 "4.00 MiB with eviction"),
              std::string::npos)
        << oom_text(mgr);
    expect_fits_now(mgr, 4 * M);
    for (int i = 1; i < 16; i += 2)
        ASSERT_EQ(uvm_mem_free(mgr, objs[i]), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(OomFits, TheGpuFiguresFitAndOneChunkMoreDoesNot) {
    std::vector<uvm_mem_t *> objs;
    uvm_manager_t *mgr = fragmented_gpu(&objs);
    // Too large even with eviction, and the estimate says so: nothing moves.
    EXPECT_EQ(try_alloc(mgr, 56 * M), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(evictions(mgr), 0u);
    const auto j = oom_json(mgr);
    const uint64_t now = j["fits"]["gpu"]["now"], with = j["fits"]["gpu"]["with_eviction"];
    EXPECT_EQ(now, 4 * M) << j.dump();
    EXPECT_EQ(with, 12 * M) << j.dump();
    EXPECT_EQ(j["fits"]["eviction"], true);
    expect_fits_now(mgr, now);
    // With eviction: the figure fits by evicting, one chunk more does not.
    EXPECT_EQ(try_alloc(mgr, with), UVM_OK);
    EXPECT_GT(evictions(mgr), 0u);
    EXPECT_EQ(try_alloc(mgr, with + 2 * M), UVM_ERR_OUT_OF_MEMORY);
    destroy(mgr, objs);
}

// Eviction off by the policy: the figure with eviction is the one without.
TEST(OomFits, WithEvictionOffBothGpuFiguresAreTheSame) {
    std::vector<uvm_mem_t *> objs;
    uvm_manager_t *mgr = fragmented_gpu(&objs);
    set_eviction(mgr, false);
    EXPECT_EQ(try_alloc(mgr, 8 * M), UVM_ERR_OUT_OF_MEMORY);
    const auto j = oom_json(mgr);
    EXPECT_EQ(j["fits"]["eviction"], false);
    EXPECT_EQ(j["fits"]["gpu"]["now"], 4 * M);
    EXPECT_EQ(j["fits"]["gpu"]["with_eviction"], 4 * M);
    EXPECT_NE(oom_text(mgr).find("(eviction is off)"), std::string::npos);
    destroy(mgr, objs);
}

// The host limit on evicted bytes: the coldest evictable object goes, the
// next would pass the limit and stays.
TEST(OomFits, TheHostLimitBoundsWhatEvictionCanFree) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    std::vector<uvm_mem_t *> objs;
    objs.push_back(alloc_2m(mgr, 4 * M, UVM_MEM_EVICTABLE));  // the coldest
    objs.push_back(alloc_2m(mgr, 4 * M, UVM_MEM_EVICTABLE));  // beside it
    objs.push_back(alloc_2m(mgr, 24 * M));                    // the rest, pinned
    set_eviction(mgr, true, 4 * M);
    EXPECT_EQ(try_alloc(mgr, 16 * M), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(evictions(mgr), 0u);
    const auto j = oom_json(mgr);
    EXPECT_EQ(j["fits"]["gpu"]["now"], 0u) << j.dump();
    const uint64_t with = j["fits"]["gpu"]["with_eviction"];
    EXPECT_EQ(with, 4 * M) << j.dump();  // 8 MiB without the limit
    set_eviction(mgr, true, 4 * M);
    EXPECT_EQ(try_alloc(mgr, with), UVM_OK);
    EXPECT_EQ(evictions(mgr), 1u);
    EXPECT_EQ(try_alloc(mgr, with + 2 * M), UVM_ERR_OUT_OF_MEMORY);
    destroy(mgr, objs);
}

namespace {

// A client with a 20 MiB budget, 12 MiB pinned and 4 MiB evictable in it,
// at the bottom of a 64 MiB GPU, the rest free; a request too large for the
// GPU even with eviction (the estimate says so: nothing moves), made in the
// client. Its report's fits.
struct ClientCase {
    uvm_manager_t *mgr = nullptr;
    uvm_client_t *client = nullptr;
    std::vector<uvm_mem_t *> objs;
    nlohmann::json fits;
    ~ClientCase() {
        for (uvm_mem_t *m : objs)
            EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
        EXPECT_EQ(uvm_client_destroy(mgr, client), UVM_OK);
        EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
    }
};

void make_client_case(ClientCase &c) {
    c.mgr = small_sim(1, 64 * M);
    EXPECT_EQ(uvm_client_create(c.mgr, "trainer", &c.client), UVM_OK);
    EXPECT_EQ(uvm_client_set_budget(c.mgr, c.client, 0, 20 * M), UVM_OK);
    for (int i = 0; i < 3; ++i)
        c.objs.push_back(alloc_2m(c.mgr, 4 * M, 0, c.client));
    c.objs.push_back(alloc_2m(c.mgr, 4 * M, UVM_MEM_EVICTABLE, c.client));
    EXPECT_EQ(try_alloc(c.mgr, 60 * M, c.client), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(evictions(c.mgr), 0u);
    c.fits = oom_json(c.mgr)["fits"];
}

}  // namespace

TEST(OomFits, AClientsFiguresAreBoundedByItsBudgetAndItsOwnEvictions) {
    ClientCase c;
    make_client_case(c);
    EXPECT_EQ(c.fits["client"]["name"], "trainer") << c.fits.dump();
    EXPECT_EQ(c.fits["client"]["budget"], 20 * M);
    const uint64_t now = c.fits["client"]["now"], with = c.fits["client"]["with_eviction"];
    EXPECT_EQ(now, 4 * M);   // 20 MiB less 16 MiB used
    EXPECT_EQ(with, 8 * M);  // and its own 4 MiB evictable object
    EXPECT_EQ(c.fits["gpu"]["now"], 48 * M);
    EXPECT_EQ(c.fits["gpu"]["with_eviction"], 52 * M);
    const std::string text = oom_text(c.mgr);
    EXPECT_NE(text.find("in client trainer (budget 20.00 MiB): 4.00 MiB now, 8.00 MiB with eviction"),
              std::string::npos)
        << text;
    expect_fits_now(c.mgr, now, c.client);
    EXPECT_EQ(try_alloc(c.mgr, with, c.client), UVM_OK);
    EXPECT_EQ(evictions(c.mgr), 1u);  // its own evictable object made room in its budget
    EXPECT_EQ(try_alloc(c.mgr, with + 2 * M, c.client), UVM_ERR_OUT_OF_MEMORY);
}

// The same report's GPU figures, for the default client: the client's
// budget does not bound them.
TEST(OomFits, TheGpuFiguresBesideAClientAreTheGpusOwn) {
    ClientCase c;
    make_client_case(c);
    const uint64_t now = c.fits["gpu"]["now"], with = c.fits["gpu"]["with_eviction"];
    expect_fits_now(c.mgr, now);
    EXPECT_EQ(try_alloc(c.mgr, with), UVM_OK);
    EXPECT_EQ(evictions(c.mgr), 1u);
    EXPECT_EQ(try_alloc(c.mgr, with + 2 * M), UVM_ERR_OUT_OF_MEMORY);
}

// A 2M chunk a thread keeps cached is a free root to an allocation (it
// flushes the caches when the PMM is out of memory): the snapshot counts it,
// and reading leaves it cached.
TEST(OomFits, ChunksThreadsCacheCountAndReadingLeavesThemCached) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    uvm_mem_t *pinned = alloc_2m(mgr, 4 * M);  // at the bottom
    std::atomic<bool> cached{false}, done{false};
    std::thread holder([&] {
        std::vector<uvm_mem_t *> objs;
        for (int i = 0; i < 3; ++i)
            objs.push_back(alloc_2m(mgr, 2 * M));  // one chunk each: through this thread's cache
        for (uvm_mem_t *m : objs)
            EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
        cached = true;
        while (!done)
            std::this_thread::yield();
    });
    while (!cached)
        std::this_thread::yield();
    uvm::ChunkCaches &caches = uvm::from_handle(mgr)->gpu(0).caches;
    uint64_t before[3], after[3];
    caches.cached_bytes(before);
    ASSERT_GT(before[2], 0u) << "the thread caches no 2M chunk: the test tests nothing";
    const std::string snap = fetch([&](char *b, size_t n, size_t *need) { return uvm_manager_snapshot(mgr, b, n, need); });
    caches.cached_bytes(after);
    EXPECT_EQ(after[2], before[2]) << "reading the fits flushed a cache";
    const auto fits = nlohmann::json::parse(snap)["gpus"][0]["fits"];
    const uint64_t now = fits["now"];
    EXPECT_EQ(now, 28 * M) << fits.dump();  // all above the pinned object, the cached roots too
    EXPECT_EQ(fits["with_eviction"], 28 * M);
    expect_fits_now(mgr, now);
    done = true;
    holder.join();
    destroy(mgr, {pinned});
}

// A restore that does not fit: the report is about the object's client and
// skips the object itself (its caller holds its lock).
TEST(OomFits, ARestoreThatDoesNotFitReportsTheObjectsClient) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    uvm_client_t *client = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "cache", &client), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, client, 0, 16 * M), UVM_OK);
    uvm_mem_t *e = alloc_2m(mgr, 8 * M, UVM_MEM_EVICTABLE, client);
    ASSERT_EQ(uvm_mem_evict(mgr, e), UVM_OK);
    uvm_mem_t *fill = alloc_2m(mgr, 28 * M);  // 4 MiB left
    EXPECT_EQ(uvm_mem_make_resident(mgr, e), UVM_ERR_OUT_OF_MEMORY);
    const auto j = oom_json(mgr);
    EXPECT_EQ(j["request"]["call"], "restore");
    EXPECT_EQ(j["fits"]["client"]["name"], "cache") << j.dump();
    EXPECT_EQ(j["fits"]["client"]["now"], 4 * M);  // the GPU's 4 MiB, within its 16 MiB
    EXPECT_EQ(j["fits"]["gpu"]["now"], 4 * M);
    EXPECT_EQ(uvm_mem_free(mgr, fill), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, e), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr, client), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Reading the fits while threads allocate, free and evict: nothing races
// (the TSan job runs it), nothing is flushed or left locked, and every
// figure is a whole number of root chunks within the GPU.
TEST(OomFits, ReadingWhileThreadsAllocateAndEvictIsSafe) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    uvm_client_t *client = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "busy", &client), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, client, 0, 24 * M), UVM_OK);
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            std::vector<uvm_mem_t *> mine;
            for (int i = 0; !stop; ++i) {
                uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, (1 + (i + t) % 3) * 2 * M, 0,
                                                        (i % 2) ? UVM_PAGE_SIZE_2M : 0, i % 3 ? UVM_MEM_EVICTABLE : 0);
                p.client = t % 2 ? client : nullptr;
                uvm_mem_t *m = nullptr;
                if (uvm_mem_alloc(mgr, &p, &m) == UVM_OK)
                    mine.push_back(m);
                if (mine.size() > 6 || (!mine.empty() && i % 4 == 0)) {
                    EXPECT_EQ(uvm_mem_free(mgr, mine.front()), UVM_OK);
                    mine.erase(mine.begin());
                }
            }
            for (uvm_mem_t *m : mine)
                EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
        });
    for (int i = 0; i < 200; ++i) {
        std::string snap(1 << 16, '\0');  // room to spare: the snapshot grows while threads allocate
        size_t needed = 0;
        ASSERT_EQ(uvm_manager_snapshot(mgr, &snap[0], snap.size(), &needed), UVM_OK);
        snap.resize(needed - 1);
        const auto fits = nlohmann::json::parse(snap)["gpus"][0]["fits"];
        const uint64_t now = fits["now"], with = fits["with_eviction"];
        EXPECT_EQ(now % (2 * M), 0u);
        EXPECT_LE(now, with);
        EXPECT_LE(with, 64 * M);
        if (i % 20 == 0 && try_alloc(mgr, 60 * M, client) == UVM_ERR_OUT_OF_MEMORY) {
            const auto j = oom_json(mgr)["fits"];
            EXPECT_LE(j["client"]["now"].get<uint64_t>(), 24 * M);
            EXPECT_LE(j["client"]["with_eviction"].get<uint64_t>(), 24 * M);
        }
    }
    stop = true;
    for (auto &t : threads)
        t.join();
    EXPECT_EQ(uvm_client_destroy(mgr, client), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

#else

TEST(OomFits, NeedsAJsonParser) { GTEST_SKIP() << "no JSON parser in this build (nlohmann-json3-dev)"; }

#endif
