// Tests of the bitmap whose runs are indexed by length: every answer is the
// plain bitmap's walk's (the PMM's placements must not change with it).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "common/run_bitmap.h"

using uvm::Bitmap;
using uvm::RunBitmap;

namespace {

// Sets (or clears) the bits of [first, first + count) that are not so yet,
// in maximal ranges, in both bitmaps.
void set_both(RunBitmap *indexed, Bitmap *plain, size_t first, size_t count, bool to) {
    for (size_t i = first; i < first + count;) {
        if (plain->test(i) == to) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < first + count && plain->test(j) != to)
            ++j;
        if (to) {
            indexed->set_range(i, j - i);
            plain->set_range(i, j - i);
        } else {
            indexed->clear_range(i, j - i);
            plain->clear_range(i, j - i);
        }
        i = j;
    }
}

}  // namespace

TEST(RunBitmap, FindsTheBestFitThePlainWalkFinds) {
    std::mt19937_64 rng(5);
    for (size_t size : {1u, 63u, 64u, 65u, 130u, 5000u}) {
        RunBitmap indexed(size);
        Bitmap plain(size);
        for (int step = 0; step < 3000; ++step) {
            const size_t first = rng() % size;
            const size_t count = std::min<size_t>(size - first, 1 + rng() % (rng() % 4 ? 5 : 200));
            set_both(&indexed, &plain, first, count, rng() % 2 == 0);
            ASSERT_TRUE(indexed.check()) << "size " << size << " step " << step;
            ASSERT_EQ(indexed.count(), plain.count());
            ASSERT_EQ(indexed.longest_run(), plain.longest_run());
            for (size_t n : {size_t(1), size_t(2), 1 + rng() % 8, 1 + rng() % 300})
                ASSERT_EQ(indexed.find_best_run(n), plain.find_best_run(n)) << "size " << size << " n " << n;
        }
    }
}

TEST(RunBitmap, JoinsAndCutsRunsAtTheirEnds) {
    RunBitmap b(300);
    EXPECT_EQ(b.find_best_run(1), RunBitmap::npos);
    EXPECT_EQ(b.longest_run(), 0u);
    b.set_range(10, 5);  // [10, 15)
    b.set_range(20, 3);  // [20, 23)
    b.set(299);          // the last bit
    EXPECT_EQ(b.runs(), 3u);
    EXPECT_EQ(b.find_best_run(1), 299u);
    EXPECT_EQ(b.find_best_run(3), 20u);
    EXPECT_EQ(b.find_best_run(4), 10u);
    EXPECT_EQ(b.find_best_run(6), RunBitmap::npos);
    b.set_range(15, 5);  // joins both sides: [10, 23)
    EXPECT_EQ(b.runs(), 2u);
    EXPECT_EQ(b.longest_run(), 13u);
    EXPECT_EQ(b.find_best_run(13), 10u);
    b.clear_range(12, 2);  // cuts it: [10, 12) and [14, 23)
    EXPECT_EQ(b.runs(), 3u);
    EXPECT_EQ(b.find_best_run(2), 10u);
    EXPECT_EQ(b.find_best_run(9), 14u);
    b.clear_range(10, 2);  // a whole run goes
    b.clear(299);
    EXPECT_EQ(b.runs(), 1u);
    EXPECT_EQ(b.find_best_run(1), 14u);
    EXPECT_TRUE(b.check());
    // Runs across word boundaries, from both ends.
    RunBitmap w(256);
    w.set_range(60, 10);
    w.set_range(127, 2);
    w.set_range(70, 57);  // [60, 129)
    EXPECT_EQ(w.runs(), 1u);
    EXPECT_EQ(w.longest_run(), 69u);
    w.clear(64);
    EXPECT_EQ(w.find_best_run(4), 60u);
    EXPECT_EQ(w.find_best_run(5), 65u);
    EXPECT_TRUE(w.check());
}

TEST(Bitmap, RunBeginAndEndBoundTheRunOfABit) {
    Bitmap b(200);
    b.set_range(0, 3);
    b.set_range(62, 70);  // [62, 132)
    EXPECT_EQ(b.run_begin(0), 0u);
    EXPECT_EQ(b.run_begin(2), 0u);
    EXPECT_EQ(b.run_end(1), 3u);
    for (size_t i : {62u, 63u, 64u, 127u, 128u, 131u}) {
        EXPECT_EQ(b.run_begin(i), 62u) << i;
        EXPECT_EQ(b.run_end(i), 132u) << i;
    }
    b.set_range(133, 67);  // to the last bit
    EXPECT_EQ(b.run_end(150), 200u);
    EXPECT_EQ(b.run_begin(199), 133u);
}

// A holder's pending roots joined with the free ones (chunk/pmm.cpp): the
// same best fit as a walk of the merged bits.
TEST(RunBitmap, FindsTheBestFitOfTwoJoinedAsTheirMergeDoes) {
    std::mt19937_64 rng(17);
    for (size_t size : {1u, 64u, 65u, 200u, 3000u}) {
        RunBitmap free(size);
        Bitmap plain(size), pending(size);
        for (int step = 0; step < 3000; ++step) {
            const size_t first = rng() % size;
            const size_t count = std::min<size_t>(size - first, 1 + rng() % (rng() % 4 ? 6 : 120));
            const int what = static_cast<int>(rng() % 4);
            for (size_t i = first; i < first + count; ++i) {
                // Each bit is free, pending or neither, never both.
                if (what == 0 && !plain.test(i) && !pending.test(i)) {
                    free.set(i);
                    plain.set(i);
                } else if (what == 1 && !plain.test(i) && !pending.test(i)) {
                    pending.set(i);
                } else if (what == 2 && plain.test(i)) {
                    free.clear(i);
                    plain.clear(i);
                } else if (what == 3 && pending.test(i)) {
                    pending.clear(i);
                }
            }
            Bitmap merged = plain;
            merged.merge(pending);
            for (size_t n : {size_t(1), size_t(2), 1 + rng() % 8, 1 + rng() % 200})
                ASSERT_EQ(find_best_joined_run(free, pending, n), merged.find_best_run(n))
                    << "size " << size << " step " << step << " n " << n;
        }
    }
}
