#include "common/bitmap.h"

#include <algorithm>

#include "common/assert.h"

namespace uvm {

void Bitmap::resize(size_t bits) {
    bits_ = bits;
    count_ = 0;
    words_.assign((bits + 63) / 64, 0);
    summary_.assign((words_.size() + 63) / 64, 0);
}

void Bitmap::set(size_t i) {
    UVM_ASSERT(i < bits_ && !test(i));
    words_[i / 64] |= uint64_t(1) << (i % 64);
    summary_[i / 4096] |= uint64_t(1) << ((i / 64) % 64);
    count_++;
}

void Bitmap::clear(size_t i) {
    UVM_ASSERT(i < bits_ && test(i));
    uint64_t &w = words_[i / 64];
    w &= ~(uint64_t(1) << (i % 64));
    if (w == 0)
        summary_[i / 4096] &= ~(uint64_t(1) << ((i / 64) % 64));
    count_--;
}

namespace {

// Bits [i, min(end, the next word boundary)) of i's word, and how many.
uint64_t word_mask(size_t i, size_t end, size_t *n) {
    const size_t lo = i % 64;
    *n = std::min<size_t>(64 - lo, end - i);
    return (*n == 64 ? ~uint64_t(0) : ((uint64_t(1) << *n) - 1)) << lo;
}

}  // namespace

// A word at a time, the partial ones at the ends by mask.
void Bitmap::set_range(size_t first, size_t count) {
    const size_t end = first + count;
    UVM_ASSERT(end <= bits_);
    for (size_t i = first, n = 0; i < end; i += n) {
        const size_t w = i / 64;
        const uint64_t mask = word_mask(i, end, &n);
        UVM_ASSERT((words_[w] & mask) == 0);
        words_[w] |= mask;
        summary_[w / 64] |= uint64_t(1) << (w % 64);
        count_ += n;
    }
}

void Bitmap::clear_range(size_t first, size_t count) {
    const size_t end = first + count;
    UVM_ASSERT(end <= bits_);
    for (size_t i = first, n = 0; i < end; i += n) {
        const size_t w = i / 64;
        const uint64_t mask = word_mask(i, end, &n);
        UVM_ASSERT((words_[w] & mask) == mask);
        words_[w] &= ~mask;
        if (words_[w] == 0)
            summary_[w / 64] &= ~(uint64_t(1) << (w % 64));
        count_ -= n;
    }
}

size_t Bitmap::next_nonzero_word(size_t from) const {
    for (size_t s = from / 64; s < summary_.size(); ++s) {
        uint64_t bits = summary_[s];
        if (s == from / 64)
            bits &= ~uint64_t(0) << (from % 64);
        if (bits)
            return s * 64 + static_cast<size_t>(__builtin_ctzll(bits));
    }
    return npos;
}

size_t Bitmap::find_next(size_t from) const {
    if (from >= bits_)
        return npos;
    const uint64_t here = words_[from / 64] & (~uint64_t(0) << (from % 64));
    if (here)
        return (from / 64) * 64 + static_cast<size_t>(__builtin_ctzll(here));
    const size_t w = next_nonzero_word(from / 64 + 1);
    return w == npos ? npos : w * 64 + static_cast<size_t>(__builtin_ctzll(words_[w]));
}

int Bitmap::find_run_in_word(uint64_t mask, unsigned n) {
    UVM_ASSERT(n >= 1 && n <= 64);
    // After the loop, bit i of r is set iff bits i..i+n-1 of mask are.
    uint64_t r = mask;
    for (unsigned len = 1; len < n && r;) {
        const unsigned step = len < n - len ? len : n - len;
        r &= r >> step;
        len += step;
    }
    return r ? __builtin_ctzll(r) : -1;
}

unsigned Bitmap::longest_run(uint64_t mask) {
    unsigned n = 0;
    for (; mask; ++n)
        mask &= mask << 1;
    return n;
}

size_t Bitmap::find_run(size_t n) const {
    UVM_ASSERT(n >= 1);
    size_t start = 0, len = 0;  // the run of set bits that reaches the current word
    for (size_t w = next_nonzero_word(0); w != npos; w = next_nonzero_word(w + 1)) {
        const uint64_t word = words_[w];
        if (len && start + len != w * 64)
            len = 0;  // an empty word lay between
        if (word == ~uint64_t(0)) {
            if (!len)
                start = w * 64;
            len += 64;
            if (len >= n)
                return start;
            continue;
        }
        // The run from the previous words, continued by this word's low ones.
        const size_t low = static_cast<size_t>(__builtin_ctzll(~word));
        if (len && len + low >= n)
            return start;
        if (n <= 64) {
            const int at = find_run_in_word(word, static_cast<unsigned>(n));
            if (at >= 0)
                return w * 64 + static_cast<size_t>(at);
        }
        // The run of high ones carries into the next word.
        const size_t high = word >> 63 ? static_cast<size_t>(__builtin_clzll(~word)) : 0;
        start = w * 64 + 64 - high;
        len = high;
    }
    return npos;
}

size_t Bitmap::run_end(size_t i) const {
    // The first clear bit at or after i.
    const size_t words = words_.size();
    size_t w = i / 64;
    uint64_t clear = ~words_[w] & (~uint64_t(0) << (i % 64));
    while (!clear && ++w < words)
        clear = ~words_[w];
    return w < words ? std::min(bits_, w * 64 + static_cast<size_t>(__builtin_ctzll(clear))) : bits_;
}

size_t Bitmap::run_begin(size_t i) const {
    UVM_ASSERT(i < bits_ && test(i));
    // The highest clear bit below i, plus one.
    size_t w = i / 64;
    uint64_t clear = ~words_[w] & ((uint64_t(1) << (i % 64)) - 1);
    while (!clear && w > 0)
        clear = ~words_[--w];
    return clear ? w * 64 + 64 - static_cast<size_t>(__builtin_clzll(clear)) : 0;
}

size_t Bitmap::find_best_run(size_t n) const {
    UVM_ASSERT(n >= 1);
    size_t best = npos, best_len = ~size_t(0);
    for_each_run([&](size_t first, size_t end) {
        const size_t len = end - first;
        if (len >= n && len < best_len) {
            best = first;
            best_len = len;
        }
        return best_len != n;  // exact: none shorter fits
    });
    return best;
}

size_t Bitmap::longest_run() const {
    size_t longest = 0;
    for_each_run([&](size_t first, size_t end) {
        longest = std::max(longest, end - first);
        return true;
    });
    return longest;
}

void Bitmap::merge(const Bitmap &other) {
    UVM_ASSERT(other.bits_ <= bits_);
    for (size_t w = 0; w < other.words_.size(); ++w) {
        const uint64_t added = other.words_[w] & ~words_[w];
        if (!added)
            continue;
        words_[w] |= added;
        summary_[w / 64] |= uint64_t(1) << (w % 64);
        count_ += static_cast<size_t>(__builtin_popcountll(added));
    }
}

}  // namespace uvm
