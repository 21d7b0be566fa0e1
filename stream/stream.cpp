#include "stream/stream.h"

#include <algorithm>
#include <cstdlib>

#include "backend/stream_capability.h"
#include "common/assert.h"
#include "common/sizes.h"
#include "uvm/manager.h"

namespace uvm {

namespace {

// A stream's pool takes a fence for its unfenced runs once it holds
// kPoolFenceRuns runs or kPoolFenceBytes bytes, so that memory freed on a
// stream that never synchronizes still comes back to the PMM
// (cudaMallocAsync's release threshold plays this part). The stream itself
// takes its runs again at once, fenced or not: the fence is for everyone
// else. On CUDA it costs an event record, a capture query and later event
// queries, and a training step that frees gigabytes of activations reached
// the marks every other free: ~500 fences a GPT-2 step, 17% on its step time
// (bench/results/2026-11-28-h200-fences). So past the marks a fence waits
// until kPoolFenceInterval has passed since the last, unless kPoolFenceRuns
// * kPoolFenceBurst runs or Stream::fence_bytes are unfenced (the GPU's
// memory / kPoolFenceShare, at most kPoolFenceMaxBytes): others wait for at
// most that much more than before, and the GPU's PMM gives back what is done
// before it grows (Streams::unpark).
constexpr size_t kPoolFenceRuns = 8;
constexpr uint64_t kPoolFenceBytes = 32ull << 20;
constexpr uint64_t kPoolFenceInterval = 1000000;  // ns; UVM_POOL_FENCE_INTERVAL_US sets another (0: none)
constexpr size_t kPoolFenceBurst = 8;
constexpr uint64_t kPoolFenceShare = 128;
constexpr uint64_t kPoolFenceMaxBytes = 256ull << 20;  // UVM_POOL_FENCE_MAX_MIB sets another
// Runs a stream remembers as hints for allocations of their length.
constexpr size_t kPendRunHints = 256;

uint64_t run_bytes(const ReusedRun &run) { return run.chunk_size * run.count; }

// A whole number from the environment variable `name`, or `otherwise`.
uint64_t from_environment(const char *name, uint64_t otherwise) {
    const char *text = std::getenv(name);
    char *end = nullptr;
    const unsigned long long v = text && *text ? std::strtoull(text, &end, 10) : 0;
    return text && *text && end && !*end ? v : otherwise;
}

// The backend's streams. A Stream exists only where the backend has them
// (create checks), so every call below but create's may take them as there.
backend::StreamCapability &backend_streams(Manager &mgr) {
    UVM_ASSERT(mgr.backend_streams());
    return *mgr.backend_streams();
}

// Whether a pooled run (`have`, of a long run when `long_run`) can give
// `want` its chunks: the same kind, enough of them, and short requests only
// from short runs: the PMM's rule (chunk/pmm.h), for the same reason (a small
// object cut from a long run would keep the run's whole driver handle held).
bool fits(const ReusedRun &have, bool long_run, const ReusedRun &want) {
    return have.gpu == want.gpu && have.chunk_size == want.chunk_size && have.count >= want.count &&
           have.evictable == want.evictable && have.remappable == want.remappable &&
           (!long_run || run_bytes(want) > kShortRunBytes);
}

// The key of a parked object's kind: its bytes (a multiple of 4 KiB) and
// its chunk size's index in the low bits.
uint64_t parked_key(uint64_t chunk_size, uint64_t alloc_size) {
    return alloc_size | (chunk_size == kPageSize4K ? 0 : chunk_size == kPageSize64K ? 1 : 2);
}

// The chunks a retiring object keeps on its owner.
uint64_t vidmem_chunk_bytes(const Mem &mem) {
    return mem.backing == UVM_BACKING_VIDMEM && !mem.imported && !mem.chunks_given ? mem.chunk_size * mem.chunks.size()
                                                                                    : 0;
}

}  // namespace

bool Streams::pendable(const Stream &stream, const ReusedRun &run) {
    return stream.holder.slot >= 0 && run.gpu == stream.gpu && run.chunk_size == kRootChunkSize && !run.remappable;
}

uint64_t Streams::pending_bytes(const Stream &stream) {
    return stream.pend_seq ? mgr_.gpu(stream.gpu).pmm.pending_bytes(stream.holder) : 0;
}

Streams::~Streams() {
    UVM_ASSERT(retiring_.empty());
    UVM_ASSERT(table_.size() == 0);
}

Streams::Streams(Manager &mgr, uint16_t manager_id)
    : mgr_(mgr),
      table_(manager_id),
      pools_(manager_id),
      fence_interval_ns_(from_environment("UVM_POOL_FENCE_INTERVAL_US", kPoolFenceInterval / 1000) * 1000),
      fence_max_bytes_(from_environment("UVM_POOL_FENCE_MAX_MIB", kPoolFenceMaxBytes >> 20) << 20) {}

uvm_status_t Streams::create(uint32_t gpu, void *native, uvm_stream_t **out) {
    auto stream = std::make_shared<Stream>();
    stream->gpu = gpu;
    stream->fence_bytes =
        std::max(kPoolFenceBytes, std::min(fence_max_bytes_, mgr_.gpu(gpu).info.memory_total / kPoolFenceShare));
    if (!mgr_.backend_streams())
        return UVM_ERR_NOT_SUPPORTED;  // a backend without streams
    uvm_status_t status = mgr_.backend_streams()->stream_create(gpu, native, &stream->backend);
    if (status != UVM_OK)
        return status;
    // Slot -1 when the PMM has no more: the stream then pools its 2M runs.
    stream->holder = mgr_.gpu(gpu).pmm.add_holder();
    uint64_t value;
    try {
        value = table_.insert(stream, &stream->id);
    } catch (...) {
        mgr_.gpu(gpu).pmm.remove_holder(stream->holder);
        backend_streams(mgr_).stream_destroy(stream->backend);
        throw;
    }
    *out = reinterpret_cast<uvm_stream_t *>(static_cast<uintptr_t>(value));
    return UVM_OK;
}

const std::shared_ptr<Stream> &Streams::lookup(const uvm_stream_t *handle) {
    return table_.lookup(reinterpret_cast<uintptr_t>(handle));
}

uvm_status_t Streams::destroy(const uvm_stream_t *handle) {
    const std::shared_ptr<Stream> stream = lookup(handle);  // a copy: the thread's cache changes below
    if (!stream)
        return UVM_ERR_INVALID_HANDLE;
    std::vector<ReusedRun> runs;
    {
        std::lock_guard<std::mutex> guard(stream->lock);
        if (stream->destroyed)
            return UVM_ERR_INVALID_HANDLE;  // another thread's destroy won
        bool capturing = false;
        uvm_status_t status = captures_locked(*stream, &capturing);
        if (status == UVM_OK && capturing)
            status = UVM_ERR_BUSY;  // its work cannot be waited for: that would break the capture
        if (status == UVM_OK)
            status = backend_streams(mgr_).stream_destroy(stream->backend);
        if (status != UVM_OK)
            return status;
        stream->destroyed = true;
        unpark_locked(*stream);
        release_pooled(*stream, &runs, true);  // its work is done
        mgr_.gpu(stream->gpu).pmm.remove_holder(stream->holder);
        if (stream->private_pool) {
            std::lock_guard<std::mutex> pool_guard(stream->private_pool->lock);
            stream->private_pool->streams--;
        }
        stream->private_pool.reset();
        stream->to_private_pool.store(false, std::memory_order_relaxed);
    }
    pools_.settled(stream.get());
    table_.erase(stream->id);
    retire_unparked(*stream, true);  // its work is done: released at once
    for (const ReusedRun &run : runs)
        vidmem_run_free(mgr_, run);
    reap(false);  // objects that waited for this stream
    return UVM_OK;
}

uvm_status_t Streams::captures_locked(Stream &stream, bool *out) {
    backend::StreamCaptureInfo info;
    const uvm_status_t status = backend_streams(mgr_).stream_capture_info(stream.backend, &info);
    *out = status == UVM_OK && info.status != backend::CaptureStatus::None;
    return status;
}

uvm_status_t Streams::synchronize(Stream &stream) {
    std::vector<ReusedRun> runs;
    {
        std::lock_guard<std::mutex> guard(stream.lock);
        if (stream.destroyed)
            return UVM_ERR_INVALID_HANDLE;
        bool capturing = false;
        const uvm_status_t asked = captures_locked(stream, &capturing);
        if (asked != UVM_OK)
            return asked;
        if (capturing)
            return UVM_ERR_BUSY;
        const uvm_status_t status = backend_streams(mgr_).stream_synchronize(stream.backend);
        if (status != UVM_OK)
            return status;
        unpark_locked(stream);
        release_pooled(stream, &runs, true);  // everything freed on it so far is behind us
    }
    retire_unparked(stream, true);
    pools_.settled(&stream);
    for (const ReusedRun &run : runs)
        vidmem_run_free(mgr_, run);
    reap(false);
    return UVM_OK;
}

uvm_status_t Streams::captures(Stream &stream, bool *out) {
    std::lock_guard<std::mutex> guard(stream.lock);
    *out = false;
    return stream.destroyed ? UVM_OK : captures_locked(stream, out);
}

uvm_status_t Streams::set_pool(Stream &stream, const std::shared_ptr<PrivatePool> &pool) {
    if (pool && pool->gpu != stream.gpu)
        return UVM_ERR_INVALID_ARGUMENT;
    std::lock_guard<std::mutex> guard(stream.lock);
    if (stream.destroyed)
        return UVM_ERR_INVALID_HANDLE;
    if (pool) {
        std::lock_guard<std::mutex> pool_guard(pool->lock);
        if (pool->destroyed)
            return UVM_ERR_INVALID_HANDLE;  // destroyed by another thread since it was looked up
        pool->streams++;
    }
    if (stream.private_pool) {
        std::lock_guard<std::mutex> pool_guard(stream.private_pool->lock);
        stream.private_pool->streams--;
    }
    stream.private_pool = pool;
    stream.to_private_pool.store(pool != nullptr, std::memory_order_relaxed);
    return UVM_OK;
}

uvm_status_t Streams::destroy_pool(const uvm_pool_t *handle) {
    std::vector<ReusedRun> runs;
    const uvm_status_t status = pools_.destroy(handle, &runs);
    if (status != UVM_OK || runs.empty())
        return status;
    // The graphs that used the memory may have been launched on any stream
    // of the GPU: it goes back once the work queued on each so far is done.
    const uint32_t gpu = runs.front().gpu;
    std::vector<Fence> fences;
    for (const std::shared_ptr<Stream> &s : table_.all()) {
        if (s->gpu != gpu)
            continue;
        Fence f{s, 0};
        if (fence(&f) != UVM_OK)
            f.after_capture = true;  // asked for again at the next reap
        fences.push_back(std::move(f));
    }
    for (const ReusedRun &run : runs)
        retire_run(run, fences);
    return UVM_OK;
}

void Streams::end_in_pool(Mem &mem, const std::shared_ptr<Stream> &on) {
    // Its memory is the pool's whatever mappings it has: a retired object's
    // work is done, so they go (an object of a pool is never exported,
    // evicted nor a sleepable client's: alloc_path.cpp).
    UVM_ASSERT(mem.pool && mem.is_vidmem() && !mem.exported && !mem.imported && !mem.evicted && !mem.client_roots);
    ReusedRun run;
    if (!mem_detach_run(mgr_, mem, &run)) {
        UVM_ASSERT(!on);
        events::released(mgr_, mem);
        mem_take_run(mgr_, mem, &run);
    }
    const std::shared_ptr<PrivatePool> pool = std::move(mem.pool);
    if (PrivatePools::returned(*pool, run, on))
        return;
    // The pool is destroyed: the run goes as any object's memory would.
    if (on)
        pool_put(*on, run);
    else
        vidmem_run_free(mgr_, run);
}

void Streams::retire_run(const ReusedRun &run, std::vector<Fence> fences) {
    bool all_done = true;
    for (Fence &f : fences)
        all_done = all_done && settle(f);
    if (all_done) {
        vidmem_run_free(mgr_, run);
        return;
    }
    const uint64_t bytes = run_bytes(run);
    std::lock_guard<std::mutex> guard(retire_lock_);
    Retiring r{};
    r.fences = std::move(fences);
    r.vidmem_bytes = bytes;
    r.run = run;
    retiring_.push_back(std::move(r));
    retiring_vidmem_[run.gpu] += bytes;
}

void Streams::release_retired(Mem &mem) {
    if (mem.pool)
        end_in_pool(mem, nullptr);
    else
        mem_release(mgr_, mem);
}

uvm_status_t Streams::fence(Fence *fence) {
    Stream &stream = *fence->stream;
    std::lock_guard<std::mutex> guard(stream.lock);
    fence->value = 0;
    fence->after_capture = false;
    if (stream.destroyed)
        return UVM_OK;
    bool capturing = false;
    const uvm_status_t status = captures_locked(stream, &capturing);
    if (status != UVM_OK)
        return status;
    if (capturing) {
        fence->after_capture = true;
        return UVM_OK;
    }
    return backend_streams(mgr_).stream_fence(stream.backend, &fence->value);
}

bool Streams::done(const Fence &fence) {
    if (fence.value == 0 && !fence.after_capture)
        return true;
    std::lock_guard<std::mutex> guard(fence.stream->lock);
    return fence.stream->destroyed ||
           (!fence.after_capture && backend_streams(mgr_).fence_done(fence.stream->backend, fence.value));
}

bool Streams::settle(Fence &fence) {
    if (fence.after_capture) {
        std::lock_guard<std::mutex> guard(fence.stream->lock);
        Stream &stream = *fence.stream;
        if (stream.destroyed)
            return true;
        // Asked again at the next reap where it captures still, or a call failed.
        bool capturing = true;
        if (captures_locked(stream, &capturing) != UVM_OK || capturing ||
            backend_streams(mgr_).stream_fence(stream.backend, &fence.value) != UVM_OK)
            return false;
        fence.after_capture = false;
    }
    return done(fence);
}

uvm_status_t Streams::wait(Stream &waiter, const Fence &fence) {
    if (fence.stream.get() == &waiter)
        return UVM_OK;  // ordered by the stream itself
    if (fence.after_capture)
        return UVM_ERR_BUSY;
    if (fence.value == 0)
        return UVM_OK;  // nothing to wait for
    // Two stream locks: in id order, so that two waits the other way round cannot deadlock.
    Stream &other = *fence.stream;
    std::unique_lock<std::mutex> a(waiter.id < other.id ? waiter.lock : other.lock);
    std::unique_lock<std::mutex> b(waiter.id < other.id ? other.lock : waiter.lock);
    if (waiter.destroyed)
        return UVM_ERR_INVALID_HANDLE;
    if (other.destroyed || backend_streams(mgr_).fence_done(other.backend, fence.value))
        return UVM_OK;
    bool capturing = false;
    const uvm_status_t status = captures_locked(waiter, &capturing);
    if (status != UVM_OK)
        return status;
    if (capturing)
        return UVM_ERR_BUSY;
    return backend_streams(mgr_).stream_wait(waiter.backend, other.backend, fence.value);
}

void Streams::retire(const std::shared_ptr<Mem> &mem, std::vector<Fence> fences) {
    UVM_ASSERT(!mem->gone());
    bool all_done = true;
    for (const Fence &f : fences)
        all_done = all_done && done(f);
    if (all_done) {
        release_retired(*mem);
        return;
    }
    const uint64_t vidmem = vidmem_chunk_bytes(*mem);
    std::lock_guard<std::mutex> guard(retire_lock_);
    retiring_.push_back({mem, std::move(fences), vidmem, ReusedRun()});  // first: a throw changes nothing
    mem->retiring = true;  // (its lock held: the reap looks at it under that lock)
    retiring_objects_++;
    retiring_bytes_ += mem->alloc_size;
    retiring_vidmem_[mem->owner] += vidmem;
}

void Streams::pool_put(Stream &stream, const ReusedRun &run) {
    std::unique_lock<std::mutex> guard(stream.lock);
    if (stream.destroyed) {
        // Destroyed meanwhile by another thread (its work is done): nothing to wait for.
        guard.unlock();
        vidmem_run_free(mgr_, run);
        return;
    }
    if (!put_locked(stream, run))
        return;
    // Runs of this stream whose work is done go back to the PMM now, not at
    // the next reap: memory a stream no longer needs is everyone's again
    // within kPoolFenceRuns frees (one query per fence, oldest first).
    std::vector<ReusedRun> done;
    fence_and_release(stream, &done);
    guard.unlock();
    for (const ReusedRun &r : done)
        vidmem_run_free(mgr_, r);
}

bool Streams::put_locked(Stream &stream, const ReusedRun &run) {
    if (pendable(stream, run)) {
        // Its roots stay allocated, taken again by this stream's allocations
        // of 2M chunks in any run (chunk/pmm.h), free once a fence after
        // this sequence number is done.
        const uvm_status_t status = mgr_.gpu(stream.gpu).pmm.pend(stream.holder, run.phys, run.count, ++stream.pend_seq);
        UVM_ASSERT(status == UVM_OK);
        (void)status;
        if (stream.pend_runs.size() == kPendRunHints)
            stream.pend_runs.erase(stream.pend_runs.begin(), stream.pend_runs.begin() + kPendRunHints / 2);
        stream.pend_runs.push_back({run.phys, run.count});
    } else {
        stream.pool.push_back({run, 0, false, run_bytes(run) > kShortRunBytes});
        stream.pool_bytes += run_bytes(run);
    }
    stream.unfenced_runs++;
    stream.unfenced_bytes += run_bytes(run);
    // A plain store, no read-modify-write: this is the stream-ordered hot path.
    if (!pools_used_.load(std::memory_order_relaxed))
        pools_used_.store(true, std::memory_order_relaxed);
    // A fence per kPoolFenceRuns runs (or kPoolFenceBytes) put, at most one
    // per interval short of the bounds (see the top), however far behind the
    // stream is: counting only the unfenced tail, a backlog of fenced runs
    // does not make every later put take one.
    if (stream.unfenced_runs < kPoolFenceRuns && stream.unfenced_bytes < kPoolFenceBytes)
        return false;
    return stream.unfenced_runs >= kPoolFenceRuns * kPoolFenceBurst || stream.unfenced_bytes >= stream.fence_bytes ||
           stream.fenced_ns == 0 || coarse_now_ns() - stream.fenced_ns >= fence_interval_ns_;
}

// Room for every parked object of `stream` to be unparked as a stitched
// one (unpark_one cannot fail). Apart from park(), which calls it rarely,
// so that the vector growth stays out of park's common path.
[[gnu::noinline]] static void reserve_unparked_views(Stream &stream) {
    stream.unparked_views.reserve(stream.unparked_views.size() + stream.parked_objects.load() + 1);
}

bool Streams::park(Stream &stream, std::shared_ptr<Mem> &&mem) {
    const uint64_t key = parked_key(mem->chunk_size, mem->alloc_size);
    std::lock_guard<std::mutex> guard(stream.lock);
    if (stream.destroyed || mem->owner != stream.gpu || no_parking_[stream.gpu].load(std::memory_order_relaxed))
        return false;
    std::vector<std::shared_ptr<Mem>> *list;
    try {
        list = &stream.parked[key];
        list->reserve(list->size() + 1);
        if (__builtin_expect(mem->stitched, 0))
            reserve_unparked_views(stream);
    } catch (const std::bad_alloc &) {
        return false;  // the caller pools its run instead
    }
    mem_stream_park(mgr_, *mem);
    stream.pool_bytes += mem->alloc_size;
    if (mem->alloc_size > kShortRunBytes)
        stream.parked_long++;
    list->push_back(std::move(mem));
    stream.count_parked(+1);
    return true;
}

void Streams::give_stitched_runs(Stream &stream, Mem &mem) {
    mem_stitched_runs(mem, [&](const ReusedRun &run) { pool_put(stream, run); });
    mem.chunks_given = true;
}

bool Streams::alloc_parked(const std::shared_ptr<Stream> &stream, const uvm_mem_alloc_params_t &params,
                           uint64_t chunk_size, size_t count, bool wanted, uvm_mem_t **out, uint64_t *gpu_address) {
    if (stream->parked_objects.load(std::memory_order_relaxed) == 0)
        return false;  // the common case of a stream that parks nothing: no lock, no look at the request
    if (params.gpu != stream->gpu)
        return false;  // no object of the stream's GPU is asked for
    std::shared_ptr<Mem> mem;
    bool long_miss = false, unparked_view = false;
    {
        std::lock_guard<std::mutex> guard(stream->lock);
        if (stream->parked_objects.load(std::memory_order_relaxed) == 0)
            return false;
        const uint64_t bytes = chunk_size * count;
        const auto it = stream->parked.find(parked_key(chunk_size, bytes));
        if (it == stream->parked.end() || it->second.empty()) {
            long_miss = bytes > kShortRunBytes && stream->parked_long != 0;
        } else {
            mem = std::move(it->second.back());
            it->second.pop_back();
            stream->count_parked(-1);
            if (mem->alloc_size > kShortRunBytes)
                stream->parked_long--;
            if (!wanted) {
                // Memory of this size freed on the stream, for an object of
                // another kind (flags, a client): its run, as the stream's pool
                // (or its pending roots) gives any request there.
                unparked_view = mem->stitched;
                (void)unpark_one(*stream, mem);
                if (!unparked_view)
                    return false;
                mem.reset();  // its view retires below, out of the lock
            } else {
                stream->pool_bytes -= mem->alloc_size;
            }
        }
    }
    if (unparked_view) {
        retire_unparked(*stream);
        return false;
    }
    if (!mem) {
        if (long_miss)
            unpark_long(*stream);  // the lock again: misses are rare where sizes repeat, hits are the hot path
        return false;
    }
    UVM_ASSERT(mem->chunk_size == chunk_size && mem->chunks.size() == count && mem->owner == params.gpu);
    mem->users.add(stream);  // as a new object on the stream, before anyone can see it
    if (!mem_stream_revive(mgr_, mem, params.size, out, gpu_address)) {
        mem->users.clear();
        // The handle table could not grow: the memory goes to the pool.
        if (mem->stitched) {
            unpark_stitched(stream, mem);
            return false;
        }
        ReusedRun run;
        mem_stream_parked_run(mgr_, *mem, &run);
        pool_put(*stream, run);
        return false;
    }
    return true;
}

void Streams::unpark_stitched(const std::shared_ptr<Stream> &stream, std::shared_ptr<Mem> mem) {
    std::unique_lock<std::mutex> guard(stream->lock);
    if (!stream->destroyed) {
        stream->pool_bytes += mem->alloc_size;  // as parked: unpark_one counts it out
        (void)unpark_one(*stream, mem);
        guard.unlock();
        retire_unparked(*stream);
        return;
    }
    // Destroyed meanwhile by another thread (its work is done): its runs
    // and its view go at once.
    guard.unlock();
    std::lock_guard<uvm::Mutex> mem_guard(mem->lock);
    mem_stream_unparked_view(mgr_, mem);
    mem_release(mgr_, *mem);
}

bool Streams::unpark_one(Stream &stream, std::shared_ptr<Mem> &mem) {
    if (mem->stitched) {
        stream.pool_bytes -= mem->alloc_size;
        bool fence_due = false;
        mem_stitched_runs(*mem, [&](const ReusedRun &run) { fence_due = put_locked(stream, run) || fence_due; });
        mem_stream_unpark_stitched(*mem);
        stream.unparked_views.push_back(std::move(mem));  // room reserved by park()
        return fence_due;
    }
    ReusedRun run;
    mem_stream_parked_run(mgr_, *mem, &run);
    stream.pool_bytes -= run_bytes(run);
    return put_locked(stream, run);
}

void Streams::retire_unparked(Stream &stream_ref, bool work_done) {
    const std::shared_ptr<Stream> stream = stream_ref.shared_from_this();
    std::vector<std::shared_ptr<Mem>> views;
    Fence f{stream, 0};
    {
        std::lock_guard<std::mutex> guard(stream->lock);
        if (stream->unparked_views.empty())
            return;
        // A copy (the only step that may fail, before anything changed),
        // then cleared: the stream keeps the room park() reserved.
        views = stream->unparked_views;
        stream->unparked_views.clear();
        bool capturing = false;
        if (!work_done && !stream->destroyed &&
            (captures_locked(*stream, &capturing) != UVM_OK || capturing ||
             backend_streams(mgr_).stream_fence(stream->backend, &f.value) != UVM_OK))
            f.after_capture = true;  // asked for again at the next reap
    }
    size_t retired = 0;
    try {
        for (; retired < views.size(); ++retired) {
            const std::shared_ptr<Mem> &mem = views[retired];
            std::vector<Fence> fences{f};  // before the count: a throw here changes nothing
            std::lock_guard<uvm::Mutex> guard(mem->lock);
            mem_stream_unparked_view(mgr_, mem);
            try {
                retire(mem, std::move(fences));
            } catch (const std::bad_alloc &) {
                mem_stream_unparked_view_undo(mgr_, *mem);  // retire() changed nothing
                throw;
            }
        }
    } catch (const std::bad_alloc &) {
        // The rest stay the stream's, for its next unpark, synchronize or
        // destroy (room for them is still reserved there).
        std::lock_guard<std::mutex> guard(stream->lock);
        stream->unparked_views.insert(stream->unparked_views.end(), views.begin() + retired, views.end());
        throw;
    }
}

void Streams::unpark_locked(Stream &stream) {
    if (stream.parked_objects.load(std::memory_order_relaxed) == 0)
        return;
    for (auto &kind : stream.parked)
        for (std::shared_ptr<Mem> &mem : kind.second)
            unpark_one(stream, mem);
    stream.parked.clear();
    stream.parked_objects.store(0, std::memory_order_relaxed);
    stream.parked_long = 0;
}

// A long request that no parked object fits: the stream's long parked
// objects become its pending roots (or pooled runs) first, which the request
// then takes, joined with free roots, before any free root of the GPU's
// (chunk/pmm.h: the holder's first). So a long object stays parked only
// while its size comes back on its stream, as a training step's do; any
// other long request finds the stream's long memory where it found it before
// long objects were parked, and the free roots stay for everyone else (a
// long object parked until a growth took them instead: docs/design.md,
// "Parked objects"). Runs whose work is done go back to the PMM once the
// stream's lock is released.
void Streams::unpark_long(Stream &stream) {
    std::unique_lock<std::mutex> guard(stream.lock);
    if (stream.destroyed)
        return;  // destroyed meanwhile: what it parked went with it
    bool fence_due = false;
    size_t unparked = 0;
    for (auto &kind : stream.parked) {
        std::vector<std::shared_ptr<Mem>> &list = kind.second;
        if (list.empty() || list.front()->alloc_size <= kShortRunBytes)
            continue;  // a key holds objects of one size
        for (std::shared_ptr<Mem> &mem : list)
            fence_due = unpark_one(stream, mem) || fence_due;
        unparked += list.size();
        list.clear();
    }
    UVM_ASSERT(unparked == stream.parked_long);
    stream.count_parked(-static_cast<ptrdiff_t>(unparked));
    stream.parked_long = 0;
    std::vector<ReusedRun> done;
    if (fence_due)
        fence_and_release(stream, &done);
    guard.unlock();
    retire_unparked(stream);
    for (const ReusedRun &r : done)
        vidmem_run_free(mgr_, r);
}

void Streams::unpark(uint32_t gpu) {
    std::vector<ReusedRun> done;
    for (const std::shared_ptr<Stream> &s : table_.all()) {
        if (gpu != kAllGpus && s->gpu != gpu)
            continue;
        {
            std::lock_guard<std::mutex> guard(s->lock);
            if (s->parked_objects.load(std::memory_order_relaxed) != 0) {
                unpark_locked(*s);
                fence_and_release(*s, &done);  // a fence after the frees: what is done is free now
            } else {
                // No new fence (one taken now would not be done before a growth,
                // and its failure would go unreported): what the fences taken
                // are done with, free now.
                release_pooled(*s, &done, false);
            }
        }
        retire_unparked(*s);
    }
    for (const ReusedRun &r : done)
        vidmem_run_free(mgr_, r);
}

void Streams::set_parking(uint32_t gpu, bool on) {
    no_parking_[gpu].store(!on);
    if (!on)
        unpark(gpu);
}

chunk::Pmm::Holder Streams::pend_holder(Stream &stream, size_t count) {
    chunk::Pmm::Holder holder = stream.holder;
    std::lock_guard<std::mutex> guard(stream.lock);
    for (size_t i = stream.pend_runs.size(); i-- > 0;)
        if (stream.pend_runs[i].count == count) {
            holder.hint = stream.pend_runs[i].phys;
            stream.pend_runs.erase(stream.pend_runs.begin() + static_cast<std::ptrdiff_t>(i));
            break;
        }
    return holder;
}

bool Streams::pool_take(Stream &stream, const ReusedRun &want, ReusedRun *out) {
    std::lock_guard<std::mutex> guard(stream.lock);
    if (stream.destroyed)
        return false;
    // The fewest chunks that are enough (best fit: a long run stays for a
    // long request); newest first among equals, the run most likely still in
    // the GPU's caches. An exact fit ends the walk.
    size_t best = stream.pool.size();
    for (size_t i = stream.pool.size(); i-- > 0;) {
        const ReusedRun &have = stream.pool[i].run;
        if (!fits(have, stream.pool[i].long_run, want) || (best < stream.pool.size() && have.count >= stream.pool[best].run.count))
            continue;
        best = i;
        if (have.count == want.count)
            break;
    }
    if (best == stream.pool.size())
        return false;
    Stream::Pooled &p = stream.pool[best];
    *out = p.run;
    out->count = want.count;
    const uint64_t taken = run_bytes(*out);
    stream.pool_bytes -= taken;
    if (!p.fenced) {
        stream.unfenced_bytes -= taken;
        stream.unfenced_runs -= p.run.count == want.count;
    }
    if (p.run.count == want.count) {
        stream.pool.erase(stream.pool.begin() + static_cast<std::ptrdiff_t>(best));
    } else {
        // The rest keeps its place and fence: the chunks are the same ones.
        p.run.phys += taken;
        p.run.count -= want.count;
    }
    return true;
}

// Give `stream`'s pooled runs that have no fence yet the fence `value`. The
// caller holds the stream's lock.
void Streams::fence_unfenced(Stream &stream, uint64_t value) {
    for (size_t i = stream.pool.size(); i-- > 0 && !stream.pool[i].fenced;) {
        stream.pool[i].fence = value;
        stream.pool[i].fenced = true;
    }
    if (stream.pend_seq != stream.pend_fenced_seq) {
        stream.pend_fences.push_back({value, stream.pend_seq});
        stream.pend_fenced_seq = stream.pend_seq;
    }
    stream.unfenced_runs = 0;
    stream.unfenced_bytes = 0;
    stream.fenced_ns = coarse_now_ns();
}

// A fence for `stream`'s unfenced runs, where it has any and is not gone,
// then its runs whose work is done to *out (release_pooled). A failed fence
// leaves the runs unfenced: the stream keeps reusing them, and synchronizing
// or destroying it gives them back. So does a capture of the stream, during
// which no fence is taken there (stream.h). The caller holds the stream's lock.
uint64_t Streams::fence_and_release(Stream &stream, std::vector<ReusedRun> *out) {
    uint64_t value = 0;
    bool capturing = true;
    if (!stream.destroyed && stream.unfenced_runs != 0 && captures_locked(stream, &capturing) == UVM_OK &&
        !capturing && backend_streams(mgr_).stream_fence(stream.backend, &value) == UVM_OK)
        fence_unfenced(stream, value);
    return release_pooled(stream, out, false);
}

// Move `stream`'s pooled runs whose fences are done (all of them: `all`) to
// *out. The caller holds the stream's lock.
// Fences never decrease along the pool: one query per distinct fence, and
// the first fence not done ends the walk (everything after waits for it).
uint64_t Streams::release_pooled(Stream &stream, std::vector<ReusedRun> *out, bool all) {
    // Pending roots: the PMM frees those of every sequence number a done
    // fence covers.
    uint64_t unpended = 0;
    chunk::Pmm &pmm = mgr_.gpu(stream.gpu).pmm;
    if (all) {
        unpended += pmm.unpend(stream.holder, UINT64_MAX);
        stream.pend_fences.clear();
        stream.pend_fenced_seq = stream.pend_seq;
        stream.pend_runs.clear();
    }
    while (!stream.pend_fences.empty()) {
        const Stream::PendFence f = stream.pend_fences.front();
        if (!stream.destroyed && !backend_streams(mgr_).fence_done(stream.backend, f.fence))
            break;
        unpended += pmm.unpend(stream.holder, f.seq);
        stream.pend_fences.pop_front();
    }
    size_t n = 0;
    bool have_answer = false;
    uint64_t answered = 0;
    for (; n < stream.pool.size(); ++n) {
        const Stream::Pooled &p = stream.pool[n];
        if (!all) {
            if (!p.fenced)
                break;
            if (!stream.destroyed && !(have_answer && p.fence == answered)) {
                if (!backend_streams(mgr_).fence_done(stream.backend, p.fence))
                    break;
                have_answer = true;
                answered = p.fence;
            }
        }
        out->push_back(p.run);
        stream.pool_bytes -= run_bytes(p.run);
    }
    stream.pool.erase(stream.pool.begin(), stream.pool.begin() + static_cast<std::ptrdiff_t>(n));
    if (all) {
        stream.unfenced_runs = 0;
        stream.unfenced_bytes = 0;
    }
    return unpended;
}

void Streams::finish_retired(std::vector<Retiring> &done) {
    for (Retiring &r : done) {
        if (!r.mem) {
            retiring_vidmem_[r.run.gpu] -= r.vidmem_bytes;
            vidmem_run_free(mgr_, r.run);
            continue;
        }
        Mem &mem = *r.mem;
        std::lock_guard<uvm::Mutex> guard(mem.lock);
        UVM_ASSERT(mem.retiring && !mem.dead);
        mem.retiring = false;
        retiring_bytes_ -= mem.alloc_size;
        retiring_vidmem_[mem.owner] -= r.vidmem_bytes;
        release_retired(mem);
    }
}

// Add to *out, once each, the streams whose fences the retiring objects that
// `pick` selects wait for.
template <typename Pick>
void Streams::retiring_streams(Pick pick, std::vector<std::shared_ptr<Stream>> *out) {
    std::lock_guard<std::mutex> guard(retire_lock_);
    for (const Retiring &r : retiring_)
        if (pick(r))
            for (const Fence &f : r.fences)
                if (f.stream && std::find(out->begin(), out->end(), f.stream) == out->end())
                    out->push_back(f.stream);
}

uint64_t Streams::wait_pending(uint32_t gpu) {
    const uint64_t before = pooled_bytes(gpu) + retiring_vidmem_bytes(gpu);
    if (before == 0)
        return 0;
    std::vector<std::shared_ptr<Stream>> streams;
    for (const std::shared_ptr<Stream> &s : table_.all()) {
        std::lock_guard<std::mutex> guard(s->lock);
        if (!s->destroyed && s->gpu == gpu && (!s->pool.empty() || s->parked_objects.load(std::memory_order_relaxed) || pending_bytes(*s)))
            streams.push_back(s);
    }
    retiring_streams([gpu](const Retiring &r) { return r.vidmem_bytes != 0 && (r.mem ? r.mem->owner : r.run.gpu) == gpu; },
                     &streams);
    for (const std::shared_ptr<Stream> &s : streams)
        synchronize(*s);  // BUSY (held sim work) or gone: nothing to wait for there
    const uint64_t after = pooled_bytes(gpu) + retiring_vidmem_bytes(gpu);
    return before > after ? before - after : 0;
}

uvm_status_t Streams::settle_retiring(const Client *client) {
    std::vector<std::shared_ptr<Stream>> streams;
    retiring_streams([client](const Retiring &r) { return r.mem && r.mem->client.get() == client; }, &streams);
    for (const std::shared_ptr<Stream> &s : streams) {
        const uvm_status_t status = synchronize(*s);
        if (status != UVM_OK && status != UVM_ERR_INVALID_HANDLE)  // a stream gone: its work is done
            return status;
    }
    reap(false);
    return UVM_OK;
}

uint64_t Streams::reap(bool fence_pools) {
    uint64_t released = 0;
    bool pools_left = false;
    const std::vector<std::shared_ptr<Stream>> streams = table_.all();
    std::vector<ReusedRun> runs;
    for (const std::shared_ptr<Stream> &s : streams) {
        {
            std::lock_guard<std::mutex> guard(s->lock);
            if (fence_pools) {
                unpark_locked(*s);  // memory is wanted back: kept objects too
                released += fence_and_release(*s, &runs);
            } else {
                released += release_pooled(*s, &runs, false);
            }
            pools_left = pools_left || !s->pool.empty() || s->pends();
        }
        if (fence_pools)
            retire_unparked(*s);
    }
    // A pool_put racing with this may be missed here; it is only a hint for
    // the opportunistic reaps, and every other reap looks at every pool.
    if (!pools_left)
        pools_used_.store(false, std::memory_order_relaxed);
    for (const ReusedRun &run : runs) {
        released += run_bytes(run);
        vidmem_run_free(mgr_, run);
    }

    std::vector<Retiring> finished;
    {
        std::lock_guard<std::mutex> guard(retire_lock_);
        auto keep = retiring_.begin();
        for (auto it = retiring_.begin(); it != retiring_.end(); ++it) {
            bool all_done = true;
            for (Fence &f : it->fences)
                all_done = all_done && settle(f);
            if (all_done) {
                if (it->mem)
                    retiring_objects_--;
                finished.push_back(std::move(*it));
            } else {
                if (keep != it)  // a vector moved onto itself comes out empty
                    *keep = std::move(*it);
                ++keep;
            }
        }
        retiring_.erase(keep, retiring_.end());
    }
    for (const Retiring &r : finished)
        released += r.mem ? r.mem->alloc_size : r.vidmem_bytes;
    finish_retired(finished);
    return released;
}

void Streams::drain() {
    const std::vector<std::shared_ptr<Stream>> streams = table_.all();
    for (const std::shared_ptr<Stream> &s : streams) {
        const auto *handle = reinterpret_cast<const uvm_stream_t *>(static_cast<uintptr_t>(table_.handle_of(s->id)));
        // Held sim work is let go: nothing else would ever release it now.
        while (destroy(handle) == UVM_ERR_BUSY)
            if (backend_streams(mgr_).stream_release(s->backend) != UVM_OK)
                break;
    }
    reap(false);
    // What is left waited for streams that could not be destroyed (a driver
    // failure): release it anyway rather than leak it, the GPU being torn down.
    std::vector<Retiring> rest;
    {
        std::lock_guard<std::mutex> guard(retire_lock_);
        rest.swap(retiring_);
    }
    finish_retired(rest);
    std::vector<ReusedRun> pooled;
    pools_.drain(&pooled);  // the GPUs' work is done: every stream was destroyed
    for (const ReusedRun &run : pooled)
        vidmem_run_free(mgr_, run);
    for (const std::shared_ptr<Stream> &st : table_.all()) {
        std::vector<ReusedRun> runs;
        {
            std::lock_guard<std::mutex> stream_guard(st->lock);
            unpark_locked(*st);
            release_pooled(*st, &runs, true);
        }
        retire_unparked(*st, true);  // released at once, as every retired object above: the GPU is torn down
        for (const ReusedRun &run : runs)
            vidmem_run_free(mgr_, run);
    }
    table_.clear();
    pools_used_ = false;
    retiring_objects_ = 0;
}

uint64_t Streams::pooled_bytes(uint32_t gpu) {
    const std::vector<std::shared_ptr<Stream>> streams = table_.all();
    uint64_t bytes = 0;
    for (const std::shared_ptr<Stream> &st : streams) {
        if (gpu != kAllGpus && st->gpu != gpu)
            continue;
        std::lock_guard<std::mutex> guard(st->lock);
        bytes += st->pool_bytes + pending_bytes(*st);
    }
    return bytes;
}

uint64_t Streams::stream_count() { return table_.size(); }

}  // namespace uvm
