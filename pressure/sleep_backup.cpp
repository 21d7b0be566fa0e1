#include "pressure/sleep_backup.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "common/assert.h"
#include "common/host_guarded.h"
#include "common/sizes.h"
#include "topo/topology.h"
#include "uvm/manager.h"

namespace uvm {

SleepBackup::SleepBackup(Manager &mgr) : mgr_(mgr) {}

SleepBackup::~SleepBackup() { UVM_ASSERT(pieces_.empty() && workers_.empty()); }

uint32_t SleepBackup::default_threads(uint32_t threads) {
    if (threads == 0)
        threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
    return std::min(threads, kMaxThreads);
}

bool SleepBackup::charge(uint64_t bytes, uint64_t credit) {
    std::atomic<uint64_t> &held = mgr_.sleep_host_bytes;
    uint64_t now = held.load();
    for (;;) {
        const uint64_t limit = mgr_.sleep_host_limit.load();
        if (limit && now - std::min(now, credit) + bytes > limit)
            return false;
        if (held.compare_exchange_weak(now, now + bytes))
            return true;
    }
}

void SleepBackup::uncharge(uint64_t bytes) {
    UVM_ASSERT(mgr_.sleep_host_bytes.load() >= bytes);
    mgr_.sleep_host_bytes -= bytes;
}

uvm_status_t SleepBackup::make(Piece &p) {
    backend::Backend &b = mgr_.backend();
    backend::HostRequest request;
    request.size = p.size;
    // 2M chunks are transparent huge pages where the host allows: pinned in
    // a fraction of the time of base pages. A piece of less than a whole
    // 2 MiB (the last few KiB of a growth) takes base pages, to the byte.
    request.chunk_size = is_aligned(p.size, kPageSize2M) ? kPageSize2M : kPageSize4K;
    uvm_status_t status = host_guarded([&] { return b.sysmem_alloc(request, &p.host); });
    if (status != UVM_OK)
        return status;
    for (uint32_t g = 0; g < mgr_.gpu_count(); ++g) {
        status = host_guarded([&] { return b.sysmem_dma_map(g, p.host, &p.dma[g]); });
        if (status != UVM_OK) {
            while (g-- > 0)
                b.sysmem_dma_unmap(g, p.host, p.dma[g]);
            b.sysmem_free(&p.host);
            return status;
        }
    }
    return UVM_OK;
}

void SleepBackup::give_back(Piece &p) {
    backend::Backend &b = mgr_.backend();
    for (uint32_t g = 0; g < mgr_.gpu_count(); ++g)
        b.sysmem_dma_unmap(g, p.host, p.dma[g]);
    b.sysmem_free(&p.host);
}

void SleepBackup::work() {
    for (;;) {
        const size_t i = next_++;
        if (i >= pieces_.size())
            return;
        Piece &p = *pieces_[i];
        // After a failure the rest is not made: the growth is undone anyway.
        const uvm_status_t status = failed_.load() ? UVM_ERR_BACKEND : make(p);
        std::lock_guard<std::mutex> guard(lock_);
        p.status = status;
        p.ready = true;
        if (status != UVM_OK)
            failed_ = true;
        ready_.notify_all();
    }
}

uvm_status_t SleepBackup::start_growth(uint64_t bytes, uint32_t threads, uint64_t credit) {
    UVM_ASSERT(!growing_ && workers_.empty() && is_aligned(bytes, kPageSize4K));
    growth_first_ = pieces_.size();
    next_ = pieces_.size();
    failed_ = false;
    if (bytes == 0) {
        growing_ = true;
        return UVM_OK;
    }
    if (bytes > topo::host_memory_bytes(false))
        return UVM_ERR_OUT_OF_MEMORY;  // more than the host has: refused before anything is pinned
    // The pieces' books first: nothing to allocate once the workers run.
    const uint64_t piece = align_up(std::max(mgr_.sleep_piece_bytes.load(), kPageSize2M), kPageSize2M);
    const size_t count = static_cast<size_t>((bytes + piece - 1) / piece) + 1;
    const size_t want = std::min<size_t>(default_threads(threads), count);
    try {
        pieces_.reserve(pieces_.size() + count);
        workers_.reserve(want);
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
    if (!charge(bytes, credit))
        return UVM_ERR_HOST_LIMIT;
    uint64_t start = held_.load();
    for (uint64_t left = bytes; left;) {
        // Whole pieces, then the whole 2 MiB of the rest, then its last KiB.
        uint64_t size = left >= piece ? piece : left & ~(kPageSize2M - 1);
        if (size == 0)
            size = left;
        std::unique_ptr<Piece> p;
        try {
            p = std::make_unique<Piece>();
        } catch (const std::bad_alloc &) {
            pieces_.resize(growth_first_);
            uncharge(bytes);
            return UVM_ERR_NO_HOST_MEMORY;
        }
        p->start = start;
        p->size = size;
        pieces_.push_back(std::move(p));
        start += size;
        left -= size;
    }
    held_ += bytes;
    growing_ = true;
    // One piece: made here and now (no copy to overlap it with that a
    // thread would pay for).
    if (pieces_.size() - growth_first_ == 1) {
        work();
        return UVM_OK;
    }
    for (size_t t = 0; t < want; ++t) {
        try {
            workers_.emplace_back([this] { work(); });
        } catch (const std::system_error &) {
            break;  // the system has no more threads: those started make every piece
        } catch (const std::bad_alloc &) {
            // No host memory for a thread's state: no more for the pieces.
            failed_ = true;
            finish_growth();
            undo_growth();
            return UVM_ERR_NO_HOST_MEMORY;
        }
    }
    if (workers_.empty())
        work();  // no thread at all: here
    return UVM_OK;
}

uvm_status_t SleepBackup::finish_growth() {
    for (std::thread &t : workers_)
        t.join();
    workers_.clear();
    uvm_status_t status = UVM_OK;
    for (size_t i = growth_first_; i < pieces_.size() && status == UVM_OK; ++i)
        status = pieces_[i]->status;
    if (status != UVM_OK)
        undo_growth();
    return status;
}

void SleepBackup::undo_growth() {
    UVM_ASSERT(workers_.empty());
    if (!growing_)
        return;
    growing_ = false;
    uint64_t bytes = 0;
    for (size_t i = growth_first_; i < pieces_.size(); ++i) {
        Piece &p = *pieces_[i];
        if (p.ready && p.status == UVM_OK)
            give_back(p);
        bytes += p.size;
    }
    pieces_.resize(growth_first_);
    held_ -= bytes;
    uncharge(bytes);
}

uvm_status_t SleepBackup::grow(uint64_t bytes, uint32_t threads, uint64_t credit) {
    uvm_status_t status = start_growth(bytes, threads, credit);
    if (status == UVM_OK)
        status = finish_growth();
    if (status == UVM_OK)
        commit_growth();
    return status;
}

uvm_status_t SleepBackup::at(uint32_t gpu, uint64_t offset, uint64_t *dma, uint64_t *contiguous) {
    // The piece holding `offset`: the last that starts at or before it.
    auto it = std::upper_bound(pieces_.begin(), pieces_.end(), offset,
                               [](uint64_t o, const std::unique_ptr<Piece> &p) { return o < p->start; });
    UVM_ASSERT(it != pieces_.begin());
    Piece &p = **(it - 1);
    UVM_ASSERT(offset < p.start + p.size);
    {
        std::unique_lock<std::mutex> guard(lock_);
        ready_.wait(guard, [&] { return p.ready; });
        if (p.status != UVM_OK)
            return p.status;
    }
    *dma = p.dma[gpu] + (offset - p.start);
    *contiguous = p.start + p.size - offset;
    return UVM_OK;
}

size_t SleepBackup::pieces_within(uint64_t bytes, uint64_t *held) const {
    size_t n = 0;
    uint64_t sum = 0;
    while (n < pieces_.size() && sum + pieces_[n]->size <= bytes)
        sum += pieces_[n++]->size;
    *held = sum;
    return n;
}

void SleepBackup::release_pieces(size_t first, size_t end, uint32_t threads) {
    UVM_ASSERT(!growing_ && first <= end && end <= pieces_.size());
    uint64_t bytes = 0;
    for (size_t i = first; i < end; ++i)
        bytes += pieces_[i]->size;
    // Unpinning costs as pinning does: as many threads.
    std::atomic<size_t> next{first};
    auto work = [&] {
        for (size_t i; (i = next++) < end;)
            give_back(*pieces_[i]);
    };
    std::vector<std::thread> helpers;
    const size_t want = std::min<size_t>(default_threads(threads), end - first);
    for (size_t t = 1; t < want; ++t) {
        try {
            helpers.emplace_back(work);
        } catch (const std::exception &) {  // no thread to be had: this one does the rest
            break;
        }
    }
    work();
    for (std::thread &t : helpers)
        t.join();
    pieces_.erase(pieces_.begin() + static_cast<std::ptrdiff_t>(first), pieces_.begin() + static_cast<std::ptrdiff_t>(end));
    for (size_t i = first; i < pieces_.size(); ++i)
        pieces_[i]->start -= bytes;
    held_ -= bytes;
    uncharge(bytes);
}

uint64_t SleepBackup::shrink_to(uint64_t bytes, uint32_t threads) {
    size_t end = pieces_.size();
    uint64_t held = held_.load();
    while (end > 0 && held - pieces_[end - 1]->size >= bytes)
        held -= pieces_[--end]->size;
    release_pieces(end, pieces_.size(), threads);
    return held_.load();
}

void SleepBackup::release() {
    UVM_ASSERT(!growing_ && workers_.empty());
    shrink_to(0, 1);
    UVM_ASSERT(held_.load() == 0);
}

}  // namespace uvm
