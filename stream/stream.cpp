#include "stream/stream.h"

#include <algorithm>

#include "backend/stream_capability.h"
#include "common/assert.h"
#include "common/sizes.h"
#include "uvm/manager.h"

namespace uvm {

namespace {

// A stream's pool takes a fence for its unfenced runs once it holds this
// much, so that memory freed on a stream that never synchronizes still comes
// back to the PMM (cudaMallocAsync's release threshold plays this part).
constexpr size_t kPoolFenceRuns = 8;
constexpr uint64_t kPoolFenceBytes = 32ull << 20;

uint64_t run_bytes(const ReusedRun &run) { return run.chunk_size * run.count; }

// The backend's streams. A Stream exists only where the backend has them
// (create checks), so every call below but create's may take them as there.
backend::StreamCapability &backend_streams(Manager &mgr) {
    UVM_ASSERT(mgr.backend_streams());
    return *mgr.backend_streams();
}

// Whether a pooled run (`have`, of a long run when `long_run`) can give
// `want` chunks (may_serve), and all it asks for (fits): the same kind, and
// short requests only from short runs: the PMM's rule (chunk/pmm.h), for the same reason (a small
// object cut from a long run would keep the run's whole driver handle held).
constexpr uint64_t kShortRunBytes = 8ull << 20;
bool may_serve(const ReusedRun &have, bool long_run, const ReusedRun &want) {
    return have.gpu == want.gpu && have.chunk_size == want.chunk_size && have.evictable == want.evictable &&
           have.remappable == want.remappable && (!long_run || run_bytes(want) > kShortRunBytes);
}
bool fits(const ReusedRun &have, bool long_run, const ReusedRun &want) {
    return have.count >= want.count && may_serve(have, long_run, want);
}

// The chunks a retiring object keeps on its owner.
uint64_t vidmem_chunk_bytes(const Mem &mem) {
    return mem.backing == UVM_BACKING_VIDMEM && !mem.imported ? mem.chunk_size * mem.chunks.size() : 0;
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
    const uint64_t vidmem = vidmem_chunk_bytes(*mem);
    std::lock_guard<std::mutex> guard(retire_lock_);
    retiring_.push_back({mem, std::move(fences), vidmem});
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
    stream.pool.push_back({run, 0, false, run_bytes(run) > kShortRunBytes});
    stream.pool_bytes += run_bytes(run);
    stream.unfenced_runs++;
    stream.unfenced_bytes += run_bytes(run);
    // A plain store, no read-modify-write: this is the stream-ordered hot path.
    if (!pools_used_.load(std::memory_order_relaxed))
        pools_used_.store(true, std::memory_order_relaxed);
    // One fence per kPoolFenceRuns runs (or bytes) put, however far behind
    // the stream is: counting only the unfenced tail, a backlog of fenced
    // runs does not make every later put take one.
    if (stream.unfenced_runs < kPoolFenceRuns && stream.unfenced_bytes < kPoolFenceBytes)
        return;
    uint64_t value = 0;
    if (backend_streams(mgr_).stream_fence(stream.backend, &value) == UVM_OK)
        fence_unfenced(stream, value);
    // A failed fence leaves the runs unfenced: the stream keeps reusing
    // them, and synchronizing or destroying it gives them back.
    // Runs of this stream whose work is done go back to the PMM now, not at
    // the next reap: memory a stream no longer needs is everyone's again
    // within kPoolFenceRuns frees (one query per fence, oldest first).
    std::vector<ReusedRun> done;
    release_pooled(stream, &done, false);
    guard.unlock();
    for (const ReusedRun &r : done)
        vidmem_run_free(mgr_, r);
}

bool Streams::pool_take(Stream &stream, const ReusedRun &want, ReusedRun *out) {
    std::lock_guard<std::mutex> guard(stream.lock);
    if (stream.destroyed)
        return false;
    // Cheapest first: one pooled run; neighbours joined; a larger chunk
    // size's run carved. What the stream freed is its own to reuse at once,
    // whatever its size, as cudaMallocAsync's pool and PyTorch's allocator
    // let a stream reuse its frees: only the PMM must wait for the fence.
    return take_one(stream, want, out) || take_joined(stream, want, out) || take_carved(stream, want, out);
}

// The pooled run of the fewest chunks that are enough (best fit: a long run
// stays for a long request); newest first among equals, the run most likely
// still in the GPU's caches. An exact fit ends the walk. Stream lock held.
bool Streams::take_one(Stream &stream, const ReusedRun &want, ReusedRun *out) {
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
    *out = take_front(stream, best, want.count);
    return true;
}

// The first `count` chunks of pooled run `i` (all of them: the entry goes),
// out of the pool's counts; the rest keeps its place and fence, since the
// chunks are the same ones. Stream lock held.
ReusedRun Streams::take_front(Stream &stream, size_t i, size_t count) {
    Stream::Pooled &p = stream.pool[i];
    UVM_ASSERT(count > 0 && count <= p.run.count);
    ReusedRun taken = p.run;
    taken.count = count;
    const uint64_t bytes = run_bytes(taken);
    stream.pool_bytes -= bytes;
    if (!p.fenced) {
        stream.unfenced_bytes -= bytes;
        stream.unfenced_runs -= p.run.count == count;
    }
    if (p.run.count == count) {
        stream.pool.erase(stream.pool.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
        p.run.phys += bytes;
        p.run.count -= count;
    }
    return taken;
}

// Pooled runs that lie side by side in physical memory, joined into one run
// of `want.count` chunks: runs freed one by one (a training step's
// activations) serve a longer request. The joined runs may carry different
// fences; the stream orders its own reuse of all of them. Among the windows
// of neighbours long enough, the one of the fewest chunks (best fit), its
// first `want.count` chunks; what the last run has beyond stays pooled.
// O(n log n) in the pool's runs, only where no single run fits (the
// alternative is growing the PMM). Stream lock held.
bool Streams::take_joined(Stream &stream, const ReusedRun &want, ReusedRun *out) {
    std::vector<std::pair<uint64_t, size_t>> near;  // (phys, index) of the runs that may serve want
    uint64_t chunks = 0;
    for (size_t i = 0; i < stream.pool.size(); ++i)
        if (may_serve(stream.pool[i].run, stream.pool[i].long_run, want)) {
            near.emplace_back(stream.pool[i].run.phys, i);
            chunks += stream.pool[i].run.count;
        }
    if (near.size() < 2 || chunks < want.count)
        return false;
    std::sort(near.begin(), near.end());
    const uint64_t size = want.chunk_size;
    size_t best_first = near.size(), best_last = 0;
    uint64_t best_total = UINT64_MAX;
    for (size_t first = 0; first < near.size(); ++first) {
        uint64_t total = 0;
        for (size_t last = first; last < near.size(); ++last) {
            const ReusedRun &r = stream.pool[near[last].second].run;
            if (last > first) {
                const ReusedRun &prev = stream.pool[near[last - 1].second].run;
                if (prev.phys + prev.count * size != r.phys)
                    break;  // a gap: no window from `first` reaches further
            }
            total += r.count;
            if (total >= want.count) {
                if (last > first && total < best_total) {
                    best_total = total;
                    best_first = first;
                    best_last = last;
                }
                break;
            }
        }
    }
    if (best_first == near.size())
        return false;
    // Take the window's runs front to back; indices of later pool entries
    // shift as earlier ones go, so take from the highest index down and
    // build the run from its known start.
    std::vector<std::pair<size_t, size_t>> parts;  // (pool index, chunks taken)
    size_t needed = want.count;
    for (size_t k = best_first; k <= best_last; ++k) {
        const size_t i = near[k].second;
        const size_t n = std::min<size_t>(needed, stream.pool[i].run.count);
        parts.emplace_back(i, n);
        needed -= n;
    }
    UVM_ASSERT(needed == 0);
    const uint64_t phys = stream.pool[near[best_first].second].run.phys;
    std::sort(parts.begin(), parts.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
    for (const auto &part : parts)
        take_front(stream, part.first, part.second);
    *out = want;
    out->phys = phys;
    joined_takes_.fetch_add(1, std::memory_order_relaxed);
    return true;
}

// A request of 64K or 4K chunks that one root (or one 64K chunk) holds, from
// a pooled run of the next larger chunk size: its last chunk is carved in
// the PMM (Pmm::carve) into chunks of the size asked for, still allocated,
// still this stream's; the request takes the first ones and the rest stays
// pooled beside the run it came from, under the same fence. Short runs
// only: a carved root must never keep a long run's handle (chunk/pmm.h).
// Stream lock held.
bool Streams::take_carved(Stream &stream, const ReusedRun &want, ReusedRun *out) {
    if (want.remappable || want.chunk_size == kPageSize2M)
        return false;
    const uint64_t per_parent = want.chunk_size == kPageSize64K ? kRootChunkSize / kPageSize64K : kPageSize64K / kPageSize4K;
    if (want.count > per_parent)
        return false;
    // 64K from a root; 4K from a 64K chunk, else from a root by way of its first 64K chunk.
    const uint64_t sources[2] = {want.chunk_size == kPageSize64K ? kPageSize2M : kPageSize64K, kPageSize2M};
    for (uint64_t from : sources) {
        ReusedRun kind = want;
        kind.chunk_size = from;
        kind.count = 1;
        size_t best = stream.pool.size();
        for (size_t i = stream.pool.size(); i-- > 0;)
            if (fits(stream.pool[i].run, stream.pool[i].long_run, kind) &&
                (best == stream.pool.size() || stream.pool[i].run.count < stream.pool[best].run.count))
                best = i;
        if (best < stream.pool.size()) {
            carve_last(stream, best, want, out);
            carved_takes_.fetch_add(1, std::memory_order_relaxed);
            return true;
        }
    }
    return false;
}

// take_carved's step: the last chunk of pooled run `i` carved for `want`.
// Stream lock held.
void Streams::carve_last(Stream &stream, size_t i, const ReusedRun &want, ReusedRun *out) {
    const Stream::Pooled source = stream.pool[i];
    const uint64_t from = source.run.chunk_size;
    const uint64_t parent = source.run.phys + (source.run.count - 1) * from;
    size_t at;  // where the rest goes: beside its source, whose fence it keeps
    if (source.run.count == 1) {
        take_front(stream, i, 1);
        at = i;
    } else {
        Stream::Pooled &p = stream.pool[i];
        p.run.count -= 1;
        stream.pool_bytes -= from;
        if (!p.fenced)
            stream.unfenced_bytes -= from;
        at = i + 1;
    }
    chunk::Pmm &pmm = mgr_.gpu(want.gpu).pmm;
    std::vector<ReusedRun> rest;
    auto run = [&](uint64_t phys, uint64_t size, size_t count) {
        ReusedRun r = want;
        r.phys = phys;
        r.chunk_size = size;
        r.count = count;
        return r;
    };
    uvm_status_t status = UVM_OK;
    if (from == kPageSize2M) {
        status = pmm.carve(parent, kPageSize2M, kPageSize64K);
        if (want.chunk_size == kPageSize64K) {
            rest.push_back(run(parent + want.count * kPageSize64K, kPageSize64K, kRootChunkSize / kPageSize64K - want.count));
        } else {
            if (status == UVM_OK)
                status = pmm.carve(parent, kPageSize64K, kPageSize4K);
            rest.push_back(run(parent + kPageSize64K, kPageSize64K, kRootChunkSize / kPageSize64K - 1));
            rest.push_back(run(parent + want.count * kPageSize4K, kPageSize4K, kPageSize64K / kPageSize4K - want.count));
        }
    } else {
        status = pmm.carve(parent, kPageSize64K, kPageSize4K);
        rest.push_back(run(parent + want.count * kPageSize4K, kPageSize4K, kPageSize64K / kPageSize4K - want.count));
    }
    // The pool's chunks are allocated in the PMM, as the carve needs.
    UVM_ASSERT(status == UVM_OK);
    (void)status;
    for (const ReusedRun &r : rest) {
        if (r.count == 0)
            continue;
        stream.pool.insert(stream.pool.begin() + static_cast<std::ptrdiff_t>(at++),
                           Stream::Pooled{r, source.fence, source.fenced, false});
        stream.pool_bytes += run_bytes(r);
        if (!source.fenced) {
            stream.unfenced_runs++;
            stream.unfenced_bytes += run_bytes(r);
        }
    }
    *out = run(parent, want.chunk_size, want.count);
}

// Give `stream`'s pooled runs that have no fence yet the fence `value`. The
// caller holds the stream's lock.
void Streams::fence_unfenced(Stream &stream, uint64_t value) {
    for (size_t i = stream.pool.size(); i-- > 0 && !stream.pool[i].fenced;) {
        stream.pool[i].fence = value;
        stream.pool[i].fenced = true;
    }
    stream.unfenced_runs = 0;
    stream.unfenced_bytes = 0;
}

// Move `stream`'s pooled runs whose fences are done (all of them: `all`) to
// *out. The caller holds the stream's lock.
// Fences never decrease along the pool: one query per distinct fence, and
// the first fence not done ends the walk (everything after waits for it).
void Streams::release_pooled(Stream &stream, std::vector<ReusedRun> *out, bool all) {
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
}

void Streams::finish_retired(std::vector<Retiring> &done) {
    for (Retiring &r : done) {
        Mem &mem = *r.mem;
        std::lock_guard<std::mutex> guard(mem.lock);
        UVM_ASSERT(mem.retiring && !mem.dead);
        mem.retiring = false;
        retiring_bytes_ -= mem.alloc_size;
        retiring_vidmem_[mem.owner] -= r.vidmem_bytes;
        mem_release(mgr_, mem);
    }
}

uint64_t Streams::wait_pending(uint32_t gpu) {
    const uint64_t before = pooled_bytes(gpu) + retiring_vidmem_bytes(gpu);
    if (before == 0)
        return 0;
    std::vector<std::shared_ptr<Stream>> streams;
    auto add = [&](const std::shared_ptr<Stream> &s) {
        if (s && std::find(streams.begin(), streams.end(), s) == streams.end())
            streams.push_back(s);
    };
    for (const std::shared_ptr<Stream> &s : table_.all()) {
        std::lock_guard<std::mutex> guard(s->lock);
        if (!s->destroyed && s->gpu == gpu && !s->pool.empty())
            add(s);
    }
    {
        std::lock_guard<std::mutex> guard(retire_lock_);
        for (const Retiring &r : retiring_)
            if (r.vidmem_bytes != 0 && r.mem->owner == gpu)
                for (const Fence &f : r.fences)
                    add(f.stream);
    }
    for (const std::shared_ptr<Stream> &s : streams)
        synchronize(*s);  // BUSY (held sim work) or gone: nothing to wait for there
    const uint64_t after = pooled_bytes(gpu) + retiring_vidmem_bytes(gpu);
    return before > after ? before - after : 0;
}

uvm_status_t Streams::settle_retiring(const Client *client) {
    std::vector<std::shared_ptr<Stream>> streams;
    {
        std::lock_guard<std::mutex> guard(retire_lock_);
        for (const Retiring &r : retiring_)
            if (r.mem->client.get() == client)
                for (const Fence &f : r.fences)
                    if (f.stream && std::find(streams.begin(), streams.end(), f.stream) == streams.end())
                        streams.push_back(f.stream);
    }
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
        std::lock_guard<std::mutex> guard(s->lock);
        if (fence_pools && !s->destroyed) {
            uint64_t value = 0;
            if (s->unfenced_runs != 0 && backend_streams(mgr_).stream_fence(s->backend, &value) == UVM_OK)
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

    std::vector<Retiring> finished;
    {
        std::lock_guard<std::mutex> guard(retire_lock_);
        auto keep = retiring_.begin();
        for (auto it = retiring_.begin(); it != retiring_.end(); ++it) {
            bool all_done = true;
            for (const Fence &f : it->fences)
                all_done = all_done && done(f);
            if (all_done) {
                finished.push_back(std::move(*it));
                retiring_objects_--;
            } else {
                if (keep != it)  // a vector moved onto itself comes out empty
                    *keep = std::move(*it);
                ++keep;
            }
        }
        retiring_.erase(keep, retiring_.end());
    }
    for (const Retiring &r : finished)
        released += r.mem->alloc_size;
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

uint64_t Streams::pooled_bytes(uint32_t gpu) {
    const std::vector<std::shared_ptr<Stream>> streams = table_.all();
    uint64_t bytes = 0;
    for (const std::shared_ptr<Stream> &st : streams) {
        if (gpu != kAllGpus && st->gpu != gpu)
            continue;
        std::lock_guard<std::mutex> guard(st->lock);
        bytes += st->pool_bytes;
    }
    return bytes;
}

uint64_t Streams::stream_count() { return table_.size(); }

}  // namespace uvm
