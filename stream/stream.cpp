#include "stream/stream.h"

#include <algorithm>

#include "backend/stream_capability.h"
#include "common/assert.h"
#include "uvm/manager.h"

namespace uvm {

namespace {

// A stream's pool takes a fence for its unfenced runs once it holds this
// much, so that memory freed on a stream that never synchronizes still comes
// back to the PMM (cudaMallocAsync's release threshold plays this part).
constexpr size_t kPoolFenceRuns = 64;
constexpr uint64_t kPoolFenceBytes = 256ull << 20;

uint64_t run_bytes(const ReusedRun &run) { return run.chunk_size * run.count; }

// The backend's streams. A Stream exists only where the backend has them
// (create checks), so every call below but create's may take them as there.
backend::StreamCapability &backend_streams(Manager &mgr) {
    UVM_ASSERT(mgr.backend_streams());
    return *mgr.backend_streams();
}

bool same_kind(const ReusedRun &a, const ReusedRun &b) {
    return a.gpu == b.gpu && a.chunk_size == b.chunk_size && a.count == b.count && a.evictable == b.evictable &&
           a.remappable == b.remappable;
}

}  // namespace

Streams::~Streams() {
    UVM_ASSERT(retiring_.empty());
    UVM_ASSERT(table_.size() == 0);
}

uvm_status_t Streams::create(uint32_t gpu, void *native, uvm_stream_t **out) {
    auto stream = std::make_shared<Stream>();
    stream->gpu = gpu;
    if (!mgr_.backend_streams())
        return UVM_ERR_NOT_SUPPORTED;  // a backend without streams
    uvm_status_t status = mgr_.backend_streams()->stream_create(gpu, native, &stream->backend);
    if (status != UVM_OK)
        return status;
    uint64_t value;
    try {
        value = table_.insert(stream, &stream->id);
    } catch (...) {
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
        const uvm_status_t status = backend_streams(mgr_).stream_destroy(stream->backend);
        if (status != UVM_OK)
            return status;
        stream->destroyed = true;
        release_pooled(*stream, &runs, true);  // its work is done
    }
    table_.erase(stream->id);
    for (const ReusedRun &run : runs)
        vidmem_run_free(mgr_, run);
    reap(false);  // objects that waited for this stream
    return UVM_OK;
}

uvm_status_t Streams::synchronize(Stream &stream) {
    std::vector<ReusedRun> runs;
    {
        std::lock_guard<std::mutex> guard(stream.lock);
        if (stream.destroyed)
            return UVM_ERR_INVALID_HANDLE;
        const uvm_status_t status = backend_streams(mgr_).stream_synchronize(stream.backend);
        if (status != UVM_OK)
            return status;
        release_pooled(stream, &runs, true);  // everything freed on it so far is behind us
    }
    for (const ReusedRun &run : runs)
        vidmem_run_free(mgr_, run);
    reap(false);
    return UVM_OK;
}

uvm_status_t Streams::fence(Stream &stream, uint64_t *value) {
    std::lock_guard<std::mutex> guard(stream.lock);
    if (stream.destroyed) {
        *value = 0;
        return UVM_OK;
    }
    return backend_streams(mgr_).stream_fence(stream.backend, value);
}

bool Streams::done(const Fence &fence) {
    if (fence.value == 0)
        return true;
    std::lock_guard<std::mutex> guard(fence.stream->lock);
    return fence.stream->destroyed || backend_streams(mgr_).fence_done(fence.stream->backend, fence.value);
}

uvm_status_t Streams::wait(Stream &waiter, const Fence &fence) {
    if (fence.value == 0 || fence.stream.get() == &waiter)
        return UVM_OK;  // nothing to wait for, or ordered by the stream itself
    // Two stream locks: in id order, so that two waits the other way round cannot deadlock.
    Stream &other = *fence.stream;
    std::unique_lock<std::mutex> a(waiter.id < other.id ? waiter.lock : other.lock);
    std::unique_lock<std::mutex> b(waiter.id < other.id ? other.lock : waiter.lock);
    if (waiter.destroyed)
        return UVM_ERR_INVALID_HANDLE;
    if (other.destroyed || backend_streams(mgr_).fence_done(other.backend, fence.value))
        return UVM_OK;
    return backend_streams(mgr_).stream_wait(waiter.backend, other.backend, fence.value);
}

void Streams::retire(const std::shared_ptr<Mem> &mem, std::vector<Fence> fences) {
    UVM_ASSERT(!mem->gone());
    bool all_done = true;
    for (const Fence &f : fences)
        all_done = all_done && done(f);
    if (all_done) {
        mem_release(mgr_, *mem);
        return;
    }
    mem->retiring = true;
    std::lock_guard<std::mutex> guard(retire_lock_);
    retiring_.push_back({mem, std::move(fences)});
    retiring_objects_++;
    retiring_bytes_ += mem->alloc_size;
}

void Streams::pool_put(Stream &stream, const ReusedRun &run) {
    std::unique_lock<std::mutex> guard(stream.lock);
    if (stream.destroyed) {
        // Destroyed meanwhile by another thread (its work is done): nothing to wait for.
        guard.unlock();
        vidmem_run_free(mgr_, run);
        return;
    }
    stream.pool.push_back({run, 0, false});
    stream.pool_bytes += run_bytes(run);
    // A plain store, no read-modify-write: this is the stream-ordered hot path.
    if (!pools_used_.load(std::memory_order_relaxed))
        pools_used_.store(true, std::memory_order_relaxed);
    if (stream.pool.size() >= kPoolFenceRuns || stream.pool_bytes >= kPoolFenceBytes) {
        uint64_t value = 0;
        if (backend_streams(mgr_).stream_fence(stream.backend, &value) == UVM_OK)
            fence_unfenced(stream, value);
        // A failed fence leaves the runs unfenced: the stream keeps reusing
        // them, and synchronizing or destroying it gives them back.
    }
}

bool Streams::pool_take(Stream &stream, const ReusedRun &want, ReusedRun *out) {
    std::lock_guard<std::mutex> guard(stream.lock);
    if (stream.destroyed)
        return false;
    // Newest first: the run most likely still in the GPU's caches, and the
    // one whose fence is furthest from being done.
    for (size_t i = stream.pool.size(); i-- > 0;) {
        if (!same_kind(stream.pool[i].run, want))
            continue;
        *out = stream.pool[i].run;
        stream.pool.erase(stream.pool.begin() + static_cast<std::ptrdiff_t>(i));
        stream.pool_bytes -= run_bytes(*out);
        return true;
    }
    return false;
}

// Give `stream`'s pooled runs that have no fence yet the fence `value`. The
// caller holds the stream's lock.
void Streams::fence_unfenced(Stream &stream, uint64_t value) {
    for (Stream::Pooled &p : stream.pool)
        if (!p.fenced) {
            p.fence = value;
            p.fenced = true;
        }
}

// Move `stream`'s pooled runs whose fences are done (all of them: `all`) to
// *out. The caller holds the stream's lock.
void Streams::release_pooled(Stream &stream, std::vector<ReusedRun> *out, bool all) {
    auto keep = stream.pool.begin();
    for (auto it = stream.pool.begin(); it != stream.pool.end(); ++it) {
        const bool release = all || (it->fenced && (stream.destroyed ||
                                                        backend_streams(mgr_).fence_done(stream.backend, it->fence)));
        if (release) {
            out->push_back(it->run);
            stream.pool_bytes -= run_bytes(it->run);
        } else {
            *keep++ = *it;
        }
    }
    stream.pool.erase(keep, stream.pool.end());
}

void Streams::finish_retired(std::vector<std::shared_ptr<Mem>> &mems) {
    for (const std::shared_ptr<Mem> &mem : mems) {
        std::lock_guard<std::mutex> guard(mem->lock);
        UVM_ASSERT(mem->retiring && !mem->dead);
        mem->retiring = false;
        retiring_bytes_ -= mem->alloc_size;
        mem_release(mgr_, *mem);
    }
}

uint64_t Streams::reap(bool fence_pools) {
    uint64_t released = 0;
    bool pools_left = false;
    const std::vector<std::shared_ptr<Stream>> streams = table_.all();
    std::vector<ReusedRun> runs;
    for (const std::shared_ptr<Stream> &s : streams) {
        std::lock_guard<std::mutex> guard(s->lock);
        if (fence_pools && !s->destroyed) {
            bool unfenced = false;
            for (const Stream::Pooled &p : s->pool)
                unfenced = unfenced || !p.fenced;
            uint64_t value = 0;
            if (unfenced && backend_streams(mgr_).stream_fence(s->backend, &value) == UVM_OK)
                fence_unfenced(*s, value);
        }
        release_pooled(*s, &runs, false);
        pools_left = pools_left || !s->pool.empty();
    }
    // A pool_put racing with this may be missed here; it is only a hint for
    // the opportunistic reaps, and every other reap looks at every pool.
    if (!pools_left)
        pools_used_.store(false, std::memory_order_relaxed);
    for (const ReusedRun &run : runs) {
        released += run_bytes(run);
        vidmem_run_free(mgr_, run);
    }

    std::vector<std::shared_ptr<Mem>> finished;
    {
        std::lock_guard<std::mutex> guard(retire_lock_);
        auto keep = retiring_.begin();
        for (auto it = retiring_.begin(); it != retiring_.end(); ++it) {
            bool all_done = true;
            for (const Fence &f : it->fences)
                all_done = all_done && done(f);
            if (all_done) {
                finished.push_back(std::move(it->mem));
                retiring_objects_--;
            } else {
                if (keep != it)  // a vector moved onto itself comes out empty
                    *keep = std::move(*it);
                ++keep;
            }
        }
        retiring_.erase(keep, retiring_.end());
    }
    for (const std::shared_ptr<Mem> &mem : finished)
        released += mem->alloc_size;
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
    std::vector<std::shared_ptr<Mem>> rest;
    {
        std::lock_guard<std::mutex> guard(retire_lock_);
        for (Retiring &r : retiring_)
            rest.push_back(std::move(r.mem));
        retiring_.clear();
    }
    finish_retired(rest);
    for (const std::shared_ptr<Stream> &st : table_.all()) {
        std::vector<ReusedRun> runs;
        {
            std::lock_guard<std::mutex> stream_guard(st->lock);
            release_pooled(*st, &runs, true);
        }
        for (const ReusedRun &run : runs)
            vidmem_run_free(mgr_, run);
    }
    table_.clear();
    pools_used_ = false;
    retiring_objects_ = 0;
}

uint64_t Streams::pooled_bytes() {
    const std::vector<std::shared_ptr<Stream>> streams = table_.all();
    uint64_t bytes = 0;
    for (const std::shared_ptr<Stream> &st : streams) {
        std::lock_guard<std::mutex> guard(st->lock);
        bytes += st->pool_bytes;
    }
    return bytes;
}

uint64_t Streams::stream_count() { return table_.size(); }

}  // namespace uvm
