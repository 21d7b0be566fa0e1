// A bitmap whose runs of set bits are also kept in bins by length, so that
// the best fit (the shortest run of at least n set bits, the lowest of
// equals) is a look at a mask and a bin, where Bitmap::find_best_run walks
// every run (O(words + runs)).
//
// The PMM's free root chunks are one: every 2M-chunk allocation that is not
// a stream's asks for the best fit among them, and on a GPU of many free
// runs the walk was the largest cost of replaying a training trace
// (docs/pmm.md).
//
// A bin is a bitmap of the first bits of its runs: one bin per length below
// kExact, where the lowest first bit of the shortest non-empty bin that
// fits is the answer; above, one bin per power of two, walked for the best
// of its runs (few: a run of 32 or more takes 32 bits). Setting or clearing
// a range joins or cuts the runs around it: a few bit operations and word
// scans over the runs it touches. Nothing is allocated after construction.
// An ordered set of (length, first) did the same in O(log runs), and was
// slower than the walk it replaced: each update was node allocations and
// rebalancing, and updates outnumber searches.
//
// Memory: about (kExact + log2(bits)) bits per bit.
//
// Thread safety: none; the owner's lock covers it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/bitmap.h"

namespace uvm {

class RunBitmap {
public:
    static constexpr size_t npos = Bitmap::npos;

    explicit RunBitmap(size_t bits);

    size_t size() const { return bits_.size(); }
    size_t count() const { return bits_.count(); }
    bool test(size_t i) const { return bits_.test(i); }
    // The bits themselves, for walks and joined views (Bitmap::merge).
    const Bitmap &bits() const { return bits_; }

    // Bits [first, first + count) were all clear; joins the runs beside them.
    void set_range(size_t first, size_t count);
    // Bits [first, first + count) were all set; cuts the run that held them.
    void clear_range(size_t first, size_t count);
    void set(size_t i) { set_range(i, 1); }
    void clear(size_t i) { clear_range(i, 1); }

    // As Bitmap::find_best_run, the same answer: the first bit of the
    // shortest run of at least n set bits, the lowest of equals; npos if none.
    size_t find_best_run(size_t n) const;
    // The same among the runs for which keep(first, end) is true; *length
    // gets the run's length where one is found.
    template <typename Keep>
    size_t find_best_run_if(size_t n, Keep keep, size_t *length) const;
    // The length of the longest run (0: none).
    size_t longest_run() const;
    size_t runs() const { return runs_; }

    // Whether the bins hold exactly the bitmap's runs. For tests: O(words + runs).
    bool check() const;

private:
    static constexpr size_t kExact = 32;  // a power of two
    static size_t bin_of(size_t length);
    void add_run(size_t first, size_t end);
    void remove_run(size_t first, size_t end);

    Bitmap bits_;
    std::vector<Bitmap> starts_;  // by bin: the first bits of its runs
    Bitmap nonempty_;             // bit b: bin b has a run
    size_t runs_ = 0;
};

template <typename Keep>
size_t RunBitmap::find_best_run_if(size_t n, Keep keep, size_t *length) const {
    // Every run of a higher bin is longer than every run of a lower one: the
    // first bin at or above n's with a run that fits has the best fit.
    for (size_t b = nonempty_.find_next(bin_of(n)); b != npos; b = nonempty_.find_next(b + 1)) {
        const Bitmap &starts = starts_[b];
        size_t best = npos, best_len = ~size_t(0);
        for (size_t i = starts.find_first(); i != npos; i = starts.find_next(i + 1)) {
            const size_t end = bits_.run_end(i), len = end - i;
            if (len >= n && len < best_len && keep(i, end)) {
                best = i;
                best_len = len;
                if (b < kExact || len == n)
                    break;  // the lowest of the shortest in this bin
            }
        }
        if (best != npos) {
            *length = best_len;
            return best;
        }
    }
    return npos;
}

// The best fit for n (the shortest run of at least n, the lowest of equals)
// among the runs of `a` and `b` joined (no bit set in both): what
// Bitmap::find_best_run finds in their merge, without making it. The runs
// that hold bits of `b` are walked (few where `b` is a holder's pending
// roots: pmm.h); of `a`'s own, the index finds the best that touches no bit
// of `b`. npos if none.
size_t find_best_joined_run(const RunBitmap &a, const Bitmap &b, size_t n);

}  // namespace uvm
