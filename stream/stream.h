// Streams and trackers: which queued GPU work still uses an object, and
// memory that waits for that work before anyone else may have it (after
// nvidia-uvm's trackers on chunks, and cudaFreeAsync's stream-ordered pools).
//
//  - An object records the streams whose work uses it (Mem::users). Recording
//    costs no driver call: the fence, a point in the stream after all work
//    queued so far, is taken when the object is freed.
//  - A free whose fences are not all done retires the object: the handle goes
//    at once, the object (mappings and memory) is released when the fences
//    are done. Nothing blocks.
//  - A stream-ordered free (uvm_mem_free_async on stream S) first makes S wait
//    for the other streams' fences, so that everything that used the object
//    comes before S's current point. A vidmem object whose mappings are views
//    (mem_detach_run) then leaves its chunks with S: an allocation on S
//    takes them again at once (S orders the work), and they go back to the
//    PMM when a fence taken after the free is done. Runs of 2M chunks of S's
//    GPU become pending roots of S in the GPU's PMM (chunk/pmm.h), which an
//    allocation on S takes in any run, joined with free roots; others (of
//    64K and 4K chunks, remappable ones, another GPU's) wait in S's pool,
//    for a later request of the same kind. Any other object retires on S's
//    fence.
//  - An object that uvm_mem_alloc_gpu made on S (its kernel mapping its
//    only one, no client, tag nor other flag) and that is freed on S is
//    parked whole there instead: its chunks, mapping and record wait for
//    S's next allocation of the same chunk size and count, which takes them
//    with no PMM, no mapping and no new record (Streams::park, alloc_parked;
//    the kernel address lookup renames its range in one store:
//    uvm/address_map.h), as PyTorch's caching allocator reuses a block, at
//    any size. Parked objects are pool memory: they become pooled runs
//    wherever pooled memory must come back (before the PMM grows, trim, the
//    OOM path, synchronize, destroy), and none is parked under a release
//    threshold. A long one (over 8 MiB) also goes when a long request of
//    another size comes on S (Streams::unpark_long): it would otherwise hold
//    a stretch of roots that the request grows beside (docs/design.md).
//  - Pooled and retiring memory stays allocated in the PMM, so trim cannot
//    give it back to the driver while work may still touch it.
//  - A stream that captures (a CUDA graph: backend/stream_capability.h)
//    records its work rather than running it, and the driver refuses, and
//    breaks the capture over, a fence taken there and later queried, a
//    synchronize of it, and a wait of it on work outside the capture. So no
//    fence is taken on a capturing stream: a fence asked of it is one to be
//    taken once the capture has ended (Fence::after_capture), its pooled
//    runs stay unfenced meanwhile (its own allocations still take them), and
//    an ordered free that cannot be ordered (the freeing stream captures and
//    another stream used the object) retires the object on those fences
//    instead, as PyTorch's allocator defers its events until no capture is
//    under way. Whether a stream captures is asked of the backend only where
//    the path would do one of those things, never on the parked or pooled
//    reuse path.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "chunk/pmm.h"
#include "common/handle_table.h"
#include "uvm/events.h"
#include "stream/parked_objects.h"
#include "stream/private_pool.h"
#include "uvm/mem.h"
#include "uvm/uvm.h"

namespace uvm {

class Manager;
struct Client;

struct Stream : std::enable_shared_from_this<Stream> {
    uint64_t id = 0;
    uint32_t gpu = 0;
    void *backend = nullptr;  // the backend's stream
    // Guards every backend call on the stream, `destroyed` and the pool.
    std::mutex lock;
    bool destroyed = false;  // the backend's stream is gone; its fences are all done

    struct Pooled {
        ReusedRun run;
        uint64_t fence = 0;
        // Whether `fence` was taken: a fence's value may be 0 (sim: nothing
        // ever queued on the stream), so 0 cannot mean "not fenced yet".
        bool fenced = false;
        // Cut from a long run (over 8 MiB): given to long requests only,
        // what is left of it too (chunk/pmm.h).
        bool long_run = false;
    };
    // Oldest first. Runs are fenced in order, so fences never decrease
    // along it and the unfenced runs are its tail.
    std::vector<Pooled> pool;
    uint64_t pool_bytes = 0;
    // Runs put (pooled or pending) since the last fence; when that was taken
    // (coarse_now_ns), and the bytes after which a put takes one however
    // soon after it (stream.cpp, kPoolFenceInterval).
    uint64_t fenced_ns = 0;
    uint64_t fence_bytes = 0;
    size_t unfenced_runs = 0;
    uint64_t unfenced_bytes = 0;

    // Its pending roots in its GPU's PMM (slot -1: none to be had, its runs
    // of 2M chunks are pooled as the others). Each run made pending takes
    // the next sequence number; a fence taken covers every number up to it.
    chunk::Pmm::Holder holder;
    uint64_t pend_seq = 0;
    uint64_t pend_fenced_seq = 0;
    struct PendFence {
        uint64_t fence;
        uint64_t seq;
    };
    std::deque<PendFence> pend_fences;  // oldest first
    // The latest runs made pending, as hints for allocations of their length
    // (Pmm::Holder::hint); stale ones are skipped by the PMM.
    struct PendRun {
        uint64_t phys;
        size_t count;
    };
    std::vector<PendRun> pend_runs;
    // Objects freed on the stream kept whole (uvm/mem.h, mem_stream_park),
    // by chunk size and bytes (parked_key), newest last: the stream's next
    // allocation of that kind takes one back with its mapping and record,
    // and no PMM. Pool memory as the runs are (pool_bytes counts them).
    // `parked_long`: how many of them are long runs (over 8 MiB), which a
    // long request of another size gives back first (Streams::unpark_long).
    std::unordered_map<uint64_t, std::vector<std::shared_ptr<Mem>>> parked;
    size_t parked_long = 0;
    // Stitched objects unparked under the lock, their runs in the pool
    // already: their kernel views retire on a fence taken once the lock is
    // let go (Streams::retire_unparked).
    std::vector<std::shared_ptr<Mem>> unparked_views;
    // How many: written under the lock, read without it as a hint by
    // allocations, so that a stream that parks nothing costs them one load.
    std::atomic<size_t> parked_objects{0};
    void count_parked(ptrdiff_t delta) {
        parked_objects.store(parked_objects.load(std::memory_order_relaxed) + static_cast<size_t>(delta),
                             std::memory_order_relaxed);
    }
    bool pends() const { return pend_seq != 0 && (pend_fenced_seq != pend_seq || !pend_fences.empty()); }
    // The private pool its allocations go to (uvm_stream_set_pool), under
    // `lock`; `to_private_pool` says whether it has one, read without the
    // lock by allocations, so that a stream with none costs them one load.
    std::shared_ptr<PrivatePool> private_pool;
    std::atomic<bool> to_private_pool{false};
};

// A point in a stream's work. Where the stream captured when it was asked
// for, none could be taken: `after_capture`, to be taken once the capture
// has ended (Streams::settle), and not done until then.
struct Fence {
    std::shared_ptr<Stream> stream;
    uint64_t value = 0;
    bool after_capture = false;
};

class Streams {
public:
    Streams(Manager &mgr, uint16_t manager_id);
    ~Streams();  // after drain()

    uvm_status_t create(uint32_t gpu, void *native, uvm_stream_t **out);
    // BUSY (sim: held work; a capture under way) leaves the stream as it was.
    uvm_status_t destroy(const uvm_stream_t *handle);
    // The stream a handle names, or an empty pointer. The reference is valid
    // until this thread's next lookup (copy it to keep it longer).
    const std::shared_ptr<Stream> &lookup(const uvm_stream_t *handle);
    // BUSY, nothing done, while the stream captures: synchronizing it would
    // break the capture.
    uvm_status_t synchronize(Stream &stream);
    // Whether the stream captures now (a CUDA graph; never on sim): one query
    // of the backend, for the few steps that a capture changes. A query that
    // fails is BACKEND; a destroyed stream captures nothing.
    uvm_status_t captures(Stream &stream, bool *out);

    // Private pools (private_pool.h). set_pool: the stream's allocations go
    // to `pool` from now (null: to none); INVALID_ARGUMENT for a pool of
    // another GPU.
    PrivatePools &private_pools() { return pools_; }
    uvm_status_t set_pool(Stream &stream, const std::shared_ptr<PrivatePool> &pool);
    // uvm_pool_destroy: its free memory retires on a fence of every stream of
    // its GPU (retire_run).
    uvm_status_t destroy_pool(const uvm_pool_t *handle);
    // An object of a private pool at the end of its life (locked, its handle
    // gone, its work done or ordered on `on`): its run back to the pool, for
    // the pool's allocations on `on` (null: for any of them); where the pool
    // is destroyed, to `on`'s pool or the PMM as any object's memory.
    void end_in_pool(Mem &mem, const std::shared_ptr<Stream> &on);
    // A run no object holds, back to its GPU once `fences` are done.
    void retire_run(const ReusedRun &run, std::vector<Fence> fences);

    // A fence on `fence->stream` after all work queued there so far (value 0
    // where the stream is gone: nothing to wait for; after_capture where it
    // captures).
    uvm_status_t fence(Fence *fence);
    bool done(const Fence &fence);
    // done(), where an after-capture fence whose capture has ended is taken
    // first (and may then be done).
    bool settle(Fence &fence);
    // Work queued on `waiter` from now on comes after `fence`. BUSY, nothing
    // queued, where it cannot be: `waiter` captures (a capture may not wait
    // on work outside it) or the fence is to be taken after a capture.
    uvm_status_t wait(Stream &waiter, const Fence &fence);

    // Free `mem` (locked by the caller, handle already removed) once `fences`
    // are done; releases it now when they are.
    void retire(const std::shared_ptr<Mem> &mem, std::vector<Fence> fences);
    // Put a detached run in `stream`'s pool. O(1) but for a fence taken once
    // per kPoolFenceRuns runs or Stream::fence_bytes bytes put.
    void pool_put(Stream &stream, const ReusedRun &run);
    // A run of this kind (GPU, chunk size, evictable, remappable) and count
    // from `stream`'s pool: the pooled run of the fewest chunks that has
    // enough, whose first `want.count` chunks are taken and the rest stays
    // pooled (the stream orders every use of them).
    bool pool_take(Stream &stream, const ReusedRun &want, ReusedRun *out);
    // Keep `mem` (freed on `stream`, locked by the caller, its handle
    // removed; mem_stream_parkable) for the stream's next allocation of its
    // kind: mem_stream_park ends it as an object. False (nothing done) where
    // the stream is gone or its GPU parks nothing (a release threshold).
    bool park(Stream &stream, std::shared_ptr<Mem> &&mem);
    // A stitched object (locked) freed on `stream` in its order: its runs go
    // to the stream's pool (pending roots where it has them) as pool_put
    // puts a detached run, and the object keeps only its kernel view
    // (Mem::chunks_given) to retire on the stream's fence.
    void give_stitched_runs(Stream &stream, Mem &mem);
    // An allocation on `stream` from an object parked there of the
    // request's chunk size and count (alloc/alloc_path.h's stream-parked
    // source): the new object's handle and, where `gpu_address` is given,
    // kernel address. `wanted`: the request asks for what a parked object
    // is (UVM_MEM_GPU_MAPPED alone, no tag nor client); for any other, a
    // parked object of its size becomes a pooled run of the stream, as its
    // pool would give it. False: the next source serves it.
    bool alloc_parked(const std::shared_ptr<Stream> &stream, const uvm_mem_alloc_params_t &params,
                      uint64_t chunk_size, size_t count, bool wanted, uvm_mem_t **out, uint64_t *gpu_address);
    // The objects parked on `gpu`'s streams (kAllGpus: every GPU's) become
    // pooled runs, fenced, those whose work is done free in the PMM; the
    // other streams of `gpu` give back the runs their taken fences are done
    // with (a stream queries its fences only as it takes one, at most every
    // kPoolFenceInterval past the first marks: stream.cpp). Before the PMM
    // grows, and wherever pooled memory must come back (trim, the OOM path,
    // synchronize, destroy).
    void unpark(uint32_t gpu);
    // A release threshold other than UINT64_MAX on `gpu`: its streams park
    // nothing (what is parked goes, unpark), since freed memory must reach
    // the PMM, which gives it back.
    void set_parking(uint32_t gpu, bool on);
    // Whether `stream` gives a freed `run` to its GPU's PMM as pending roots
    // (then never to its pool): 2M chunks of its GPU, not remappable, while
    // the stream is one of the PMM's holders.
    static bool pendable(const Stream &stream, const ReusedRun &run);
    // The stream's holder, with the hint of the newest run it made pending
    // of `count` roots where it has one (forgotten then: one taker).
    chunk::Pmm::Holder pend_holder(Stream &stream, size_t count);

    // Release retiring objects and pooled runs whose work is done. `fence_pools`:
    // first take a fence for pooled runs that have none (the OOM and trim
    // paths, so that memory freed on streams can come back). Returns the bytes
    // released. Never blocks on GPU work.
    uint64_t reap(bool fence_pools);
    // Wait for the work that memory of `gpu` waits for (runs in the pools of
    // its streams, retiring objects it owns), then release that memory: for
    // an allocation that found the GPU full, as PyTorch's caching allocator
    // synchronizes before it frees its cache on OOM. Blocks on the GPU.
    // Returns the bytes of `gpu` that came back; 0 where nothing waited or
    // the work cannot finish (sim: held work, whose streams say BUSY).
    uint64_t wait_pending(uint32_t gpu);
    // Wait for the work of every retiring object of `client` and release
    // them (a client's sleep: its memory must be nobody's work's).
    uvm_status_t settle_retiring(const Client *client);
    // Whether anything may wait for GPU work: a hint for the opportunistic
    // reaps of hot paths (reap itself always looks at everything).
    bool pending() const {
        return retiring_objects_.load(std::memory_order_relaxed) != 0 || pools_used_.load(std::memory_order_relaxed);
    }

    // Teardown: destroy every stream (releasing held sim work) and release
    // everything that waited for them. Not thread-safe.
    void drain();

    uint64_t stream_count();
    uint64_t retiring_objects() const { return retiring_objects_.load(); }
    uint64_t retiring_bytes() const { return retiring_bytes_.load(); }
    // GPU memory that waits for work: chunks in the pools of `gpu`'s streams
    // (every GPU's: kAllGpus), and chunks of retiring vidmem objects owned by `gpu`.
    static constexpr uint32_t kAllGpus = UINT32_MAX;
    uint64_t pooled_bytes(uint32_t gpu = kAllGpus);
    uint64_t retiring_vidmem_bytes(uint32_t gpu) const { return retiring_vidmem_[gpu].load(std::memory_order_relaxed); }

private:
    struct Retiring {
        std::shared_ptr<Mem> mem;  // null: `run` retires (retire_run)
        std::vector<Fence> fences;
        uint64_t vidmem_bytes = 0;  // its chunks on its owner, counted in retiring_vidmem_
        ReusedRun run;
    };
    // The end of a retired object's life: to its private pool, or released.
    void release_retired(Mem &mem);
    void fence_unfenced(Stream &stream, uint64_t value);
    // pool_put with the stream's lock held and the stream not destroyed:
    // whether a fence is due (kPoolFenceRuns).
    bool put_locked(Stream &stream, const ReusedRun &run);
    // One parked object's run into the pool (the stream's lock held); whether
    // a fence is due (put_locked). A stitched one's runs, its view to
    // unparked_views, which retire_unparked retires.
    bool unpark_one(Stream &stream, std::shared_ptr<Mem> &mem);
    // The kernel views of `stream`'s unparked stitched objects, retired on a
    // fence of it taken now (its lock not held; where it cannot be, asked
    // for again at the next reap, as retire_run does), or released at once
    // where `work_done` (synchronized, destroyed). NO_HOST_MEMORY (thrown):
    // those not retired stay the stream's.
    void retire_unparked(Stream &stream, bool work_done = false);
    // A parked stitched object taken from `stream`'s list (its lock not
    // held) that cannot be revived: unparked there, or released where the
    // stream was destroyed meanwhile.
    void unpark_stitched(const std::shared_ptr<Stream> &stream, std::shared_ptr<Mem> mem);
    // Its parked objects into the pool (its lock held).
    void unpark_locked(Stream &stream);
    // Its long parked objects into the pool (the lock taken), and what is
    // done freed.
    void unpark_long(Stream &stream);
    uint64_t release_pooled(Stream &stream, std::vector<ReusedRun> *out, bool all);
    uint64_t fence_and_release(Stream &stream, std::vector<ReusedRun> *out);
    // Its pending roots' bytes (its lock held; none where it never made any).
    uint64_t pending_bytes(const Stream &stream);
    // captures() with the stream's lock held, not destroyed. The query
    // disturbs no capture.
    uvm_status_t captures_locked(Stream &stream, bool *out);
    void finish_retired(std::vector<Retiring> &done);
    template <typename Pick>
    void retiring_streams(Pick pick, std::vector<std::shared_ptr<Stream>> *out);

    Manager &mgr_;
    HandleTable<Stream> table_;
    PrivatePools pools_;

    std::mutex retire_lock_;
    std::vector<Retiring> retiring_;

    std::atomic<uint64_t> retiring_objects_{0};
    std::atomic<uint64_t> retiring_bytes_{0};
    std::atomic<uint64_t> retiring_vidmem_[UVM_MAX_GPUS] = {};
    std::atomic<bool> pools_used_{false};  // some stream's pool may hold runs
    std::atomic<bool> no_parking_[UVM_MAX_GPUS] = {};  // set_parking
    // The least time between two fences of a stream's pool past the first
    // marks (stream.cpp, kPoolFenceInterval), read once from the environment.
    const uint64_t fence_interval_ns_;
    const uint64_t fence_max_bytes_;  // the most Stream::fence_bytes may be
};

// After a free: now and then, give back what streams have finished with.
inline void reap_now_and_then(Streams &streams) {
    static thread_local uint32_t frees = 0;
    if (streams.pending() && (++frees & 15) == 0)
        streams.reap(false);
}

// Free now, or when the work its streams queued is done; `on`: ordered on
// that stream (uvm_mem_free_async). `freed` (kReport), where given, gets the
// object's size and alloc_size as it was freed (uvm_gpu_free_async reports
// them); a template so that the held pair's free carries none of it.
struct FreedBytes {
    uint64_t size = 0;
    uint64_t alloc_size = 0;
};
template <bool kReport>
uvm_status_t free_object_reporting(Manager &mgr, uvm_mem_t *handle, const std::shared_ptr<uvm::Stream> &on,
                                   FreedBytes *freed) {
    std::shared_ptr<Mem> mem;
    uvm::Streams &streams = mgr.streams();
    // The common free: not ordered on a stream, of an object no stream uses,
    // so that nothing below can fail, nor wait. The table hands it over
    // locked in one step. With the trace on, the general path records the
    // free while the handle is still taken.
    if (!on && !mgr.tracing.on()) {
        const Manager::Take taken = mgr.take_idle(handle, &mem);
        if (taken == Manager::Take::Invalid)
            return UVM_ERR_INVALID_HANDLE;
        if (kReport && taken != Manager::Take::Busy)
            *freed = FreedBytes{mem->size, mem->alloc_size};
        if (taken == Manager::Take::Parked) {
            uvm::mem_park(mgr, std::move(mem));  // its chunk and record to the thread's cache
            reap_now_and_then(streams);
            return UVM_OK;
        }
        if (taken == Manager::Take::Taken) {
            {
                std::lock_guard<uvm::Mutex> guard(mem->lock, std::adopt_lock);
                uvm::mem_release(mgr, *mem);
            }
            reap_now_and_then(streams);
            return UVM_OK;
        }
    }
    std::unique_lock<uvm::Mutex> guard;
    uvm_status_t status = lock_live(mgr, handle, &mem, &guard);
    if (status != UVM_OK)
        return status;
    if (kReport)
        *freed = FreedBytes{mem->size, mem->alloc_size};  // written on failure too: the caller reads them on success only
    std::vector<uvm::Fence> fences;
    // Whether `on` comes after every other stream's work on the object: not
    // where it captures, or another stream's fence waits for a capture's end
    // (Streams::wait). The object then retires on all of their fences.
    bool ordered = true;
    mem->users.for_each([&](const std::shared_ptr<uvm::Stream> &user) {
        if (user == on || status != UVM_OK)
            return;  // the free is ordered on it, or an earlier one failed
        uvm::Fence f{user, 0};
        status = streams.fence(&f);
        if (status == UVM_OK && on && ordered) {
            status = streams.wait(*on, f);
            if (status == UVM_ERR_BUSY) {
                ordered = false;
                status = UVM_OK;
            }
        }
        if (status == UVM_OK)
            fences.push_back(std::move(f));
    });
    if (status != UVM_OK)
        return status;  // the object stays as it was
    // A stitched object is never detached as one run: kept whole (parked)
    // below where it may be (`whole`), and fenced only where it is not.
    const bool pooled = on && ordered && uvm::mem_can_detach(*mem);
    bool whole = pooled;
    if (on && !pooled) {
        if (__builtin_expect(mem->stitched && ordered && uvm::mem_can_leave_whole(*mem), 0)) {
            whole = true;
            fences.reserve(fences.size() + 1);  // its fence, below: nothing may fail once it is out of the table
        } else {
            uvm::Fence f{on, 0};
            status = streams.fence(&f);
            if (status != UVM_OK)
                return status;
            fences.push_back(std::move(f));
        }
    }
    // Recorded while the handle is still taken: its next user's alloc comes after.
    uvm::trace_event(mgr, *mem, uvm::TraceKind::Free);
    const std::shared_ptr<Mem> removed = mgr.remove(handle);
    UVM_ASSERT(removed == mem);
    (void)removed;
    // An object of a private pool leaves its memory there, for the pool's
    // next allocations on `on` (private_pool.h).
    if (pooled && mem->pool) {
        streams.end_in_pool(*mem, on);
        guard.unlock();
        reap_now_and_then(streams);
        return UVM_OK;
    }
    // Kept whole for the stream's next allocation of its kind where nobody
    // else holds the record (the table's reference is `removed` now).
    if (whole && mem.use_count() == 2 && uvm::mem_stream_parkable_whole(*mem) && !mgr.tracing.on()) {
        std::shared_ptr<Mem> kept = removed;  // `mem` holds the record until the lock is let go
        if (streams.park(*on, std::move(kept))) {
            guard.unlock();
            return UVM_OK;
        }
    }
    // A stitched object not parked: its runs are the stream's at once, as a
    // detached run's are, now that nothing can fail; its kernel view (a
    // driver mapping of its own) retires on the fence (where none can be
    // taken now, asked for again at the next reap, as for a retired run).
    if (on && ordered && mem->stitched) {
        if (whole) {
            uvm::Fence f{on, 0};
            if (streams.fence(&f) != UVM_OK)
                f.after_capture = true;
            fences.push_back(std::move(f));
        }
        streams.give_stitched_runs(*on, *mem);
    }
    if (pooled) {
        uvm::ReusedRun run;
        const bool detached = uvm::mem_detach_run(mgr, *mem, &run);
        UVM_ASSERT(detached);
        (void)detached;
        streams.pool_put(*on, run);
    } else if (fences.empty()) {
        if (mem->pool)
            streams.end_in_pool(*mem, nullptr);
        else
            uvm::mem_release(mgr, *mem);
    } else {
        streams.retire(mem, std::move(fences));
    }
    guard.unlock();
    reap_now_and_then(streams);
    return UVM_OK;
}

inline uvm_status_t free_object(Manager &mgr, uvm_mem_t *handle, const std::shared_ptr<uvm::Stream> &on) {
    return free_object_reporting<false>(mgr, handle, on, nullptr);
}
inline uvm_status_t free_object(Manager &mgr, uvm_mem_t *handle, const std::shared_ptr<uvm::Stream> &on,
                                FreedBytes *freed) {
    return free_object_reporting<true>(mgr, handle, on, freed);
}

}  // namespace uvm
