// The manager: its backend, its GPUs (each with a physical memory manager,
// kernel and user page trees and a kernel VA allocator), the user address
// space shared by the CPU and every GPU (user_space.h), and the table of
// object handles.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "chunk/pmm.h"
#include "chunk/chunk_cache.h"
#include "common/last_error.h"
#include "common/spin_lock.h"
#include "uvm/address_map.h"
#include "uvm/labels.h"
#include "uvm/trace_hook.h"
#include "uvm/user_space.h"
#include "mmu/page_tree.h"
#include "mmu/range_allocator.h"
#include "uvm/uvm.h"

namespace uvm {

struct Mem;
// The subsystems' state, each defined in its own folder (stream/, pressure/,
// observe/): the core holds it without seeing it.
class Streams;
class Clients;
class MetricsServers;
class PressureQueue;
class Tracer;
struct GpuPressure;
struct GpuCompaction;

// A subsystem's state as the manager holds it: made by the assembly
// (api/assembly.cpp), the one place that sees every subsystem, and ended
// with the deleter it came with, so the core never needs its definition.
template <typename T>
struct PartEnd {
    void (*end)(T *) = nullptr;
    void operator()(T *part) const { end(part); }
};
template <typename T>
using Part = std::unique_ptr<T, PartEnd<T>>;
// Only where T is defined (the assembly).
template <typename T, typename... Args>
Part<T> make_part(Args &&...args) {
    return Part<T>(new T(std::forward<Args>(args)...), PartEnd<T>{[](T *part) { delete part; }});
}

class Manager;

// Feeds a GPU's PMM with root chunks from the backend, and tells the manager
// what the GPU's held memory becomes (pressure notices).
class BackendRootSource final : public chunk::RootChunkSource {
public:
    BackendRootSource(Manager *mgr, backend::Backend *backend, uint32_t gpu, bool remappable)
        : mgr_(mgr), backend_(backend), gpu_(gpu), remappable_(remappable) {}
    uvm_status_t alloc_root_chunks(size_t count, uint64_t *phys) override;
    void free_root_chunk(uint64_t phys) override;
    void release_span(uint64_t phys, uint64_t *first, size_t *count) const override {
        backend_->root_chunk_span(gpu_, phys, first, count);
    }

private:
    Manager *mgr_;
    backend::Backend *backend_;
    uint32_t gpu_;
    bool remappable_;
};

struct GpuState {
    GpuState(Manager *mgr, backend::Backend *backend, uint32_t gpu_index);

    uint32_t index;
    backend::GpuInfo info;
    BackendRootSource root_source;
    chunk::Pmm pmm;
    ChunkCaches caches{&pmm};  // after pmm: flushed into it before it goes
    // Root chunks each mappable on its own, for vidmem objects of 2M chunks
    // that ask to be placed at a caller's user address (UVM_MEM_USER_MAPPABLE):
    // on CUDA the pool above grows in large driver handles, which the driver
    // can map only whole, so those objects take their chunks from here.
    BackendRootSource remap_source;
    chunk::Pmm remap_pmm;
    mmu::PageTree kernel_tree;
    mmu::PageTree user_tree;
    std::unique_ptr<mmu::RangeAllocator> kernel_va;
    // Kernel address -> the object mapped there (uvm_mem_lookup_gpu_kernel):
    // kept by mem_map_gpu_virtual and mem_unmap_gpu_virtual, read lock-free.
    AddressMap kernel_addresses;

    // The alloc/free fast path touches no shared counter: vidmem objects are
    // counted per thread (caches.objects()), a vidmem object's physical
    // mapping on its owner is counted by that, and the manager's object count
    // is summed when asked for.
    std::atomic<uint64_t> other_phys_mappings{0};  // sysmem DMA and peer mappings
    std::atomic<uint64_t> kernel_mappings{0};
    std::atomic<uint64_t> user_mappings{0};
    std::atomic<uint64_t> peer_mappings{0};

    // Eviction's counters (uvm/events.h: evicted, eviction_ended, restored).
    std::atomic<uint64_t> evictions{0};
    std::atomic<uint64_t> restores{0};
    std::atomic<uint64_t> bytes_evicted{0};
    std::atomic<uint64_t> bytes_restored{0};
    std::atomic<uint64_t> evicted_objects{0};
    std::atomic<uint64_t> evicted_bytes{0};
    std::atomic<uint64_t> oom_count{0};  // requests that ended in OUT_OF_MEMORY (report.h)
    std::atomic<uint64_t> held_bytes{0};  // root chunks held from the backend, both PMMs
    // Its evictable objects, the host store for their bytes and the
    // watermarks on held_bytes (pressure/gpu_pressure.h).
    Part<GpuPressure> pressure;
    // Its compaction's lock, policy and counters (compact/compact.h).
    Part<GpuCompaction> compaction;

    mmu::PageTree &tree(uvm_va_space_kind_t space) {
        return space == UVM_VA_SPACE_USER ? user_tree : kernel_tree;
    }
};

class Manager {
public:
    // Takes the backend; INVALID_ARGUMENT when it has no GPU or too many.
    static uvm_status_t create(std::unique_ptr<backend::Backend> backend, Manager **out);
    ~Manager();
    Manager(const Manager &) = delete;
    Manager &operator=(const Manager &) = delete;

    backend::Backend &backend() { return *backend_; }
    // The backend's capabilities (backend.h), asked once at creation so that
    // no path pays a lookup: null where the backend lacks one.
    backend::StreamCapability *backend_streams() const { return streams_cap_; }
    backend::SharingCapability *backend_sharing() const { return sharing_cap_; }
    backend::ManagedCapability *backend_managed() const { return managed_cap_; }
    backend::PlacementCapability *backend_placement() const { return placement_cap_; }
    // Never the same for two managers of a process (unlike the address):
    // what thread-local reports are keyed by.
    uint64_t serial() const { return serial_; }
    // This process is a fork()ed child of the one that created the manager:
    // every call on it is refused (uvm.h, Conventions).
    bool forked() const;
    uint32_t gpu_count() const { return static_cast<uint32_t>(gpus_.size()); }
    GpuState &gpu(uint32_t index) { return *gpus_[index]; }
    UserSpace &user_space() { return *user_space_; }
    // What handles of other kinds (streams, clients) carry of the manager.
    uint16_t id() const { return id_; }
    Streams &streams() { return *streams_; }
    Clients &clients() { return *clients_; }
    MetricsServers &metrics_servers() { return *metrics_servers_; }
    PressureQueue &pressure() { return *pressure_; }
    Tracer &tracer() { return *tracer_; }  // the event trace (uvm_trace_start)

    // The subsystems' parts, made by the assembly (api/assembly.cpp).
    struct Parts {
        Part<Streams> streams;
        Part<Clients> clients;
        Part<MetricsServers> metrics_servers;
        Part<PressureQueue> pressure;
        Part<Tracer> tracer;
    };
    void attach(Parts parts);

    // Handle table. Handles carry the manager's id and a generation, so a
    // freed handle or one from another manager is refused, never dereferenced.
    // A slot is reserved first (the one step that needs host memory), before
    // the object exists, so that putting the object in cannot fail once its
    // memory is taken. Takes the reference out of `mem`.
    struct SlotTicket {
        uint32_t shard = 0;
        uint32_t index = UINT32_MAX;  // UINT32_MAX: none
    };
    uvm_status_t reserve_slot(SlotTicket *ticket);
    void insert(SlotTicket *ticket, std::shared_ptr<Mem> &mem, uvm_mem_t **handle);
    void cancel_slot(SlotTicket *ticket);  // a reserved slot not used (none: nothing)
    // reserve_slot and insert in one critical section, where the thread's
    // shard has a free slot (for an object whose memory can go back if the
    // table cannot grow: NO_HOST_MEMORY, and `mem` is left as it was).
    uvm_status_t insert_new(std::shared_ptr<Mem> &mem, uvm_mem_t **handle);
    std::shared_ptr<Mem> lookup(const uvm_mem_t *handle);
    std::shared_ptr<Mem> remove(const uvm_mem_t *handle);
    // A free that cannot fail, in one critical section of the table (the
    // held pair's free took two, a lookup and a remove, and a reference's
    // count traffic): where the handle names a live object that nobody holds
    // locked and that no stream uses (its free waits for no work), the
    // object leaves the table and comes back in *out with its lock held by
    // the caller. Invalid: the handle names no object (lookup would return
    // null). Busy: nothing was done; the caller takes the general path
    // (lookup, lock, remove). Its lock is only tried, never waited for,
    // under the table's: the general path takes the two the other way round.
    // Parked: as Taken, of an object that may be parked (see parkable), not
    // locked: nobody else has a reference to it.
    enum class Take { Taken, Invalid, Busy, Parked };
    Take take_idle(const uvm_mem_t *handle, std::shared_ptr<Mem> *out);
    std::vector<std::shared_ptr<Mem>> remove_all();
    // Every object a handle names now (for reports; the objects are not
    // locked), and where given, the handles, in the same order.
    std::vector<std::shared_ptr<Mem>> live_objects(std::vector<uvm_mem_t *> *handles = nullptr);

    std::atomic<uint64_t> sysmem_objects{0};
    std::atomic<uint64_t> sysmem_bytes{0};
    std::atomic<uint64_t> cpu_kernel_mappings{0};
    std::atomic<uint64_t> cpu_user_mappings{0};
    std::atomic<uint64_t> managed_objects{0};
    std::atomic<uint64_t> managed_bytes{0};
    std::atomic<uint64_t> prefetches{0};
    std::atomic<uint64_t> prefetched_bytes{0};

    // Eviction policy (uvm_manager_set_eviction_policy) and the host bytes
    // evicted objects of every GPU hold, against its limit.
    std::atomic<bool> eviction_disabled{false};
    std::atomic<uint64_t> evicted_limit{0};
    std::atomic<uint64_t> evicted_host_bytes{0};
    // Host memory the sleepable clients' backups hold (pressure/sleep_backup.h),
    // against its limit (uvm_manager_set_sleep_host_limit; 0: none).
    std::atomic<uint64_t> sleep_host_limit{0};
    std::atomic<uint64_t> sleep_host_bytes{0};
    // The largest piece a backup is made of (SleepBackup::kPieceSize; tests
    // make it small, to have many pieces of little memory).
    std::atomic<uint64_t> sleep_piece_bytes{64ull << 20};

    // Long runtime objects may be stitched from several runs (chunk/pmm.h,
    // docs/design.md), unless UVM_STITCH=0 is in the environment at the
    // manager's creation: the switch stays for comparing the two on real
    // work (bench/results/2026-12-02-h200-stitched-on).
    const bool stitching = stitching_from_environment();

    TraceSwitch tracing;  // whether the trace records (read by every hook)
    Labels labels;  // object tags and client names, for reports and the trace
    std::atomic<bool> tearing_down{false};  // the GPUs are going: no more notices

private:
    explicit Manager(std::unique_ptr<backend::Backend> backend);
    static bool stitching_from_environment();

    struct Slot {
        std::shared_ptr<Mem> mem;
        uint32_t generation = 1;
        uint32_t next_free = 0;
    };
    // The table is split in shards, each with its own lock, and a thread
    // inserts into its own shard: threads allocating and freeing at once do
    // not queue on one lock. A handle's slot field is (index << kShardBits) | shard.
    static constexpr uint32_t kShardBits = 4;
    static constexpr uint32_t kShards = 1u << kShardBits;
    struct alignas(64) Shard {
        SpinLock lock;  // held for a few loads and stores (a walk for reports)
        std::vector<Slot> slots;
        uint32_t free_head = UINT32_MAX;
    };
    bool decode(const uvm_mem_t *handle, Shard **shard, uint32_t *index, uint32_t *generation);
    // Shard lock held: the slot's object may be parked. A freed vidmem object
    // of one pinned chunk from the chunk caches, made with no flags, tag nor
    // stream (a client's stays charged to it: mem_park), that no call but its alloc and its free ever reached
    // (Mem::touched) and that nobody else holds, is what mem_take_thread_parked
    // hands out again as new: it goes into its thread's chunk cache with its
    // chunk (ChunkCaches::free with a record), as kmem caches keep
    // constructed objects, and the next allocation of that kind takes both.
    static bool parkable(const Slot &s);
    // Shard lock held: the slot's object is out; the slot goes back to the
    // free list under a new generation.
    static void free_slot(Shard &shard, uint32_t index);
    // reserve_slot's rare cases, out of its way: the thread's first call
    // (its shard), and a shard with no free slot (the table grows; entered
    // with the shard's lock held, returns with it released).
    static uint32_t pick_shard();
    uint32_t my_shard();  // the calling thread's
    // Shard lock held: `mem` into the free slot taken off the list, and its handle.
    void fill_slot(uint32_t shard, uint32_t index, std::shared_ptr<Mem> &mem, uvm_mem_t **handle);
    __attribute__((noinline)) uvm_status_t reserve_new_slot(uint32_t shard, SlotTicket *ticket);
    uvm_mem_t *encode(uint32_t shard, uint32_t index, uint32_t generation) const;

    std::unique_ptr<backend::Backend> backend_;
    // Before user_space_, which is made with placement_cap_.
    backend::StreamCapability *streams_cap_;
    backend::SharingCapability *sharing_cap_;
    backend::ManagedCapability *managed_cap_;
    backend::PlacementCapability *placement_cap_;
    std::vector<std::unique_ptr<GpuState>> gpus_;
    std::unique_ptr<UserSpace> user_space_;
    uint16_t id_;
    uint64_t serial_ = 0;
    uint64_t fork_generation_ = 0;  // the process's fork generation at creation
    Part<Streams> streams_;
    Part<Clients> clients_;
    Part<MetricsServers> metrics_servers_;
    Part<PressureQueue> pressure_;
    Part<Tracer> tracer_;

    Shard shards_[kShards];
};

// INVALID_GPU for an index the manager does not have, saying how many it has.
[[gnu::cold]] inline uvm_status_t bad_gpu(const Manager &mgr, uint32_t gpu) {
    return fail(UVM_ERR_INVALID_GPU, "gpu %u is out of range: the manager has %u GPU%s (0 to %u)", gpu,
                mgr.gpu_count(), mgr.gpu_count() == 1 ? "" : "s", mgr.gpu_count() - 1);
}

// INVALID_HANDLE for a client handle that names no live client here.
[[gnu::cold]] inline uvm_status_t dead_client(const uvm_client_t *handle) {
    return fail(UVM_ERR_INVALID_HANDLE, "client %p: destroyed, or of another manager",
                static_cast<const void *>(handle));
}

// A call's GPU index and out-parameter: INVALID_ARGUMENT for a null `out`,
// INVALID_GPU for an index the manager does not have.
inline uvm_status_t check_gpu(const Manager &mgr, uint32_t gpu, const void *out) {
    if (!out)
        return fail(UVM_ERR_INVALID_ARGUMENT, "the output pointer is NULL");
    return gpu < mgr.gpu_count() ? UVM_OK : bad_gpu(mgr, gpu);
}

// A reserved slot of the handle table, given back unless an insert used it.
struct SlotReservation {
    Manager &mgr;
    Manager::SlotTicket ticket;
    explicit SlotReservation(Manager &m) : mgr(m) {}
    ~SlotReservation() {
        if (ticket.index != UINT32_MAX)  // used by the insert (the usual case): nothing to do
            mgr.cancel_slot(&ticket);
    }
    SlotReservation(const SlotReservation &) = delete;
    SlotReservation &operator=(const SlotReservation &) = delete;
};

}  // namespace uvm
