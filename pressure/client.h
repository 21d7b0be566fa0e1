// Clients: named owners of objects, with budgets (uvm.h, "Clients").
//
// A client's usage is charged before memory is taken and never exceeds its
// budget: a charge is a compare-and-swap on the client's counter for that
// GPU (or host memory), so two threads cannot both pass a budget that only
// one fits. Objects of the default client (params.client NULL) are charged
// to nobody: the allocation fast path does not change for callers that have
// no clients.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/handle_table.h"
#include "pressure/pressure.h"
#include "pressure/sleep.h"
#include "uvm/mem.h"
#include "uvm/labels.h"
#include "uvm/uvm.h"

namespace uvm {

class Manager;
struct Mem;

struct Client {
    uint64_t id = 0;
    std::string name;
    const char *label = nullptr;  // the name, interned (Manager::labels): the trace keeps it
    std::atomic<uint64_t> objects{0};
    struct Account {
        std::atomic<uint64_t> used{0};
        std::atomic<uint64_t> evictable{0};
        std::atomic<uint64_t> budget{0};  // 0: unlimited
        Watermarks marks;                 // pressure notices on used against budget
        // Threads whose charge waits for the client's parked objects to go
        // (charge_client): none is parked meanwhile, so that they all go.
        std::atomic<uint32_t> squeezed{0};
    };
    uvm_client_t *handle = nullptr;  // as the caller knows it (pressure events name it)
    Account vidmem[UVM_MAX_GPUS];
    Account sysmem;

    // Sleep and wake (sleep.h): null for a client not created sleepable.
    std::unique_ptr<SleepState> sleep;

    Account &account(bool sys, uint32_t gpu) { return sys ? sysmem : vidmem[gpu]; }
    // Take `bytes` of the account if the budget allows (*used_after: its use
    // then); false (nothing taken) if not.
    bool charge(Account &a, uint64_t bytes, bool evictable, uint64_t *used_after);
    // Give `bytes` back; its use then.
    uint64_t uncharge(Account &a, uint64_t bytes, bool evictable);
};

class Clients {
public:
    Clients(uint16_t manager_id, Labels &labels) : table_(manager_id), labels_(labels) {}
    ~Clients();  // every sleepable client's state released (sleep.h)
    // `sleep`: the client is sleepable (sleep.h), with this state.
    uvm_status_t create(const char *name, uvm_client_t **out, std::unique_ptr<SleepState> sleep = nullptr);
    uvm_status_t destroy(const uvm_client_t *handle);
    // The client a handle names, or an empty pointer.
    std::shared_ptr<Client> lookup(const uvm_client_t *handle) {
        return table_.lookup(reinterpret_cast<uintptr_t>(handle));
    }
    std::vector<std::shared_ptr<Client>> all() { return table_.all(); }

private:
    HandleTable<Client> table_;
    Labels &labels_;
};

// Charge `mem`'s memory (vidmem/managed on its GPU, or sysmem) to its client,
// evicting the client's own evictable objects first where it must (other than
// `mem` and `holding`). OK without a client. OUT_OF_MEMORY: over budget.
// The caller holds `mem`'s lock (an eviction must not find it charged by half).
uvm_status_t charge_client(Manager &mgr, Mem &mem, const Mem *holding);
void uncharge_client(Manager &mgr, Mem &mem);

// Bytes of `c`'s parked objects on `gpu` (uvm/mem.h, mem_park): charged to
// its budget, and counted in its objects, though no handle names them; and
// where given, *objects their count. Changes nothing.
uint64_t client_parked_bytes(Manager &mgr, const Client &c, uint32_t gpu, uint64_t *objects = nullptr);

// The same on every GPU, as uvm_client_info and the snapshot show it: the
// parked bytes by GPU, and the objects a handle names (its count less the
// parked ones; a free racing the look may count once in both).
struct ClientParked {
    uint64_t cached[UVM_MAX_GPUS] = {};
    uint64_t live_objects = 0;
};
ClientParked client_parked(Manager &mgr, const Client &c);

// uvm_client_set_budget and uvm_pressure_watermarks on one of `c`'s
// accounts: a budget change that crosses a watermark queues its event.
void set_client_budget(Manager &mgr, Client &c, bool sys, uint32_t gpu, uint64_t bytes);
void set_client_watermarks(Client &c, bool sys, uint32_t gpu, const uint32_t *percents, uint32_t count);

// A new object made `client`'s (moved in), charged to its budget; over the
// budget it is nobody's again and the caller gives its memory back. The
// object's lock is held from the moment it names its client until it is
// charged (or nobody's again): an evictable object is on its GPU's evictable
// list already, and an eviction (the client's own, from another thread's
// charge, or the GPU's under pressure) uncharges what it evicts. Evicted
// before it was charged, its memory would be uncharged once too often: the
// client's counters went below zero and let it pass its budget. Evictors
// only try an object's lock, so holding it here makes them pass it by.
// Before that lock is taken, though, the object is nobody's and may be
// evicted (by the GPU's eviction under pressure): then nothing of it is
// resident, nothing is charged, and its restore charges it as any.
// An object that is not evictable is on no list and has no handle yet:
// nobody else can reach it, so it is charged without its lock (one mutex
// fewer on a client's alloc+free pair).
inline uvm_status_t charge_new_object(Manager &mgr, Mem &mem, std::shared_ptr<uvm::Client> client) {
    uvm::Client &owner = *client;
    std::unique_lock<uvm::Mutex> guard(mem.lock, std::defer_lock);
    if (mem.evictable)
        guard.lock();
    mem.client = std::move(client);  // moved: no reference count traffic on the pair
    if (mem.evicted) {
        owner.objects.fetch_add(1, std::memory_order_relaxed);
        return UVM_OK;  // evicted bytes count against no budget
    }
    // Lock order: this object, then (in its own evictions) the others' with
    // try_lock and the evictable list: as everywhere (residency.h).
    const uvm_status_t status = uvm::charge_client(mgr, mem, nullptr);
    if (status != UVM_OK) {
        mem.client.reset();
        return status;
    }
    owner.objects.fetch_add(1, std::memory_order_relaxed);
    return UVM_OK;
}

}  // namespace uvm
