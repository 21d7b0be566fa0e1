// Compaction (compact.h): live vidmem objects move behind their addresses.
#include "compact/compact.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <new>
#include <unordered_set>
#include <vector>

#include "backend/placement_capability.h"
#include "common/assert.h"
#include "common/bitmap.h"
#include "common/sizes.h"
#include "compact/compact_private.h"
#include "stream/stream.h"

namespace uvm {

const char *compact_pin(Manager &mgr, const Mem &mem) {
    if (mem.exported || mem.imported)
        return "shared with another process, which maps its memory";
    if (mem.own_pmm)
        return "in root chunks of its own (remappable, or a sleepable client's), each given back whole already";
    if (mem.stitched)
        return "made of several runs, its kernel mapping a driver mapping of each";
    if (mem.cpu_kernel || mem.cpu_user)
        return "mapped on the CPU, whose mapping names its memory";
    for (uint32_t g = 0; g < mem.gpus.size(); ++g)
        if (g != mem.owner && (mem.gpus[g].phys || mem.gpus[g].kernel || mem.gpus[g].user))
            return "mapped on a peer GPU";
    if (mem.owner < mem.gpus.size()) {
        const GpuMapping &m = mem.gpus[mem.owner];
        if (m.kernel && m.kernel_va_placed)
            return "its kernel address is a view of its physical memory (the driver's window)";
        if (m.user && mgr.backend_placement())
            return "its user address is a driver mapping of its memory";
    }
    return nullptr;
}

bool busy_on_streams(Manager &mgr, Mem &mem) {
    bool busy = false;
    mem.users.for_each([&](const std::shared_ptr<Stream> &user) {
        Fence f{user, 0};
        if (!busy && (mgr.streams().fence(&f) != UVM_OK || !mgr.streams().settle(f)))
            busy = true;
    });
    return busy;
}

namespace {

// The driver allocations (root spans) of one GPU and the live bytes in each.
// Each held root's unit is looked up once, here, and each unit keeps its
// roots: a move's avoided roots are then set from those lists, with no
// lookup in the backend per unit and per move (a compaction moves
// thousands of objects among thousands of driver allocations on a GPU).
class Units {
public:
    Units(Manager &mgr, uint32_t gpu) : backend_(mgr.backend()), gpu_(gpu) {
        const std::vector<chunk::Pmm::RootUsage> usage = mgr.gpu(gpu).pmm.root_usage();
        roots_ = usage.size();
        for (size_t i = 0; i < usage.size(); ++i) {
            const uint64_t used = uint64_t(usage[i].pinned) + usage[i].evictable;
            if (usage[i].free + used == 0)
                continue;  // not held
            Unit &u = unit(unit_of(i * kRootChunkSize));
            u.live += used;
            u.roots.push_back(static_cast<uint32_t>(i));
        }
    }
    // The roots a move out of `unit` must not go to: its own and those of
    // every unit with less live memory (moving there empties nothing).
    void avoid_for(uint64_t unit, Bitmap *avoid) const {
        avoid->resize(roots_);  // all clear
        const uint32_t own = index_.at(unit);
        const uint64_t bar = units_[own].live;
        for (uint32_t k = 0; k < units_.size(); ++k)
            if (k == own || units_[k].live < bar)
                for (uint32_t r : units_[k].roots)
                    avoid->set(r);
    }
    uint64_t unit_of(uint64_t phys) const {
        uint64_t first = 0;
        size_t count = 0;
        backend_.root_chunk_span(gpu_, phys & ~(kRootChunkSize - 1), &first, &count);
        return first;
    }
    // The unit of a run, or UINT64_MAX where it lies in more than one.
    uint64_t unit_of_run(uint64_t phys, uint64_t bytes) const {
        const uint64_t first = unit_of(phys);
        return unit_of(phys + bytes - 1) == first ? first : UINT64_MAX;
    }
    // A unit's live bytes; one grown since (by other threads' allocations)
    // joins with none and no roots listed: never avoided.
    uint64_t &live(uint64_t first) { return unit(first).live; }

private:
    struct Unit {
        uint64_t live = 0;            // bytes of live chunks
        std::vector<uint32_t> roots;  // the roots of it the PMM holds
    };
    // The unit whose first root is at `first`, a new one where none yet.
    Unit &unit(uint64_t first) {
        auto it = index_.find(first);
        if (it == index_.end()) {
            it = index_.emplace(first, static_cast<uint32_t>(units_.size())).first;
            units_.emplace_back();
        }
        return units_[it->second];
    }
    backend::Backend &backend_;
    uint32_t gpu_;
    size_t roots_ = 0;
    std::map<uint64_t, uint32_t> index_;  // a unit's first root (phys) -> its place in units_
    std::vector<Unit> units_;
};

struct Candidate {
    std::shared_ptr<Mem> mem;
    uint64_t unit;
    uint64_t unit_live;  // at the start, for the order
};

// Point the owner's manager-placed virtual mappings of `mem` at `chunks`.
// All or nothing: the tree is the MMU of a backend without placement (its
// gpu_va_map only checks the entries), so the undo rewrites the tree.
uvm_status_t retarget(Manager &mgr, Mem &mem, const uint64_t *from, const uint64_t *to) {
    const uint64_t n = mem.chunk_count();
    std::vector<mmu::Pte> ptes(n), old(n);
    for (uint64_t i = 0; i < n; ++i) {
        ptes[i] = mmu::Pte{to[i], mmu::Aperture::Vid, static_cast<uint8_t>(mem.owner)};
        old[i] = mmu::Pte{from[i], mmu::Aperture::Vid, static_cast<uint8_t>(mem.owner)};
    }
    GpuState &g = mgr.gpu(mem.owner);
    const GpuMapping *m = mem.owner < mem.gpus.size() ? &mem.gpus[mem.owner] : nullptr;
    struct Target {
        uvm_va_space_kind_t space;
        uint64_t va;
    };
    Target targets[2];
    int count = 0;
    if (m && m->kernel)
        targets[count++] = {UVM_VA_SPACE_KERNEL, m->kernel_va};
    if (m && m->user)
        targets[count++] = {UVM_VA_SPACE_USER, mem.user_address};
    for (int i = 0; i < count; ++i) {
        mmu::PageTree &tree = g.tree(targets[i].space);
        uvm_status_t status = tree.remap(targets[i].va, mem.chunk_size, ptes.data(), n);
        if (status == UVM_OK) {
            status = mgr.backend().gpu_va_map(mem.owner, targets[i].space, targets[i].va, mem.chunk_size,
                                              ptes.data(), n);
            if (status != UVM_OK)
                tree.remap(targets[i].va, mem.chunk_size, old.data(), n);
        }
        if (status != UVM_OK) {
            for (int j = 0; j < i; ++j)
                g.tree(targets[j].space).remap(targets[j].va, mem.chunk_size, old.data(), n);
            return status;
        }
    }
    return UVM_OK;
}

// Move `c.mem` (locked) where it packs better, if anywhere: OK whether it
// moved or stayed (*moved says); another status where a step failed, with
// the object where it was.
uvm_status_t move_one(Manager &mgr, uint32_t gpu, Candidate &c, Units &units, bool *moved) {
    Mem &mem = *c.mem;
    *moved = false;
    chunk::Pmm &pmm = mgr.gpu(gpu).pmm;
    const size_t n = mem.chunk_count();
    std::vector<uint64_t> to(n);
    Bitmap avoid;
    units.avoid_for(c.unit, &avoid);
    uvm_status_t status = pmm.alloc_avoiding(mem.chunk_size, n, mem.evictable, avoid, to.data());
    if (status != UVM_OK)
        return status == UVM_ERR_OUT_OF_MEMORY ? UVM_OK : status;  // nowhere better: it stays
    const uint64_t dest = units.unit_of_run(to[0], mem.alloc_size);
    if (dest == UINT64_MAX) {  // across two driver allocations: no better than where it is
        pmm.free(mem.chunk_size, to.data(), n);
        return UVM_OK;
    }

    backend::CeAddress dst, src;
    dst.address = to[0];
    src.address = mem.chunks[0];
    status = mgr.backend().ce_copy(mem.owner, dst, src, mem.alloc_size);
    if (status == UVM_OK)
        status = retarget(mgr, mem, mem.chunks.data(), to.data());
    if (status != UVM_OK) {
        pmm.free(mem.chunk_size, to.data(), n);
        return status;
    }
    // Committed: the object is on its new chunks; the old ones go back.
    std::vector<uint64_t> from(mem.chunks.data(), mem.chunks.data() + n);
    std::copy(to.begin(), to.end(), mem.chunks.data());
    const uvm_status_t freed = pmm.free(mem.chunk_size, from.data(), n);
    UVM_ASSERT(freed == UVM_OK);
    (void)freed;
    units.live(c.unit) -= mem.alloc_size;
    units.live(dest) += mem.alloc_size;
    *moved = true;
    return UVM_OK;
}

void pmm_view(Manager &mgr, uint32_t gpu, uint64_t *held, uint64_t *whole_free, uint64_t *largest) {
    const chunk::PmmStats s = mgr.gpu(gpu).pmm.stats();
    *held = s.root_chunks * kRootChunkSize;
    *whole_free = s.bytes_free[kIndex2M];
    *largest = s.largest_free_block;
}

// compact_gpu with the GPU's compaction lock held.
uvm_status_t compact_locked(Manager &mgr, uint32_t gpu, const CompactOptions &options, uvm_compact_result_t *out,
                            const char **first_pin) {
    *out = uvm_compact_result_t{};
    GpuState &g = mgr.gpu(gpu);
    // Memory the streams finished with and the threads' cached chunks come
    // back first: they would look live and keep their roots.
    try {
        mgr.streams().reap(true);
    } catch (const std::bad_alloc &) {
        // Nothing lost: what could not be looked at stays pooled or retiring.
    }
    g.caches.flush_all();
    pmm_view(mgr, gpu, &out->held_before, &out->free_whole_before, &out->largest_free_before);
    out->driver_held_before = mgr.backend().gpu_memory_held(gpu);

    std::vector<std::shared_ptr<Mem>> live;
    try {
        live = mgr.live_objects();
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
    if (options.wait) {
        // The streams that use the GPU's objects, synchronized with no
        // object locked (a synchronize releases what waited on the stream).
        std::vector<std::shared_ptr<Stream>> streams;
        for (const std::shared_ptr<Mem> &m : live) {
            if (!m->is_vidmem() || m->owner != gpu || m.get() == options.skip[0] || m.get() == options.skip[1])
                continue;
            std::lock_guard<Mutex> guard(m->lock);
            m->users.for_each([&](const std::shared_ptr<Stream> &s) {
                if (std::find(streams.begin(), streams.end(), s) == streams.end())
                    streams.push_back(s);
            });
        }
        for (const std::shared_ptr<Stream> &s : streams)
            (void)mgr.streams().synchronize(*s);  // BUSY (held sim work): its objects are skipped below
    }

    Units units(mgr, gpu);
    std::vector<Candidate> candidates;
    for (std::shared_ptr<Mem> &m : live) {
        if (!m->is_vidmem() || m->owner != gpu)
            continue;
        std::unique_lock<Mutex> guard(m->lock, std::defer_lock);
        if (m.get() == options.skip[0] || m.get() == options.skip[1] ||
            !(options.try_locks ? guard.try_lock() : (guard.lock(), true))) {
            out->objects_busy++;
            continue;
        }
        if (!holds_memory(*m))
            continue;  // freed meanwhile, or holding no memory now
        if (const char *why = compact_pin(mgr, *m)) {
            out->objects_pinned++;
            if (!*first_pin)
                *first_pin = why;
            continue;
        }
        const uint64_t unit = units.unit_of_run(m->chunks[0], m->alloc_size);
        if (unit == UINT64_MAX) {
            out->objects_kept++;  // over several driver allocations: moving it empties none
            continue;
        }
        candidates.push_back({std::move(m), unit, units.live(unit)});
    }
    live.clear();
    // The sparsest allocations first; within one, the highest addresses.
    std::sort(candidates.begin(), candidates.end(), [](const Candidate &a, const Candidate &b) {
        return a.unit_live != b.unit_live ? a.unit_live < b.unit_live : a.mem->chunks[0] > b.mem->chunks[0];
    });

    uvm_status_t status = UVM_OK;
    for (Candidate &c : candidates) {
        std::unique_lock<Mutex> guard(c.mem->lock, std::defer_lock);
        if (!(options.try_locks ? guard.try_lock() : (guard.lock(), true))) {
            out->objects_busy++;
            continue;
        }
        if (c.mem->gone() || c.mem->evicted || c.mem->asleep || compact_pin(mgr, *c.mem))
            continue;  // changed since it was looked at
        if (busy_on_streams(mgr, *c.mem)) {
            out->objects_busy++;
            continue;
        }
        bool moved = false;
        status = move_one(mgr, gpu, c, units, &moved);
        if (status != UVM_OK)
            break;
        if (moved) {
            out->objects_moved++;
            out->bytes_moved += c.mem->alloc_size;
        } else {
            out->objects_kept++;
        }
    }
    candidates.clear();

    if (options.release) {
        g.pmm.trim();
        mgr.backend().trim(gpu);
        if (status == UVM_OK) {
            try {
                status = shrink_spans(mgr, gpu, options, out);
            } catch (const std::bad_alloc &) {
                status = UVM_ERR_NO_HOST_MEMORY;  // nothing half done: each shrink is whole or not at all
            }
        }
    }
    pmm_view(mgr, gpu, &out->held_after, &out->free_whole_after, &out->largest_free_after);
    out->driver_held_after = mgr.backend().gpu_memory_held(gpu);
    out->bytes_released = out->held_before > out->held_after ? out->held_before - out->held_after : 0;
    GpuCompaction &c = *g.compaction;
    c.runs.fetch_add(1, std::memory_order_relaxed);
    c.objects_moved.fetch_add(out->objects_moved, std::memory_order_relaxed);
    c.bytes_moved.fetch_add(out->bytes_moved, std::memory_order_relaxed);
    c.bytes_rebacked.fetch_add(out->bytes_rebacked, std::memory_order_relaxed);
    // What the driver got back: its count of this process's memory fell by
    // it (the roots the PMM gave back go to the driver only with whole
    // allocations; a shrink gives back the free rest of part-live ones).
    c.bytes_released.fetch_add(
        out->driver_held_before > out->driver_held_after ? out->driver_held_before - out->driver_held_after : 0,
        std::memory_order_relaxed);
    return status;
}

thread_local char t_oom_note[512];

}  // namespace

uvm_status_t compact_gpu(Manager &mgr, uint32_t gpu, const CompactOptions &options, uvm_compact_result_t *out) {
    std::lock_guard<std::mutex> guard(mgr.gpu(gpu).compaction->lock);
    const char *first_pin = nullptr;
    return compact_locked(mgr, gpu, options, out, &first_pin);
}

bool compact_for_oom(Manager &mgr, uint32_t gpu, uint64_t bytes, const Mem *skip_a, const Mem *skip_b) {
    GpuState &g = mgr.gpu(gpu);
    GpuCompaction &c = *g.compaction;
    if (!c.on_oom.load(std::memory_order_relaxed)) {
        std::snprintf(t_oom_note, sizeof(t_oom_note), "compaction is off on GPU %u (uvm_gpu_set_compact_policy)",
                      gpu);
        return false;
    }
    g.caches.flush_all();
    const chunk::PmmStats s = g.pmm.stats();
    const uint64_t free = s.bytes_free[0] + s.bytes_free[1] + s.bytes_free[2] + mgr.backend().gpu_memory_free(gpu);
    if (free < bytes) {
        std::snprintf(t_oom_note, sizeof(t_oom_note),
                      "compaction could not help: %" PRIu64 " bytes free in all (held and in the driver), %" PRIu64
                      " asked",
                      free, bytes);
        return false;
    }
    std::unique_lock<std::mutex> guard(c.lock, std::try_to_lock);
    if (!guard.owns_lock()) {
        std::snprintf(t_oom_note, sizeof(t_oom_note), "compaction not tried: another compaction of GPU %u was running",
                      gpu);
        return false;
    }
    CompactOptions options;
    options.try_locks = true;
    // The whole free roots go back and part-free driver allocations shrink:
    // the request may need the driver's memory more than a run in the PMM.
    options.release = true;
    options.skip[0] = skip_a;
    options.skip[1] = skip_b;
    uvm_compact_result_t r;
    const char *first_pin = nullptr;
    const uvm_status_t status = compact_locked(mgr, gpu, options, &r, &first_pin);
    c.oom_runs.fetch_add(1, std::memory_order_relaxed);
    std::snprintf(t_oom_note, sizeof(t_oom_note),
                  "compaction ran%s: %" PRIu64 " objects moved (%" PRIu64 " bytes), %" PRIu64
                  " could not move%s%s%s, %" PRIu64 " busy, %" PRIu64
                  " had no better place; the driver got %" PRIu64 " bytes back (%" PRIu64
                  " copied to shrink its allocations around live objects); largest free block %" PRIu64
                  " bytes after, %" PRIu64 " asked",
                  status == UVM_OK ? "" : " and stopped at a failed step", r.objects_moved, r.bytes_moved,
                  r.objects_pinned, first_pin ? " (" : "", first_pin ? first_pin : "", first_pin ? ")" : "",
                  r.objects_busy, r.objects_kept,
                  r.driver_held_before > r.driver_held_after ? r.driver_held_before - r.driver_held_after : 0,
                  r.bytes_rebacked, r.largest_free_after, bytes);
    return true;
}

void compact_oom_served(Manager &mgr, uint32_t gpu) {
    mgr.gpu(gpu).compaction->oom_helped.fetch_add(1, std::memory_order_relaxed);
    t_oom_note[0] = '\0';
}

std::string compact_take_oom_note() {
    std::string note = t_oom_note;
    t_oom_note[0] = '\0';
    return note;
}

}  // namespace uvm
