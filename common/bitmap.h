// A bitmap that finds the lowest set bit and the lowest run of n set bits
// with word operations, skipping empty words through a summary level (one
// bit per word). The PMM keeps its free root chunks in one, the backends their
// ready ones, so that "n adjacent free root chunks, lowest address first" is
// a walk over words, never over chunks.
//
// Thread safety: none; the owner's lock covers it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace uvm {

class Bitmap {
public:
    static constexpr size_t npos = ~size_t(0);

    explicit Bitmap(size_t bits = 0) { resize(bits); }
    void resize(size_t bits);
    size_t size() const { return bits_; }

    bool test(size_t i) const { return (words_[i / 64] >> (i % 64)) & 1u; }
    void set(size_t i);
    void clear(size_t i);
    void set_range(size_t first, size_t count);
    void clear_range(size_t first, size_t count);
    size_t count() const { return count_; }

    // Lowest set bit at or above `from`, or npos.
    size_t find_next(size_t from) const;
    size_t find_first() const { return find_next(0); }
    // Lowest i such that bits [i, i + n) are all set, or npos. n >= 1.
    size_t find_run(size_t n) const;
    // The start of the shortest run of at least n set bits (the lowest of
    // equals), npos if none: best fit, which keeps long runs for long requests.
    // O(words + runs).
    size_t find_best_run(size_t n) const;
    // The length of the longest run of set bits (0: none). O(words + runs).
    size_t longest_run() const;
    // Set every bit that is set in `other` (no larger than this one): a
    // word at a time, for "free here or there" views (the OOM report's fits).
    void merge(const Bitmap &other);
    // f(first, end) for each run of set bits [first, end), lowest first,
    // until f returns false. O(words + runs).
    template <typename F>
    void for_each_run(F f) const {
        for (size_t i = find_next(0); i != npos;) {
            const size_t end = run_end(i);
            if (!f(i, end))
                return;
            i = end < bits_ ? find_next(end) : npos;
        }
    }

    // Lowest i such that bits [i, i + n) of `mask` (w bits wide) are all set;
    // -1 if none. For the PMM's per-chunk masks (w <= 64).
    static int find_run_in_word(uint64_t mask, unsigned n);
    // Length of the longest run of set bits of `mask`.
    static unsigned longest_run(uint64_t mask);

    // The run of set bits that holds set bit i: [run_begin(i), run_end(i)).
    // O(run length / 64).
    size_t run_begin(size_t i) const;
    size_t run_end(size_t i) const;

private:
    size_t next_nonzero_word(size_t from) const;

    size_t bits_ = 0;
    size_t count_ = 0;
    std::vector<uint64_t> words_;
    std::vector<uint64_t> summary_;  // bit w: words_[w] != 0
};

}  // namespace uvm
