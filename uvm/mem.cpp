// Memory objects: allocation, the four kinds of mapping, addresses, teardown.
#include "uvm/mem.h"
#include "uvm/events.h"

#include <algorithm>
#include <cstring>
#include <ctime>

#include "backend/managed_capability.h"
#include "backend/placement_capability.h"
#include "backend/sharing_capability.h"
#include "common/assert.h"
#include "common/enum_value.h"
#include "common/sizes.h"

namespace uvm {

namespace {

// The PTEs a GPU mapping builds, in a buffer of the calling thread's that
// lives on: neither allocated nor zeroed per mapping. Above kKeptPtes the
// buffer is one call's only, so that an occasional huge object of small
// chunks does not leave megabytes behind in every thread.
constexpr uint64_t kKeptPtes = 1u << 14;

mmu::Pte *pte_scratch(uint64_t n) {
    static thread_local std::vector<mmu::Pte> kept;
    static thread_local std::unique_ptr<mmu::Pte[]> large;
    if (n > kKeptPtes) {
        large.reset(new mmu::Pte[n]);
        return large.get();
    }
    large.reset();
    if (kept.size() < n)
        kept.resize(n);
    return kept.data();
}
constexpr uint32_t kKnownFlags =
    UVM_MEM_ZERO | UVM_MEM_EVICTABLE | UVM_MEM_USER_MAPPABLE | UVM_MEM_GPU_MAPPED | UVM_MEM_DISCARDABLE;

chunk::Pmm &pmm_of(Manager &mgr, const Mem &mem) {
    return mem.own_pmm ? *mem.own_pmm : mgr.gpu(mem.owner).pmm;
}

GpuMapping &gpu_mapping(Manager &mgr, Mem &mem, uint32_t gpu) {
    if (mem.gpus.empty())
        mem.gpus.resize(mgr.gpu_count());
    return mem.gpus[gpu];
}

bool has_gpu_mapping(const Mem &mem, uint32_t gpu) { return !mem.gpus.empty() && gpu < mem.gpus.size(); }

// Vidmem is always physically present on its owner.
bool phys_mapped(const Mem &mem, uint32_t gpu) {
    if (mem.is_vidmem() && gpu == mem.owner)
        return true;
    return has_gpu_mapping(mem, gpu) && mem.gpus[gpu].phys;
}

// The PTE for chunk `i` of `mem` as GPU `gpu` sees it.
mmu::Pte chunk_pte(const Mem &mem, uint32_t gpu, uint64_t i) {
    mmu::Pte pte;
    if (mem.is_vidmem()) {
        pte.address = mem.chunks[i];
        pte.aperture = gpu == mem.owner ? mmu::Aperture::Vid : mmu::Aperture::Peer;
        pte.peer_gpu = static_cast<uint8_t>(mem.owner);
    } else {
        pte.address = mem.gpus[gpu].dma + i * mem.chunk_size;
        pte.aperture = mmu::Aperture::Sys;
    }
    return pte;
}

// Zero a new vidmem object on its owner's copy engine, one physically
// contiguous run of chunks at a time.
uvm_status_t zero_vidmem(Manager &mgr, Mem &mem) {
    uvm_status_t status = UVM_OK;
    for_each_run(mem, [&](size_t first, size_t count) {
        if (status != UVM_OK)
            return;
        backend::CeAddress dst;
        dst.address = mem.chunks[first];
        dst.aperture = mmu::Aperture::Vid;
        status = mgr.backend().ce_memset(mem.owner, dst, 0, count * mem.chunk_size);
    });
    return status;
}

// Take the object's user address range in the shared user address space, or
// check `address` against the one it has. `address` 0 with none set: the
// backend's own placement where it has one (`placed`, else 0), else one the
// manager picks.
uvm_status_t claim_user_address(Manager &mgr, Mem &mem, uint64_t address, uint64_t placed, bool *claimed) {
    *claimed = false;
    if (mem.user_refs > 0)
        return address == 0 || address == mem.user_address ? UVM_OK : UVM_ERR_INVALID_ARGUMENT;
    if (address == 0 && placed == 0) {
        const uvm_status_t status = mgr.user_space().pick(mem.alloc_size, std::max(mem.chunk_size, kPageSize2M),
                                                          &mem.user_address);
        if (status != UVM_OK)
            return status;
        mem.user_address_picked = true;
        *claimed = true;
        return UVM_OK;
    }
    const uint64_t at = address ? address : placed;
    const uvm_status_t status = mgr.user_space().claim(at, mem.alloc_size);
    if (status != UVM_OK)
        return status;
    mem.user_address = at;
    *claimed = true;
    return UVM_OK;
}

void release_user_address(Manager &mgr, Mem &mem) {
    mgr.user_space().release(mem.user_address, mem.alloc_size, mem.user_address_picked);
    mem.user_address = 0;
    mem.user_address_picked = false;
}

// Sysmem whose GPU user mappings rest on its CPU mapping at the user address.
bool gpu_user_through_cpu(Manager &mgr, const Mem &mem) {
    // Without placement the GPU maps the DMA pages, never through the CPU.
    return !mem.is_vidmem() && !mem.is_managed() && mgr.backend_placement() &&
           mgr.backend_placement()->gpu_user_sysmem_through_cpu();
}

bool any_gpu_user(const Mem &mem) {
    for (const GpuMapping &m : mem.gpus)
        if (m.user)
            return true;
    return false;
}

// Map the object's pages at its user address on the CPU (the manager's CPU
// reservation there, where it holds one, makes way).
uvm_status_t map_at_user_address(Manager &mgr, Mem &mem) {
    void *fixed = reinterpret_cast<void *>(static_cast<uintptr_t>(mem.user_address));
    void *mapped = nullptr;
    mgr.user_space().uncover_for_cpu(mem.user_address, mem.alloc_size, mem.user_address_picked);
    uvm_status_t status;
    if (mem.is_vidmem())
        status = mgr.backend().vidmem_cpu_map(mem.owner, mem.chunks.data(), mem.chunks.size(),
                                              mem.chunk_size, fixed, &mapped);
    else
        status = mgr.backend().sysmem_cpu_map(mem.host, fixed, &mapped);
    if (status != UVM_OK) {
        mgr.user_space().cover_after_cpu(mem.user_address, mem.alloc_size, mem.user_address_picked);
        return status;
    }
    UVM_ASSERT(mapped == fixed);
    if (!mem.is_vidmem())
        mem.host_at_user = true;
    return UVM_OK;
}

void unmap_at_user_address(Manager &mgr, Mem &mem) {
    void *at = reinterpret_cast<void *>(static_cast<uintptr_t>(mem.user_address));
    if (mem.is_vidmem())
        mgr.backend().vidmem_cpu_unmap(at, mem.alloc_size);
    else
        mgr.backend().sysmem_cpu_unmap(at, mem.alloc_size);
    mgr.user_space().cover_after_cpu(mem.user_address, mem.alloc_size, mem.user_address_picked);
    mem.host_at_user = false;
}

void drop_user_ref(Manager &mgr, Mem &mem) {
    UVM_ASSERT(mem.user_refs > 0);
    if (--mem.user_refs == 0)
        release_user_address(mgr, mem);
}

void undo_claim(Manager &mgr, Mem &mem, bool claimed) {
    if (claimed)
        release_user_address(mgr, mem);
}

}  // namespace

uvm_status_t mem_alloc_chunks(Manager &mgr, Mem &mem, std::vector<uint64_t> *grown, bool may_stitch) {
    GpuState &gpu = mgr.gpu(mem.owner);
    if (single_pinned_chunk(mem))
        return gpu.caches.alloc(mem.chunk_size, mem.chunks.data(), grown);  // the fast path
    if (mem.own_pmm)
        return mem.own_pmm->alloc(mem.chunk_size, mem.chunks.size(), mem.evictable, mem.chunks.data(), grown);
    return gpu.caches.pmm_alloc(mem.chunk_size, mem.chunks.size(), mem.evictable, mem.chunks.data(), grown,
                                chunk::Pmm::Holder(), may_stitch);
}

void mem_undo_chunks(Manager &mgr, Mem &mem, const std::vector<uint64_t> &grown) {
    if (single_pinned_chunk(mem))
        mgr.gpu(mem.owner).caches.undo_alloc(mem.chunk_size, mem.chunks[0], grown);
    else
        pmm_of(mgr, mem).undo_alloc(mem.chunk_size, mem.chunks.data(), mem.chunks.size(), grown);
}

void mem_free_chunks(Manager &mgr, Mem &mem) {
    if (chunk_in_cache(mem)) {
        mgr.gpu(mem.owner).caches.free(mem.chunk_size, mem.chunks[0]);
        return;
    }
    if (mem.imported) {
        UVM_ASSERT(mgr.backend_sharing());  // only a backend that shares imports
        mgr.backend_sharing()->roots_import_release(mem.owner, mem.chunks[0], mem.chunks.size());
        return;
    }
    if (mem.exported) {
        const uvm_status_t status = pmm_of(mgr, mem).free_and_release(mem.chunks.data(), mem.chunks.size());
        UVM_ASSERT(status == UVM_OK);
        (void)status;
        return;
    }
    const uvm_status_t status = pmm_of(mgr, mem).free(mem.chunk_size, mem.chunks.data(), mem.chunks.size());
    UVM_ASSERT(status == UVM_OK);
    (void)status;
}

uint64_t coarse_now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

// mem_check_alloc's refusal of GPU memory larger than its GPU.
uvm_status_t more_than_its_gpu(Manager &mgr, const uvm_mem_alloc_params_t &params) {
    return fail(UVM_ERR_OUT_OF_MEMORY, "size %s is more than GPU %u's memory, %s", byte_text(params.size).text,
                params.gpu, byte_text(mgr.gpu(params.gpu).info.memory_total).text);
}

}  // namespace

// The checks of uvm_mem_alloc's arguments, and what they resolve to.
uvm_status_t mem_check_alloc(Manager &mgr, const uvm_mem_alloc_params_t &params, CheckedAlloc *out,
                             uint64_t picked) {
    // GPU memory larger than any object is larger than its GPU: that is
    // OUT_OF_MEMORY, below, once the GPU is known (cudaMalloc of any size it
    // cannot hold says cudaErrorMemoryAllocation).
    const int backing = enum_value(params.backing);
    const bool gpu_memory = backing == UVM_BACKING_VIDMEM || backing == UVM_BACKING_MANAGED;
    const bool too_long = params.size > kMaxObjectSize;
    if (params.size == 0 || (too_long && !gpu_memory) || (params.flags & ~kKnownFlags)) {
        if (params.size == 0)
            return fail(UVM_ERR_INVALID_ARGUMENT, "size is 0");
        if (too_long && !gpu_memory)
            return fail(UVM_ERR_INVALID_ARGUMENT, "size %s is over the maximum object size, %s",
                        byte_text(params.size).text, byte_text(kMaxObjectSize).text);
        return fail(UVM_ERR_INVALID_ARGUMENT, "flags 0x%x: unknown flag bits 0x%x", params.flags,
                    params.flags & ~kKnownFlags);
    }
    uint64_t supported = kAllPageSizes;
    topo::ResolvedPlacement placement;
    switch (backing) {
        case UVM_BACKING_SYSMEM: {
            // The GPU the object is for places it by default; any valid GPU
            // will do when the placement names its own node.
            const bool gpu_local = enum_value(params.placement.kind) == UVM_PLACEMENT_GPU_LOCAL;
            if (gpu_local && params.gpu >= mgr.gpu_count())
                return bad_gpu(mgr, params.gpu);
            const int32_t gpu_node = gpu_local ? mgr.gpu(params.gpu).info.place.numa_node : -1;
            uvm_status_t placed = topo::resolve_placement(params.placement, gpu_node,
                                                          mgr.backend().topology(), &placement);
            if (placed != UVM_OK)
                return placed;
            break;
        }
        case UVM_BACKING_VIDMEM:
        case UVM_BACKING_MANAGED:
            if (params.gpu >= mgr.gpu_count())
                return bad_gpu(mgr, params.gpu);
            if (too_long)  // never fits (and rounding it up to chunks could overflow)
                return more_than_its_gpu(mgr, params);
            supported = mgr.gpu(params.gpu).info.page_sizes;
            break;
        default:
            return fail(UVM_ERR_INVALID_ARGUMENT,
                        "backing %d: no such backing; UVM_BACKING_SYSMEM, _VIDMEM or _MANAGED", backing);
    }
    if (backing != UVM_BACKING_SYSMEM && !default_placement(params.placement))
        return fail(UVM_ERR_INVALID_ARGUMENT, "placement is for sysmem: it must stay zero for %s",
                    backing == UVM_BACKING_VIDMEM ? "vidmem" : "managed memory");
    uint64_t chunk_size = picked;
    uvm_status_t status =
        picked ? UVM_OK : pick_chunk_size(params.backing, params.size, params.chunk_size, supported, &chunk_size);
    if (status != UVM_OK && params.chunk_size)
        return fail(status, "chunk_size %s: not a chunk size the backing supports here (mask 0x%llx)",
                    byte_text(params.chunk_size).text, static_cast<unsigned long long>(supported));
    if (status != UVM_OK)
        return status;
    const uint64_t alloc_size = align_up(params.size, chunk_size);
    // Larger than the GPU: it can never fit, which is what out-of-memory
    // says (cudaMalloc's cudaErrorMemoryAllocation), not a malformed request.
    const bool larger_than_gpu = params.backing != UVM_BACKING_SYSMEM && alloc_size > mgr.gpu(params.gpu).info.memory_total;

    if (params.tag && strnlen(params.tag, Labels::kMaxLength + 1) > Labels::kMaxLength)
        return fail(UVM_ERR_INVALID_ARGUMENT, "tag is longer than %zu characters", Labels::kMaxLength);
    // Only vidmem is ever evicted: asking it of other memory is the caller's
    // mistake, for both flags (one rule, uvm.h).
    if ((params.flags & (UVM_MEM_EVICTABLE | UVM_MEM_DISCARDABLE)) && params.backing != UVM_BACKING_VIDMEM)
        return fail(UVM_ERR_INVALID_ARGUMENT, "flags: UVM_MEM_%s is for vidmem only",
                    (params.flags & UVM_MEM_EVICTABLE) ? "EVICTABLE" : "DISCARDABLE");
    out->params = &params;
    out->placement = placement;
    out->chunk_size = chunk_size;
    out->alloc_size = alloc_size;
    if (larger_than_gpu)
        return more_than_its_gpu(mgr, params);
    return UVM_OK;
}


uvm_status_t mem_alloc(Manager &mgr, const CheckedAlloc &checked, std::shared_ptr<Mem> *out, const ReusedRun *reuse,
                       chunk::Pmm *client_pmm, const chunk::Pmm::Holder *holder) {
    const uvm_mem_alloc_params_t &params = *checked.params;
    const topo::ResolvedPlacement &placement = checked.placement;
    const uint64_t chunk_size = checked.chunk_size, alloc_size = checked.alloc_size;
    uvm_status_t status = UVM_OK;
    bool counted = false;  // by the chunk caches, with its chunk
    std::shared_ptr<Mem> mem = make_mem();
    std::vector<uint64_t> grown;  // vidmem: the roots the PMM grew for it, to undo exactly
    if (params.flags & UVM_MEM_GPU_MAPPED)
        mem->gpus.resize(mgr.gpu_count());  // the mapping at the end then needs no host memory
    if (params.tag)
        mem->tag = mgr.labels.intern(params.tag);  // before anything that must be undone
    mem->born_ns = coarse_now_ns();
    mem->size = params.size;
    mem->alloc_size = alloc_size;
    mem->chunk_size = chunk_size;
    mem->backing = params.backing;
    // A discardable object is evictable by nature: a cache its owner can rebuild.
    mem->evictable = (params.flags & (UVM_MEM_EVICTABLE | UVM_MEM_DISCARDABLE)) != 0;
    mem->flags = params.flags;

    mem->owner = params.gpu;
    if (params.backing == UVM_BACKING_VIDMEM) {
        mem->chunks.resize(alloc_size / chunk_size);
        mem->remappable = (params.flags & UVM_MEM_USER_MAPPABLE) && chunk_size == kPageSize2M;
        // A sleepable client's roots are remappable all: they serve its remappable objects too.
        mem->client_roots = client_pmm != nullptr;
        mem->own_pmm = client_pmm ? client_pmm : mem->remappable ? &mgr.gpu(params.gpu).remap_pmm : nullptr;
        const bool zero = (params.flags & UVM_MEM_ZERO) != 0;
        // A later step that can fail needs the record of what the PMM grew,
        // to undo exactly.
        const bool undoable = zero || (params.flags & UVM_MEM_GPU_MAPPED) || mem->evictable;
        // An object of one pinned chunk that nothing after its chunk can
        // refuse (no zeroing nor mapping to fail, not evictable: created
        // below cannot fail) takes it from the thread's cache as
        // mem_alloc_chunks would, and is counted in the same visit.
        // Chunks that may be a stream's pending roots come from the PMM and
        // go back to it on undo (pending again): never through a thread's cache.
        UVM_ASSERT(!holder || (!reuse && !mem->own_pmm && chunk_size == kRootChunkSize));
        counted = !reuse && !holder && !undoable && single_pinned_chunk(*mem);
        if (counted) {
            status = mgr.gpu(params.gpu).caches.alloc(chunk_size, mem->chunks.data(), nullptr, +1);
        } else if (reuse) {
            // Chunks a stream freed and this allocation on it takes again
            // (stream.h): already allocated in the PMM, in one run.
            UVM_ASSERT(reuse->chunk_size == chunk_size && reuse->count == mem->chunks.size() &&
                       reuse->evictable == mem->evictable && reuse->remappable == mem->remappable);
            for (size_t i = 0; i < mem->chunks.size(); ++i)
                mem->chunks[i] = reuse->phys + i * chunk_size;
        } else if (holder) {
            status = mgr.gpu(params.gpu).caches.pmm_alloc(chunk_size, mem->chunks.size(), mem->evictable,
                                                          mem->chunks.data(), undoable ? &grown : nullptr, *holder,
                                                          checked.may_stitch);
        } else {
            status = mem_alloc_chunks(mgr, *mem, undoable ? &grown : nullptr, checked.may_stitch);
        }
        if (status != UVM_OK)
            return status;
        if (checked.may_stitch && !reuse) {
            size_t runs = 0;
            for_each_run(*mem, [&](size_t, size_t) { ++runs; });
            mem->stitched = runs > 1;
        }
        if (zero && !reuse)  // reused chunks are zeroed in stream order by the caller
            status = zero_vidmem(mgr, *mem);
        if (status == UVM_OK && (params.flags & UVM_MEM_GPU_MAPPED))
            status = mem_map_gpu_virtual(mgr, *mem, mem->owner, UVM_VA_SPACE_KERNEL, 0);
        if (status != UVM_OK) {
            if (holder)
                mgr.gpu(params.gpu).pmm.undo_alloc(chunk_size, mem->chunks.data(), mem->chunks.size(), grown, *holder);
            else if (!reuse)  // else the run stays the caller's
                mem_undo_chunks(mgr, *mem, grown);
            return status;
        }
    } else if (params.backing == UVM_BACKING_MANAGED) {
        // The chunk size of a managed object is the granularity we report and
        // round to; the driver migrates it in pages of its own choosing.
        backend::ManagedCapability *managed = mgr.backend_managed();
        status = managed ? managed->managed_alloc(params.gpu, alloc_size, &mem->managed)
                         : fail(UVM_ERR_NOT_SUPPORTED, "backing UVM_BACKING_MANAGED: this backend has no managed memory");
        if (status != UVM_OK)
            return status;
        if (params.flags & UVM_MEM_ZERO) {
            backend::CeAddress dst;
            dst.is_virtual = true;
            dst.address = mem->managed;
            status = mgr.backend().ce_memset(params.gpu, dst, 0, alloc_size);
            if (status != UVM_OK) {
                managed->managed_free(mem->managed);
                return status;
            }
        }
    } else {
        // Fresh sysmem pages come zeroed from the host, so UVM_MEM_ZERO costs nothing here.
        backend::HostRequest request;
        request.size = alloc_size;
        request.chunk_size = chunk_size;
        request.shareable = (params.flags & UVM_MEM_USER_MAPPABLE) != 0;
        request.policy = placement.policy;
        status = mgr.backend().sysmem_alloc(request, &mem->host);
        if (status != UVM_OK)
            return status;
        mem->numa_node = placement.node;
        mem->numa_node_mask = placement.node_mask;
    }
    // The last step: only the evictable list can refuse the new object
    // (uvm/events.h), and mem_release takes it off again.
    status = events::created(mgr, mem, counted);
    if (status != UVM_OK) {  // an evictable object, so vidmem
        UVM_ASSERT(!counted);
        if (params.flags & UVM_MEM_GPU_MAPPED)
            mem_unmap_gpu_virtual(mgr, *mem, mem->owner, UVM_VA_SPACE_KERNEL);
        if (holder)
            mgr.gpu(params.gpu).pmm.undo_alloc(chunk_size, mem->chunks.data(), mem->chunks.size(), grown, *holder);
        else if (!reuse)  // else the run stays the caller's
            mem_undo_chunks(mgr, *mem, grown);
        return status;
    }
    if ((params.flags & UVM_MEM_GPU_MAPPED) && !mem->is_vidmem()) {
        status = mem_map_gpu_virtual(mgr, *mem, mem->owner, UVM_VA_SPACE_KERNEL, 0);
        if (status != UVM_OK) {
            mem_release(mgr, *mem);
            return status;
        }
    }
    *out = std::move(mem);
    return UVM_OK;
}

void mem_publish_kernel_addresses(Manager &mgr, Mem &mem) {
    UVM_ASSERT(mem.handle != 0);
    for (uint32_t g = 0; g < mem.gpus.size(); ++g)
        if (mem.gpus[g].kernel) {
            mgr.gpu(g).kernel_addresses.name(mem.gpus[g].kernel_name, mem.handle);
        }
}

void mem_hold_user_address(Mem &mem) {
    UVM_ASSERT(mem.user_refs > 0);
    mem.user_refs++;
}

void mem_drop_user_address(Manager &mgr, Mem &mem) { drop_user_ref(mgr, mem); }

// mem_unmap_all's walk, out of line: most objects freed have nothing to
// walk (no GPU's mapping table, no CPU mapping), and the check for that
// costs a few instructions where this function's entry and exit cost tens.
static __attribute__((noinline)) void unmap_each(Manager &mgr, Mem &mem) {
    for (uint32_t g = 0; g < mem.gpus.size(); ++g) {
        if (mem.gpus[g].kernel)
            mem_unmap_gpu_virtual(mgr, mem, g, UVM_VA_SPACE_KERNEL);
        if (mem.gpus[g].user)
            mem_unmap_gpu_virtual(mgr, mem, g, UVM_VA_SPACE_USER);
        if (mem.gpus[g].phys && !(mem.is_vidmem() && g == mem.owner))
            mem_unmap_gpu_phys(mgr, mem, g);
    }
    if (mem.cpu_kernel)
        mem_unmap_cpu_kernel(mgr, mem);
    if (mem.cpu_user)
        mem_unmap_cpu_user(mgr, mem);
}

void mem_unmap_all(Manager &mgr, Mem &mem) {
    // Every GPU mapping is recorded in mem.gpus, made on the first one
    // (gpu_mapping): an empty table means none to remove.
    if (!mem.gpus.empty() || mem.cpu_kernel || mem.cpu_user)
        unmap_each(mgr, mem);
    UVM_ASSERT(mem.user_refs == (mem.remap_user ? 1u : 0u));  // an eviction holds the address
}

void vidmem_run_free(Manager &mgr, const ReusedRun &run) {
    GpuState &gpu = mgr.gpu(run.gpu);
    if (run.count == 1 && !run.evictable && !run.remappable) {
        gpu.caches.free(run.chunk_size, run.phys);  // as single_pinned_chunk objects
        return;
    }
    std::vector<uint64_t> chunks(run.count);
    for (size_t i = 0; i < run.count; ++i)
        chunks[i] = run.phys + i * run.chunk_size;
    const uvm_status_t status = (run.remappable ? gpu.remap_pmm : gpu.pmm).free(run.chunk_size, chunks.data(), chunks.size());
    UVM_ASSERT(status == UVM_OK);
    (void)status;
}

bool mem_can_leave_whole(const Mem &mem) {
    // A stream's pool holds runs of the GPU's PMMs: a client's roots stay its own.
    if (!mem.is_vidmem() || mem.evicted || mem.client_roots || mem.exported || mem.imported || mem.cpu_kernel ||
        mem.cpu_user || mem.user_refs || mem.chunks_given)
        return false;
    for (uint32_t g = 0; g < mem.gpus.size(); ++g)
        if (g != mem.owner && (mem.gpus[g].phys || mem.gpus[g].kernel || mem.gpus[g].user))
            return false;
    return true;
}

// The run of an object that can be detached, its mappings removed; the record dead.
void mem_take_run(Manager &mgr, Mem &mem, ReusedRun *run) {
    mem_unmap_all(mgr, mem);
    run->gpu = mem.owner;
    run->phys = mem.chunks[0];
    run->chunk_size = mem.chunk_size;
    run->count = mem.chunks.size();
    run->evictable = mem.evictable;
    run->remappable = mem.remappable;
    for (size_t i = 1; i < mem.chunks.size(); ++i)
        UVM_ASSERT(mem.chunks[i] == run->phys + i * mem.chunk_size);  // every object is one run
    mem.dead = true;
}

bool mem_detach_run(Manager &mgr, Mem &mem, ReusedRun *run) {
    UVM_ASSERT(!mem.dead);
    if (!mem_can_detach(mem))
        return false;
    // The object is gone for its client and the evictable list as for
    // anyone: the run is no object's now, charged to nobody.
    events::released(mgr, mem);
    mem_take_run(mgr, mem, run);
    return true;
}

void mem_release(Manager &mgr, Mem &mem) {
    UVM_ASSERT(!mem.dead);
    if (mem.evicted && mem.remap_user) {
        mem.remap_user = false;
        drop_user_ref(mgr, mem);  // the address the eviction held for the restore
    }
    mem_unmap_all(mgr, mem);
    // An evicted object's bytes are in host memory, its chunks long gone:
    // the release gives the bytes back (uvm/events.h). A stitched one freed
    // on a stream gave its chunks to the stream at the free.
    const bool has_chunks = !mem.evicted && !mem.chunks_given;
    // An object whose chunk goes back to the thread's cache (as
    // mem_free_chunks gives it back: chunk_in_cache) is counted out with it,
    // in one visit of the cache.
    const bool counted = mem.is_vidmem() && has_chunks && chunk_in_cache(mem);
    events::released(mgr, mem, counted);
    if (mem.is_vidmem()) {
        if (counted)
            mgr.gpu(mem.owner).caches.free(mem.chunk_size, mem.chunks[0], -1);
        else if (has_chunks)
            mem_free_chunks(mgr, mem);
    } else if (mem.is_managed()) {
        mgr.backend_managed()->managed_free(mem.managed);  // it made the object
    } else {
        mgr.backend().sysmem_free(&mem.host);
    }
    mem.dead = true;
}

uvm_status_t mem_map_cpu_kernel(Manager &mgr, Mem &mem) {
    if (mem.cpu_kernel)
        return UVM_ERR_ALREADY_MAPPED;
    void *address = nullptr;
    uvm_status_t status = UVM_OK;
    if (mem.is_managed()) {
        // The managed address is the CPU's too: nothing to map.
        mem.cpu_kernel = reinterpret_cast<void *>(static_cast<uintptr_t>(mem.managed));
        events::mapped(mgr, MapKind::CpuKernel, 0);
        return UVM_OK;
    }
    if (mem.is_vidmem())
        status = mgr.gpu(mem.owner).info.cpu_coherent
                     ? mgr.backend().vidmem_cpu_map(mem.owner, mem.chunks.data(), mem.chunks.size(),
                                                    mem.chunk_size, nullptr, &address)
                     : UVM_ERR_NOT_SUPPORTED;
    else
        address = mem.host.linear;  // sysmem: the manager's own mapping of its pages
    if (status != UVM_OK)
        return status;
    mem.cpu_kernel = address;
    events::mapped(mgr, MapKind::CpuKernel, 0);
    return UVM_OK;
}

uvm_status_t mem_unmap_cpu_kernel(Manager &mgr, Mem &mem) {
    if (!mem.cpu_kernel)
        return UVM_ERR_NOT_MAPPED;
    // Sysmem's kernel mapping is its linear mapping, which lives as long as the
    // object; managed memory's is the managed address.
    if (mem.is_vidmem())
        mgr.backend().vidmem_cpu_unmap(mem.cpu_kernel, mem.alloc_size);
    mem.cpu_kernel = nullptr;
    events::unmapped(mgr, MapKind::CpuKernel, 0);
    return UVM_OK;
}

uvm_status_t mem_map_cpu_user(Manager &mgr, Mem &mem, void *address) {
    const uint64_t addr = reinterpret_cast<uintptr_t>(address);
    if (addr == 0)
        return UVM_ERR_INVALID_ARGUMENT;
    if (!is_aligned(addr, kPageSize4K))
        return UVM_ERR_MISALIGNED;
    if (mem.cpu_user)
        return UVM_ERR_ALREADY_MAPPED;
    if (mem.is_managed() || (mem.is_vidmem() && !mgr.gpu(mem.owner).info.cpu_coherent) ||
        (!mem.is_vidmem() && mem.host.fd < 0))  // private sysmem pages cannot be mapped twice
        return UVM_ERR_NOT_SUPPORTED;
    if (mem.user_refs == 0 && mgr.user_space().in_backend_reservation(addr, mem.alloc_size))
        return UVM_ERR_NOT_SUPPORTED;  // the driver holds that range: the CPU cannot map there
    bool claimed;
    uvm_status_t status = claim_user_address(mgr, mem, addr, 0, &claimed);
    if (status != UVM_OK)
        return status;
    // The pages may be there already, for the GPU user mappings.
    if (!mem.host_at_user) {
        status = map_at_user_address(mgr, mem);
        if (status != UVM_OK) {
            undo_claim(mgr, mem, claimed);
            return status;
        }
    }
    mem.cpu_user = reinterpret_cast<void *>(static_cast<uintptr_t>(mem.user_address));
    mem.user_refs++;
    events::mapped(mgr, MapKind::CpuUser, 0);
    return UVM_OK;
}

uvm_status_t mem_unmap_cpu_user(Manager &mgr, Mem &mem) {
    if (!mem.cpu_user)
        return UVM_ERR_NOT_MAPPED;
    // GPU user mappings that reach the pages through this CPU mapping keep it.
    if (!(gpu_user_through_cpu(mgr, mem) && any_gpu_user(mem)))
        unmap_at_user_address(mgr, mem);
    mem.cpu_user = nullptr;
    drop_user_ref(mgr, mem);
    events::unmapped(mgr, MapKind::CpuUser, 0);
    return UVM_OK;
}

uvm_status_t mem_map_gpu_phys(Manager &mgr, Mem &mem, uint32_t gpu) {
    if (mem.is_managed())
        return UVM_ERR_NOT_SUPPORTED;  // the driver places managed pages
    if (phys_mapped(mem, gpu))
        return UVM_ERR_ALREADY_MAPPED;
    GpuMapping &m = gpu_mapping(mgr, mem, gpu);
    if (mem.is_vidmem()) {
        // A peer reaches the owner's vidmem over the link: nothing to map per
        // object once the pair has access.
        if (!((mgr.gpu(gpu).info.peer_mask >> mem.owner) & 1u))
            return UVM_ERR_NO_PEER_ACCESS;
        const uvm_status_t status = mgr.backend().peer_access(gpu, mem.owner);
        if (status != UVM_OK)
            return status;
    } else {
        const uvm_status_t status = mgr.backend().sysmem_dma_map(gpu, mem.host, &m.dma);
        if (status != UVM_OK)
            return status;
    }
    m.phys = true;
    events::mapped(mgr, MapKind::GpuPhys, gpu, mem.is_vidmem());
    return UVM_OK;
}

uvm_status_t mem_unmap_gpu_phys(Manager &mgr, Mem &mem, uint32_t gpu) {
    if (mem.is_managed() || (mem.is_vidmem() && gpu == mem.owner))
        return UVM_ERR_NOT_SUPPORTED;  // vidmem is always physically present on its owner
    if (!phys_mapped(mem, gpu))
        return UVM_ERR_NOT_MAPPED;
    GpuMapping &m = mem.gpus[gpu];
    // Virtual mappings go first: they point at the physical ones.
    if (m.kernel)
        mem_unmap_gpu_virtual(mgr, mem, gpu, UVM_VA_SPACE_KERNEL);
    if (m.user)
        mem_unmap_gpu_virtual(mgr, mem, gpu, UVM_VA_SPACE_USER);
    if (!mem.is_vidmem())
        mgr.backend().sysmem_dma_unmap(gpu, mem.host, m.dma);
    m.phys = false;
    m.dma = 0;
    events::unmapped(mgr, MapKind::GpuPhys, gpu, mem.is_vidmem());
    return UVM_OK;
}

uvm_status_t mem_map_gpu_virtual(Manager &mgr, Mem &mem, uint32_t gpu, uvm_va_space_kind_t space,
                                 uint64_t address) {
    const bool user = space == UVM_VA_SPACE_USER;
    // The address the mapping goes to: `address` 0 takes the one the object
    // has (a CPU user mapping's, 4 KiB aligned), which a GPU's pages of the
    // chunk size must be aligned to as well.
    if (user && !is_aligned(address ? address : mem.user_refs ? mem.user_address : 0, mem.chunk_size))
        return UVM_ERR_MISALIGNED;
    GpuMapping &m = gpu_mapping(mgr, mem, gpu);
    if (user ? m.user : m.kernel)
        return UVM_ERR_ALREADY_MAPPED;
    GpuState &g = mgr.gpu(gpu);
    const bool through_cpu = user && gpu_user_through_cpu(mgr, mem);
    if (through_cpu && mem.host.fd < 0)
        return UVM_ERR_NOT_SUPPORTED;  // private pages cannot be mapped again at a user address
    if (mem.is_managed()) {
        // The managed address is every GPU's too; the driver's own page
        // tables map it, so our page tree records nothing.
        if (user)
            return UVM_ERR_NOT_SUPPORTED;
        // A new object (no handle yet) has its range reserved, so that its
        // publication (api/entry.h) cannot fail.
        const uint32_t name = g.kernel_addresses.reserve(mem.managed, mem.alloc_size);
        if (!name)
            return UVM_ERR_NO_HOST_MEMORY;
        if (mem.handle)
            g.kernel_addresses.name(name, mem.handle);
        m.kernel_name = name;
        m.kernel = true;
        m.kernel_va = mem.managed;
        m.kernel_va_placed = true;
        events::mapped(mgr, MapKind::GpuKernel, gpu);
        return UVM_OK;
    }

    // The physical mapping first, as in the driver; it stays if we made it and succeed.
    bool made_phys = false;
    uvm_status_t status = UVM_OK;
    if (!phys_mapped(mem, gpu)) {
        status = mem_map_gpu_phys(mgr, mem, gpu);
        if (status != UVM_OK)
            return status;
        made_phys = true;
    }
    const uint64_t n = mem.chunk_count();
    mmu::Pte *ptes = pte_scratch(n);
    for (uint64_t i = 0; i < n; ++i)
        ptes[i] = chunk_pte(mem, gpu, i);

    bool claimed = false;
    bool made_cpu = false;  // mapped the pages at the user address on the CPU for this
    uint64_t va = 0;
    bool placed = false;
    if (user) {
        uint64_t placed_at = 0;
        if (address == 0 && mem.user_refs == 0 && mgr.backend_placement())  // else the manager picks
            status = mgr.backend_placement()->user_va_placement(gpu, mem.chunk_size, ptes, n, &placed_at);
        if (status == UVM_OK)
            status = claim_user_address(mgr, mem, address, placed_at, &claimed);
        va = mem.user_address;
        if (status == UVM_OK && through_cpu && !mem.host_at_user) {
            status = map_at_user_address(mgr, mem);
            made_cpu = status == UVM_OK;
            if (status != UVM_OK)
                undo_claim(mgr, mem, claimed);
        }
    } else {
        if (mgr.backend_placement())  // else the manager picks
            status = mgr.backend_placement()->kernel_va_placement(gpu, mem.chunk_size, ptes, n, &va);
        placed = status == UVM_OK && va != 0;
        if (status == UVM_OK && !placed)
            status = g.kernel_va->alloc(mem.alloc_size, mem.chunk_size, &va);
    }
    if (status != UVM_OK) {
        if (made_phys)
            mem_unmap_gpu_phys(mgr, mem, gpu);
        return status;
    }
    // A kernel view the backend placed (CUDA: a range of the physical
    // window, or registered host pages' device pointer) is reachable through
    // page tables the driver made once for the whole window: it adds no
    // entries, so our page tree records none (and the alloc+map fast path
    // pays no page-tree walk).
    mmu::PageTree &tree = g.tree(space);
    status = placed ? UVM_OK : tree.map(va, mem.chunk_size, ptes, n);
    if (status == UVM_OK) {
        status = mgr.backend().gpu_va_map(gpu, space, va, mem.chunk_size, ptes, n);
        if (status != UVM_OK && !placed)
            tree.unmap(va, mem.chunk_size, n);
        else if (status != UVM_OK && !user)
            mgr.backend().gpu_va_unmap(gpu, space, va, mem.alloc_size);  // a view the placement made (stitched)
    } else if (status == UVM_ERR_ALREADY_MAPPED) {
        status = UVM_ERR_ADDRESS_IN_USE;
    }
    // The address lookup's range (for a new object, nobody's until it has a handle).
    uint32_t name = 0;
    if (status == UVM_OK && !user && !(name = g.kernel_addresses.reserve(va, mem.alloc_size))) {
        mgr.backend().gpu_va_unmap(gpu, space, va, mem.alloc_size);
        if (!placed)
            tree.unmap(va, mem.chunk_size, n);
        status = UVM_ERR_NO_HOST_MEMORY;
    }
    if (status != UVM_OK) {
        if (made_cpu)
            unmap_at_user_address(mgr, mem);
        if (user)
            undo_claim(mgr, mem, claimed);
        else if (!placed)
            g.kernel_va->free(va, mem.alloc_size);
        if (made_phys)
            mem_unmap_gpu_phys(mgr, mem, gpu);
        return status;
    }
    if (user) {
        m.user = true;
        mem.user_refs++;
        events::mapped(mgr, MapKind::GpuUser, gpu);
    } else {
        if (mem.handle)
            g.kernel_addresses.name(name, mem.handle);
        m.kernel = true;
        m.kernel_va = va;
        m.kernel_name = name;
        m.kernel_va_placed = placed;
        events::mapped(mgr, MapKind::GpuKernel, gpu);
    }
    return UVM_OK;
}

uvm_status_t mem_unmap_gpu_virtual(Manager &mgr, Mem &mem, uint32_t gpu, uvm_va_space_kind_t space) {
    const bool user = space == UVM_VA_SPACE_USER;
    if (!has_gpu_mapping(mem, gpu) || !(user ? mem.gpus[gpu].user : mem.gpus[gpu].kernel))
        return UVM_ERR_NOT_MAPPED;
    GpuMapping &m = mem.gpus[gpu];
    GpuState &g = mgr.gpu(gpu);
    if (!user) {  // first: the range may be someone else's once unmapped
        g.kernel_addresses.erase(m.kernel_name);
        m.kernel_name = 0;
    }
    if (mem.is_managed()) {
        m.kernel = false;
        m.kernel_va = 0;
        m.kernel_va_placed = false;
        events::unmapped(mgr, MapKind::GpuKernel, gpu);
        return UVM_OK;
    }
    const uint64_t va = user ? mem.user_address : m.kernel_va;
    mgr.backend().gpu_va_unmap(gpu, space, va, mem.alloc_size);
    if (user || !m.kernel_va_placed) {  // placed kernel views are not in the tree
        const uvm_status_t status = g.tree(space).unmap(va, mem.chunk_size, mem.chunk_count());
        UVM_ASSERT(status == UVM_OK);
        (void)status;
    }
    if (user) {
        m.user = false;
        if (mem.host_at_user && !mem.cpu_user && !any_gpu_user(mem))
            unmap_at_user_address(mgr, mem);  // it was there for the GPU user mappings only
        drop_user_ref(mgr, mem);
        events::unmapped(mgr, MapKind::GpuUser, gpu);
    } else {
        if (!m.kernel_va_placed)
            g.kernel_va->free(va, mem.alloc_size);
        m.kernel = false;
        m.kernel_va = 0;
        m.kernel_va_placed = false;
        events::unmapped(mgr, MapKind::GpuKernel, gpu);
    }
    return UVM_OK;
}

uvm_status_t mem_advise(Manager &mgr, Mem &mem, int advice, int32_t processor) {
    if (advice < UVM_ADVISE_SET_READ_MOSTLY || advice > UVM_ADVISE_UNSET_ACCESSED_BY)
        return UVM_ERR_INVALID_ARGUMENT;
    if (processor != UVM_PROCESSOR_CPU && (processor < 0 || static_cast<uint32_t>(processor) >= mgr.gpu_count()))
        return UVM_ERR_INVALID_GPU;
    if (!mem.is_managed())
        return UVM_ERR_NOT_SUPPORTED;  // advice steers the driver's migration of managed memory
    // A managed object exists only where the backend has managed memory.
    return mgr.backend_managed()->managed_advise(mem.managed, mem.alloc_size, static_cast<uvm_managed_advice_t>(advice),
                                                 processor);
}

uvm_status_t mem_prefetch(Manager &mgr, Mem &mem, uint64_t offset, uint64_t size, int32_t processor) {
    if (size == 0)
        return UVM_ERR_INVALID_ARGUMENT;
    if (processor != UVM_PROCESSOR_CPU && (processor < 0 || static_cast<uint32_t>(processor) >= mgr.gpu_count()))
        return UVM_ERR_INVALID_GPU;
    if (offset >= mem.alloc_size || size > mem.alloc_size - offset)
        return UVM_ERR_OUT_OF_RANGE;
    if (!mem.is_managed())
        return UVM_ERR_NOT_SUPPORTED;
    const uvm_status_t status = mgr.backend_managed()->managed_prefetch(mem.managed + offset, size, processor);
    if (status == UVM_OK) {
        events::prefetched(mgr, size);
    }
    return status;
}

uvm_status_t mem_gpu_phys_address(Manager &mgr, Mem &mem, uint32_t gpu, uint64_t offset,
                                  uint64_t size, uvm_gpu_phys_address_t *out) {
    if (size == 0)
        return UVM_ERR_INVALID_ARGUMENT;
    if (mem.is_managed())
        return UVM_ERR_NOT_SUPPORTED;
    if (offset >= mem.alloc_size || size > mem.alloc_size - offset)
        return UVM_ERR_OUT_OF_RANGE;
    if (!phys_mapped(mem, gpu))
        return UVM_ERR_NOT_MAPPED;
    uvm_gpu_phys_address_t a{};
    if (mem.is_vidmem()) {
        const uint64_t first = offset / mem.chunk_size;
        const uint64_t last = (offset + size - 1) / mem.chunk_size;
        a.address = mem.chunks[first] + offset % mem.chunk_size;
        a.aperture = gpu == mem.owner ? UVM_APERTURE_VID : UVM_APERTURE_PEER;
        a.peer_gpu = mem.owner;
        a.contiguous = 1;
        for (uint64_t i = first + 1; i <= last; ++i)
            if (mem.chunks[i] != mem.chunks[i - 1] + mem.chunk_size)
                a.contiguous = 0;
    } else {
        // Both backends give a sysmem object one DMA range per GPU.
        a.address = mem.gpus[gpu].dma + offset;
        a.aperture = UVM_APERTURE_SYS;
        a.contiguous = 1;
    }
    *out = a;
    return UVM_OK;
}

uvm_status_t mem_ce_address(Manager &mgr, Mem &mem, uint32_t gpu, uvm_gpu_view_t view,
                            uint64_t offset, backend::CeAddress *out, uint64_t *piece) {
    backend::CeAddress a;
    const bool mapped = has_gpu_mapping(mem, gpu);
    switch (view) {
        case UVM_VIEW_KERNEL:
        case UVM_VIEW_USER: {
            const bool user = view == UVM_VIEW_USER;
            if (!mapped || !(user ? mem.gpus[gpu].user : mem.gpus[gpu].kernel))
                return UVM_ERR_NOT_MAPPED;
            a.is_virtual = true;
            a.space = user ? UVM_VA_SPACE_USER : UVM_VA_SPACE_KERNEL;
            a.tree = mem.is_managed() ? nullptr : &mgr.gpu(gpu).tree(a.space);
            a.address = (user ? mem.user_address : mem.gpus[gpu].kernel_va) + offset;
            *piece = mem.alloc_size - offset;  // the MMU translates every page
            break;
        }
        case UVM_VIEW_PHYSICAL: {
            uvm_gpu_phys_address_t p;
            const uvm_status_t status = mem_gpu_phys_address(mgr, mem, gpu, offset, 1, &p);
            if (status != UVM_OK)
                return status;
            a.address = p.address;
            a.aperture = p.aperture == UVM_APERTURE_VID    ? mmu::Aperture::Vid
                         : p.aperture == UVM_APERTURE_PEER ? mmu::Aperture::Peer
                                                           : mmu::Aperture::Sys;
            a.peer_gpu = p.peer_gpu;
            if (mem.is_vidmem()) {
                // To the end of the physically contiguous run of chunks.
                uint64_t i = offset / mem.chunk_size;
                uint64_t end = (i + 1) * mem.chunk_size;
                while (i + 1 < mem.chunks.size() && mem.chunks[i + 1] == mem.chunks[i] + mem.chunk_size) {
                    ++i;
                    end += mem.chunk_size;
                }
                *piece = end - offset;
            } else {
                *piece = mem.alloc_size - offset;
            }
            break;
        }
        default:
            return UVM_ERR_INVALID_ARGUMENT;
    }
    *out = a;
    return UVM_OK;
}

}  // namespace uvm
