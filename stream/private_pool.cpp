// Private pools: see private_pool.h.
#include "stream/private_pool.h"

#include "stream/stream.h"

namespace uvm {

namespace {

uint64_t run_bytes(const ReusedRun &run) { return run.chunk_size * run.count; }

// Whether a free run can serve `want` on `stream`: the same kind, enough
// chunks, and ordered for it (freed on it, or its work done).
bool serves(const PrivatePool::FreeRun &have, const Stream *stream, const ReusedRun &want) {
    const ReusedRun &r = have.run;
    return r.gpu == want.gpu && r.chunk_size == want.chunk_size && r.count >= want.count &&
           r.evictable == want.evictable && r.remappable == want.remappable &&
           (!have.stream || have.stream.get() == stream);
}

}  // namespace

uvm_status_t PrivatePools::create(uint32_t gpu, uvm_pool_t **out) {
    auto pool = std::make_shared<PrivatePool>();
    pool->gpu = gpu;
    const uint64_t value = table_.insert(pool, &pool->id);
    *out = reinterpret_cast<uvm_pool_t *>(static_cast<uintptr_t>(value));
    return UVM_OK;
}

const std::shared_ptr<PrivatePool> &PrivatePools::lookup(const uvm_pool_t *handle) {
    return table_.lookup(reinterpret_cast<uintptr_t>(handle));
}

uvm_status_t PrivatePools::destroy(const uvm_pool_t *handle, std::vector<ReusedRun> *runs) {
    const std::shared_ptr<PrivatePool> pool = lookup(handle);  // a copy: the thread's cache changes below
    if (!pool)
        return UVM_ERR_INVALID_HANDLE;
    {
        std::lock_guard<std::mutex> guard(pool->lock);
        if (pool->destroyed)
            return UVM_ERR_INVALID_HANDLE;  // another thread's destroy won
        if (pool->streams)
            return UVM_ERR_BUSY;
        pool->destroyed = true;
        for (const PrivatePool::FreeRun &f : pool->free)
            runs->push_back(f.run);
        pool->free.clear();
        pool->free_bytes = 0;
    }
    table_.erase(pool->id);
    return UVM_OK;
}

bool PrivatePools::take(PrivatePool &pool, const Stream *stream, const ReusedRun &want, ReusedRun *out) {
    std::lock_guard<std::mutex> guard(pool.lock);
    if (pool.destroyed)
        return false;
    // The fewest chunks that are enough; newest first among equals. An exact
    // fit ends the walk.
    size_t best = pool.free.size();
    for (size_t i = pool.free.size(); i-- > 0;) {
        const PrivatePool::FreeRun &have = pool.free[i];
        if (!serves(have, stream, want) || (best < pool.free.size() && have.run.count >= pool.free[best].run.count))
            continue;
        best = i;
        if (have.run.count == want.count)
            break;
    }
    if (best == pool.free.size())
        return false;
    PrivatePool::FreeRun &f = pool.free[best];
    *out = f.run;
    out->count = want.count;
    pool.free_bytes -= run_bytes(*out);
    if (f.run.count == want.count) {
        pool.free.erase(pool.free.begin() + static_cast<std::ptrdiff_t>(best));
    } else {
        f.run.phys += run_bytes(*out);  // the rest keeps its place and its stream
        f.run.count -= want.count;
    }
    return true;
}

bool PrivatePools::put(PrivatePool &pool, const ReusedRun &run, std::shared_ptr<Stream> stream) {
    std::lock_guard<std::mutex> guard(pool.lock);
    if (pool.destroyed)
        return false;
    pool.free.push_back({run, std::move(stream)});
    pool.free_bytes += run_bytes(run);
    return true;
}

void PrivatePools::joined(PrivatePool &pool, uint64_t bytes) {
    std::lock_guard<std::mutex> guard(pool.lock);
    pool.objects++;
    pool.live_bytes += bytes;
}

bool PrivatePools::returned(PrivatePool &pool, const ReusedRun &run, std::shared_ptr<Stream> stream) {
    std::lock_guard<std::mutex> guard(pool.lock);
    UVM_ASSERT(pool.objects > 0 && pool.live_bytes >= run_bytes(run));
    pool.objects--;
    pool.live_bytes -= run_bytes(run);
    if (pool.destroyed)
        return false;
    pool.free.push_back({run, std::move(stream)});
    pool.free_bytes += run_bytes(run);
    return true;
}

void PrivatePools::settled(const Stream *stream) {
    for (const std::shared_ptr<PrivatePool> &pool : table_.all()) {
        std::lock_guard<std::mutex> guard(pool->lock);
        for (PrivatePool::FreeRun &f : pool->free)
            if (f.stream.get() == stream)
                f.stream.reset();
    }
}

uint64_t PrivatePools::free_bytes(uint32_t gpu) {
    uint64_t bytes = 0;
    for (const std::shared_ptr<PrivatePool> &pool : table_.all()) {
        if (pool->gpu != gpu)
            continue;
        std::lock_guard<std::mutex> guard(pool->lock);
        bytes += pool->free_bytes;
    }
    return bytes;
}

void PrivatePools::drain(std::vector<ReusedRun> *runs) {
    for (const std::shared_ptr<PrivatePool> &pool : table_.all()) {
        std::lock_guard<std::mutex> guard(pool->lock);
        pool->destroyed = true;
        for (const PrivatePool::FreeRun &f : pool->free)
            runs->push_back(f.run);
        pool->free.clear();
        pool->free_bytes = 0;
    }
    table_.clear();
}

}  // namespace uvm
