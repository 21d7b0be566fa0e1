// Tests of the run-finding bitmap, against a plain search over bools.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "common/bitmap.h"

using uvm::Bitmap;

namespace {

size_t slow_run(const std::vector<bool> &bits, size_t n) {
    size_t len = 0;
    for (size_t i = 0; i < bits.size(); ++i) {
        len = bits[i] ? len + 1 : 0;
        if (len == n)
            return i + 1 - n;
    }
    return Bitmap::npos;
}

// The shortest run of at least n, the lowest of equals.
size_t slow_best_run(const std::vector<bool> &bits, size_t n) {
    size_t best = Bitmap::npos, best_len = ~size_t(0);
    for (size_t i = 0; i < bits.size();) {
        if (!bits[i]) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < bits.size() && bits[j])
            ++j;
        if (j - i >= n && j - i < best_len) {
            best = i;
            best_len = j - i;
        }
        i = j;
    }
    return best;
}

size_t slow_longest_run(const std::vector<bool> &bits) {
    size_t len = 0, longest = 0;
    for (bool b : bits) {
        len = b ? len + 1 : 0;
        longest = std::max(longest, len);
    }
    return longest;
}

}  // namespace

TEST(Bitmap, LongestRunAndMergeAgreeWithAPlainSearch) {
    std::mt19937_64 rng(23);
    for (size_t size : {1u, 63u, 64u, 65u, 130u, 5000u}) {
        Bitmap a(size), b(size);
        std::vector<bool> ra(size, false), rb(size, false);
        for (int step = 0; step < 500; ++step) {
            Bitmap &m = rng() % 2 ? a : b;
            std::vector<bool> &r = &m == &a ? ra : rb;
            const size_t i = rng() % size;
            for (size_t j = i; j < std::min(size, i + rng() % 90); ++j)
                if (rng() % 4 && !r[j]) {
                    m.set(j);
                    r[j] = true;
                } else if (r[j] && rng() % 2) {
                    m.clear(j);
                    r[j] = false;
                }
            ASSERT_EQ(a.longest_run(), slow_longest_run(ra)) << "size " << size;
            if (step % 50 == 0) {
                Bitmap both = a;
                both.merge(b);
                std::vector<bool> rboth(size);
                size_t count = 0;
                for (size_t j = 0; j < size; ++j)
                    count += rboth[j] = ra[j] || rb[j];
                ASSERT_EQ(both.count(), count);
                ASSERT_EQ(both.longest_run(), slow_longest_run(rboth));
                ASSERT_EQ(both.find_run(1), slow_run(rboth, 1));
            }
        }
    }
    // A smaller bitmap merges into the low bits of a larger one.
    Bitmap big(300), small(70);
    small.set_range(60, 10);
    big.set_range(70, 5);
    big.merge(small);
    EXPECT_EQ(big.longest_run(), 15u);
    EXPECT_EQ(big.count(), 15u);
    EXPECT_EQ(Bitmap(10).longest_run(), 0u);
}

TEST(Bitmap, FindsTheBestFitAsAPlainSearchDoes) {
    std::mt19937_64 rng(11);
    for (size_t size : {1u, 64u, 65u, 130u, 5000u}) {
        Bitmap b(size);
        std::vector<bool> ref(size, false);
        for (int step = 0; step < 2000; ++step) {
            const size_t i = rng() % size;
            if (rng() % 2) {
                for (size_t j = i; j < std::min(size, i + rng() % 70); ++j)
                    if (!ref[j]) {
                        b.set(j);
                        ref[j] = true;
                    }
            } else {
                for (size_t j = i; j < std::min(size, i + rng() % 5); ++j)
                    if (ref[j]) {
                        b.clear(j);
                        ref[j] = false;
                    }
            }
            const size_t n = 1 + rng() % 100;
            ASSERT_EQ(b.find_best_run(n), slow_best_run(ref, n)) << "size " << size << " n " << n;
        }
    }
    Bitmap b(200);
    b.set_range(0, 10);   // a long run first
    b.set_range(20, 3);   // then a tight one
    b.set_range(199, 1);  // a single bit at the very end
    EXPECT_EQ(b.find_best_run(3), 20u);
    EXPECT_EQ(b.find_best_run(1), 199u);
    EXPECT_EQ(b.find_best_run(4), 0u);
    EXPECT_EQ(b.find_best_run(11), Bitmap::npos);
}

TEST(Bitmap, FindsRunsAsAPlainSearchDoes) {
    std::mt19937_64 rng(5);
    for (size_t size : {1u, 63u, 64u, 65u, 200u, 5000u}) {
        Bitmap b(size);
        std::vector<bool> ref(size, false);
        for (int step = 0; step < 3000; ++step) {
            const size_t i = rng() % size;
            // Mostly set in long stretches, so that long runs exist.
            if (rng() % 3) {
                for (size_t j = i; j < std::min(size, i + rng() % 90); ++j)
                    if (!ref[j]) {
                        b.set(j);
                        ref[j] = true;
                    }
            } else if (ref[i]) {
                b.clear(i);
                ref[i] = false;
            }
            const size_t n = 1 + rng() % 150;
            ASSERT_EQ(b.find_run(n), slow_run(ref, n)) << "size " << size << " n " << n;
            ASSERT_EQ(b.find_first(), slow_run(ref, 1));
            const size_t from = rng() % size;
            size_t want = Bitmap::npos;
            for (size_t j = from; j < size && want == Bitmap::npos; ++j)
                if (ref[j])
                    want = j;
            ASSERT_EQ(b.find_next(from), want);
        }
        size_t count = 0;
        for (bool v : ref)
            count += v;
        EXPECT_EQ(b.count(), count);
    }
}

TEST(Bitmap, WordHelpers) {
    EXPECT_EQ(Bitmap::find_run_in_word(0b0111011100u, 3), 2);
    EXPECT_EQ(Bitmap::find_run_in_word(0b0111011100u, 4), -1);
    EXPECT_EQ(Bitmap::find_run_in_word(~uint64_t(0), 64), 0);
    EXPECT_EQ(Bitmap::find_run_in_word(0xFFFF0000u, 16), 16);
    EXPECT_EQ(Bitmap::longest_run(0b0111011100u), 3u);
    EXPECT_EQ(Bitmap::longest_run(0), 0u);
    EXPECT_EQ(Bitmap::longest_run(~uint64_t(0)), 64u);
}

TEST(Bitmap, RangesSetAndClearWordsAndEnds) {
    std::mt19937_64 rng(11);
    for (int round = 0; round < 200; ++round) {
        const size_t size = 1 + rng() % 700;
        Bitmap b(size);
        std::vector<bool> ref(size, false);
        const size_t first = rng() % size, count = 1 + rng() % (size - first);
        b.set_range(first, count);
        for (size_t i = first; i < first + count; ++i)
            ref[i] = true;
        const size_t cfirst = first + rng() % count;
        const size_t ccount = 1 + rng() % (first + count - cfirst);
        b.clear_range(cfirst, ccount);
        for (size_t i = cfirst; i < cfirst + ccount; ++i)
            ref[i] = false;
        size_t n = 0;
        for (size_t i = 0; i < size; ++i) {
            ASSERT_EQ(b.test(i), ref[i]) << "size " << size << " bit " << i;
            n += ref[i];
        }
        EXPECT_EQ(b.count(), n);
        EXPECT_EQ(b.find_first(), slow_run(ref, 1));
        EXPECT_EQ(b.find_run(count), slow_run(ref, count));
    }
}

TEST(Bitmap, RangesSetAndClearAsBitsDo) {
    std::mt19937_64 rng(31);
    for (size_t size : {1u, 63u, 64u, 65u, 130u, 700u}) {
        Bitmap b(size);
        std::vector<bool> ref(size, false);
        for (int step = 0; step < 2000; ++step) {
            const size_t first = rng() % size;
            const size_t count = 1 + rng() % std::min<size_t>(size - first, 1 + rng() % 150);
            const bool to = rng() % 2 == 0;
            bool all_other = true;  // set_range wants them all clear, clear_range all set
            for (size_t i = first; i < first + count; ++i)
                all_other = all_other && ref[i] != to;
            if (!all_other)
                continue;
            if (to)
                b.set_range(first, count);
            else
                b.clear_range(first, count);
            for (size_t i = first; i < first + count; ++i)
                ref[i] = to;
            ASSERT_EQ(b.count(), static_cast<size_t>(std::count(ref.begin(), ref.end(), true)));
            for (size_t i = 0; i < size; ++i)
                ASSERT_EQ(b.test(i), ref[i]) << "size " << size << " bit " << i;
            const size_t from = rng() % size;
            size_t want = Bitmap::npos;
            for (size_t i = from; i < size && want == Bitmap::npos; ++i)
                if (ref[i])
                    want = i;
            ASSERT_EQ(b.find_next(from), want) << "the summary follows the words";
        }
    }
}
