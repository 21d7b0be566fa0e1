// Tests of the physical memory manager, after nvidia-uvm's uvm_pmm_test.c.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "chunk/pmm.h"
#include "common/sizes.h"

using namespace uvm;
using uvm::chunk::ChunkState;
using uvm::chunk::Pmm;

namespace {

// A source of `limit` root chunks that can be told to fail its Nth call. It
// gives the lowest run of free roots that fits.
class FakeSource : public chunk::RootChunkSource {
public:
    // `span`: root chunks per driver allocation (aligned groups), whose
    // memory goes back only with the last of them (release_span).
    explicit FakeSource(uint64_t limit, size_t span = 1) : limit_(limit), span_(span) {}
    void release_span(uint64_t phys, uint64_t *first, size_t *count) const override {
        *first = phys / kRootChunkSize / span_ * span_ * kRootChunkSize;
        *count = span_;
    }
    // Driver allocations with a root chunk still held.
    size_t spans_held() {
        std::lock_guard<std::mutex> g(lock_);
        std::set<uint64_t> spans;
        for (uint64_t root : held_)
            spans.insert(root / span_);
        return spans.size();
    }
    uvm_status_t alloc_root_chunks(size_t count, uint64_t *phys) override {
        std::lock_guard<std::mutex> g(lock_);
        if (fail_at_ && ++calls_ == fail_at_)
            return UVM_ERR_BACKEND;
        for (uint64_t i = 0; i + count <= limit_; ++i) {
            uint64_t j = i;
            while (j < i + count && !held_.count(j))
                ++j;
            if (j < i + count) {
                i = j;
                continue;
            }
            for (j = i; j < i + count; ++j)
                held_.insert(j);
            *phys = i * kRootChunkSize;
            return UVM_OK;
        }
        return UVM_ERR_OUT_OF_MEMORY;
    }
    void free_root_chunk(uint64_t phys) override {
        std::lock_guard<std::mutex> g(lock_);
        ASSERT_EQ(held_.erase(phys / kRootChunkSize), 1u);
    }
    size_t held() {
        std::lock_guard<std::mutex> g(lock_);
        return held_.size();
    }
    void fail_call(uint64_t n) {
        calls_ = 0;
        fail_at_ = n;
    }

private:
    std::mutex lock_;
    uint64_t limit_;
    size_t span_;
    std::set<uint64_t> held_;
    uint64_t calls_ = 0, fail_at_ = 0;
};

constexpr uint64_t kSizes[] = {kPageSize4K, kPageSize64K, kPageSize2M};

}  // namespace

TEST(Pmm, AllocatesEachSizeAligned) {
    FakeSource source(16);
    Pmm pmm(&source, 16 * kRootChunkSize);
    for (uint64_t size : kSizes) {
        uint64_t phys[40];
        ASSERT_EQ(pmm.alloc(size, size == kPageSize2M ? 8 : 40, false, phys), UVM_OK);
        const size_t n = size == kPageSize2M ? 8 : 40;
        std::set<uint64_t> unique(phys, phys + n);
        EXPECT_EQ(unique.size(), n);
        for (size_t i = 0; i < n; ++i) {
            EXPECT_TRUE(is_aligned(phys[i], size));
            EXPECT_EQ(pmm.state(phys[i], size), ChunkState::Pinned);
        }
        EXPECT_TRUE(pmm.check_invariants());
        ASSERT_EQ(pmm.free(size, phys, n), UVM_OK);
        EXPECT_TRUE(pmm.check_invariants());
    }
}

TEST(Pmm, SplitsRootsInto64KAnd4K) {
    FakeSource source(4);
    Pmm pmm(&source, 4 * kRootChunkSize);
    uint64_t a;
    ASSERT_EQ(pmm.alloc(kPageSize4K, 1, false, &a), UVM_OK);
    // One root split into 64K chunks, one of which is split into 4K chunks.
    const chunk::PmmStats s = pmm.stats();
    EXPECT_EQ(s.root_chunks, 1u);
    EXPECT_EQ(s.chunks_split[2], 1u);
    EXPECT_EQ(s.chunks_split[1], 1u);
    EXPECT_EQ(s.bytes_pinned[0], kPageSize4K);
    EXPECT_EQ(s.bytes_free[0], kPageSize64K - kPageSize4K);
    EXPECT_EQ(s.bytes_free[1], kRootChunkSize - kPageSize64K);
    EXPECT_EQ(pmm.state(a & ~(kRootChunkSize - 1), kRootChunkSize), ChunkState::IsSplit);
    EXPECT_EQ(pmm.state(a & ~(kPageSize64K - 1), kPageSize64K), ChunkState::IsSplit);
    // Freeing the only chunk merges all the way back to a whole free root.
    ASSERT_EQ(pmm.free(kPageSize4K, &a, 1), UVM_OK);
    const chunk::PmmStats t = pmm.stats();
    EXPECT_EQ(t.chunks_split[2], 0u);
    EXPECT_EQ(t.chunks_split[1], 0u);
    EXPECT_EQ(t.bytes_free[2], kRootChunkSize);
    EXPECT_EQ(pmm.state(a & ~(kRootChunkSize - 1), kRootChunkSize), ChunkState::Free);
    EXPECT_TRUE(pmm.check_invariants());
}

TEST(Pmm, RandomSplitAndMergeEndsWithWholeRoots) {
    FakeSource source(64);
    Pmm pmm(&source, 64 * kRootChunkSize);
    std::mt19937_64 rng(1234);
    std::vector<std::pair<uint64_t, uint64_t>> live;  // size, phys
    for (int step = 0; step < 20000; ++step) {
        if (!live.empty() && (rng() % 100) < 45) {
            const size_t i = rng() % live.size();
            ASSERT_EQ(pmm.free(live[i].first, &live[i].second, 1), UVM_OK);
            live[i] = live.back();
            live.pop_back();
        } else {
            const uint64_t size = kSizes[rng() % 10 < 6 ? 0 : rng() % 10 < 8 ? 1 : 2];
            uint64_t phys;
            const uvm_status_t s = pmm.alloc(size, 1, rng() & 1, &phys);
            if (s == UVM_ERR_OUT_OF_MEMORY)
                continue;
            ASSERT_EQ(s, UVM_OK);
            live.emplace_back(size, phys);
        }
        if (step % 1000 == 0)
            ASSERT_TRUE(pmm.check_invariants());
    }
    // No two live chunks overlap.
    std::sort(live.begin(), live.end(), [](auto &x, auto &y) { return x.second < y.second; });
    for (size_t i = 1; i < live.size(); ++i)
        ASSERT_LE(live[i - 1].second + live[i - 1].first, live[i].second);
    for (auto &c : live)
        ASSERT_EQ(pmm.free(c.first, &c.second, 1), UVM_OK);
    const chunk::PmmStats s = pmm.stats();
    EXPECT_EQ(s.bytes_free[2], s.root_chunks * kRootChunkSize);
    EXPECT_EQ(s.bytes_free[0] + s.bytes_free[1], 0u);
    EXPECT_EQ(s.chunks_split[1] + s.chunks_split[2], 0u);
    EXPECT_EQ(s.largest_free_block, s.root_chunks * kRootChunkSize);  // roots were handed out in order
    EXPECT_TRUE(pmm.check_invariants());
    EXPECT_EQ(pmm.trim(), s.root_chunks * kRootChunkSize);
    EXPECT_EQ(source.held(), 0u);
    EXPECT_EQ(pmm.stats().root_chunks, 0u);
}

// root_usage against the chunks handed out: each root's pinned and
// evictable bytes are theirs, and its free bytes what the stats count.
// Compaction's allocation: never in an avoided root, never growing, and a
// whole free root that falls in an avoided one goes back.
TEST(Pmm, AllocAvoidingKeepsOutOfTheAvoidedRoots) {
    FakeSource source(8);
    Pmm pmm(&source, 8 * kRootChunkSize);
    std::vector<uint64_t> chunks(64);
    ASSERT_EQ(pmm.alloc(kPageSize64K, 64, false, chunks.data()), UVM_OK);  // roots 0 and 1, full
    ASSERT_EQ(pmm.free(kPageSize64K, &chunks[3], 1), UVM_OK);              // a hole in root 0
    ASSERT_EQ(pmm.free(kPageSize64K, &chunks[40], 2), UVM_OK);             // a hole of two in root 1
    Bitmap avoid(8);
    avoid.set(0);
    uint64_t out = 0;
    ASSERT_EQ(pmm.alloc_avoiding(kPageSize64K, 1, false, avoid, &out), UVM_OK);
    EXPECT_EQ(out / kRootChunkSize, 1u) << "the best fit (root 0's hole of one) is avoided";
    EXPECT_EQ(pmm.alloc_avoiding(kPageSize64K, 2, false, avoid, &out), UVM_ERR_OUT_OF_MEMORY)
        << "no run of two outside root 0, and nothing grown for it";
    EXPECT_EQ(pmm.stats().root_chunks, 2u);
    avoid.clear(0);
    avoid.set(1);
    uint64_t four[4];
    EXPECT_EQ(pmm.alloc_avoiding(kPageSize4K, 4, false, avoid, four), UVM_OK);
    EXPECT_EQ(four[0] / kRootChunkSize, 0u);
    ASSERT_EQ(pmm.free(kPageSize4K, four, 4), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize64K, &out, 1), UVM_OK);
    EXPECT_TRUE(pmm.check_invariants());
    Bitmap bad(2);
    EXPECT_EQ(pmm.alloc_avoiding(kPageSize64K, 1, false, bad, &out), UVM_ERR_INVALID_ARGUMENT);
}

// Whole roots under alloc_avoiding: the shortest free stretch outside the
// avoided roots, not the best fit of all free roots (which compaction then
// had to give back, and the object stayed where it was).
TEST(Pmm, AllocAvoidingTakesWholeRootsOutsideTheAvoidedOnes) {
    FakeSource source(8);
    Pmm pmm(&source, 8 * kRootChunkSize);
    uint64_t roots[8];
    ASSERT_EQ(pmm.alloc(kRootChunkSize, 4, false, roots), UVM_OK);  // grown for short runs: those serve them
    ASSERT_EQ(pmm.alloc(kRootChunkSize, 4, false, roots + 4), UVM_OK);
    // Free: root 1 alone (the best fit for one), roots 4-6 (three).
    ASSERT_EQ(pmm.free(kRootChunkSize, &roots[1], 1), UVM_OK);
    ASSERT_EQ(pmm.free(kRootChunkSize, &roots[4], 3), UVM_OK);
    Bitmap avoid(8);
    avoid.set(1);
    avoid.set(4);
    uint64_t out[2] = {};
    ASSERT_EQ(pmm.alloc_avoiding(kRootChunkSize, 1, false, avoid, out), UVM_OK);
    EXPECT_EQ(out[0] / kRootChunkSize, 5u) << "root 1 is the best fit but avoided; 5-6 is the stretch left";
    EXPECT_EQ(pmm.alloc_avoiding(kRootChunkSize, 2, false, avoid, out), UVM_ERR_OUT_OF_MEMORY)
        << "only root 6 is free and not avoided";
    ASSERT_EQ(pmm.free(kRootChunkSize, out, 1), UVM_OK);
    ASSERT_EQ(pmm.alloc_avoiding(kRootChunkSize, 2, false, avoid, out), UVM_OK);
    EXPECT_EQ(out[0] / kRootChunkSize, 5u);
    EXPECT_EQ(out[1] / kRootChunkSize, 6u);
    // A 64K run needing a new root: that root is not an avoided one either.
    uint64_t small = 0;
    ASSERT_EQ(pmm.free(kRootChunkSize, out, 2), UVM_OK);
    ASSERT_EQ(pmm.alloc_avoiding(kPageSize64K, 1, false, avoid, &small), UVM_OK);
    EXPECT_FALSE(avoid.test(small / kRootChunkSize));
    EXPECT_EQ(pmm.stats().root_chunks, 8u) << "nothing grown";
    ASSERT_EQ(pmm.free(kPageSize64K, &small, 1), UVM_OK);
    EXPECT_TRUE(pmm.check_invariants());
}

TEST(Pmm, RootUsageIsWhatTheLiveChunksHold) {
    FakeSource source(32);
    Pmm pmm(&source, 32 * kRootChunkSize);
    std::mt19937_64 rng(99);
    struct Live {
        uint64_t size, phys;
        bool evictable;
    };
    std::vector<Live> live;
    for (int step = 0; step < 6000; ++step) {
        if (!live.empty() && (rng() % 100) < 45) {
            const size_t i = rng() % live.size();
            ASSERT_EQ(pmm.free(live[i].size, &live[i].phys, 1), UVM_OK);
            live[i] = live.back();
            live.pop_back();
        } else {
            const uint64_t size = kSizes[rng() % 3];
            const bool evictable = rng() & 1;
            uint64_t phys;
            if (pmm.alloc(size, 1, evictable, &phys) == UVM_OK)
                live.push_back({size, phys, evictable});
        }
        if (step % 500 != 0)
            continue;
        std::vector<uint64_t> pinned(32, 0), evictable(32, 0);
        for (const Live &l : live)
            (l.evictable ? evictable : pinned)[l.phys / kRootChunkSize] += l.size;
        const std::vector<Pmm::RootUsage> usage = pmm.root_usage();
        ASSERT_EQ(usage.size(), 32u);
        const chunk::PmmStats st = pmm.stats();
        uint64_t free = 0, held = 0;
        for (size_t r = 0; r < 32; ++r) {
            ASSERT_EQ(usage[r].pinned, pinned[r]) << "root " << r;
            ASSERT_EQ(usage[r].evictable, evictable[r]) << "root " << r;
            const uint64_t sum = uint64_t(usage[r].free) + usage[r].pinned + usage[r].evictable;
            ASSERT_TRUE(sum == 0 || sum == kRootChunkSize) << "root " << r;
            free += usage[r].free;
            held += sum;
        }
        EXPECT_EQ(free, st.bytes_free[0] + st.bytes_free[1] + st.bytes_free[2]);
        EXPECT_EQ(held, st.root_chunks * kRootChunkSize);
    }
    for (Live &l : live)
        ASSERT_EQ(pmm.free(l.size, &l.phys, 1), UVM_OK);
}

TEST(Pmm, ExhaustionIsAStatusAndChangesNothing) {
    FakeSource source(2);
    Pmm pmm(&source, 2 * kRootChunkSize);
    uint64_t held;
    ASSERT_EQ(pmm.alloc(kPageSize64K, 1, false, &held), UVM_OK);
    const chunk::PmmStats before = pmm.stats();
    std::vector<uint64_t> phys(2 * 32);
    // 2 roots hold 64 chunks of 64K; one is taken, so 64 cannot be had, nor
    // 33 (a run of more than one root's worth takes whole roots).
    EXPECT_EQ(pmm.alloc(kPageSize64K, 64, false, phys.data()), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(pmm.alloc(kPageSize64K, 33, false, phys.data()), UVM_ERR_OUT_OF_MEMORY);
    const chunk::PmmStats after = pmm.stats();
    EXPECT_EQ(after.root_chunks, before.root_chunks);  // the root grown in the call went back
    EXPECT_EQ(source.held(), 1u);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(after.bytes_free[i], before.bytes_free[i]);
        EXPECT_EQ(after.bytes_pinned[i], before.bytes_pinned[i]);
    }
    EXPECT_EQ(pmm.state(held, kPageSize64K), ChunkState::Pinned);
    EXPECT_TRUE(pmm.check_invariants());
    ASSERT_EQ(pmm.alloc(kPageSize64K, 31, false, phys.data()), UVM_OK);  // the rest of the first root
    EXPECT_EQ(phys[0] / kRootChunkSize, held / kRootChunkSize);
    ASSERT_EQ(pmm.alloc(kPageSize64K, 32, false, phys.data() + 31), UVM_OK);  // the second, whole
    EXPECT_EQ(pmm.alloc(kPageSize4K, 1, false, phys.data()), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_TRUE(pmm.check_invariants());
}

TEST(Pmm, SourceFailureAtEveryCallRollsBack) {
    for (uint64_t n = 1; n <= 4; ++n) {
        FakeSource source(8);
        Pmm pmm(&source, 8 * kRootChunkSize);
        source.fail_call(n);
        std::vector<uint64_t> phys(3);
        const uvm_status_t s = pmm.alloc(kPageSize2M, 3, false, phys.data());
        if (n <= 1) {  // a run of roots is one call to the source
            EXPECT_EQ(s, UVM_ERR_BACKEND) << n;
            EXPECT_EQ(source.held(), 0u);
            EXPECT_EQ(pmm.stats().root_chunks, 0u);
        } else {
            EXPECT_EQ(s, UVM_OK);
        }
        EXPECT_TRUE(pmm.check_invariants());
    }
}

TEST(Pmm, RefusesBadFrees) {
    FakeSource source(2);
    Pmm pmm(&source, 2 * kRootChunkSize);
    uint64_t a, b;
    ASSERT_EQ(pmm.alloc(kPageSize4K, 1, false, &a), UVM_OK);
    ASSERT_EQ(pmm.alloc(kPageSize4K, 1, true, &b), UVM_OK);
    EXPECT_EQ(pmm.state(b, kPageSize4K), ChunkState::Evictable);
    EXPECT_EQ(pmm.free(kPageSize64K, &a, 1), UVM_ERR_INVALID_ARGUMENT);  // wrong size
    EXPECT_EQ(pmm.free(kPageSize2M, &a, 1), UVM_ERR_INVALID_ARGUMENT);
    uint64_t never = 5 * kPageSize4K;
    EXPECT_EQ(pmm.free(kPageSize4K, &never, 1), UVM_ERR_INVALID_ARGUMENT);  // not allocated
    uint64_t unheld = kRootChunkSize;
    EXPECT_EQ(pmm.free(kPageSize4K, &unheld, 1), UVM_ERR_INVALID_ARGUMENT);
    uint64_t misaligned = a + 1;
    EXPECT_EQ(pmm.free(kPageSize4K, &misaligned, 1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(pmm.alloc(12345, 1, false, &never), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(pmm.alloc(kPageSize4K, 0, false, &never), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(pmm.free(kPageSize4K, &a, 1), UVM_OK);
    EXPECT_EQ(pmm.free(kPageSize4K, &a, 1), UVM_ERR_INVALID_ARGUMENT);  // double free
    // A batch with one bad chunk frees nothing.
    uint64_t batch[2] = {b, a};
    EXPECT_EQ(pmm.free(kPageSize4K, batch, 2), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(pmm.state(b, kPageSize4K), ChunkState::Evictable);
    EXPECT_TRUE(pmm.check_invariants());
}

TEST(Pmm, LargestFreeBlockFollowsFragmentation) {
    FakeSource source(2);
    Pmm pmm(&source, 2 * kRootChunkSize);
    std::vector<uint64_t> phys(64);
    ASSERT_EQ(pmm.alloc(kPageSize64K, 64, false, phys.data()), UVM_OK);
    EXPECT_EQ(pmm.stats().largest_free_block, 0u);
    // Free every other chunk: the largest free run is one chunk.
    for (size_t i = 0; i < 64; i += 2)
        ASSERT_EQ(pmm.free(kPageSize64K, &phys[i], 1), UVM_OK);
    EXPECT_EQ(pmm.stats().largest_free_block, kPageSize64K);
    EXPECT_EQ(pmm.stats().bytes_free[1], 32 * kPageSize64K);
    // Free the first root's remaining chunks: it merges into a 2 MiB block.
    for (size_t i = 1; i < 32; i += 2)
        ASSERT_EQ(pmm.free(kPageSize64K, &phys[i], 1), UVM_OK);
    EXPECT_EQ(pmm.stats().largest_free_block, kRootChunkSize + kPageSize64K);
    EXPECT_TRUE(pmm.check_invariants());
}

TEST(Pmm, ConcurrentAllocFreeKeepsInvariants) {
    FakeSource source(32);
    Pmm pmm(&source, 32 * kRootChunkSize);
    std::atomic<bool> failed{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937_64 rng(t);
            std::vector<std::pair<uint64_t, uint64_t>> live;
            for (int i = 0; i < 20000; ++i) {
                if (!live.empty() && rng() % 2) {
                    auto c = live.back();
                    live.pop_back();
                    if (pmm.free(c.first, &c.second, 1) != UVM_OK)
                        failed = true;
                } else {
                    const uint64_t size = kSizes[rng() % 3];
                    uint64_t phys;
                    const uvm_status_t s = pmm.alloc(size, 1, false, &phys);
                    if (s == UVM_OK)
                        live.emplace_back(size, phys);
                    else if (s != UVM_ERR_OUT_OF_MEMORY)
                        failed = true;
                }
            }
            for (auto &c : live)
                if (pmm.free(c.first, &c.second, 1) != UVM_OK)
                    failed = true;
        });
    }
    for (auto &t : threads)
        t.join();
    EXPECT_FALSE(failed);
    EXPECT_TRUE(pmm.check_invariants());
    const chunk::PmmStats s = pmm.stats();
    EXPECT_EQ(s.bytes_free[2], s.root_chunks * kRootChunkSize);
}

// Every allocation is one physically contiguous run, for every size and count.
TEST(Pmm, EveryAllocationIsAContiguousRun) {
    FakeSource source(64);
    Pmm pmm(&source, 64 * kRootChunkSize);
    std::mt19937_64 rng(7);
    struct Run {
        uint64_t size;
        std::vector<uint64_t> phys;
    };
    std::vector<Run> live;
    for (int step = 0; step < 4000; ++step) {
        if (!live.empty() && rng() % 100 < 45) {
            const size_t i = rng() % live.size();
            ASSERT_EQ(pmm.free(live[i].size, live[i].phys.data(), live[i].phys.size()), UVM_OK);
            live[i] = std::move(live.back());
            live.pop_back();
            continue;
        }
        const uint64_t size = kSizes[rng() % 3];
        const size_t count = 1 + rng() % (size == kPageSize2M ? 3 : rng() % 4 == 0 ? 70 : 20);
        Run r{size, std::vector<uint64_t>(count)};
        const uvm_status_t s = pmm.alloc(size, count, rng() & 1, r.phys.data());
        if (s == UVM_ERR_OUT_OF_MEMORY)
            continue;
        ASSERT_EQ(s, UVM_OK);
        for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(r.phys[i], r.phys[0] + i * size) << "size " << size << " count " << count;
            ASSERT_TRUE(is_aligned(r.phys[i], size));
            ASSERT_NE(pmm.state(r.phys[i], size), ChunkState::Free);
        }
        live.push_back(std::move(r));
        if (step % 500 == 0)
            ASSERT_TRUE(pmm.check_invariants());
    }
    std::vector<std::pair<uint64_t, uint64_t>> all;  // start, end
    for (auto &r : live)
        all.emplace_back(r.phys[0], r.phys[0] + r.phys.size() * r.size);
    std::sort(all.begin(), all.end());
    for (size_t i = 1; i < all.size(); ++i)
        ASSERT_LE(all[i - 1].second, all[i].first);
    for (auto &r : live)
        ASSERT_EQ(pmm.free(r.size, r.phys.data(), r.phys.size()), UVM_OK);
    EXPECT_TRUE(pmm.check_invariants());
    EXPECT_EQ(pmm.stats().bytes_free[2], pmm.stats().root_chunks * kRootChunkSize);
}

// A small run goes where it fits most tightly, not into a fresh root.
TEST(Pmm, RunsGoToTheTightestFit) {
    FakeSource source(4);
    Pmm pmm(&source, 4 * kRootChunkSize);
    uint64_t a[32], b[32];
    ASSERT_EQ(pmm.alloc(kPageSize64K, 32, false, a), UVM_OK);  // root 0, whole
    ASSERT_EQ(pmm.alloc(kPageSize64K, 32, false, b), UVM_OK);  // root 1, whole
    ASSERT_EQ(pmm.free(kPageSize64K, a + 4, 10), UVM_OK);      // root 0: a hole of 10
    ASSERT_EQ(pmm.free(kPageSize64K, b + 20, 5), UVM_OK);      // root 1: a hole of 5
    uint64_t c[5];
    ASSERT_EQ(pmm.alloc(kPageSize64K, 5, false, c), UVM_OK);
    EXPECT_EQ(c[0], b[20]);  // the hole of 5, not the first hole of 10
    uint64_t d[6];
    ASSERT_EQ(pmm.alloc(kPageSize64K, 6, false, d), UVM_OK);
    EXPECT_EQ(d[0], a[4]);
    uint64_t e[8];
    ASSERT_EQ(pmm.alloc(kPageSize4K, 8, false, e), UVM_OK);  // splits a 64K of root 0's hole
    EXPECT_EQ(e[0] / kRootChunkSize, 0u);
    EXPECT_EQ(pmm.stats().root_chunks, 2u);  // nothing grown
    EXPECT_TRUE(pmm.check_invariants());
}

// Runs longer than a parent take whole parents; the last one's spare children stay free.
// Whole roots go to the shortest free run that fits, so a long run stays
// for a long request instead of the PMM growing for it.
TEST(Pmm, RootRunsGoToTheShortestFreeRunThatFits) {
    FakeSource source(64);
    Pmm pmm(&source, 64 * kRootChunkSize);
    uint64_t a[4], b[1], c[1], d[3];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 4, false, a), UVM_OK);  // roots 0-3
    ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, b), UVM_OK);  // 4
    ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, c), UVM_OK);  // 5
    ASSERT_EQ(pmm.alloc(kPageSize2M, 3, false, d), UVM_OK);  // 6-8
    ASSERT_EQ(pmm.free(kPageSize2M, a, 4), UVM_OK);          // a free run of 4 at 0
    ASSERT_EQ(pmm.free(kPageSize2M, c, 1), UVM_OK);          // and of 1 at 5
    const size_t held = source.held();
    uint64_t one, four[4];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, &one), UVM_OK);
    EXPECT_EQ(one, c[0]) << "the single free root, not the head of the run of 4";
    ASSERT_EQ(pmm.alloc(kPageSize2M, 4, false, four), UVM_OK);
    EXPECT_EQ(four[0], a[0]);
    EXPECT_EQ(source.held(), held) << "the PMM grew although a run fit";
    ASSERT_EQ(pmm.free(kPageSize2M, &one, 1), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, four, 4), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, b, 1), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, d, 3), UVM_OK);
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
}

// A long free run is not cut for a short request (on CUDA the run is one
// driver handle of its own, which a small object would keep): the short
// request grows, the long run goes back to the source first, and a request
// of about its length still takes it.
TEST(Pmm, ALongFreeRunIsNotCutForAShortRequest) {
    FakeSource source(64);
    Pmm pmm(&source, 64 * kRootChunkSize);
    // Under a release threshold (one no free of this test exceeds), free roots
    // go back before the PMM grows.
    pmm.set_release_threshold(64 * kRootChunkSize);
    uint64_t big[20], one = 0, again[12];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 20, false, big), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, big, 20), UVM_OK);
    ASSERT_EQ(pmm.alloc(kPageSize2M, 12, false, again), UVM_OK);
    EXPECT_EQ(again[0], big[0]) << "more than half the run: taken from it";
    EXPECT_EQ(source.held(), 20u);
    ASSERT_EQ(pmm.free(kPageSize2M, again, 12), UVM_OK);
    ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, &one), UVM_OK);
    EXPECT_EQ(source.held(), 1u) << "the run of 20 went back before the PMM grew";
    uint64_t small = 0;
    ASSERT_EQ(pmm.alloc(kPageSize4K, 1, false, &small), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize4K, &small, 1), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, &one, 1), UVM_OK);
    // Runs of at most 4 roots (a pooled handle) are cut for anything.
    uint64_t four[4], part[1];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 4, false, four), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, four, 4), UVM_OK);
    pmm.trim();
    ASSERT_EQ(pmm.alloc(kPageSize2M, 4, false, four), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, four, 4), UVM_OK);
    const size_t held = source.held();
    ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, part), UVM_OK);
    EXPECT_EQ(source.held(), held);
    ASSERT_EQ(pmm.free(kPageSize2M, part, 1), UVM_OK);
    EXPECT_TRUE(pmm.check_invariants());
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
}

// Within the growth slack (UVM_GROWTH_SLACK_DEFAULT by default) a long free
// run stays held beside a growth, for the next long request: no source call
// for it.
TEST(Pmm, WithinTheGrowthSlackALongFreeRunStaysForTheNextLongRequest) {
    FakeSource source(64);
    Pmm pmm(&source, 64 * kRootChunkSize);
    uint64_t big[20], one = 0;
    ASSERT_EQ(pmm.alloc(kPageSize2M, 20, false, big), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, big, 20), UVM_OK);
    ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, &one), UVM_OK);
    EXPECT_EQ(source.held(), 21u);
    EXPECT_FALSE(one >= big[0] && one <= big[19]);
    ASSERT_EQ(pmm.alloc(kPageSize2M, 20, false, big), UVM_OK);
    EXPECT_EQ(source.held(), 21u) << "the long request grew although its run was held";
    EXPECT_EQ(pmm.stats().roots_moved, 0u);
    ASSERT_EQ(pmm.free(kPageSize2M, big, 20), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, &one, 1), UVM_OK);
    EXPECT_TRUE(pmm.check_invariants());
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
}

// A growth that would hold more than the PMM ever needed (and no slack)
// moves free roots that cannot serve it instead (pmm.h): only as many as it
// would hold above its peak need, and no more.
TEST(Pmm, AGrowthAboveThePeakNeedMovesOnlyTheExcessOfFreeRoots) {
    FakeSource source(64);
    Pmm pmm(&source, 64 * kRootChunkSize);
    pmm.set_growth_slack(0);
    uint64_t a[10], b[10], c[12];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 10, false, a), UVM_OK);
    ASSERT_EQ(pmm.alloc(kPageSize2M, 10, false, b), UVM_OK);  // 20 needed
    ASSERT_EQ(pmm.free_and_release(a, 10), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, b, 10), UVM_OK);
    ASSERT_EQ(source.held(), 10u);
    // 12 fit in no free run: 22 would be held; 2 free roots move.
    ASSERT_EQ(pmm.alloc(kPageSize2M, 12, false, c), UVM_OK);
    EXPECT_EQ(source.held(), 20u);
    chunk::PmmStats s = pmm.stats();
    EXPECT_EQ(s.roots_moved, 2u);
    EXPECT_EQ(s.roots_grown, 32u);
    EXPECT_EQ(s.bytes_free[2], 8 * kRootChunkSize) << "free roots below the peak need stay cached";
    EXPECT_TRUE(pmm.check_invariants());
    ASSERT_EQ(pmm.free(kPageSize2M, c, 12), UVM_OK);
    // Setting a threshold gives back what is above it.
    pmm.set_release_threshold(5 * kRootChunkSize);
    EXPECT_EQ(source.held(), 5u);
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
}

// Moves take whole driver allocations only: a free root whose allocation
// has a live one stays (its memory would not go back), and the free roots
// of the shortest runs go first.
TEST(Pmm, MovesTakeWholeDriverAllocations) {
    FakeSource source(64, 4);
    Pmm pmm(&source, 64 * kRootChunkSize);
    pmm.set_growth_slack(0);
    uint64_t a[4], b[2], c[4], d[5];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 4, false, a), UVM_OK);  // roots 0-3
    ASSERT_EQ(pmm.alloc(kPageSize2M, 2, false, b), UVM_OK);  // 4-5
    ASSERT_EQ(pmm.alloc(kPageSize2M, 4, false, c), UVM_OK);  // 6-9
    ASSERT_EQ(a[0], 0u);
    ASSERT_EQ(c[0], 6 * kRootChunkSize);
    ASSERT_EQ(pmm.free(kPageSize2M, a, 4), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, c, 4), UVM_OK);
    // Free runs 0-3 and 6-9; 5 roots fit in neither. 15 would be held for a
    // peak need of 10: roots 0-3 (a whole allocation) and 8-9 (theirs, 10-11,
    // never given out) go; 6-7 share theirs with b.
    ASSERT_EQ(pmm.alloc(kPageSize2M, 5, false, d), UVM_OK);
    chunk::PmmStats s = pmm.stats();
    EXPECT_EQ(s.roots_moved, 6u);
    EXPECT_EQ(s.root_chunks, 9u);
    EXPECT_EQ(s.bytes_free[2], 2 * kRootChunkSize);
    EXPECT_EQ(pmm.state(6 * kRootChunkSize, kPageSize2M), ChunkState::Free);
    EXPECT_EQ(pmm.state(7 * kRootChunkSize, kPageSize2M), ChunkState::Free);
    EXPECT_EQ(source.held(), 9u);
    EXPECT_TRUE(pmm.check_invariants());
    ASSERT_EQ(pmm.free(kPageSize2M, d, 5), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, b, 2), UVM_OK);
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
    EXPECT_EQ(source.spans_held(), 0u);
}

// The peak need counts from the last trim: what was needed before it no
// longer lets free roots stay beside a growth.
TEST(Pmm, TrimStartsThePeakNeedAgain) {
    FakeSource source(64);
    Pmm pmm(&source, 64 * kRootChunkSize);
    pmm.set_growth_slack(0);
    uint64_t a[10], b[6], c[7];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 10, false, a), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, a, 10), UVM_OK);
    pmm.trim();
    ASSERT_EQ(pmm.alloc(kPageSize2M, 6, false, b), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, b, 6), UVM_OK);
    ASSERT_EQ(pmm.alloc(kPageSize2M, 7, false, c), UVM_OK);
    EXPECT_EQ(source.held(), 7u) << "6 free roots kept beside 7 new ones, for a need of 7 since the trim";
    EXPECT_EQ(pmm.stats().roots_moved, 6u);
    ASSERT_EQ(pmm.free(kPageSize2M, c, 7), UVM_OK);
    EXPECT_TRUE(pmm.check_invariants());
}

// Moves are budgeted: once the roots moved since the peak need last rose
// reach half of it, growth goes beside the free roots, so that a workload
// whose every step fits no free run at its peak stops moving memory and
// settles (no source call a step) instead of moving it every step.
TEST(Pmm, MovesStopOnceHalfThePeakNeedMovedAndTheStepsSettle) {
    FakeSource source(256);
    Pmm pmm(&source, 256 * kRootChunkSize);
    pmm.set_growth_slack(0);
    std::vector<uint64_t> moved, grown;
    for (int step = 0; step < 8; ++step) {
        uint64_t x[10], y = 0, z[11];
        ASSERT_EQ(pmm.alloc(kPageSize2M, 10, false, x), UVM_OK);
        ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, &y), UVM_OK);
        ASSERT_EQ(pmm.free(kPageSize2M, x, 10), UVM_OK);
        ASSERT_EQ(pmm.alloc(kPageSize2M, 11, false, z), UVM_OK);  // fits in no free run
        ASSERT_EQ(pmm.free(kPageSize2M, z, 11), UVM_OK);
        ASSERT_EQ(pmm.free(kPageSize2M, &y, 1), UVM_OK);
        moved.push_back(pmm.stats().roots_moved);
        grown.push_back(pmm.stats().roots_grown);
        ASSERT_TRUE(pmm.check_invariants());
    }
    EXPECT_GT(moved[0], 0u) << "the first step moves the free run that fits no request";
    EXPECT_LE(moved.back(), 12u / 2 + 11) << "at most the budget, and the move that crossed it";
    EXPECT_EQ(moved[4], moved.back()) << "moves stopped";
    EXPECT_EQ(grown[4], grown.back()) << "the steps settled: no growth";
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
}

// A steady state makes no source call: once the peak need is held, the
// same requests again are served from the free roots.
TEST(Pmm, AStepRepeatedGrowsNoMore) {
    FakeSource source(64);
    Pmm pmm(&source, 64 * kRootChunkSize);
    uint64_t grown_after_first = 0;
    for (int step = 0; step < 4; ++step) {
        uint64_t a[20], one = 0, c[6], d[14];
        ASSERT_EQ(pmm.alloc(kPageSize2M, 20, false, a), UVM_OK);
        ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, &one), UVM_OK);
        ASSERT_EQ(pmm.free(kPageSize2M, a, 20), UVM_OK);
        ASSERT_EQ(pmm.alloc(kPageSize2M, 6, false, c), UVM_OK);
        ASSERT_EQ(pmm.alloc(kPageSize2M, 14, false, d), UVM_OK);
        ASSERT_EQ(pmm.free(kPageSize2M, c, 6), UVM_OK);
        ASSERT_EQ(pmm.free(kPageSize2M, d, 14), UVM_OK);
        ASSERT_EQ(pmm.free(kPageSize2M, &one, 1), UVM_OK);
        if (step == 0)
            grown_after_first = pmm.stats().roots_grown;
    }
    EXPECT_EQ(pmm.stats().roots_grown, grown_after_first);
    EXPECT_LE(source.held(), 21u);
    EXPECT_TRUE(pmm.check_invariants());
}

TEST(Pmm, LongRunsSpanParents) {
    FakeSource source(8);
    Pmm pmm(&source, 8 * kRootChunkSize);
    std::vector<uint64_t> small(40), mid(70), big(3);
    ASSERT_EQ(pmm.alloc(kPageSize4K, 40, true, small.data()), UVM_OK);  // 3 64K chunks
    ASSERT_EQ(pmm.alloc(kPageSize64K, 70, false, mid.data()), UVM_OK);  // 3 roots
    ASSERT_EQ(pmm.alloc(kPageSize2M, 3, false, big.data()), UVM_OK);
    chunk::PmmStats s = pmm.stats();
    EXPECT_EQ(s.bytes_evictable[0], 40 * kPageSize4K);
    EXPECT_EQ(s.bytes_free[0], 8 * kPageSize4K);
    EXPECT_EQ(s.bytes_pinned[1], 70 * kPageSize64K);
    EXPECT_EQ(s.bytes_pinned[2], 3 * kRootChunkSize);
    EXPECT_EQ(pmm.state(small[39], kPageSize4K), ChunkState::Evictable);
    EXPECT_EQ(pmm.state(small[39] + kPageSize4K, kPageSize4K), ChunkState::Free);
    EXPECT_TRUE(pmm.check_invariants());
    ASSERT_EQ(pmm.free(kPageSize4K, small.data(), 40), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize64K, mid.data(), 70), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, big.data(), 3), UVM_OK);
    s = pmm.stats();
    EXPECT_EQ(s.bytes_free[2], s.root_chunks * kRootChunkSize);
    EXPECT_TRUE(pmm.check_invariants());
}

// Where the held free roots are scattered and the source has no run left, the
// PMM gives them back and asks again: the source joins them into one run.
TEST(Pmm, ScatteredFreeRootsAreRejoinedThroughTheSource) {
    FakeSource source(4);
    Pmm pmm(&source, 4 * kRootChunkSize);
    uint64_t r[4];
    for (uint64_t &p : r)
        ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, &p), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, &r[1], 1), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, &r[3], 1), UVM_OK);
    uint64_t two[2];
    EXPECT_EQ(pmm.alloc(kPageSize2M, 2, false, two), UVM_ERR_OUT_OF_MEMORY);  // 1 and 3 are not adjacent
    ASSERT_EQ(pmm.free(kPageSize2M, &r[2], 1), UVM_OK);
    ASSERT_EQ(pmm.alloc(kPageSize2M, 3, false, r + 1), UVM_OK);
    EXPECT_EQ(r[1], kRootChunkSize);
    EXPECT_TRUE(pmm.check_invariants());
}

// Churn: objects of mixed sizes freed at random; what is left free must
// mostly be whole roots a trim can give back, and new objects still fit.
TEST(Pmm, ChurnLeavesMemoryTrimmable) {
    FakeSource source(256);
    Pmm pmm(&source, 256 * kRootChunkSize);
    std::mt19937_64 rng(99);
    std::vector<std::pair<uint64_t, std::vector<uint64_t>>> live;
    uint64_t live_bytes = 0;
    for (int step = 0; step < 20000; ++step) {
        const bool grow = live_bytes < (64ull << 20) || rng() % 2;
        if (!grow && !live.empty()) {
            const size_t i = rng() % live.size();
            ASSERT_EQ(pmm.free(live[i].first, live[i].second.data(), live[i].second.size()), UVM_OK);
            live_bytes -= live[i].first * live[i].second.size();
            live[i] = std::move(live.back());
            live.pop_back();
            continue;
        }
        const uint64_t bytes = (1 + rng() % 3000) * kPageSize4K;  // 4 KiB to 12 MiB
        const uint64_t size = bytes < kPageSize64K ? kPageSize4K : bytes < kRootChunkSize ? kPageSize64K : kPageSize2M;
        std::vector<uint64_t> phys((bytes + size - 1) / size);
        if (pmm.alloc(size, phys.size(), false, phys.data()) != UVM_OK)
            continue;
        live_bytes += size * phys.size();
        live.emplace_back(size, std::move(phys));
    }
    const chunk::PmmStats s = pmm.stats();
    const uint64_t held = s.root_chunks * kRootChunkSize;
    const uint64_t free_bytes = s.bytes_free[0] + s.bytes_free[1] + s.bytes_free[2];
    std::printf("churn: %llu MiB held, %llu MiB live, %llu MiB free (%llu MiB of it in split roots), "
                "largest free block %llu MiB\n",
                (unsigned long long)(held >> 20), (unsigned long long)(live_bytes >> 20),
                (unsigned long long)(free_bytes >> 20),
                (unsigned long long)((s.bytes_free[0] + s.bytes_free[1]) >> 20),
                (unsigned long long)(s.largest_free_block >> 20));
    // Fragmentation after churn: free memory stranded in split roots is at
    // most a quarter of the free memory held.
    EXPECT_LE(s.bytes_free[0] + s.bytes_free[1], free_bytes / 4 + 4 * kRootChunkSize)
        << "held " << held << " live " << live_bytes;
    EXPECT_TRUE(pmm.check_invariants());
    for (auto &l : live)
        ASSERT_EQ(pmm.free(l.first, l.second.data(), l.second.size()), UVM_OK);
    EXPECT_EQ(pmm.trim(), held);
    EXPECT_EQ(source.held(), 0u);
}

// Pending roots (pmm.h): allocated for everyone but their holder, whose 2M
// allocations take them in any run, joined with each other and with free
// roots; never split, trimmed or released above a threshold; free once
// unpended up to their sequence number.
TEST(Pmm, PendingRootsGoToTheirHolderOnlyUntilUnpended) {
    FakeSource source(64);
    Pmm pmm(&source, 64 * kRootChunkSize);
    const Pmm::Holder h = pmm.add_holder(), other = pmm.add_holder();
    ASSERT_GE(h.slot, 0);
    ASSERT_GE(other.slot, 0);
    ASSERT_NE(h.slot, other.slot);
    uint64_t a[2], b[2];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 2, false, a), UVM_OK);
    ASSERT_EQ(pmm.alloc(kPageSize2M, 2, false, b), UVM_OK);
    ASSERT_EQ(b[0], a[0] + 2 * kRootChunkSize);  // the fake source gives the lowest run
    ASSERT_EQ(pmm.pend(h, a[0], 2, 1), UVM_OK);
    ASSERT_EQ(pmm.pend(h, b[0], 2, 2), UVM_OK);
    EXPECT_EQ(pmm.pending_bytes(h), 4 * kRootChunkSize);
    EXPECT_EQ(pmm.pending_bytes(other), 0u);
    EXPECT_EQ(pmm.stats().bytes_pinned[2], 4 * kRootChunkSize) << "pending roots are allocated for everyone else";
    EXPECT_TRUE(pmm.check_invariants());
    EXPECT_EQ(pmm.trim(), 0u);
    EXPECT_EQ(source.held(), 4u);
    auto outside = [&](uint64_t p) { return p < a[0] || p >= a[0] + 4 * kRootChunkSize; };
    // Nobody else gets them: no holder, another holder, a split for 64K.
    uint64_t x[4], y[4], z = 0;
    ASSERT_EQ(pmm.alloc(kPageSize2M, 4, false, x), UVM_OK);
    ASSERT_EQ(pmm.alloc(kPageSize2M, 4, false, y, nullptr, true, other), UVM_OK);
    ASSERT_EQ(pmm.alloc(kPageSize64K, 1, false, &z, nullptr, true, h), UVM_OK);
    EXPECT_TRUE(outside(x[0]) && outside(y[0]) && outside(z)) << "pending roots went to someone else";
    ASSERT_EQ(pmm.free(kPageSize2M, x, 4), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, y, 4), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize64K, &z, 1), UVM_OK);
    // Its holder takes the two pending runs as one, without growing.
    const size_t held = source.held();
    uint64_t joined[4];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 4, false, joined, nullptr, true, h), UVM_OK);
    EXPECT_EQ(joined[0], a[0]) << "the holder's adjacent pending runs were not joined";
    EXPECT_EQ(source.held(), held);
    EXPECT_EQ(pmm.pending_bytes(h), 0u);
    EXPECT_TRUE(pmm.check_invariants());
    // A pending root joins a free neighbour for its holder.
    ASSERT_EQ(pmm.free(kPageSize2M, &joined[1], 3), UVM_OK);
    ASSERT_EQ(pmm.pend(h, joined[0], 1, 3), UVM_OK);
    uint64_t pair[2];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 2, false, pair, nullptr, true, h), UVM_OK);
    EXPECT_EQ(pair[0], a[0]) << "a pending root and the free one beside it were not joined";
    EXPECT_EQ(source.held(), held);
    // Unpended up to its sequence number, and not before.
    ASSERT_EQ(pmm.pend(h, pair[0], 2, 5), UVM_OK);
    EXPECT_EQ(pmm.unpend(h, 4), 0u);
    EXPECT_EQ(pmm.unpend(h, 5), 2 * kRootChunkSize);
    EXPECT_EQ(pmm.pending_bytes(h), 0u);
    EXPECT_TRUE(pmm.check_invariants());
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
}

TEST(Pmm, PendingRootsRefuseBadCallsAndOutliveNoHolder) {
    FakeSource source(16);
    Pmm pmm(&source, 16 * kRootChunkSize);
    const Pmm::Holder h = pmm.add_holder();
    uint64_t r[3], c64 = 0;
    ASSERT_EQ(pmm.alloc(kPageSize2M, 3, false, r), UVM_OK);
    ASSERT_EQ(pmm.alloc(kPageSize64K, 1, false, &c64), UVM_OK);
    EXPECT_EQ(pmm.pend(Pmm::Holder(), r[0], 1, 1), UVM_ERR_INVALID_ARGUMENT) << "no holder";
    EXPECT_EQ(pmm.pend(h, r[0], 0, 1), UVM_ERR_INVALID_ARGUMENT) << "no roots";
    EXPECT_EQ(pmm.pend(h, c64 - c64 % kRootChunkSize, 1, 1), UVM_ERR_INVALID_ARGUMENT) << "a split root";
    EXPECT_EQ(pmm.pend(h, 15 * kRootChunkSize, 1, 1), UVM_ERR_INVALID_ARGUMENT) << "a root not held";
    ASSERT_EQ(pmm.pend(h, r[0], 1, 1), UVM_OK);
    EXPECT_EQ(pmm.pend(h, r[0], 2, 2), UVM_ERR_INVALID_ARGUMENT) << "pending already";
    EXPECT_EQ(pmm.pending_bytes(h), kRootChunkSize) << "a refused pend changed something";
    EXPECT_EQ(pmm.free(kPageSize2M, &r[0], 1), UVM_ERR_INVALID_ARGUMENT) << "a pending root is no object's to free";
    EXPECT_TRUE(pmm.check_invariants());
    // Under a release threshold of 0 a pending root stays until unpended,
    // then goes back at once.
    pmm.set_release_threshold(0);
    EXPECT_EQ(source.held(), 4u);
    // An undone allocation of its holder leaves the roots pending again.
    uint64_t two[2];
    std::vector<uint64_t> grown;
    ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, two, &grown, true, h), UVM_OK);
    EXPECT_EQ(two[0], r[0]);
    pmm.undo_alloc(kPageSize2M, two, 1, grown, h);
    EXPECT_EQ(pmm.pending_bytes(h), kRootChunkSize);
    EXPECT_TRUE(pmm.check_invariants());
    // A removed holder's roots come free (here: back to the source) and its
    // name takes nothing any more, even once the slot is someone else's.
    pmm.remove_holder(h);
    EXPECT_EQ(source.held(), 3u);
    EXPECT_EQ(pmm.pending_bytes(h), 0u);
    const Pmm::Holder next = pmm.add_holder();
    EXPECT_EQ(next.slot, h.slot);
    ASSERT_EQ(pmm.pend(next, r[1], 1, 1), UVM_OK);
    EXPECT_EQ(pmm.pend(h, r[2], 1, 1), UVM_ERR_INVALID_ARGUMENT) << "a stale holder";
    uint64_t one = 0;
    ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, &one, nullptr, true, h), UVM_OK);
    EXPECT_NE(one, r[1]) << "a stale holder took another's pending root";
    ASSERT_EQ(pmm.free(kPageSize2M, &one, 1), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, &r[2], 1), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize64K, &c64, 1), UVM_OK);
    EXPECT_EQ(pmm.unpend(next, UINT64_MAX), kRootChunkSize);
    EXPECT_TRUE(pmm.check_invariants());
    EXPECT_EQ(source.held(), 0u);
    pmm.remove_holder(next);
    // Every slot taken: the next holder is none.
    std::vector<Pmm::Holder> all;
    for (int i = 0; i < Pmm::kMaxHolders; ++i)
        all.push_back(pmm.add_holder());
    EXPECT_EQ(pmm.add_holder().slot, -1);
    for (const Pmm::Holder &x : all)
        pmm.remove_holder(x);
}

// An undone allocation of a holder gives back each root where it came from:
// its pending roots pending again, with their sequence numbers (its work may
// still use them), free ones free (no work ever did).
TEST(Pmm, AnUndoneHolderAllocationPutsEachRootBackWhereItWas) {
    FakeSource source(16);
    Pmm pmm(&source, 16 * kRootChunkSize);
    const Pmm::Holder h = pmm.add_holder();
    uint64_t r[2];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 2, false, r), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, &r[1], 1), UVM_OK);  // r[1] free, r[0] pending
    ASSERT_EQ(pmm.pend(h, r[0], 1, 7), UVM_OK);
    uint64_t two[2];
    std::vector<uint64_t> grown;
    ASSERT_EQ(pmm.alloc(kPageSize2M, 2, false, two, &grown, true, h), UVM_OK);
    ASSERT_EQ(two[0], r[0]);  // the pending root and the free one joined
    EXPECT_TRUE(grown.empty());
    pmm.undo_alloc(kPageSize2M, two, 2, grown, h);
    EXPECT_EQ(pmm.pending_bytes(h), kRootChunkSize);
    EXPECT_EQ(pmm.stats().bytes_free[2], kRootChunkSize);
    EXPECT_EQ(pmm.unpend(h, 6), 0u) << "re-pended under another sequence number";
    EXPECT_EQ(pmm.unpend(h, 7), kRootChunkSize);
    // Taken from free alone, then undone: free, not pending.
    uint64_t one = 0;
    ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, &one, &grown, true, h), UVM_OK);
    pmm.undo_alloc(kPageSize2M, &one, 1, grown, h);
    EXPECT_EQ(pmm.pending_bytes(h), 0u);
    EXPECT_TRUE(pmm.check_invariants());
    pmm.remove_holder(h);
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
}

// unpend looks only at what it may give back (the pends up to its sequence
// number, pmm.h), not at the whole backlog; a root an undone allocation
// pends again after its pend was looked at still comes back, with the
// pends after it (never before its own sequence number).
TEST(Pmm, UnpendGivesBackEachPendOnceAndAnUndoneTakeLater) {
    FakeSource source(64);
    Pmm pmm(&source, 64 * kRootChunkSize);
    const Pmm::Holder h = pmm.add_holder();
    uint64_t r[40];
    for (uint64_t &root : r)  // roots of short runs, side by side
        ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, &root), UVM_OK);
    // Forty pends of a root each; the holder's backlog is all of them.
    for (uint64_t i = 0; i < 40; ++i)
        ASSERT_EQ(pmm.pend(h, r[i], 1, i + 1), UVM_OK);
    for (uint64_t upto = 1; upto <= 10; ++upto)
        EXPECT_EQ(pmm.unpend(h, upto), kRootChunkSize) << "up to " << upto;
    EXPECT_EQ(pmm.unpend(h, 10), 0u) << "given back twice";
    EXPECT_EQ(pmm.pending_bytes(h), 30 * kRootChunkSize);
    EXPECT_TRUE(pmm.check_invariants());
    // The holder takes two pending roots (pends 11 and 12, adjacent), whose
    // pends are then looked at while they are taken; the take is undone.
    uint64_t two[2];
    std::vector<uint64_t> grown;
    ASSERT_EQ(pmm.alloc(kPageSize2M, 2, false, two, &grown, true, h), UVM_OK);
    ASSERT_TRUE(grown.empty());
    const uint64_t first = (two[0] - r[0]) / kRootChunkSize + 1;  // its seq
    EXPECT_EQ(pmm.unpend(h, first + 1), (first - 11) * kRootChunkSize) << "the pends before the taken ones";
    pmm.undo_alloc(kPageSize2M, two, 2, grown, h);
    EXPECT_EQ(pmm.pending_bytes(h), (40 - first + 1) * kRootChunkSize);
    EXPECT_TRUE(pmm.check_invariants()) << "a root pending again with no pend entry";
    // They come back with the pends after them, all of them at the last.
    EXPECT_EQ(pmm.unpend(h, 40), (40 - first + 1) * kRootChunkSize);
    EXPECT_EQ(pmm.pending_bytes(h), 0u);
    EXPECT_TRUE(pmm.check_invariants());
    pmm.remove_holder(h);
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
}

// Stitched runs (pmm.h): a long run of 2M chunks that no held run fits takes
// whole free driver allocations wherever they are, and only the rest is grown.
namespace {

std::set<uint64_t> distinct(const uint64_t *chunks, size_t n) { return std::set<uint64_t>(chunks, chunks + n); }

}  // namespace

TEST(Pmm, AStitchedRunTakesFreeDriverAllocationsAndGrowsOnlyTheRest) {
    FakeSource source(64, 4);
    Pmm pmm(&source, 64 * kRootChunkSize);
    uint64_t a[8], b[8], c[8];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 8, false, a), UVM_OK);  // roots 0-7: allocations 0-3, 4-7
    ASSERT_EQ(pmm.alloc(kPageSize2M, 8, false, b), UVM_OK);  // 8-15
    ASSERT_EQ(pmm.alloc(kPageSize2M, 8, false, c), UVM_OK);  // 16-23
    ASSERT_EQ(pmm.free(kPageSize2M, a, 8), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, c, 8), UVM_OK);
    // 24 roots: the free 0-7 and 16-23 fit no run of them; stitched, 8 are grown.
    uint64_t d[24];
    std::vector<uint64_t> grown;
    ASSERT_EQ(pmm.alloc(kPageSize2M, 24, false, d, &grown, true, Pmm::Holder(), true), UVM_OK);
    EXPECT_EQ(grown.size(), 8u);
    EXPECT_EQ(source.held(), 32u);
    EXPECT_EQ(distinct(d, 24).size(), 24u);
    for (uint64_t phys : d)
        EXPECT_EQ(pmm.state(phys, kPageSize2M), ChunkState::Pinned);
    for (uint64_t phys : a)
        EXPECT_TRUE(distinct(d, 24).count(phys));
    EXPECT_EQ(pmm.stats().bytes_free[2], 0u);
    EXPECT_TRUE(pmm.check_invariants());
    // Undone, the held ones are free again and the grown ones gone.
    pmm.undo_alloc(kPageSize2M, d, 24, grown);
    EXPECT_EQ(source.held(), 24u);
    EXPECT_EQ(pmm.stats().bytes_free[2], 16 * kRootChunkSize);
    EXPECT_TRUE(pmm.check_invariants());
    // Without leave to stitch, the same request grows a run of its own.
    grown.clear();
    pmm.set_growth_slack(UINT64_MAX);
    ASSERT_EQ(pmm.alloc(kPageSize2M, 24, false, d, &grown), UVM_OK);
    EXPECT_EQ(grown.size(), 24u);
    for (size_t i = 1; i < 24; ++i)
        EXPECT_EQ(d[i], d[0] + i * kRootChunkSize);
    ASSERT_EQ(pmm.free(kPageSize2M, d, 24), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, b, 8), UVM_OK);
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
}

// Only whole driver allocations are pieces (each is mapped elsewhere whole),
// and the grown rest is long: a short one would share a pooled allocation.
TEST(Pmm, AStitchedRunTakesNoPartOfADriverAllocation) {
    FakeSource source(64, 4);
    Pmm pmm(&source, 64 * kRootChunkSize);
    pmm.set_growth_slack(UINT64_MAX);
    uint64_t a[8], b[8];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 8, false, a), UVM_OK);  // 0-7
    ASSERT_EQ(pmm.alloc(kPageSize2M, 8, false, b), UVM_OK);  // 8-15
    ASSERT_EQ(pmm.free(kPageSize2M, a + 1, 7), UVM_OK);       // 0 stays: allocation 0-3 is not all free
    ASSERT_EQ(pmm.free(kPageSize2M, b, 8), UVM_OK);
    const uint64_t keep = a[0];
    // Free: 1-15, no run of 16; whole allocations free: 4-7, 8-11, 12-15.
    // Three would leave a short rest (4): two, and 8 grown.
    uint64_t d[16];
    std::vector<uint64_t> grown;
    ASSERT_EQ(pmm.alloc(kPageSize2M, 16, false, d, &grown, true, Pmm::Holder(), true), UVM_OK);
    EXPECT_EQ(grown.size(), 8u);
    const std::set<uint64_t> got = distinct(d, 16);
    EXPECT_EQ(got.size(), 16u);
    for (uint64_t r : {0u, 1u, 2u, 3u})
        EXPECT_FALSE(got.count(r * kRootChunkSize)) << "root " << r << " is part of an allocation not all free";
    EXPECT_EQ(source.held(), 24u);
    EXPECT_TRUE(pmm.check_invariants());
    ASSERT_EQ(pmm.free(kPageSize2M, d, 16), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, &keep, 1), UVM_OK);
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
}

// A holder's pending roots are pieces for its own stitched runs only, and
// go back pending when the allocation is undone.
TEST(Pmm, AStitchedRunTakesItsHoldersPendingRootsOnly) {
    FakeSource source(64);
    Pmm pmm(&source, 64 * kRootChunkSize);
    pmm.set_growth_slack(UINT64_MAX);
    const Pmm::Holder h = pmm.add_holder(), other = pmm.add_holder();
    uint64_t a[6], sep[1], b[6], sep2[1];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 6, false, a), UVM_OK);     // 0-5
    ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, sep), UVM_OK);   // 6
    ASSERT_EQ(pmm.alloc(kPageSize2M, 6, false, b), UVM_OK);     // 7-12
    ASSERT_EQ(pmm.alloc(kPageSize2M, 1, false, sep2), UVM_OK);  // 13
    ASSERT_EQ(pmm.pend(h, a[0], 6, 1), UVM_OK);
    ASSERT_EQ(pmm.pend(other, b[0], 6, 1), UVM_OK);
    // 11 roots: the holder's 6 pending ones and 5 grown.
    uint64_t d[11];
    std::vector<uint64_t> grown;
    ASSERT_EQ(pmm.alloc(kPageSize2M, 11, false, d, &grown, true, h, true), UVM_OK);
    const std::set<uint64_t> got = distinct(d, 11);
    for (uint64_t r : a)
        EXPECT_TRUE(got.count(r));
    for (uint64_t r : b)
        EXPECT_FALSE(got.count(r)) << "another holder's pending root";
    EXPECT_EQ(pmm.pending_bytes(h), 0u);
    EXPECT_EQ(grown.size(), 5u);
    pmm.undo_alloc(kPageSize2M, d, 11, grown, h);
    EXPECT_EQ(pmm.pending_bytes(h), 6 * kRootChunkSize);
    EXPECT_TRUE(pmm.check_invariants());
    pmm.remove_holder(h);
    pmm.remove_holder(other);
    ASSERT_EQ(pmm.free(kPageSize2M, sep, 1), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, sep2, 1), UVM_OK);
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
}

// Where the grown rest is not whole driver allocations (the source gave
// roots beside a held allocation's), the stitch is undone and the run goes
// the usual way: one run, the roots the stitch grew given back.
TEST(Pmm, AStitchWhoseGrownRestIsNotWholeGoesTheUsualWay) {
    FakeSource source(64, 4);
    Pmm pmm(&source, 64 * kRootChunkSize);
    pmm.set_growth_slack(UINT64_MAX);
    uint64_t a[8], b[6];
    ASSERT_EQ(pmm.alloc(kPageSize2M, 8, false, a), UVM_OK);  // 0-7
    ASSERT_EQ(pmm.alloc(kPageSize2M, 6, false, b), UVM_OK);  // 8-13: allocation 12-15 half held
    ASSERT_EQ(pmm.free(kPageSize2M, a, 8), UVM_OK);
    // 10 roots: 0-3 and 4-7 would leave a short rest, so one piece and 6
    // grown, at 14-19 (allocations 12-15 and 16-19): not whole.
    uint64_t d[10];
    std::vector<uint64_t> grown;
    ASSERT_EQ(pmm.alloc(kPageSize2M, 10, false, d, &grown, true, Pmm::Holder(), true), UVM_OK);
    for (size_t i = 1; i < 10; ++i)
        EXPECT_EQ(d[i], d[0] + i * kRootChunkSize) << "one run";
    EXPECT_EQ(grown.size(), 10u);
    EXPECT_EQ(source.held(), 24u);
    EXPECT_TRUE(pmm.check_invariants());
    ASSERT_EQ(pmm.free(kPageSize2M, d, 10), UVM_OK);
    ASSERT_EQ(pmm.free(kPageSize2M, b, 6), UVM_OK);
    pmm.trim();
    EXPECT_EQ(source.held(), 0u);
}
