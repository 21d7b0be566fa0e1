#include "uvm/manager.h"

#include <cstdlib>
#include <cstring>

#include <pthread.h>

#include <mutex>
#include <new>

#include "common/assert.h"
#include "common/sizes.h"
#include "uvm/events.h"
#include "uvm/mem.h"

namespace uvm {

namespace {
// Handle layout: manager id (16 bits) | generation (20 bits) | slot (28 bits).
constexpr uint64_t kSlotBits = 28;
constexpr uint64_t kGenerationBits = 20;
constexpr uint64_t kSlotMask = (1ull << kSlotBits) - 1;
constexpr uint32_t kGenerationMask = (1u << kGenerationBits) - 1;

std::atomic<uint64_t> g_next_manager_id{1};

// Raised in every child a fork() makes (pthread_atfork): managers created
// before it belong to the parent. An atomic load per call, no system call.
std::atomic<uint64_t> g_fork_generation{0};
void on_fork_child() { g_fork_generation.fetch_add(1); }

}  // namespace

bool Manager::forked() const { return g_fork_generation.load(std::memory_order_relaxed) != fork_generation_; }

uvm_status_t BackendRootSource::alloc_root_chunks(size_t count, uint64_t *phys) {
    const uvm_status_t status = backend_->root_chunks_alloc(gpu_, count, remappable_, phys);
    if (status == UVM_OK)
        events::held_changed(*mgr_, gpu_, static_cast<int64_t>(count * kRootChunkSize));
    return status;
}

void BackendRootSource::free_root_chunk(uint64_t phys) {
    backend_->root_chunk_free(gpu_, phys);
    events::held_changed(*mgr_, gpu_, -static_cast<int64_t>(kRootChunkSize));
}

GpuState::GpuState(Manager *mgr, backend::Backend *backend, uint32_t gpu_index)
    : index(gpu_index),
      info(backend->gpu_info(gpu_index)),
      root_source(mgr, backend, gpu_index, false),
      pmm(&root_source, info.phys_space),
      remap_source(mgr, backend, gpu_index, true),
      remap_pmm(&remap_source, info.phys_space) {
    uint64_t base = 0, size = 0;
    backend->kernel_va_range(gpu_index, &base, &size);
    kernel_va = std::make_unique<mmu::RangeAllocator>(base, size);
}

bool Manager::stitching_from_environment() {
    const char *v = std::getenv("UVM_STITCH");
    return !(v && std::strcmp(v, "0") == 0);
}

Manager::Manager(std::unique_ptr<backend::Backend> backend)
    : backend_(std::move(backend)),
      streams_cap_(backend_->streams()),
      sharing_cap_(backend_->sharing()),
      managed_cap_(backend_->managed()),
      placement_cap_(backend_->placement()),
      user_space_(std::make_unique<UserSpace>(placement_cap_)) {
    static std::once_flag fork_hook;
    std::call_once(fork_hook, [] { pthread_atfork(nullptr, nullptr, on_fork_child); });
    fork_generation_ = g_fork_generation.load();
    uint32_t id;
    do {
        serial_ = g_next_manager_id.fetch_add(1);
        id = static_cast<uint32_t>(serial_ & 0xFFFFu);
    } while (id == 0);
    id_ = static_cast<uint16_t>(id);
}

void Manager::attach(Parts parts) {
    streams_ = std::move(parts.streams);
    clients_ = std::move(parts.clients);
    metrics_servers_ = std::move(parts.metrics_servers);
    pressure_ = std::move(parts.pressure);
    tracer_ = std::move(parts.tracer);
}

uvm_status_t Manager::create(std::unique_ptr<backend::Backend> backend, Manager **out) {
    const uint32_t count = backend->gpu_count();
    if (count > UVM_MAX_GPUS)
        return fail(UVM_ERR_INVALID_ARGUMENT, "the backend has %u GPUs, over the limit of %d (UVM_MAX_GPUS)", count,
                    UVM_MAX_GPUS);
    std::unique_ptr<Manager> mgr(new Manager(std::move(backend)));
    for (uint32_t g = 0; g < count; ++g)
        mgr->gpus_.push_back(std::make_unique<GpuState>(mgr.get(), mgr->backend_.get(), g));
    *out = mgr.release();
    return UVM_OK;
}

Manager::~Manager() {
    // Objects are gone (uvm_manager_destroy frees them first); the GPUs'
    // PMMs give their root chunks back before the backend goes.
    metrics_servers_.reset();  // first: their threads read the manager
    // Parked objects of clients end their charges (uvm/mem.h, mem_park)
    // while the clients, the GPUs and the notices are all still here.
    for (auto &gpu : gpus_) {
        gpu->caches.flush_all();
        gpu->caches.set_before_growth(nullptr);  // it names the streams, which go first
    }
    tearing_down = true;
    streams_.reset();
    clients_.reset();  // a sleepable client's roots and host images go back to the GPUs
    gpus_.clear();
    user_space_.reset();  // reservations go back to the backend
    backend_.reset();
}

inline uint32_t Manager::my_shard() {
    // Picked at the thread's first call; zero-initialized, so that reading it
    // needs no thread-local initialization guard.
    static thread_local uint32_t my_shard_plus_one = 0;
    uint32_t plus_one = my_shard_plus_one;
    if (__builtin_expect(plus_one == 0, 0))
        plus_one = my_shard_plus_one = pick_shard() + 1;
    return plus_one - 1;
}

uvm_status_t Manager::reserve_slot(SlotTicket *ticket) {
    const uint32_t my_shard = this->my_shard();
    Shard &shard = shards_[my_shard];
    shard.lock.lock();
    const uint32_t index = shard.free_head;
    if (__builtin_expect(index == UINT32_MAX, 0))
        return reserve_new_slot(my_shard, ticket);  // unlocks
    shard.free_head = shard.slots[index].next_free;
    shard.lock.unlock();
    ticket->shard = my_shard;
    ticket->index = index;
    return UVM_OK;
}

uint32_t Manager::pick_shard() {
    // Threads take shards in turn, so that up to kShards threads never share one.
    static std::atomic<uint32_t> next_shard{0};
    return next_shard.fetch_add(1) % kShards;
}

uvm_status_t Manager::reserve_new_slot(uint32_t shard_index, SlotTicket *ticket) {
    Shard &shard = shards_[shard_index];
    std::lock_guard<SpinLock> guard(shard.lock, std::adopt_lock);
    if (shard.slots.size() > (kSlotMask >> kShardBits))
        return UVM_ERR_NO_HOST_MEMORY;
    const uint32_t index = static_cast<uint32_t>(shard.slots.size());
    try {
        shard.slots.emplace_back();
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
    ticket->shard = shard_index;
    ticket->index = index;
    return UVM_OK;
}

inline void Manager::fill_slot(uint32_t shard, uint32_t index, std::shared_ptr<Mem> &mem, uvm_mem_t **handle) {
    Slot &s = shards_[shard].slots[index];
    UVM_ASSERT(!s.mem);
    s.mem.swap(mem);  // the slot's is empty: no reference of it to drop
    *handle = encode(shard, index, s.generation);
    s.mem->handle = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(*handle));
}

void Manager::insert(SlotTicket *ticket, std::shared_ptr<Mem> &mem, uvm_mem_t **handle) {
    UVM_ASSERT(ticket->index != UINT32_MAX);
    std::lock_guard<SpinLock> guard(shards_[ticket->shard].lock);
    fill_slot(ticket->shard, ticket->index, mem, handle);
    ticket->index = UINT32_MAX;
}

uvm_status_t Manager::insert_new(std::shared_ptr<Mem> &mem, uvm_mem_t **handle) {
    const uint32_t sh = my_shard();
    Shard &shard = shards_[sh];
    {
        std::lock_guard<SpinLock> guard(shard.lock);
        const uint32_t index = shard.free_head;
        if (__builtin_expect(index != UINT32_MAX, 1)) {
            shard.free_head = shard.slots[index].next_free;
            fill_slot(sh, index, mem, handle);
            return UVM_OK;
        }
    }
    SlotTicket ticket;  // the table grows
    const uvm_status_t status = reserve_slot(&ticket);
    if (status == UVM_OK)
        insert(&ticket, mem, handle);
    return status;
}

void Manager::cancel_slot(SlotTicket *ticket) {
    if (ticket->index == UINT32_MAX)
        return;
    Shard &shard = shards_[ticket->shard];
    std::lock_guard<SpinLock> guard(shard.lock);
    UVM_ASSERT(!shard.slots[ticket->index].mem);
    shard.slots[ticket->index].next_free = shard.free_head;
    shard.free_head = ticket->index;
    ticket->index = UINT32_MAX;
}

uvm_mem_t *Manager::encode(uint32_t shard, uint32_t index, uint32_t generation) const {
    const uint64_t slot = (static_cast<uint64_t>(index) << kShardBits) | shard;
    const uint64_t value = (static_cast<uint64_t>(id_) << (kSlotBits + kGenerationBits)) |
                           (static_cast<uint64_t>(generation) << kSlotBits) | slot;
    return reinterpret_cast<uvm_mem_t *>(static_cast<uintptr_t>(value));
}

bool Manager::decode(const uvm_mem_t *handle, Shard **shard, uint32_t *index, uint32_t *generation) {
    const uint64_t value = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle));
    if ((value >> (kSlotBits + kGenerationBits)) != id_)
        return false;
    const uint64_t slot = value & kSlotMask;
    *shard = &shards_[slot & (kShards - 1)];
    *index = static_cast<uint32_t>(slot >> kShardBits);
    *generation = static_cast<uint32_t>((value >> kSlotBits) & kGenerationMask);
    return true;
}

std::shared_ptr<Mem> Manager::lookup(const uvm_mem_t *handle) {
    Shard *shard;
    uint32_t index, generation;
    if (!decode(handle, &shard, &index, &generation))
        return nullptr;
    std::lock_guard<SpinLock> guard(shard->lock);
    if (index >= shard->slots.size() || shard->slots[index].generation != generation)
        return nullptr;
    Slot &s = shard->slots[index];
    if (s.mem)
        s.mem->touched = true;
    return s.mem;
}

inline void Manager::free_slot(Shard &shard, uint32_t index) {
    Slot &s = shard.slots[index];
    s.mem.reset();
    // A new generation makes every copy of the old handle dead; 0 is never used.
    s.generation = (s.generation + 1) & kGenerationMask;
    if (s.generation == 0)
        s.generation = 1;
    s.next_free = shard.free_head;
    shard.free_head = index;
}

std::shared_ptr<Mem> Manager::remove(const uvm_mem_t *handle) {
    Shard *shard;
    uint32_t index, generation;
    if (!decode(handle, &shard, &index, &generation))
        return nullptr;
    std::lock_guard<SpinLock> guard(shard->lock);
    if (index >= shard->slots.size() || shard->slots[index].generation != generation ||
        !shard->slots[index].mem)
        return nullptr;
    std::shared_ptr<Mem> mem = std::move(shard->slots[index].mem);
    free_slot(*shard, index);
    return mem;
}

Manager::Take Manager::take_idle(const uvm_mem_t *handle, std::shared_ptr<Mem> *out) {
    Shard *shard;
    uint32_t index, generation;
    if (!decode(handle, &shard, &index, &generation))
        return Take::Invalid;
    std::lock_guard<SpinLock> guard(shard->lock);
    if (index >= shard->slots.size())
        return Take::Invalid;
    Slot &s = shard->slots[index];
    if (s.generation != generation || !s.mem)
        return Take::Invalid;
    if (parkable(s)) {
        *out = std::move(s.mem);
        free_slot(*shard, index);
        return Take::Parked;
    }
    Mem &mem = *s.mem;
    if (!mem.lock.try_lock())
        return Take::Busy;
    if (mem.gone() || !mem.users.empty()) {
        mem.lock.unlock();
        return Take::Busy;
    }
    *out = std::move(s.mem);
    free_slot(*shard, index);
    return Take::Taken;
}

bool Manager::parkable(const Slot &s) {
    const Mem &m = *s.mem;
    const bool parkable = !m.touched && m.is_vidmem() && m.flags == 0 && !m.tag && m.users.empty() &&
                          chunk_in_cache(m) && !m.gone() && s.mem.use_count() == 1;
    UVM_ASSERT(!parkable || (m.gpus.empty() && !m.cpu_kernel && !m.cpu_user && !m.evicted && !m.asleep));
    return parkable;
}

std::vector<std::shared_ptr<Mem>> Manager::live_objects(std::vector<uvm_mem_t *> *handles) {
    std::vector<std::shared_ptr<Mem>> live;
    if (handles)
        handles->clear();
    for (uint32_t sh = 0; sh < kShards; ++sh) {
        Shard &shard = shards_[sh];
        std::lock_guard<SpinLock> guard(shard.lock);
        for (uint32_t i = 0; i < shard.slots.size(); ++i) {
            Slot &s = shard.slots[i];
            if (!s.mem)
                continue;
            s.mem->touched = true;  // a report holds it now (parkable)
            live.push_back(s.mem);
            if (handles)
                handles->push_back(encode(sh, i, s.generation));
        }
    }
    return live;
}

std::vector<std::shared_ptr<Mem>> Manager::remove_all() {
    std::vector<std::shared_ptr<Mem>> live;
    for (Shard &shard : shards_) {
        std::lock_guard<SpinLock> guard(shard.lock);
        for (Slot &s : shard.slots)
            if (s.mem)
                live.push_back(std::move(s.mem));
        shard.slots.clear();
        shard.free_head = UINT32_MAX;
    }
    return live;
}

}  // namespace uvm
