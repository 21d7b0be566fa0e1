#include "chunk/chunk_cache.h"

#include <atomic>
#include <utility>

#include "common/assert.h"
#include "common/spin_lock.h"
#include "common/sizes.h"

namespace uvm {

namespace {

// By SizeIndex (4K, 64K, 2M): chunks taken from the PMM at once, and the most a
// thread keeps (half go back when full). 2M chunks are whole root chunks:
// a thread keeps few of them, so that idle caches do not hold much memory.
constexpr size_t kRefill[kSizeIndexCount] = {8, 8, 2};
constexpr size_t kCapacity[kSizeIndexCount] = {16, 16, 4};
constexpr size_t kMaxCapacity = 16;

// The callers' sizes are chunk sizes: two compares on the hot path.
SizeIndex size_index(uint64_t size) {
    UVM_ASSERT(chunk_size_index(size) != kNoSizeIndex);
    return size == kPageSize4K ? kIndex4K : size == kPageSize64K ? kIndex64K : kIndex2M;
}

std::atomic<uint64_t> g_next_key{1};

}  // namespace

struct ChunkCaches::Cache {
    SpinLock lock;  // its thread's, taken by another only to flush or copy it
    chunk::Pmm *pmm = nullptr;
    bool dead = false;    // its ChunkCaches is gone: never touch pmm again
    bool orphan = false;  // its thread has exited: drop it from the registry
    uint64_t chunks[kSizeIndexCount][kMaxCapacity];
    // A parked object's record, beside its chunk (free, take_parked); null
    // for a chunk with none. Only ever set at the top of a stack.
    std::shared_ptr<Mem> records[kSizeIndexCount][kMaxCapacity];
    uintptr_t owners[kSizeIndexCount][kMaxCapacity];  // a record's key (its client's), valid where it has one
    size_t count[kSizeIndexCount] = {};
    // count[], published for readers that must not take the lock (the
    // statistics): written under the lock, by plain stores, read relaxed.
    std::atomic<size_t> published[kSizeIndexCount] = {{0}, {0}, {0}};
    // Lock held: after every change of count[i].
    void publish(int i) { published[i].store(count[i], std::memory_order_relaxed); }
    // Objects made less objects freed by this thread. Written by its thread
    // only, so the cache line stays with it; read by objects().
    std::atomic<int64_t> objects{0};
    // Only this thread writes it: a plain store, no locked instruction.
    void count_objects(int delta) { objects.store(objects.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed); }

    // Lock held: the chunks from `from` up go back to the PMM, their records
    // into *dropped (destroyed by the caller, out of the lock).
    void give_back_from(int i, size_t from, std::vector<std::shared_ptr<Mem>> *dropped) {
        if (count[i] > from) {
            const uvm_status_t s = pmm->free(chunk_size_of_index(i), chunks[i] + from, count[i] - from);
            UVM_ASSERT(s == UVM_OK);
            (void)s;
            for (size_t k = from; k < count[i]; ++k)
                if (records[i][k])
                    dropped->push_back(std::move(records[i][k]));
        }
        count[i] = from;
        publish(i);
    }
    // Lock held: the next slot on top of size i's stack, for a chunk given
    // back (half the stack goes back to the PMM first where it is full).
    size_t push_slot(int i, std::vector<std::shared_ptr<Mem>> *dropped) {
        if (count[i] == kCapacity[i])
            give_back_from(i, kCapacity[i] / 2, dropped);
        return count[i]++;
    }
    // Lock held.
    void give_back(std::vector<std::shared_ptr<Mem>> *dropped) {
        for (int i = 0; i < kSizeIndexCount; i++)
            give_back_from(i, 0, dropped);
    }
};

namespace {

// The cache the calling thread used last, and its ChunkCaches' key: what
// nearly every call asks for, found with one thread-local access and no
// search (t_caches, which has a destructor, costs a guarded access and a
// walk). It points into t_caches.entries, which keeps that cache alive,
// and is set again whenever an entry goes.
struct LastCache {
    uint64_t key;
    ChunkCaches::Cache *cache;
};
thread_local LastCache t_last = {0, nullptr};

// The calling thread's caches, one per ChunkCaches it has used. On thread
// exit each gives its chunks back, unless its ChunkCaches has gone first.
struct ThreadCaches {
    std::vector<std::pair<uint64_t, std::shared_ptr<ChunkCaches::Cache>>> entries;
    ~ThreadCaches() {
        std::vector<std::shared_ptr<Mem>> dropped;
        for (auto &entry : entries) {
            ChunkCaches::Cache &c = *entry.second;
            std::lock_guard<SpinLock> guard(c.lock);
            if (!c.dead)
                c.give_back(&dropped);
            c.orphan = true;
        }
        t_last = {0, nullptr};  // a call made later in this thread's exit starts again
    }
};

thread_local ThreadCaches t_caches;

}  // namespace

ChunkCaches::ChunkCaches(chunk::Pmm *pmm) : pmm_(pmm), key_(g_next_key.fetch_add(1)) {}

ChunkCaches::~ChunkCaches() {
    std::vector<std::shared_ptr<Mem>> dropped;
    std::lock_guard<std::mutex> guard(registry_lock_);
    for (auto &cache : registry_) {
        std::lock_guard<SpinLock> cache_guard(cache->lock);
        if (!cache->orphan)
            cache->give_back(&dropped);
        cache->dead = true;
    }
    registry_.clear();
}

ChunkCaches::Cache &ChunkCaches::mine() {
    LastCache &last = t_last;
    if (__builtin_expect(last.key == key_, 1))
        return *last.cache;
    return mine_slow();
}

ChunkCaches::Cache &ChunkCaches::mine_slow() {
    auto &entries = t_caches.entries;
    for (auto &entry : entries)
        if (entry.first == key_) {
            t_last = {key_, entry.second.get()};
            return *entry.second;
        }
    // First use by this thread: drop entries of instances that are gone, then register.
    for (size_t i = 0; i < entries.size();) {
        bool dead;
        {
            std::lock_guard<SpinLock> guard(entries[i].second->lock);
            dead = entries[i].second->dead;
        }
        if (dead) {
            entries[i] = std::move(entries.back());
            entries.pop_back();
        } else {
            i++;
        }
    }
    auto cache = std::make_shared<Cache>();
    cache->pmm = pmm_;
    {
        std::lock_guard<std::mutex> guard(registry_lock_);
        registry_.push_back(cache);
    }
    entries.emplace_back(key_, cache);
    t_last = {key_, cache.get()};
    return *cache;
}

uvm_status_t ChunkCaches::alloc(uint64_t size, uint64_t *phys, std::vector<uint64_t> *grown, int objects) {
    const SizeIndex i = size_index(size);
    Cache &c = mine();
    std::shared_ptr<Mem> dropped;  // declared first: destroyed after the lock is released
    if (grown)
        grown->clear();
    {
        std::lock_guard<SpinLock> guard(c.lock);
        if (c.count[i] == 0) {
            // From what the PMM holds only: growing is for pmm_alloc, after
            // every thread's cached chunks went back.
            const uvm_status_t status = c.pmm->alloc(size, kRefill[i], false, c.chunks[i], grown, false);
            if (status == UVM_OK)
                c.count[i] = kRefill[i];
            else if (status != UVM_ERR_OUT_OF_MEMORY)
                return status;  // the backend failed: say so, do not retry
        }
        if (c.count[i]) {
            *phys = c.chunks[i][--c.count[i]];
            dropped = std::move(c.records[i][c.count[i]]);  // a parked object's: it goes (after the unlock)
            c.publish(i);
            c.count_objects(objects);
            return UVM_OK;
        }
    }
    // The PMM could not give a batch: one chunk.
    const uvm_status_t status = pmm_alloc(size, 1, false, phys, grown);
    if (status == UVM_OK)
        c.count_objects(objects);
    return status;
}

void ChunkCaches::undo_alloc(uint64_t size, uint64_t phys, const std::vector<uint64_t> &grown) {
    if (grown.empty()) {
        free(size, phys);  // it came from the cache (or a held root): back where it was
        return;
    }
    // The allocation refilled the cache, growing the PMM: the refill goes
    // back whole, and the roots it grew with it.
    const SizeIndex i = size_index(size);
    Cache &c = mine();
    std::lock_guard<SpinLock> guard(c.lock);
    UVM_ASSERT(c.count[i] < kCapacity[i]);
    c.chunks[i][c.count[i]++] = phys;
    // Only the refill is in the cache: it was empty, so no chunk has a record.
    c.pmm->undo_alloc(size, c.chunks[i], c.count[i], grown);
    c.count[i] = 0;
    c.publish(i);
}

uvm_status_t ChunkCaches::pmm_alloc(uint64_t size, size_t count, bool evictable, uint64_t *out,
                                    std::vector<uint64_t> *grown, chunk::Pmm::Holder holder, bool may_stitch) {
    // What the PMM holds first; before it grows (or fails), the free chunks
    // that sit in threads' caches go back to it, where they may complete a
    // run or a whole root: growing beside them would hold more than needed.
    uvm_status_t status = pmm_->alloc(size, count, evictable, out, grown, false, holder);
    if (status == UVM_ERR_OUT_OF_MEMORY) {
        flush_all();
        if (before_growth_) {
            // What the caches gave back may be enough; if not, what the
            // layers above keep goes back before the PMM grows.
            status = pmm_->alloc(size, count, evictable, out, grown, false, holder);
            if (status != UVM_ERR_OUT_OF_MEMORY)
                return status;
            before_growth_();
        }
        status = pmm_->alloc(size, count, evictable, out, grown, true, holder, may_stitch);
    }
    return status;
}

void ChunkCaches::free(uint64_t size, uint64_t phys, int objects) {
    const SizeIndex i = size_index(size);
    Cache &c = mine();
    std::vector<std::shared_ptr<Mem>> dropped;  // declared first: destroyed after the lock is released
    std::lock_guard<SpinLock> guard(c.lock);
    c.chunks[i][c.push_slot(i, &dropped)] = phys;
    c.publish(i);
    c.count_objects(objects);
}

void ChunkCaches::park(uint64_t size, uint64_t phys, int objects, std::shared_ptr<Mem> &&record, uintptr_t owner) {
    UVM_ASSERT(record);
    const SizeIndex i = size_index(size);
    Cache &c = mine();
    std::vector<std::shared_ptr<Mem>> dropped;  // declared first: destroyed after the lock is released
    std::lock_guard<SpinLock> guard(c.lock);
    const size_t k = c.push_slot(i, &dropped);
    c.owners[i][k] = owner;
    c.records[i][k] = std::move(record);
    c.chunks[i][k] = phys;
    c.publish(i);
    c.count_objects(objects);
}

bool ChunkCaches::take_parked(uint64_t size, uint64_t *phys, std::shared_ptr<Mem> *record, int objects,
                              uintptr_t owner) {
    const SizeIndex i = size_index(size);
    Cache &c = mine();
    std::lock_guard<SpinLock> guard(c.lock);
    const size_t n = c.count[i];
    if (n == 0 || !c.records[i][n - 1] || c.owners[i][n - 1] != owner)
        return false;
    *phys = c.chunks[i][n - 1];
    *record = std::move(c.records[i][n - 1]);
    c.count[i] = n - 1;
    c.publish(i);
    c.count_objects(objects);
    return true;
}

void ChunkCaches::flush_all() {
    // Destroyed after the threads' locks are released, but before the
    // registry's: a flush that returns has ended every record it found and
    // every record a concurrent flush took (it waited for that one), so a
    // client's parked objects are out of its count once any flush returns
    // (uvm_client_destroy relies on it). Ending a record takes its client's
    // watermark lock and the notice queue's, never the registry's.
    std::lock_guard<std::mutex> guard(registry_lock_);
    std::vector<std::shared_ptr<Mem>> dropped;
    for (size_t i = 0; i < registry_.size();) {
        bool orphan;
        {
            std::lock_guard<SpinLock> cache_guard(registry_[i]->lock);
            registry_[i]->give_back(&dropped);
            orphan = registry_[i]->orphan;
        }
        if (orphan) {
            departed_objects_ += registry_[i]->objects.load(std::memory_order_relaxed);
            registry_[i] = std::move(registry_.back());
            registry_.pop_back();
        } else {
            i++;
        }
    }
}

void ChunkCaches::count_object(int delta) { mine().count_objects(delta); }

void ChunkCaches::cached_bytes(uint64_t out[kSizeIndexCount]) {
    // The registry lock only keeps the list still: threads' own caches are
    // read without their locks, so a statistics read never waits for them.
    std::lock_guard<std::mutex> guard(registry_lock_);
    for (int i = 0; i < kSizeIndexCount; ++i)
        out[i] = 0;
    for (const auto &cache : registry_)
        for (int i = 0; i < kSizeIndexCount; ++i)
            out[i] += cache->published[i].load(std::memory_order_relaxed) * chunk_size_of_index(i);
}

void ChunkCaches::cached_chunks(std::vector<uint64_t> out[kSizeIndexCount]) {
    std::lock_guard<std::mutex> guard(registry_lock_);
    for (const auto &cache : registry_) {
        std::lock_guard<SpinLock> cache_guard(cache->lock);
        for (int i = 0; i < kSizeIndexCount; ++i)
            out[i].insert(out[i].end(), cache->chunks[i], cache->chunks[i] + cache->count[i]);
    }
}

uint64_t ChunkCaches::parked_bytes(uintptr_t owner, uint64_t *records) {
    uint64_t bytes = 0, n = 0;
    std::lock_guard<std::mutex> guard(registry_lock_);
    for (const auto &cache : registry_) {
        std::lock_guard<SpinLock> cache_guard(cache->lock);
        for (int i = 0; i < kSizeIndexCount; ++i)
            for (size_t k = 0; k < cache->count[i]; ++k)
                if (cache->records[i][k] && cache->owners[i][k] == owner) {
                    bytes += chunk_size_of_index(i);
                    n++;
                }
    }
    if (records)
        *records = n;
    return bytes;
}

uint64_t ChunkCaches::objects() {
    std::lock_guard<std::mutex> guard(registry_lock_);
    int64_t total = departed_objects_;
    for (const auto &cache : registry_)
        total += cache->objects.load(std::memory_order_relaxed);
    UVM_ASSERT(total >= 0);
    return static_cast<uint64_t>(total);
}

}  // namespace uvm
