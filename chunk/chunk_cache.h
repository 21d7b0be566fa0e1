// Per-thread caches of free chunks in front of a GPU's PMM, as the kernel keeps
// per-CPU page lists in front of its buddy allocator. An object of one pinned
// chunk takes its chunk from the calling thread's cache and gives it back
// there, so threads allocating at once do not queue on the PMM's lock; the
// caches refill from and drain to the PMM in batches.
//
// Each thread also counts the vidmem objects it allocates and frees on the
// GPU: one counter shared by every thread was what kept threads from scaling
// (docs/design.md, per-thread chunk caches).
//
// A cached chunk is allocated as far as the PMM knows. What must change the
// PMM whole (trim, a PMM that would grow or is out of memory, eviction, the
// GPU's teardown) calls flush_all() first, which gives every thread's chunks back. The statistics
// only read: each cache publishes how many chunks it holds (cached_bytes), so
// reading them changes nothing and never takes a thread's lock.
//
// Thread safety: every method may be called concurrently. A thread's cache
// has its own lock (a SpinLock), taken uncontended except by flush_all().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "chunk/pmm.h"
#include "uvm/uvm.h"

namespace uvm {

struct Mem;  // a parked object's record (uvm/mem.h): held and moved here, never looked into

class ChunkCaches {
public:
    explicit ChunkCaches(chunk::Pmm *pmm);
    ~ChunkCaches();  // flushes every cache into the PMM, which must outlive it
    ChunkCaches(const ChunkCaches &) = delete;
    ChunkCaches &operator=(const ChunkCaches &) = delete;

    // One pinned chunk of `size` for the calling thread. OUT_OF_MEMORY only
    // when the PMM has none even with every cache flushed. `grown`, where
    // given, gets the roots the PMM grew for it (for undo_alloc).
    // `objects`: where the chunk came, count that many objects made, as
    // count_object(objects) would, in the same visit of the thread's cache
    // (each visit is a thread-local access); never counted on failure.
    uvm_status_t alloc(uint64_t size, uint64_t *phys, std::vector<uint64_t> *grown = nullptr, int objects = 0);
    // Undo alloc exactly (a later step of the caller failed): the chunk goes
    // back, and where the call refilled the cache by growing the PMM, the
    // refill and the grown roots go back too.
    void undo_alloc(uint64_t size, uint64_t phys, const std::vector<uint64_t> &grown);
    // Chunks straight from the PMM (Pmm::alloc): from what it holds, else,
    // with every cache given back first, letting it grow (and stitch, where
    // `may_stitch`: Pmm::alloc).
    uvm_status_t pmm_alloc(uint64_t size, size_t count, bool evictable, uint64_t *out,
                           std::vector<uint64_t> *grown, chunk::Pmm::Holder holder = chunk::Pmm::Holder(),
                           bool may_stitch = false);
    // Give back a pinned chunk of `size` (from alloc or from the PMM), and
    // count `objects` (made: positive; freed: negative) as count_object would.
    void free(uint64_t size, uint64_t phys, int objects = 0);
    // The same, with the freed object's record (not null), kept with the
    // chunk for take_parked (the object is parked) under the key `owner`
    // (its client's, 0 for none); dropped whenever the chunk leaves the
    // cache otherwise.
    void park(uint64_t size, uint64_t phys, int objects, std::shared_ptr<Mem> &&record, uintptr_t owner);
    // The thread's most recently cached chunk of `size` with the record it
    // was parked with under `owner`, and count `objects` as alloc would;
    // false where that chunk has none, or another owner's (or there is no
    // chunk): nothing is taken.
    bool take_parked(uint64_t size, uint64_t *phys, std::shared_ptr<Mem> *record, int objects, uintptr_t owner = 0);
    // Bytes of the chunks parked under `owner` in every thread's cache, and
    // where given, *records their count. Changes nothing; holds each
    // thread's lock for a look at its 48 slots (as cached_chunks).
    uint64_t parked_bytes(uintptr_t owner, uint64_t *records = nullptr);
    // Give every thread's cached chunks back to the PMM.
    void flush_all();
    // Called before the PMM grows (pmm_alloc), after flush_all: memory that
    // layers above keep allocated for reuse of their own (objects parked on
    // streams, stream/stream.h) goes back to the PMM there. Set once, before
    // any allocation, or cleared (empty) at teardown.
    void set_before_growth(std::function<void()> hook) { before_growth_ = std::move(hook); }

    // Bytes of free chunks the threads hold now, by SizeIndex: counted as
    // pinned by the PMM, free to everyone else.
    void cached_bytes(uint64_t out[kSizeIndexCount]);
    // The same chunks by address, appended to out[] by SizeIndex: what
    // flush_all() would give back, for views of the PMM as it would be then
    // (pressure/fits.h). Changes nothing; holds each thread's lock for a copy
    // of at most its 48 addresses, so it can wait for one of that thread's
    // allocs or frees (cached_bytes never waits).
    void cached_chunks(std::vector<uint64_t> out[kSizeIndexCount]);

    // Count a vidmem object made (+1) or freed (-1) by the calling thread.
    void count_object(int delta);
    // Live vidmem objects, summed over the threads.
    uint64_t objects();

    struct Cache;  // one thread's chunks (defined in the .cpp)

private:
    Cache &mine();
    Cache &mine_slow();  // first use by this thread, or another instance used since

    chunk::Pmm *pmm_;
    const uint64_t key_;  // unique per instance for the process's lifetime
    std::mutex registry_lock_;
    std::vector<std::shared_ptr<Cache>> registry_;
    int64_t departed_objects_ = 0;  // counts of exited threads' caches (registry lock)
    std::function<void()> before_growth_;
};

}  // namespace uvm
