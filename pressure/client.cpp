#include "pressure/client.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "uvm/manager.h"
#include "uvm/mem.h"
#include "pressure/fits.h"
#include "pressure/gpu_pressure.h"
#include "pressure/residency.h"

namespace uvm {

bool Client::charge(Account &a, uint64_t bytes, bool evictable, uint64_t *used_after) {
    // Sequentially consistent, as Watermarks::change needs of a change made without its lock.
    uint64_t used = a.used.load();
    for (;;) {
        const uint64_t budget = a.budget.load(std::memory_order_relaxed);
        if (budget && used + bytes > budget)
            return false;
        if (a.used.compare_exchange_weak(used, used + bytes))
            break;
    }
    if (evictable)
        a.evictable.fetch_add(bytes, std::memory_order_relaxed);
    *used_after = used + bytes;
    return true;
}

uint64_t Client::uncharge(Account &a, uint64_t bytes, bool evictable) {
    // The evictable part first: read after `used`, it is never more than `used` was.
    if (evictable)
        a.evictable.fetch_sub(bytes, std::memory_order_relaxed);
    return a.used.fetch_sub(bytes) - bytes;
}

uvm_status_t Clients::create(const char *name, uvm_client_t **out, std::unique_ptr<SleepState> sleep) {
    if (!name || !out || !name[0] || std::char_traits<char>::length(name) > 63)
        return UVM_ERR_INVALID_ARGUMENT;
    auto c = std::make_shared<Client>();
    c->sleep = std::move(sleep);
    c->name = name;
    c->label = labels_.intern(name);
    Client *raw = c.get();
    const uint64_t value = table_.insert(std::move(c), &raw->id);
    raw->handle = reinterpret_cast<uvm_client_t *>(static_cast<uintptr_t>(value));
    *out = raw->handle;
    return UVM_OK;
}

Clients::~Clients() {
    for (const std::shared_ptr<Client> &c : table_.all())
        if (c->sleep)
            c->sleep->release();
}

uvm_status_t Clients::destroy(const uvm_client_t *handle) {
    const std::shared_ptr<Client> c = lookup(handle);
    if (!c)
        return UVM_ERR_INVALID_HANDLE;
    if (c->objects.load() != 0)
        return UVM_ERR_BUSY;  // it still owns objects
    if (c->sleep)
        c->sleep->release();  // now: a thread's handle cache may keep the client past the manager
    table_.erase(c->id);
    return UVM_OK;
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
        std::lock_guard<std::mutex> guard(g.pressure->evictable_lock);
        // Whose an object is, read under its lock (taken without waiting:
        // the lock order is an object's lock, then the evictable list's). A
        // busy object is no candidate now, as it would not be below either.
        for (const auto &entry : g.pressure->evictable)
            if (entry.first != skip_a && entry.first != skip_b)
                if (std::shared_ptr<Mem> m = entry.second.lock()) {
                    std::unique_lock<uvm::Mutex> object(m->lock, std::try_to_lock);
                    if (object.owns_lock() && m->client.get() == client) {
                        object.unlock();
                        mine.emplace_back(m->last_use.load(std::memory_order_relaxed), std::move(m));
                    }
                }
    }
    std::sort(mine.begin(), mine.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    for (const auto &c : mine) {
        std::unique_lock<uvm::Mutex> guard(c.second->lock, std::try_to_lock);
        if (guard.owns_lock() && !c.second->gone() && !c.second->evicted && mem_evict(mgr, *c.second) == UVM_OK)
            return true;
    }
    return false;
}

}  // namespace

namespace {

// An account's level (its use of its budget) and where its crossings go.
Watermarks::Level level_of(const Client::Account &a) { return {a.used.load(), a.budget.load()}; }

struct Notices {
    Manager &mgr;
    Client &c;
    bool sys;
    uint32_t gpu;
    void operator()(const Watermarks::Crossing &x, const Watermarks::Level &l) const {
        mgr.pressure().push({sys ? UVM_CLIENT_SYSMEM : gpu, c.handle, x.percent, x.rising ? 1 : 0, l.used, l.limit});
    }
};

}  // namespace

uint64_t client_parked_bytes(Manager &mgr, const Client &c, uint32_t gpu, uint64_t *objects) {
    return mgr.gpu(gpu).caches.parked_bytes(reinterpret_cast<uintptr_t>(c.handle), objects);
}

ClientParked client_parked(Manager &mgr, const Client &c) {
    ClientParked p;
    uint64_t parked = 0;
    for (uint32_t g = 0; g < mgr.gpu_count(); ++g) {
        uint64_t n = 0;
        p.cached[g] = client_parked_bytes(mgr, c, g, &n);
        parked += n;
    }
    const uint64_t objects = c.objects.load();
    p.live_objects = objects > parked ? objects - parked : 0;
    return p;
}

namespace {

// While it lives, no object of the account is parked (events::heard::owned_parked).
class Squeeze {
public:
    explicit Squeeze(Client::Account &a) : a_(a) { a_.squeezed.fetch_add(1); }
    ~Squeeze() { a_.squeezed.fetch_sub(1); }
    Squeeze(const Squeeze &) = delete;
    Squeeze &operator=(const Squeeze &) = delete;

private:
    Client::Account &a_;
};

}  // namespace

uvm_status_t charge_client(Manager &mgr, Mem &mem, const Mem *holding) {
    Client *c = mem.client.get();
    if (!c)
        return UVM_OK;
    const bool sys = mem.backing == UVM_BACKING_SYSMEM;
    Client::Account &a = c->account(sys, mem.owner);
    const bool evictable = mem.evictable && !sys;
    // The charge and its watermark crossings as one step (pressure.h).
    auto charge = [&](Watermarks::Level *after) {
        if (!c->charge(a, mem.alloc_size, evictable, &after->used))
            return false;
        after->limit = a.budget.load();
        return true;
    };
    auto now = [&] { return level_of(a); };
    std::optional<Squeeze> squeeze;
    bool judged = false;  // whether evicting could bring it within the budget at all
    while (!a.marks.change(charge, now, Notices{mgr, *c, sys, mem.owner})) {
        // The client's parked objects (uvm/mem.h, mem_park) are charged to
        // it: they go first, before anything of its is evicted. None is
        // parked from the first flush on (the squeeze), so at most the parks
        // already under way when it began come after it: flushed again,
        // until none of the client's is left.
        if (!sys && (!squeeze || client_parked_bytes(mgr, *c, mem.owner) > 0)) {
            if (!squeeze)
                squeeze.emplace(a);
            mgr.gpu(mem.owner).caches.flush_all();
            continue;
        }
        if (sys)
            return UVM_ERR_OUT_OF_MEMORY;  // over the client's budget
        if (!judged) {
            // Where even every object of its own that could go would not
            // make room, nothing goes (uvm_pressure.h): fail as it is.
            judged = true;
            const uint64_t used = a.used.load(), budget = a.budget.load();
            const uint64_t freeable = client_evictable_bytes(mgr, mem.owner, *c, &mem, holding);
            if (budget && used - std::min(used, freeable) + mem.alloc_size > budget)
                return UVM_ERR_OUT_OF_MEMORY;
        }
        if (!evict_client_object(mgr, c, mem.owner, &mem, holding))
            return UVM_ERR_OUT_OF_MEMORY;  // over the client's budget
    }
    return UVM_OK;
}

void uncharge_client(Manager &mgr, Mem &mem) {
    Client *c = mem.client.get();
    if (!c)
        return;
    const bool sys = mem.backing == UVM_BACKING_SYSMEM;
    Client::Account &a = c->account(sys, mem.owner);
    const bool evictable = mem.evictable && !sys;
    a.marks.change(
        [&](Watermarks::Level *after) {
            after->used = c->uncharge(a, mem.alloc_size, evictable);
            after->limit = a.budget.load();
            return true;
        },
        [&] { return level_of(a); }, Notices{mgr, *c, sys, mem.owner});
}

void set_client_budget(Manager &mgr, Client &c, bool sys, uint32_t gpu, uint64_t bytes) {
    Client::Account &a = c.account(sys, gpu);
    a.marks.change(
        [&](Watermarks::Level *after) {
            a.budget.store(bytes);
            after->used = a.used.load();
            after->limit = bytes;
            return true;
        },
        [&] { return level_of(a); }, Notices{mgr, c, sys, gpu});
}

void set_client_watermarks(Client &c, bool sys, uint32_t gpu, const uint32_t *percents, uint32_t count) {
    Client::Account &a = c.account(sys, gpu);
    a.marks.set(percents, count, [&] { return level_of(a); });
}

}  // namespace uvm
