// Residency of evictable vidmem (residency.h), and the evictable list and
// budgets as listeners of the object events (uvm/events.h).
#include "pressure/residency.h"
#include "uvm/events.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "backend/placement_capability.h"
#include "common/assert.h"
#include "common/sizes.h"
#include "pressure/client.h"
#include "pressure/fits.h"
#include "pressure/sleep.h"
#include "pressure/gpu_pressure.h"
#include "stream/stream.h"

namespace uvm {

namespace {

std::atomic<uint64_t> g_use_clock{0};

}  // namespace

uvm_status_t mem_can_evict(Manager &mgr, Mem &mem) {
    if (mem.asleep)
        return UVM_ERR_ASLEEP;  // its memory is gone already, its addresses kept (sleep.h)
    if (!mem.is_vidmem() || !mem.evictable)
        return UVM_ERR_NOT_SUPPORTED;
    if (mem.cpu_kernel || mem.cpu_user)
        return UVM_ERR_NOT_SUPPORTED;  // a CPU address someone outside may use
    // Without placement a user mapping survives a move (the manager placed it).
    if (mem.user_refs && mgr.backend_placement() && !mgr.backend_placement()->gpu_user_survives_move(mem.remappable))
        return UVM_ERR_NOT_SUPPORTED;  // its user address could not be kept
    for (uint32_t g = 0; g < mem.gpus.size(); ++g)
        if (g != mem.owner && (mem.gpus[g].phys || mem.gpus[g].kernel || mem.gpus[g].user))
            return UVM_ERR_NOT_SUPPORTED;
    uvm_status_t status = UVM_OK;
    mem.users.for_each([&](const std::shared_ptr<Stream> &user) {
        Fence f{user, 0};
        if (status == UVM_OK)
            status = mgr.streams().fence(&f);  // after a capture of it: not done
        if (status == UVM_OK && !mgr.streams().done(f))
            status = UVM_ERR_BUSY;
    });
    return status;
}

namespace {

// The object's physical run and its host bytes' DMA mapping, as the copy
// engine of its owner sees them.
backend::CeAddress vid_address(const Mem &mem) {
    backend::CeAddress a;
    a.aperture = mmu::Aperture::Vid;
    a.address = mem.chunks[0];
    return a;
}

backend::CeAddress sys_address(uint64_t dma) {
    backend::CeAddress a;
    a.aperture = mmu::Aperture::Sys;
    a.address = dma;
    return a;
}

// Copy between the object's chunks and its range of the host store (to
// host: `out`): one copy, the object being one physical run.
uvm_status_t move_bytes(Manager &mgr, Mem &mem, uint64_t dma, bool out) {
    backend::Backend &b = mgr.backend();
    return out ? b.ce_copy(mem.owner, sys_address(dma), vid_address(mem), mem.alloc_size)
               : b.ce_copy(mem.owner, vid_address(mem), sys_address(dma), mem.alloc_size);
}

}  // namespace

namespace {

void forget_evictable(Manager &mgr, Mem &mem) {
    GpuPressure &g = *mgr.gpu(mem.owner).pressure;
    std::lock_guard<std::mutex> guard(g.evictable_lock);
    g.evictable.erase(&mem);
}

}  // namespace

uvm_status_t events::heard::evictable_created(Manager &mgr, const std::shared_ptr<Mem> &mem) {
    GpuPressure &g = *mgr.gpu(mem->owner).pressure;
    mem_touch(*mem);
    std::lock_guard<std::mutex> guard(g.evictable_lock);
    try {
        g.evictable[mem.get()] = mem;
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
    return UVM_OK;
}

void events::heard::owned_released(Manager &mgr, Mem &mem) {
    if (mem.client) {
        if (mem.asleep)
            sleep_object_released(mgr, mem);  // its account as the sleep left it
        else if (!mem.evicted)  // an evicted object's memory was uncharged when it went
            uncharge_client(mgr, mem);
        mem.client->objects.fetch_sub(1, std::memory_order_relaxed);
    }
    if (mem.evictable) {
        forget_evictable(mgr, mem);
        if (mem.evicted)
            drop_evicted_bytes(mgr, mem);  // its bytes are in host memory, its chunks long gone
    }
}

bool events::heard::owned_reused(const Mem &mem) {
    UVM_ASSERT(mem.client && mem.is_vidmem() && !mem.evictable);
    const Client::Account &a = mem.client->vidmem[mem.owner];
    const uint64_t budget = a.budget.load(std::memory_order_relaxed);
    return !budget || a.used.load(std::memory_order_relaxed) <= budget;
}

uintptr_t events::heard::owned_parked(const Mem &mem) {
    UVM_ASSERT(mem.client && !mem.client->sleep);  // a sleepable client's objects have roots of their own
    // A usage with watermarks is watched: a free must show in it (and its
    // notices) at once; uvm_pressure_watermarks drops what is parked. And a
    // charge of the client's that needs its parked objects gone is waiting.
    const Client::Account &a = mem.client->vidmem[mem.owner];
    if (!a.marks.empty() || a.squeezed.load(std::memory_order_relaxed))
        return 0;
    return reinterpret_cast<uintptr_t>(mem.client->handle);
}

void drop_evicted_bytes(Manager &mgr, Mem &mem) {
    UVM_ASSERT(mem.evicted);
    const bool kept = mem.saved_slab != nullptr;  // else discarded: nothing kept
    if (kept) {
        mgr.gpu(mem.owner).pressure->host_store.give(mem.saved_slab, mem.saved_offset, mem.alloc_size);
        mem.saved_slab = nullptr;
    }
    events::eviction_ended(mgr, mem, kept);
    mem.evicted = false;
}

void mem_touch(Mem &mem) {
    if (mem.evictable)
        mem.last_use.store(g_use_clock.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

uvm_status_t mem_evict(Manager &mgr, Mem &mem) {
    if (mem.evicted)
        return UVM_OK;
    uvm_status_t status = mem_can_evict(mgr, mem);
    if (status != UVM_OK)
        return status;
    const bool discard = (mem.flags & UVM_MEM_DISCARDABLE) != 0;
    const uint64_t limit = mgr.evicted_limit.load();
    if (!discard && limit && mgr.evicted_host_bytes.load() + mem.alloc_size > limit)
        return UVM_ERR_OUT_OF_MEMORY;  // the policy's host budget for evicted bytes

    HostStore &store = mgr.gpu(mem.owner).pressure->host_store;
    HostStore::Slab *slab = nullptr;
    uint64_t offset = 0, dma = 0;
    if (!discard) {  // a discardable object's bytes are dropped, not kept
        status = store.take(mem.alloc_size, &slab, &offset, &dma);
        if (status == UVM_OK)
            status = move_bytes(mgr, mem, dma, true);
        if (status != UVM_OK) {
            if (slab)
                store.give(slab, offset, mem.alloc_size);
            return status;
        }
    }
    // Committed: nothing below fails.
    mem.remap_kernel = mem.owner < mem.gpus.size() && mem.gpus[mem.owner].kernel;
    mem.remap_user = mem.owner < mem.gpus.size() && mem.gpus[mem.owner].user;
    if (mem.remap_user)
        mem_hold_user_address(mem);  // the address stays the object's while it is out
    mem_unmap_all(mgr, mem);
    mem_free_chunks(mgr, mem);
    uncharge_client(mgr, mem);  // out of vidmem: out of its client's budget
    mem.saved_slab = slab;
    mem.saved_offset = offset;
    mem.evicted = true;
    mem.evictions++;
    mem.discards += discard;
    events::evicted(mgr, mem, discard);
    return UVM_OK;
}

uvm_status_t mem_make_resident(Manager &mgr, Mem &mem, const Mem *holding) {
    if (__builtin_expect(mem.asleep, 0))
        return UVM_ERR_ASLEEP;  // its client's wake brings it back, not a call on it
    mem_touch(mem);
    if (!mem.evicted)
        return UVM_OK;
    // Back into its client's budget first (evicting the client's others if it must).
    uvm_status_t status = charge_client(mgr, mem, holding);
    if (status != UVM_OK)
        return status;
    std::vector<uint64_t> grown;
    status = mem_alloc_chunks(mgr, mem, &grown);
    if (status == UVM_ERR_OUT_OF_MEMORY)
        status = retry_with_room(mgr, true, mem.owner, room_for_run(mem.alloc_size, mem.chunk_size), &mem, holding,
                                 [&] { return mem_alloc_chunks(mgr, mem, &grown); });
    if (status != UVM_OK) {
        uncharge_client(mgr, mem);
        return status;
    }
    const bool discarded = mem.saved_slab == nullptr;
    status = discarded ? mgr.backend().ce_memset(mem.owner, vid_address(mem), 0, mem.alloc_size)
                       : move_bytes(mgr, mem, HostStore::dma_of(mem.saved_slab, mem.saved_offset), false);
    bool mapped_kernel = false;
    if (status == UVM_OK && mem.remap_kernel) {
        status = mem_map_gpu_virtual(mgr, mem, mem.owner, UVM_VA_SPACE_KERNEL, 0);
        mapped_kernel = status == UVM_OK;
    }
    if (status == UVM_OK && mem.remap_user)
        status = mem_map_gpu_virtual(mgr, mem, mem.owner, UVM_VA_SPACE_USER, mem.user_address);
    if (status != UVM_OK) {
        if (mapped_kernel)
            mem_unmap_gpu_virtual(mgr, mem, mem.owner, UVM_VA_SPACE_KERNEL);
        mem_undo_chunks(mgr, mem, grown);  // still evicted, its bytes intact
        uncharge_client(mgr, mem);
        return status;
    }
    drop_evicted_bytes(mgr, mem);
    if (mem.remap_user)
        mem_drop_user_address(mgr, mem);  // the mapping holds the address now
    mem.remap_user = false;
    mem.remap_kernel = false;
    mem.restores++;
    events::restored(mgr, mem, discarded);
    return UVM_OK;
}

uvm_status_t mem_forget_remap(Manager &mgr, Mem &mem, uint32_t gpu, MapKind kind) {
    UVM_ASSERT(mem.evicted);
    if (kind == MapKind::GpuPhys)
        return gpu == mem.owner ? UVM_ERR_NOT_SUPPORTED : UVM_ERR_NOT_MAPPED;  // evicted: no peer has it
    bool &remembered = kind == MapKind::GpuUser ? mem.remap_user : mem.remap_kernel;
    if (gpu != mem.owner || !remembered)
        return UVM_ERR_NOT_MAPPED;
    remembered = false;
    if (kind == MapKind::GpuUser)
        mem_drop_user_address(mgr, mem);  // the hold mem_evict took
    return UVM_OK;
}

namespace {

// A root chunk and the evictable objects in it; as cold as its most recently
// used object (the driver evicts whole roots, coldest first).
struct Root {
    chunk::Pmm *pmm;
    uint64_t phys;
    uint64_t hottest = 0;
    std::vector<Mem *> objects;
};

// The GPU's roots that hold resident evictable objects (other than the two
// skipped), coldest first; `keep` holds the objects alive.
std::vector<Root> cold_roots(Manager &mgr, uint32_t gpu, const Mem *skip_a, const Mem *skip_b,
                             std::vector<std::shared_ptr<Mem>> *keep) {
    GpuState &g = mgr.gpu(gpu);
    {
        GpuPressure &p = *g.pressure;
        std::lock_guard<std::mutex> guard(p.evictable_lock);
        keep->reserve(p.evictable.size());
        for (const auto &entry : p.evictable)
            if (entry.first != skip_a && entry.first != skip_b)
                if (std::shared_ptr<Mem> m = entry.second.lock())
                    keep->push_back(std::move(m));
    }
    std::vector<Root> roots;
    std::map<std::pair<chunk::Pmm *, uint64_t>, size_t> index;
    for (const std::shared_ptr<Mem> &m : *keep) {
        std::unique_lock<uvm::Mutex> guard(m->lock, std::try_to_lock);
        if (!guard.owns_lock() || m->gone() || m->evicted || m->client_roots)
            continue;  // busy in another thread, freed, out already, or in a client's roots (sleep.h)
        chunk::Pmm *pmm = m->remappable ? &g.remap_pmm : &g.pmm;
        const uint64_t use = m->last_use.load(std::memory_order_relaxed);
        for (uint64_t root = m->chunks[0] & ~(kRootChunkSize - 1); root < m->chunks[0] + m->alloc_size;
             root += kRootChunkSize) {
            auto it = index.emplace(std::make_pair(pmm, root), roots.size()).first;
            if (it->second == roots.size())
                roots.push_back({pmm, root, 0, {}});
            Root &r = roots[it->second];
            r.hottest = std::max(r.hottest, use);
            r.objects.push_back(m.get());
        }
    }
    std::sort(roots.begin(), roots.end(), [](const Root &a, const Root &b) { return a.hottest < b.hottest; });
    return roots;
}

}  // namespace

RoomNeed room_for_run(uint64_t bytes, uint64_t chunk_size) {
    RoomNeed need;
    need.bytes = bytes;
    const uint64_t chunks = chunk_size ? (bytes + chunk_size - 1) / chunk_size : 0;
    if (chunk_size == kRootChunkSize) {
        need.whole_roots = chunks;
    } else if (chunk_size == kPageSize64K) {
        const uint64_t per_root = kRootChunkSize / kPageSize64K;
        need.whole_roots = chunks >= per_root ? (chunks + per_root - 1) / per_root : 0;
    } else if (chunk_size == kPageSize4K) {
        // A run of more than one 64K chunk's worth takes whole 64K chunks,
        // which take whole roots where there are a root's worth of them.
        const uint64_t per_64k = kPageSize64K / kPageSize4K, per_root = kRootChunkSize / kPageSize64K;
        const uint64_t parents = chunks >= per_64k ? (chunks + per_64k - 1) / per_64k : 0;
        need.whole_roots = parents >= per_root ? (parents + per_root - 1) / per_root : 0;
    }
    return need;
}

uint64_t give_back_free_roots(Manager &mgr, uint32_t gpu) {
    GpuState &g = mgr.gpu(gpu);
    g.caches.flush_all();  // cached chunks would keep their roots held
    const uint64_t bytes = g.pmm.trim() + g.remap_pmm.trim() + client_roots_trim(mgr, gpu);
    if (bytes)
        mgr.backend().trim(gpu);
    return bytes;
}

bool eviction_could_make_room(Manager &mgr, uint32_t gpu, const RoomNeed &need, const Mem *skip_a,
                              const Mem *skip_b) {
    if (mgr.eviction_disabled.load())
        return false;
    const uint64_t bytes = need.bytes;
    GpuState &g = mgr.gpu(gpu);
    g.caches.flush_all();
    uint64_t room = mgr.backend().gpu_memory_free(gpu);
    for (const chunk::Pmm *pmm : {&g.pmm, &g.remap_pmm}) {
        const chunk::PmmStats st = pmm->stats();
        room += st.bytes_free[0] + st.bytes_free[1] + st.bytes_free[2];
    }
    std::vector<std::shared_ptr<Mem>> keep;
    uint64_t evictable = 0;
    for (const Root &r : cold_roots(mgr, gpu, skip_a, skip_b, &keep))
        if (!r.pmm->root_has_pinned(r.phys))
            evictable += kRootChunkSize;
    const uint64_t limit = mgr.evicted_limit.load();
    if (limit) {
        const uint64_t held = mgr.evicted_host_bytes.load();
        evictable = std::min(evictable, held < limit ? limit - held : 0);
    }
    if (room + evictable < bytes)
        return false;
    // Bytes are not a run: holes between pinned roots may add up to far more
    // than the longest of them.
    return need.whole_roots == 0 || roots_after_eviction(mgr, gpu, skip_a, skip_b) >= need.whole_roots;
}

bool evict_one(Manager &mgr, uint32_t gpu, const Mem *skip_a, const Mem *skip_b) {
    if (mgr.eviction_disabled.load())
        return false;
    mgr.gpu(gpu).caches.flush_all();  // free chunks cached by threads would look pinned
    std::vector<std::shared_ptr<Mem>> keep;
    bool evicted_any = false;
    for (const Root &r : cold_roots(mgr, gpu, skip_a, skip_b, &keep)) {
        if (r.pmm->root_has_pinned(r.phys))
            continue;  // it can never come free
        for (Mem *m : r.objects) {
            std::unique_lock<uvm::Mutex> guard(m->lock, std::try_to_lock);
            if (guard.owns_lock() && !m->gone() && !m->evicted && mem_evict(mgr, *m) == UVM_OK)
                evicted_any = true;
        }
        if (evicted_any && r.pmm->state(r.phys, kRootChunkSize) == chunk::ChunkState::Free)
            return true;  // a whole root for the request
    }
    return evicted_any;
}

}  // namespace uvm
