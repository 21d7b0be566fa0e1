#include "uvm/client.h"

#include <algorithm>
#include <vector>

#include "uvm/manager.h"
#include "uvm/mem.h"
#include "uvm/residency.h"

namespace uvm {

namespace {
constexpr uint64_t kClientIdBits = 47;  // handle: manager id | client id | 1
std::atomic<uint64_t> g_next_epoch{1};

struct LookupCache {
    const void *owner = nullptr;
    uint64_t handle = 0;
    uint64_t epoch = 0;
    std::shared_ptr<Client> client;
};
thread_local LookupCache t_lookup;
}  // namespace

Clients::Clients(uint16_t manager_id) : manager_id_(manager_id), epoch_(g_next_epoch.fetch_add(1)) {}

bool Client::charge(Account &a, uint64_t bytes, bool evictable) {
    uint64_t used = a.used.load(std::memory_order_relaxed);
    for (;;) {
        const uint64_t budget = a.budget.load(std::memory_order_relaxed);
        if (budget && used + bytes > budget)
            return false;
        if (a.used.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed))
            break;
    }
    if (evictable)
        a.evictable.fetch_add(bytes, std::memory_order_relaxed);
    return true;
}

void Client::uncharge(Account &a, uint64_t bytes, bool evictable) {
    a.used.fetch_sub(bytes, std::memory_order_relaxed);
    if (evictable)
        a.evictable.fetch_sub(bytes, std::memory_order_relaxed);
}

uvm_status_t Clients::create(const char *name, uvm_client_t **out) {
    if (!name || !out || !name[0] || std::char_traits<char>::length(name) > 63)
        return UVM_ERR_INVALID_ARGUMENT;
    auto c = std::make_shared<Client>();
    c->name = name;
    std::lock_guard<std::mutex> guard(lock_);
    c->id = next_id_++;
    table_.emplace(c->id, c);
    const uint64_t value = (static_cast<uint64_t>(manager_id_) << (kClientIdBits + 1)) | (c->id << 1) | 1;
    *out = reinterpret_cast<uvm_client_t *>(static_cast<uintptr_t>(value));
    c->handle = *out;
    return UVM_OK;
}

std::shared_ptr<Client> Clients::lookup(const uvm_client_t *handle) {
    const uint64_t value = reinterpret_cast<uintptr_t>(handle);
    if (!(value & 1) || (value >> (kClientIdBits + 1)) != manager_id_)
        return nullptr;
    const uint64_t epoch = epoch_.load(std::memory_order_acquire);
    if (t_lookup.owner == this && t_lookup.handle == value && t_lookup.epoch == epoch)
        return t_lookup.client;
    std::lock_guard<std::mutex> guard(lock_);
    auto it = table_.find((value >> 1) & ((1ull << kClientIdBits) - 1));
    if (it == table_.end())
        return nullptr;
    t_lookup = {this, value, epoch, it->second};
    return it->second;
}

uvm_status_t Clients::destroy(const uvm_client_t *handle) {
    std::shared_ptr<Client> c = lookup(handle);
    if (!c)
        return UVM_ERR_INVALID_HANDLE;
    std::lock_guard<std::mutex> guard(lock_);
    if (c->objects.load() != 0)
        return UVM_ERR_BUSY;  // it still owns objects
    table_.erase(c->id);
    epoch_.store(g_next_epoch.fetch_add(1), std::memory_order_release);
    return UVM_OK;
}

std::vector<std::shared_ptr<Client>> Clients::all() {
    std::lock_guard<std::mutex> guard(lock_);
    std::vector<std::shared_ptr<Client>> v;
    for (const auto &e : table_)
        v.push_back(e.second);
    std::sort(v.begin(), v.end(), [](const auto &a, const auto &b) { return a->id < b->id; });
    return v;
}

namespace {

// Evict the least recently used evictable resident object of `client` on
// `gpu` (other than the two skipped). False when none could go.
bool evict_client_object(Manager &mgr, Client *client, uint32_t gpu, const Mem *skip_a, const Mem *skip_b) {
    if (mgr.eviction_disabled.load())
        return false;
    GpuState &g = mgr.gpu(gpu);
    std::vector<std::pair<uint64_t, std::shared_ptr<Mem>>> mine;
    {
        std::lock_guard<std::mutex> guard(g.evictable_lock);
        for (const auto &entry : g.evictable)
            if (entry.first != skip_a && entry.first != skip_b)
                if (std::shared_ptr<Mem> m = entry.second.lock())
                    if (m->client.get() == client)
                        mine.emplace_back(m->last_use.load(std::memory_order_relaxed), std::move(m));
    }
    std::sort(mine.begin(), mine.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    for (const auto &c : mine) {
        std::unique_lock<std::mutex> guard(c.second->lock, std::try_to_lock);
        if (guard.owns_lock() && !c.second->gone() && !c.second->evicted && mem_evict(mgr, *c.second) == UVM_OK)
            return true;
    }
    return false;
}

}  // namespace

// The client's use of one budget changed: queue the watermark crossings.
static void notice(Manager &mgr, Client &c, bool sys, uint32_t gpu) {
    Client::Account &a = c.account(sys, gpu);
    if (a.marks.empty())
        return;
    std::vector<Watermarks::Crossing> crossings;
    const uint64_t used = a.used.load(), budget = a.budget.load();
    a.marks.update(used, budget, &crossings);
    for (const Watermarks::Crossing &x : crossings)
        mgr.pressure.push({sys ? UVM_CLIENT_SYSMEM : gpu, c.handle, x.percent, x.rising ? 1 : 0, used, budget});
}

uvm_status_t charge_client(Manager &mgr, Mem &mem, const Mem *holding) {
    Client *c = mem.client.get();
    if (!c)
        return UVM_OK;
    const bool sys = mem.backing == UVM_BACKING_SYSMEM;
    Client::Account &a = c->account(sys, mem.owner);
    while (!c->charge(a, mem.alloc_size, mem.evictable && !sys)) {
        if (sys || !evict_client_object(mgr, c, mem.owner, &mem, holding))
            return UVM_ERR_OUT_OF_MEMORY;  // over the client's budget
    }
    notice(mgr, *c, sys, mem.owner);
    return UVM_OK;
}

void uncharge_client(Manager &mgr, Mem &mem) {
    Client *c = mem.client.get();
    if (!c)
        return;
    const bool sys = mem.backing == UVM_BACKING_SYSMEM;
    c->uncharge(c->account(sys, mem.owner), mem.alloc_size, mem.evictable && !sys);
    notice(mgr, *c, sys, mem.owner);
}

}  // namespace uvm
