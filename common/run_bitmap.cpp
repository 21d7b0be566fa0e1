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

RunBitmap::RunBitmap(size_t bits) : bits_(bits), nonempty_(bits ? bin_of(bits) + 1 : 1) {
    starts_.reserve(nonempty_.size());
    for (size_t b = 0; b < nonempty_.size(); ++b)
        starts_.emplace_back(b == 0 ? 0 : bits);  // bin 0 (length 0) holds nothing
}

void RunBitmap::add_run(size_t first, size_t end) {
    UVM_ASSERT(first < end);
    const size_t b = bin_of(end - first);
    starts_[b].set(first);
    if (!nonempty_.test(b))
        nonempty_.set(b);
    runs_++;
}

void RunBitmap::remove_run(size_t first, size_t end) {
    UVM_ASSERT(first < end && runs_ > 0);
    const size_t b = bin_of(end - first);
    starts_[b].clear(first);  // asserts that it was there
    if (starts_[b].count() == 0)
        nonempty_.clear(b);
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

size_t RunBitmap::find_best_run(size_t n) const {
    UVM_ASSERT(n >= 1);
    size_t length = 0;
    return find_best_run_if(n, [](size_t, size_t) { return true; }, &length);
}

size_t RunBitmap::longest_run() const {
    if (nonempty_.count() == 0)
        return 0;
    size_t top = 0;  // the highest non-empty bin
    for (size_t b = nonempty_.find_first(); b != npos; b = nonempty_.find_next(b + 1))
        top = b;
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
        all = all && nonempty_.test(b) == (starts_[b].count() > 0);
    }
    return all && seen == runs_ && listed == runs_;
}

}  // namespace uvm
