#include "common/run_bitmap.h"

#include <algorithm>

#include "common/assert.h"

namespace uvm {

// Lengths below kExact have a bin each; then one per power of two.
size_t RunBitmap::bin_of(size_t length) {
    UVM_ASSERT(length >= 1);
    if (length < kExact)
        return length;
    return kExact + static_cast<size_t>(63 - __builtin_clzll(length)) - static_cast<size_t>(__builtin_ctzll(kExact));
}

RunBitmap::RunBitmap(size_t bits) : bits_(bits) {
    const size_t bins = bits ? bin_of(bits) + 1 : 1;
    UVM_ASSERT(bins <= 128);
    starts_.reserve(bins);
    for (size_t b = 0; b < bins; ++b)
        starts_.emplace_back(b == 0 ? 0 : bits);  // bin 0 (length 0) holds nothing
}

size_t RunBitmap::next_bin(size_t from) const {
    for (size_t w = from / 64; w < 2; ++w) {
        uint64_t m = nonempty_[w];
        if (w == from / 64)
            m &= ~uint64_t(0) << (from % 64);
        if (m)
            return w * 64 + static_cast<size_t>(__builtin_ctzll(m));
    }
    return npos;
}

void RunBitmap::add_run(size_t first, size_t end) {
    UVM_ASSERT(first < end);
    const size_t b = bin_of(end - first);
    starts_[b].set(first);
    nonempty_[b / 64] |= uint64_t(1) << (b % 64);
    runs_++;
}

void RunBitmap::remove_run(size_t first, size_t end) {
    UVM_ASSERT(first < end && runs_ > 0);
    const size_t b = bin_of(end - first);
    starts_[b].clear(first);  // asserts that it was there
    if (starts_[b].count() == 0)
        nonempty_[b / 64] &= ~(uint64_t(1) << (b % 64));
    runs_--;
}

void RunBitmap::set_range(size_t first, size_t count) {
    UVM_ASSERT(count > 0 && first + count <= bits_.size());
    size_t begin = first, end = first + count;
    if (first > 0 && bits_.test(first - 1)) {
        begin = bits_.run_begin(first - 1);
        remove_run(begin, first);
    }
    if (end < bits_.size() && bits_.test(end)) {
        const size_t after = bits_.run_end(end);
        remove_run(end, after);
        end = after;
    }
    bits_.set_range(first, count);  // asserts that they were clear
    add_run(begin, end);
}

void RunBitmap::clear_range(size_t first, size_t count) {
    UVM_ASSERT(count > 0 && first + count <= bits_.size() && bits_.test(first));
    const size_t begin = bits_.run_begin(first), end = bits_.run_end(first);
    UVM_ASSERT(first + count <= end);
    remove_run(begin, end);
    bits_.clear_range(first, count);
    if (begin < first)
        add_run(begin, first);
    if (first + count < end)
        add_run(first + count, end);
}

size_t RunBitmap::best_in_bin(size_t b, size_t n, size_t *length) const {
    const Bitmap &starts = starts_[b];
    size_t best = npos, best_len = ~size_t(0);
    for (size_t i = starts.find_first(); i != npos; i = starts.find_next(i + 1)) {
        const size_t len = bits_.run_end(i) - i;
        if (len >= n && len < best_len) {
            best = i;
            best_len = len;
            if (len == n)
                break;  // none shorter fits; later ones are higher
        }
    }
    *length = best_len;
    return best;
}

size_t RunBitmap::find_best_run(size_t n) const {
    UVM_ASSERT(n >= 1);
    // Every run of a higher bin is longer than every run of a lower one: the
    // first bin at or above n's with a run that fits has the best fit.
    for (size_t b = next_bin(bin_of(n)); b != npos; b = next_bin(b + 1)) {
        if (b < kExact)
            return starts_[b].find_first();  // all of length b >= n: the lowest
        size_t len = 0;
        const size_t at = best_in_bin(b, n, &len);
        if (at != npos)
            return at;
    }
    return npos;
}

size_t RunBitmap::longest_run() const {
    size_t top = npos;
    for (size_t b = next_bin(0); b != npos; b = next_bin(b + 1))
        top = b;
    if (top == npos)
        return 0;
    if (top < kExact)
        return top;
    size_t longest = 0;
    const Bitmap &starts = starts_[top];
    for (size_t i = starts.find_first(); i != npos; i = starts.find_next(i + 1))
        longest = std::max(longest, bits_.run_end(i) - i);
    return longest;
}

size_t find_best_joined_run(const RunBitmap &a, const Bitmap &b, size_t n) {
    UVM_ASSERT(n >= 1 && a.size() == b.size());
    const size_t size = a.size();
    size_t best = RunBitmap::npos, best_len = ~size_t(0);
    auto consider = [&](size_t first, size_t len) {
        if (len >= n && (len < best_len || (len == best_len && first < best))) {
            best = first;
            best_len = len;
        }
    };
    // Joined runs that hold bits of b: from each of b's runs not yet inside
    // one, out to both sides across a's and b's runs in turn.
    size_t covered = 0;
    b.for_each_run([&](size_t first, size_t end) {
        if (first < covered)
            return true;
        size_t lo = first, hi = end;
        for (;;) {
            if (lo > 0 && a.test(lo - 1))
                lo = a.bits().run_begin(lo - 1);
            else if (lo > 0 && b.test(lo - 1))
                lo = b.run_begin(lo - 1);
            else
                break;
        }
        for (;;) {
            if (hi < size && a.test(hi))
                hi = a.bits().run_end(hi);
            else if (hi < size && b.test(hi))
                hi = b.run_end(hi);
            else
                break;
        }
        consider(lo, hi - lo);
        covered = hi;
        return true;
    });
    // a's runs beside no bit of b are joined runs as they are.
    size_t len = 0;
    const size_t alone = a.find_best_run_if(
        n,
        [&](size_t first, size_t end) { return !(first > 0 && b.test(first - 1)) && !(end < size && b.test(end)); },
        &len);
    if (alone != RunBitmap::npos)
        consider(alone, len);
    return best;
}

bool RunBitmap::check() const {
    size_t seen = 0, listed = 0;
    bool all = true;
    bits_.for_each_run([&](size_t first, size_t end) {
        seen++;
        all = starts_[bin_of(end - first)].test(first);
        return all;
    });
    for (size_t b = 0; b < starts_.size(); ++b) {
        listed += starts_[b].count();
        all = all && ((nonempty_[b / 64] >> (b % 64)) & 1u) == (starts_[b].count() > 0);
    }
    return all && seen == runs_ && listed == runs_;
}

}  // namespace uvm
