// Memory objects and their mappings (nvidia-uvm's uvm_mem).
//
// Every function here works on one object whose lock the caller holds, and
// either succeeds or leaves the object, the manager and the backend as they
// were.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "common/assert.h"
#include "common/enum_value.h"
#include "common/mutex.h"
#include "common/recycling_allocator.h"
#include "topo/placement.h"
#include "uvm/manager.h"
#include "uvm/uvm.h"

namespace uvm {

// What one object has on one GPU.
struct GpuMapping {
    bool phys = false;       // physical/DMA mapping
    uint64_t dma = 0;        // sysmem: DMA address of byte 0
    bool kernel = false;     // kernel virtual mapping
    uint64_t kernel_va = 0;
    uint32_t kernel_name = 0;  // its range in the GPU's kernel address lookup (AddressMap::reserve)
    bool kernel_va_placed = false;  // the backend placed it: not from the kernel VA allocator
    bool user = false;       // user virtual mapping (at Mem::user_address)
};

// A vidmem object's chunk addresses. Most objects are one chunk: that one is
// held inline, so the alloc/free fast path makes no heap allocation for it.
class ChunkList {
public:
    void resize(size_t n) {
        UVM_ASSERT(size_ == 0);
        if (n > 1)
            heap_ = std::make_unique<uint64_t[]>(n);
        size_ = n;
    }
    size_t size() const { return size_; }
    uint64_t *data() { return heap_ ? heap_.get() : &inline_; }
    const uint64_t *data() const { return heap_ ? heap_.get() : &inline_; }
    uint64_t &operator[](size_t i) { return data()[i]; }
    uint64_t operator[](size_t i) const { return data()[i]; }

private:
    uint64_t inline_ = 0;
    size_t size_ = 0;
    std::unique_ptr<uint64_t[]> heap_;
};

struct Stream;
struct Client;
struct HostSlab;     // pressure/host_store.h
struct PrivatePool;  // stream/private_pool.h

// The streams whose work uses an object. Most objects that have any have
// one (the stream they were allocated on): held inline, so stream-ordered
// allocation makes no heap allocation for it.
class StreamSet {
public:
    bool empty() const { return !first_; }
    bool contains(const Stream *s) const {
        if (first_.get() == s)
            return true;
        for (const auto &m : more_)
            if (m.get() == s)
                return true;
        return false;
    }
    void add(const std::shared_ptr<Stream> &s) {
        if (contains(s.get()))
            return;
        if (!first_)
            first_ = s;
        else
            more_.push_back(s);
    }
    void clear() {
        first_.reset();
        more_.clear();
    }
    template <typename F>
    void for_each(F &&f) const {
        if (first_)
            f(first_);
        for (const auto &m : more_)
            f(m);
    }

private:
    std::shared_ptr<Stream> first_;
    std::vector<std::shared_ptr<Stream>> more_;
};

struct Mem {
    Mutex lock;  // common/mutex.h
    bool dead = false;  // freed: every call through a stale reference fails
    // Freed while GPU work that uses it is still in flight: the handle is
    // gone and calls fail as for a dead object; the manager releases it
    // when the work is done (stream.h).
    bool retiring = false;
    bool gone() const { return dead || retiring; }
    // A call other than its alloc and free reached it through its handle, or
    // a report holds it (Manager::lookup, live_objects; written and read
    // under the table shard's lock): its record may differ from a new one,
    // so it is never parked (Manager::take_idle).
    bool touched = false;
    // Parked with a client (mem_park): its client's charge and object count
    // stay with it, for that client's next allocation on the thread, and
    // end with the record (~Mem) wherever else it goes. The manager it was
    // parked in; null while it is an object.
    Manager *parked_by = nullptr;
    ~Mem();
    // Streams whose queued work uses the object (uvm_mem_record_use, async
    // copies, allocation on a stream). Empty for callers that never use streams.
    StreamSet users;
    // The client that owns it and whose budget its memory is charged to
    // (client.h); null: the default client, charged to nobody.
    std::shared_ptr<Client> client;
    // The private pool it was allocated to, whose memory it stays when freed
    // (stream/private_pool.h); null: none.
    std::shared_ptr<PrivatePool> pool;
    uint64_t handle = 0;         // its handle's value, once it has one (the trace names it so)
    const char *tag = nullptr;   // the caller's tag (interned in Manager::labels), or none
    uint64_t born_ns = 0;        // when it was allocated (coarse monotonic clock), for its age

    uint64_t size = 0;
    uint64_t alloc_size = 0;
    uint64_t chunk_size = 0;
    uvm_backing_t backing = UVM_BACKING_SYSMEM;
    uint32_t owner = 0;  // vidmem and managed: the owning GPU; sysmem: the GPU it is for
    bool evictable = false;
    bool remappable = false;  // vidmem from the GPU's remap_pmm (see GpuState)
    // Shared with other processes (share.h). Exported vidmem: its roots go
    // back to the backend when it is freed, never to be reused here while
    // others may hold them. Imported vidmem: its chunks are other processes'
    // roots in the backend's import area, not the PMM's.
    bool exported = false;
    bool imported = false;
    uint32_t flags = 0;          // UVM_MEM_* as allocated
    int32_t numa_node = -1;      // sysmem: the node its placement resolved to
    uint64_t numa_node_mask = 0; // sysmem: the nodes it is bound to

    ChunkList chunks;                // vidmem: physical address of each chunk
    // Vidmem whose chunks are several runs, not one (stitched: chunk/pmm.h):
    // its kernel mapping joins them, and it never moves, is never detached
    // as one run, shared nor evicted (mem_can_detach, compact/, share/); it
    // may be parked whole on its stream (stream/parked_objects.h).
    bool stitched = false;
    // A stitched object freed on a stream (or unparked there): its runs are
    // that stream's already (pooled or pending, for its next allocations:
    // Streams::give_stitched_runs), and it retires holding only its kernel
    // view, which the stream's queued work may still use; its release frees
    // no chunk.
    bool chunks_given = false;
    backend::HostAllocation host;    // sysmem
    uint64_t managed = 0;            // managed: the address every processor uses

    void *cpu_kernel = nullptr;
    void *cpu_user = nullptr;
    uint64_t user_address = 0;  // one address for the CPU and every GPU user mapping
    uint32_t user_refs = 0;     // user mappings holding it
    bool user_address_picked = false;  // the manager picked it (UserSpace::pick)
    // Sysmem: the pages are mapped on the CPU at user_address, for the CPU
    // user mapping or for GPU user mappings that reach them through it
    // (Backend::gpu_user_sysmem_through_cpu); it goes when neither needs it.
    bool host_at_user = false;

    // Evictable vidmem (residency.h): evicted, its bytes are in a range of
    // its GPU's host store (none where discarded), and it has no chunks and
    // no mappings.
    bool evicted = false;
    HostSlab *saved_slab = nullptr;  // null: discarded
    uint64_t saved_offset = 0;
    bool remap_kernel = false;        // it had its owner's kernel mapping when evicted
    // It had its owner's user mapping when evicted: made again at the same
    // address on restore; meanwhile one user_ref holds the address.
    bool remap_user = false;
    std::atomic<uint64_t> last_use{0};  // the use clock's value at its last use

    // Sleep (pressure/sleep.h). A sleepable client's vidmem comes from its
    // own PMM, named here (the GPU's own PMM and chunk caches otherwise; for
    // a remappable object, the GPU's remap_pmm).
    chunk::Pmm *own_pmm = nullptr;
    bool client_roots = false; // own_pmm is its client's roots (not the GPU's remap_pmm)
    bool asleep = false;       // its client sleeps: its memory is gone, its addresses kept
    bool sleep_kept = false;   // asleep with its bytes at sleep_offset of its GPU's sleep image
    bool sleep_uncharged = false;  // asleep and out of its client's budget (the wake charges it again)
    uint8_t sleep_mode = 0;    // uvm_sleep_mode_t of its own (uvm_mem_set_sleep_mode)
    uint64_t sleep_offset = 0;
    uint64_t evictions = 0;
    uint64_t restores = 0;
    uint64_t discards = 0;  // evictions that dropped the bytes (UVM_MEM_DISCARDABLE)

    std::vector<GpuMapping> gpus;  // sized to the GPU count on first use
    uint64_t chunk_count() const { return alloc_size / chunk_size; }
    bool is_vidmem() const { return backing == UVM_BACKING_VIDMEM; }
    bool is_managed() const { return backing == UVM_BACKING_MANAGED; }
};

// `f(first, count)` for each physically contiguous run of a vidmem object's
// chunks (chunk indices), in order: one run, but for a stitched object.
template <typename F>
void for_each_run(const Mem &mem, F &&f) {
    for (size_t i = 0; i < mem.chunks.size();) {
        size_t j = i + 1;
        while (j < mem.chunks.size() && mem.chunks[j] == mem.chunks[j - 1] + mem.chunk_size)
            ++j;
        f(i, j - i);
        i = j;
    }
}

// Objects of one pinned chunk go through the calling thread's chunk cache.
// Objects of their own PMM (remappable ones, a sleepable client's) never
// go through the chunk caches, which are the GPU's own PMM's.
inline bool single_pinned_chunk(const Mem &mem) {
    return mem.chunks.size() == 1 && !mem.evictable && !mem.own_pmm;
}

// Whether the object's chunk goes back to the thread's chunk cache
// (mem_free_chunks): then the cache can count the object out in the same
// visit. A shared object's never does.
inline bool chunk_in_cache(const Mem &mem) { return !mem.imported && !mem.exported && single_pinned_chunk(mem); }

// A freed object that Manager::take_idle found parkable, with its chunk,
// into its thread's chunk cache for the next allocation of that chunk size
// (and client) there: mem_take_thread_parked.
void mem_park_owned(Manager &mgr, std::shared_ptr<Mem> &&mem);  // a client's: mem.cpp
inline void mem_park(Manager &mgr, std::shared_ptr<Mem> &&mem) {
    UVM_ASSERT(!mem->parked_by && single_pinned_chunk(*mem));
    if (__builtin_expect(mem->client != nullptr, 0))
        return mem_park_owned(mgr, std::move(mem));
    ChunkCaches &caches = mgr.gpu(mem->owner).caches;
    const uint64_t chunk_size = mem->chunk_size, phys = mem->chunks[0];
    caches.park(chunk_size, phys, -1, std::move(mem), 0);  // counted out as mem_release would
}

// A new object record, in a block the calling thread recycles (most pairs
// take the block the last free gave back: no malloc, no free).
inline std::shared_ptr<Mem> make_mem() { return std::allocate_shared<Mem>(RecyclingAllocator<Mem>()); }

// The coarse monotonic clock in nanoseconds: a few nanoseconds to read,
// good to the scheduler tick (objects' ages).
uint64_t coarse_now_ns();

// Objects above this are refused as absurd, whatever the backing (256 TiB).
constexpr uint64_t kMaxObjectSize = 1ull << 48;

// A zero placement: local to the GPU, nothing else asked (all vidmem and managed may have).
inline bool default_placement(const uvm_placement_t &p) {
    return enum_value(p.kind) == UVM_PLACEMENT_GPU_LOCAL && !p.node && !p.node_mask && !p.strict;
}

// Pick the chunk size for an object (after nvidia-uvm's mem_pick_chunk_size).
// `requested` 0 = adaptive. PAGE_SIZE_NOT_SUPPORTED for a forced size that
// `supported` (a mask of page sizes) lacks.
uvm_status_t pick_chunk_size(uvm_backing_t backing, uint64_t size, uint64_t requested,
                             uint64_t supported, uint64_t *out);

// A vidmem object's chunks, one physically contiguous run, held apart from
// any object (a stream's pool of freed memory, stream.h).
struct ReusedRun {
    uint32_t gpu = 0;
    uint64_t phys = 0;
    uint64_t chunk_size = 0;
    size_t count = 0;
    bool evictable = false;
    bool remappable = false;
};

// uvm_mem_alloc's arguments, checked, and what they resolve to: the
// placement, and the chunk size picked once for the request.
struct CheckedAlloc {
    const uvm_mem_alloc_params_t *params = nullptr;
    topo::ResolvedPlacement placement;
    uint64_t chunk_size = 0;
    uint64_t alloc_size = 0;
    // Its chunks may be several runs (Pmm::alloc's may_stitch): the allocation
    // path says so for the objects whose every later step takes any chunks
    // (kernel-mapped vidmem of the GPU's PMM, nothing else asked).
    bool may_stitch = false;
    size_t count() const { return static_cast<size_t>(alloc_size / chunk_size); }
};
// uvm_mem_alloc's checks of its arguments alone (a size-0 allocation takes
// no memory but refuses what any other size would). An object larger than
// its GPU's memory is OUT_OF_MEMORY, as cudaMalloc says. `picked`: the
// chunk size already picked for these arguments (0: pick it here).
uvm_status_t mem_check_alloc(Manager &mgr, const uvm_mem_alloc_params_t &params, CheckedAlloc *out,
                             uint64_t picked = 0);

// A new object of a checked request.
// `reuse`: take the object's chunks from this run (of exactly the object's
// chunk size, count and kind) rather than the PMM; UVM_MEM_ZERO is then the
// caller's to do, and on failure the run stays the caller's.
// `client_pmm`: take the chunks from this PMM (a sleepable client's roots,
// pressure/sleep.h) rather than the GPU's.
// `holder`: the object, of 2M chunks of the GPU's PMM (not `reuse`d, not
// remappable), may take that holder's pending roots (a stream's, allocating
// on it: stream/stream.h).
uvm_status_t mem_alloc(Manager &mgr, const CheckedAlloc &request, std::shared_ptr<Mem> *out,
                       const ReusedRun *reuse = nullptr, chunk::Pmm *client_pmm = nullptr,
                       const chunk::Pmm::Holder *holder = nullptr);
// The object parked in the calling thread's chunk cache (mem_park) for a
// request of one chunk, no flags, tag nor placement (alloc/alloc_path.h's
// thread-parked source), of the same client (or none) as the parked one,
// whose budget its use is within (a client's parked object is charged to
// it already): true with its new handle. False: the next source serves it.
bool mem_take_thread_parked(Manager &mgr, const uvm_mem_alloc_params_t &params, uint64_t chunk_size, uvm_mem_t **out);
// Remove every mapping, then release the memory. Cannot fail.
void mem_release(Manager &mgr, Mem &mem);
// A vidmem object's chunks from its GPU's PMM (or thread cache), one run
// (several where `may_stitch`: CheckedAlloc); undone exactly with the roots
// the PMM grew (`grown`, where given).
uvm_status_t mem_alloc_chunks(Manager &mgr, Mem &mem, std::vector<uint64_t> *grown, bool may_stitch = false);
void mem_undo_chunks(Manager &mgr, Mem &mem, const std::vector<uint64_t> &grown);
void mem_free_chunks(Manager &mgr, Mem &mem);
// Remove every mapping. Cannot fail.
void mem_unmap_all(Manager &mgr, Mem &mem);
// A new object's kernel mappings go into its GPUs' address lookups, once it
// has a handle (their tables were made when it was mapped: this cannot fail).
void mem_publish_kernel_addresses(Manager &mgr, Mem &mem);
// One more / one fewer holder of the object's user address (released with
// the last one).
void mem_hold_user_address(Mem &mem);
void mem_drop_user_address(Manager &mgr, Mem &mem);
// A vidmem object whose mappings are all views that need nothing of the
// backend to stay valid for queued work (its owner's physical and kernel
// mappings): remove them, end the object and hand its chunks to *run,
// still allocated. False (nothing done) for any other object.
// mem_can_leave_whole: the same but for the one run: whether the object may
// outlive its handle for its stream's next allocation (parked), a stitched
// one too; mem_can_detach asks that and one run.
bool mem_can_leave_whole(const Mem &mem);
inline bool mem_can_detach(const Mem &mem) { return !mem.stitched && mem_can_leave_whole(mem); }
bool mem_detach_run(Manager &mgr, Mem &mem, ReusedRun *run);
// mem_detach_run's second half, for an object already out of the counts:
// its mappings removed, its run to *run, the record dead.
void mem_take_run(Manager &mgr, Mem &mem, ReusedRun *run);
// f(run) for each of a stitched object's runs (locked), in order, each of
// the kind a stream's pool takes; they stay the object's until it sets
// chunks_given. Nothing is allocated: callers hold a stream's lock.
template <typename F>
void mem_stitched_runs(const Mem &mem, F &&f) {
    UVM_ASSERT(mem.stitched && !mem.chunks_given);
    for_each_run(mem, [&](size_t first, size_t count) {
        ReusedRun run;
        run.gpu = mem.owner;
        run.phys = mem.chunks[first];
        run.chunk_size = mem.chunk_size;
        run.count = count;
        f(static_cast<const ReusedRun &>(run));
    });
}
// Give a detached run back to its GPU's PMM (or thread cache).
void vidmem_run_free(Manager &mgr, const ReusedRun &run);

uvm_status_t mem_map_cpu_kernel(Manager &mgr, Mem &mem);
uvm_status_t mem_unmap_cpu_kernel(Manager &mgr, Mem &mem);
uvm_status_t mem_map_cpu_user(Manager &mgr, Mem &mem, void *address);
uvm_status_t mem_unmap_cpu_user(Manager &mgr, Mem &mem);
uvm_status_t mem_map_gpu_phys(Manager &mgr, Mem &mem, uint32_t gpu);
uvm_status_t mem_unmap_gpu_phys(Manager &mgr, Mem &mem, uint32_t gpu);
uvm_status_t mem_map_gpu_virtual(Manager &mgr, Mem &mem, uint32_t gpu, uvm_va_space_kind_t space,
                                 uint64_t address);
uvm_status_t mem_unmap_gpu_virtual(Manager &mgr, Mem &mem, uint32_t gpu, uvm_va_space_kind_t space);

uvm_status_t mem_advise(Manager &mgr, Mem &mem, int advice, int32_t processor);
uvm_status_t mem_prefetch(Manager &mgr, Mem &mem, uint64_t offset, uint64_t size, int32_t processor);

uvm_status_t mem_gpu_phys_address(Manager &mgr, Mem &mem, uint32_t gpu, uint64_t offset,
                                  uint64_t size, uvm_gpu_phys_address_t *out);

// Where the copy engine of `gpu` finds byte `offset` of `mem` through `view`,
// and how many bytes from there it may take in one piece.
uvm_status_t mem_ce_address(Manager &mgr, Mem &mem, uint32_t gpu, uvm_gpu_view_t view,
                            uint64_t offset, backend::CeAddress *out, uint64_t *piece);

// INVALID_HANDLE for an object handle that names no live object here. Out of
// line, so that the paths that may say it (lock_live) stay small enough to
// be inlined where they are taken.
[[gnu::cold, gnu::noinline]] inline uvm_status_t dead_handle(const uvm_mem_t *handle) {
    return fail(UVM_ERR_INVALID_HANDLE, "object %p: freed, or of another manager", static_cast<const void *>(handle));
}

// The live object a handle names, locked (*guard); INVALID_HANDLE for a
// freed handle or one of another manager. Always inlined: it is the first
// step of every call on an object, the stream-ordered free's among them,
// where a call to it cost 45 instructions a pair.
__attribute__((always_inline)) inline uvm_status_t lock_live(Manager &mgr, uvm_mem_t *handle,
                                                             std::shared_ptr<Mem> *mem,
                                                             std::unique_lock<uvm::Mutex> *guard) {
    *mem = mgr.lookup(handle);
    if (!*mem)
        return dead_handle(handle);
    *guard = std::unique_lock<uvm::Mutex>((*mem)->lock);
    return (*mem)->gone() ? dead_handle(handle) : UVM_OK;
}

// A new object's handle, in the slot reserved for it: the table takes the
// reference over (no count traffic on the pair); its birth is traced.
inline uvm_mem_t *publish_new_object(Manager &mgr, SlotReservation *slot, std::shared_ptr<Mem> &mem, bool gpu_mapped) {
    uvm_mem_t *handle = nullptr;
    Mem *const raw = mem.get();
    mgr.insert(&slot->ticket, mem, &handle);
    if (gpu_mapped) {
        // Found by its kernel address from now. Nobody has the handle yet;
        // only an evictable object can be reached (and unmapped, by another
        // thread's eviction) without it: that one is locked.
        std::unique_lock<uvm::Mutex> guard(raw->lock, std::defer_lock);
        if (raw->evictable)
            guard.lock();
        uvm::mem_publish_kernel_addresses(mgr, *raw);
    }
    // Nobody has the handle yet: the object stays while the table holds it.
    if (mgr.tracing.on()) {
        std::lock_guard<uvm::Mutex> guard(raw->lock);
        uvm::trace_mem(mgr, *raw, uvm::TraceKind::Alloc);
        if (gpu_mapped)
            uvm::trace_mem(mgr, *raw, uvm::TraceKind::Map, uvm::MapKind::GpuKernel, raw->owner);
    }
    return handle;
}

}  // namespace uvm
