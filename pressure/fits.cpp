// The largest request that fits: see fits.h.
#include "pressure/fits.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/bitmap.h"
#include "common/sizes.h"
#include "pressure/client.h"
#include "pressure/gpu_pressure.h"
#include "pressure/residency.h"
#include "uvm/mem.h"

namespace uvm {

namespace {

using RootUsage = chunk::Pmm::RootUsage;

uint64_t align_down_2m(uint64_t bytes) { return bytes & ~(kRootChunkSize - 1); }

// What a view of the PMMs subtracts never goes below zero: the caches and
// the PMM are read one after the other, and other threads go on meanwhile.
void move_to_free(RootUsage &u, uint32_t *from, uint64_t bytes) {
    const uint32_t b = static_cast<uint32_t>(std::min<uint64_t>(bytes, *from));
    *from -= b;
    u.free += b;
}

// The chunks of the run [first, first + bytes) back in the view, root by root.
void release_run(std::vector<RootUsage> &usage, uint64_t first, uint64_t bytes, bool evictable) {
    for (uint64_t at = first; at < first + bytes;) {
        const uint64_t root = at / kRootChunkSize;
        const uint64_t end = std::min(first + bytes, (root + 1) * kRootChunkSize);
        if (root < usage.size()) {
            RootUsage &u = usage[root];
            move_to_free(u, evictable ? &u.evictable : &u.pinned, end - at);
        }
        at = end;
    }
}

Bitmap whole_free_roots(const std::vector<RootUsage> &usage) {
    Bitmap free(usage.size());
    for (size_t i = 0; i < usage.size(); ++i)
        if (usage[i].free == kRootChunkSize)
            free.set(i);
    return free;
}

// A resident evictable object of the GPU, as its lock showed it.
struct Candidate {
    bool remap = false;  // in the GPU's remap_pmm
    uint64_t first = 0;  // its run's physical address
    uint64_t bytes = 0;  // alloc_size
    uint64_t last_use = 0;
    bool discard = false;   // UVM_MEM_DISCARDABLE: no host bytes kept
    bool can_go = false;    // mem_can_evict: OK
    const Client *client = nullptr;
    bool client_roots = false;  // in a sleepable client's roots: its own evictions only (cold_roots passes it by)
    bool evicted = false;   // in the simulated eviction
};

// The objects cold_roots (residency.cpp) would see: those it can lock now,
// resident and live (and of `only`, where given).
std::vector<Candidate> candidates(Manager &mgr, uint32_t gpu, const Mem *skip_a, const Mem *skip_b,
                                  const Client *only = nullptr) {
    GpuState &g = mgr.gpu(gpu);
    std::vector<std::shared_ptr<Mem>> keep;
    {
        std::lock_guard<std::mutex> guard(g.pressure->evictable_lock);
        keep.reserve(g.pressure->evictable.size());
        for (const auto &entry : g.pressure->evictable)
            if (entry.first != skip_a && entry.first != skip_b)
                if (std::shared_ptr<Mem> m = entry.second.lock())
                    keep.push_back(std::move(m));
    }
    std::vector<Candidate> out;
    out.reserve(keep.size());
    for (const std::shared_ptr<Mem> &m : keep) {
        std::unique_lock<uvm::Mutex> guard(m->lock, std::try_to_lock);
        // A stitched object is pinned (never evictable), its roots counted so
        // in the PMM's usage already; its chunks are no one run to walk here.
        if (!guard.owns_lock() || m->gone() || m->evicted || m->stitched || (only && m->client.get() != only))
            continue;
        Candidate c;
        c.remap = m->remappable;
        c.first = m->chunks[0];
        c.bytes = m->alloc_size;
        c.last_use = m->last_use.load(std::memory_order_relaxed);
        c.discard = (m->flags & UVM_MEM_DISCARDABLE) != 0;
        c.can_go = mem_can_evict(mgr, *m) == UVM_OK;
        c.client = m->client.get();
        c.client_roots = m->client_roots;
        out.push_back(c);
    }
    return out;
}

// The simulated PMMs of one GPU: both usage views, as if the caches were
// flushed, and evictions applied to them.
struct View {
    std::vector<RootUsage> main, remap;
    std::vector<RootUsage> &of(bool is_remap) { return is_remap ? remap : main; }
};

template <typename F>
void for_each_root(const Candidate &c, F &&f) {
    for (uint64_t root = c.first & ~(kRootChunkSize - 1); root < c.first + c.bytes; root += kRootChunkSize)
        f(root / kRootChunkSize);
}

bool has_pinned(View &v, bool remap, uint64_t root) {
    const std::vector<RootUsage> &u = v.of(remap);
    return root < u.size() && u[root].pinned > 0;
}

// mem_evict's host limit: whether `c` may go with `*held` bytes evicted (and count it).
bool within_limit(const Candidate &c, uint64_t limit, uint64_t *held) {
    if (c.discard || !limit)
        return true;
    if (*held + c.bytes > limit)
        return false;
    *held += c.bytes;
    return true;
}

// evict_one (residency.cpp) on the view: the roots of the candidates not yet
// evicted, coldest first; in each without pinned memory every candidate that
// can go goes; the first root so made whole ends the call.
bool simulate_evict_one(View &v, std::vector<Candidate> &cands, uint64_t limit, uint64_t *held) {
    struct Root {
        bool remap;
        uint64_t index;
        uint64_t hottest = 0;
        std::vector<size_t> objects;
    };
    std::vector<Root> roots;
    std::map<std::pair<bool, uint64_t>, size_t> where;
    for (size_t i = 0; i < cands.size(); ++i) {
        if (cands[i].evicted || cands[i].client_roots)
            continue;
        for_each_root(cands[i], [&](uint64_t root) {
            auto it = where.emplace(std::make_pair(cands[i].remap, root), roots.size()).first;
            if (it->second == roots.size())
                roots.push_back({cands[i].remap, root, 0, {}});
            Root &r = roots[it->second];
            r.hottest = std::max(r.hottest, cands[i].last_use);
            r.objects.push_back(i);
        });
    }
    std::sort(roots.begin(), roots.end(), [](const Root &a, const Root &b) { return a.hottest < b.hottest; });
    bool evicted_any = false;
    for (const Root &r : roots) {
        if (has_pinned(v, r.remap, r.index))
            continue;
        for (size_t i : r.objects) {
            Candidate &c = cands[i];
            if (c.evicted || !c.can_go || !within_limit(c, limit, held))
                continue;
            c.evicted = true;
            release_run(v.of(c.remap), c.first, c.bytes, true);
            evicted_any = true;
        }
        const std::vector<RootUsage> &u = v.of(r.remap);
        if (evicted_any && r.index < u.size() && u[r.index].free == kRootChunkSize)
            return true;
    }
    return evicted_any;
}

// Everything the ladder of evict_one calls evicts before it finds nothing
// more. Without a host limit the order cannot matter (what can go from a
// root without pinned memory goes, whatever went before), so one pass does;
// with one, the calls are replayed, each as costly as cold_roots.
void simulate_eviction(View &v, std::vector<Candidate> &cands, uint64_t limit, uint64_t held) {
    if (limit) {
        while (simulate_evict_one(v, cands, limit, &held)) {
        }
        return;
    }
    for (Candidate &c : cands) {
        if (!c.can_go || c.client_roots)
            continue;
        bool unpinned_root = false;
        for_each_root(c, [&](uint64_t root) { unpinned_root = unpinned_root || !has_pinned(v, c.remap, root); });
        if (!unpinned_root)
            continue;
        c.evicted = true;
        release_run(v.of(c.remap), c.first, c.bytes, true);
    }
}

// eviction_could_make_room's estimate (residency.cpp), on the view before
// any eviction: the bytes of the largest request it lets the ladder try.
uint64_t estimate_room(Manager &mgr, uint32_t gpu, View &v, const std::vector<Candidate> &cands, uint64_t limit,
                       uint64_t held) {
    uint64_t room = mgr.backend().gpu_memory_free(gpu);
    for (const auto *usage : {&v.main, &v.remap})
        for (const RootUsage &u : *usage)
            room += u.free;
    std::map<std::pair<bool, uint64_t>, bool> roots;  // every root of a candidate: whether it has no pinned memory
    for (const Candidate &c : cands)
        if (!c.client_roots)
            for_each_root(c, [&](uint64_t root) { roots.emplace(std::make_pair(c.remap, root), !has_pinned(v, c.remap, root)); });
    uint64_t evictable = 0;
    for (const auto &r : roots)
        evictable += r.second ? kRootChunkSize : 0;
    if (limit)
        evictable = std::min(evictable, held < limit ? limit - held : 0);
    return room + evictable;
}

// What charge_client's own evictions (evict_client_object, client.cpp) free
// of the client's budget: its objects that can go, least recently used
// first, within the host limit.
uint64_t client_evictable(const std::vector<Candidate> &cands, const Client *client, uint64_t limit, uint64_t held) {
    std::vector<const Candidate *> mine;
    for (const Candidate &c : cands)
        if (c.client == client)
            mine.push_back(&c);
    std::sort(mine.begin(), mine.end(), [](const Candidate *a, const Candidate *b) { return a->last_use < b->last_use; });
    uint64_t bytes = 0;
    for (const Candidate *c : mine)
        if (c->can_go && within_limit(*c, limit, &held))
            bytes += c->bytes;
    return bytes;
}

// Both PMMs of the GPU as the view starts: the caches as if flushed.
View gpu_view(GpuState &g) {
    // The caches, then the PMM: two reads, so a chunk that moves between a
    // cache and the PMM in between is miscounted for that moment. With other
    // threads allocating the figures are of no single instant anyway.
    std::vector<uint64_t> cached[3];
    g.caches.cached_chunks(cached);
    View v;
    v.main = g.pmm.root_usage();
    v.remap = g.remap_pmm.root_usage();
    for (int i = 0; i < 3; ++i)
        for (uint64_t phys : cached[i])
            release_run(v.main, phys, chunk_size_of_index(i), false);
    return v;
}

}  // namespace

uint64_t roots_after_eviction(Manager &mgr, uint32_t gpu, const Mem *skip_a, const Mem *skip_b) {
    View v = gpu_view(mgr.gpu(gpu));
    std::vector<Candidate> cands = candidates(mgr, gpu, skip_a, skip_b);
    simulate_eviction(v, cands, mgr.evicted_limit.load(), mgr.evicted_host_bytes.load());
    // Either PMM's whole free roots: each gives them back to the backend
    // before it fails, and the backend may join them into one run.
    Bitmap free = whole_free_roots(v.main);
    const Bitmap remap = whole_free_roots(v.remap);
    if (remap.size() <= free.size())
        free.merge(remap);
    return mgr.backend().largest_free_run(gpu, free);
}

uint64_t client_evictable_bytes(Manager &mgr, uint32_t gpu, const Client &client, const Mem *skip_a,
                                const Mem *skip_b) {
    if (mgr.eviction_disabled.load())
        return 0;
    const std::vector<Candidate> cands = candidates(mgr, gpu, skip_a, skip_b, &client);
    return client_evictable(cands, &client, mgr.evicted_limit.load(), mgr.evicted_host_bytes.load());
}

Fits largest_fits(Manager &mgr, uint32_t gpu, Client *client, const Mem *skip_a, const Mem *skip_b) {
    View v = gpu_view(mgr.gpu(gpu));
    Fits f;
    f.gpu_now = mgr.backend().largest_free_run(gpu, whole_free_roots(v.main)) * kRootChunkSize;
    f.gpu_with_eviction = f.gpu_now;
    std::vector<Candidate> cands;
    const bool evicting = !mgr.eviction_disabled.load();
    const uint64_t limit = mgr.evicted_limit.load();
    const uint64_t held = mgr.evicted_host_bytes.load();
    if (evicting) {
        cands = candidates(mgr, gpu, skip_a, skip_b);
        const uint64_t estimate = align_down_2m(estimate_room(mgr, gpu, v, cands, limit, held));
        simulate_eviction(v, cands, limit, held);
        const uint64_t run = mgr.backend().largest_free_run(gpu, whole_free_roots(v.main)) * kRootChunkSize;
        f.gpu_with_eviction = std::max(f.gpu_now, std::min(run, estimate));
    }

    const uint64_t budget = client ? client->vidmem[gpu].budget.load() : 0;
    f.client_now = f.gpu_now;
    f.client_with_eviction = f.gpu_with_eviction;
    if (budget) {
        // The client's parked objects (uvm/mem.h) go before its allocation is refused: not in the way.
        const uint64_t charged = client->vidmem[gpu].used.load();
        const uint64_t used = charged - std::min(charged, client_parked_bytes(mgr, *client, gpu));
        f.client_now = std::min(f.gpu_now, align_down_2m(budget > used ? budget - used : 0));
        const uint64_t own = evicting ? client_evictable(cands, client, limit, held) : 0;
        f.client_with_eviction =
            std::min(f.gpu_with_eviction, align_down_2m(budget + own > used ? budget + own - used : 0));
    }
    return f;
}

}  // namespace uvm
