// Sleep and wake of a client (uvm_pressure.h, "Sleep and wake"): its GPU
// memory goes back to the driver and comes back under the same addresses.
//
// The unit is the root chunk, not the object. A sleepable client's vidmem
// comes from a PMM of its own per GPU (ClientRoots), fed with remappable
// root chunks, which on CUDA are driver handles of their own: no root it
// holds holds another client's memory, so every one of them can go whole.
// Sleep copies the kept objects' bytes to the client's backup (host memory
// of its own, sleep_backup.h: one image per GPU, end to end), then the
// backend offloads every root the client holds (backend/offload_capability.h):
// the memory goes back and the address stays reserved. Wake restores the
// roots at their addresses and copies the bytes back. Nothing above the
// roots moves: the PMM's chunk states, the page trees, every mapping and
// every address stay as they were, which is what keeps a runtime's pointers
// valid (where eviction, which moves an object, cannot).
//
// Locks: a client's SleepState::gate is taken before any object's lock:
// shared by an allocation for the client (from its check to its handle),
// exclusive by sleep and wake, so no object of the client is born while it
// goes to sleep or wakes. Free takes no gate (it holds an object's lock
// first): freeing chunks into a PMM whose roots are offloaded only changes
// the PMM's books, and ClientRoots' own lock orders it against the offload.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "chunk/pmm.h"
#include "common/assert.h"
#include "pressure/sleep_backup.h"
#include "uvm/uvm.h"

namespace uvm {

class Manager;
struct Client;
struct Mem;

// A sleepable client's root chunks on one GPU, and the PMM over them.
class ClientRoots final : public chunk::RootChunkSource {
public:
    ClientRoots(Manager &mgr, uint32_t gpu);
    ~ClientRoots() override;  // every chunk must have come back
    ClientRoots(const ClientRoots &) = delete;
    ClientRoots &operator=(const ClientRoots &) = delete;

    chunk::Pmm &pmm() { return *pmm_; }
    const chunk::Pmm &pmm() const { return *pmm_; }

    // RootChunkSource: remappable roots from the backend, counted as held.
    uvm_status_t alloc_root_chunks(size_t count, uint64_t *phys) override;
    void free_root_chunk(uint64_t phys) override;

    // Offload every root held (after the PMM gave its free ones back), or
    // restore every root offloaded; all or nothing (offload_capability.h).
    uvm_status_t offload();
    uvm_status_t restore();
    uint64_t offloaded_bytes() const;
    uint64_t held_bytes() const;  // roots backed now
    // The PMM's free roots into the reserve, and the reserve's roots back to
    // the backend where their driver handle goes whole; bytes given.
    uint64_t trim();
    uint64_t reserve_bytes() const;
    // No root goes back to the backend while the lock returned is held (a
    // sleep's and a wake's copies: an asleep object freed meanwhile frees
    // its chunks, and a root they empty waits).
    std::unique_lock<std::mutex> hold_backed() { return std::unique_lock<std::mutex>(lock_); }

private:
    // Growth in runs. The PMM asks for the roots a request needs, one at a
    // time for small objects; asked of the backend so, a client growing
    // beside others' growth gets roots scattered over the GPU's physical
    // space, and its wake makes a driver handle per root (on CUDA about
    // 28 us each whatever the size: 10 GiB of 2 MiB roots, 143 ms). So the
    // backend is asked for runs that double from one root to kMaxGrowth
    // (64 MiB, the wake's largest handle), and the roots a run has beyond
    // the request wait in the reserve for the next requests. The reserve is
    // held free memory: it goes back on trim and before a sleep.
    //
    // A root the PMM gives back joins the reserve, and goes to the backend
    // with the rest of its release span (on CUDA its driver handle, of up to
    // 64 MiB: root_chunks_alloc_owned) once every root of the span is in the
    // reserve: given back alone it would be parked in its handle, neither the
    // driver's memory nor the client's. On the sim a root is its own span: it
    // goes at once. reserve_'s capacity covers every root the client holds,
    // so a root joins it without allocating.
    static constexpr size_t kMaxGrowth = 32;
    void release_reserve();  // lock_ held
    uint64_t release_whole_span(uint64_t phys);  // lock_ held; the bytes given back

    Manager &mgr_;
    uint32_t gpu_;
    mutable std::mutex lock_;
    std::vector<uint64_t> backed_;     // roots the PMM holds, backed, unordered
    std::vector<uint64_t> reserve_;    // roots backed and not the PMM's yet, sorted
    size_t next_growth_ = 1;
    std::vector<uint64_t> offloaded_;  // roots offloaded by the last sleep
    // offload()'s list (backed and reserve), kept: a failed wake's sleep
    // again then needs no host memory, as the vectors above keep theirs.
    std::vector<uint64_t> going_;
    uint64_t released_bytes_ = 0;  // given back to the backend from the reserve, ever (trim's count)
    std::unique_ptr<chunk::Pmm> pmm_;  // last member: its roots come back through us
};

// The host copy of a GPU's kept bytes while the client sleeps: where it
// starts in the client's backup, and its size (0: none).
struct SleepImage {
    uint64_t base = 0;
    uint64_t size = 0;
};

// What a sleepable client has beyond a client (Client::sleep).
struct SleepState {
    explicit SleepState(Manager &m) : mgr(m), backup(m) {}
    // Everything back (the backup, the roots), while the manager lives:
    // at the client's destruction and the manager's teardown. The state may
    // outlive both (a thread's handle cache keeps its client a while), so
    // its destructor touches nothing of the manager's.
    void release();
    ~SleepState() { UVM_ASSERT(!holds_anything()); }
    bool holds_anything() const;

    Manager &mgr;
    std::shared_mutex gate;      // see the header comment
    std::atomic<bool> asleep{false};
    std::mutex roots_lock;       // making roots[g]
    std::unique_ptr<ClientRoots> roots[UVM_MAX_GPUS];
    SleepImage images[UVM_MAX_GPUS];          // under gate, exclusive
    std::atomic<uint64_t> asleep_bytes[UVM_MAX_GPUS] = {};
    std::atomic<uint64_t> host_bytes{0};     // of the backup, what the images hold
    SleepBackup backup;                      // under gate, exclusive (held() any time)
    // uvm_client_set_sleep_policy's, under gate (exclusive to write); the
    // reserve rounded up to 4 KiB. Atomic: uvm_client_info reads them.
    std::atomic<uint32_t> host_policy{UVM_SLEEP_HOST_KEEP};
    std::atomic<uint64_t> host_reserve{0};
    std::atomic<uint32_t> pin_threads{0};
};

// The PMM a new vidmem object of `client` on `gpu` takes its chunks from:
// null for a client that does not sleep (the GPU's own), else its roots',
// made on first use. *status: NO_HOST_MEMORY where they could not be made.
chunk::Pmm *client_pmm(Manager &mgr, Client *client, uint32_t gpu, uvm_status_t *status);

// The sleepable clients' roots of GPU `gpu`: every one's PMM statistics
// added into *sum (held memory's parts), or every one trimmed (bytes given
// back: uvm_gpu_trim).
void client_roots_stats(Manager &mgr, uint32_t gpu, chunk::PmmStats *sum);
uint64_t client_roots_trim(Manager &mgr, uint32_t gpu);

// An allocation for `client` (null: the default client): holds the client's
// gate shared while it lives, after checking the client is awake (ASLEEP).
class SleepGate {
public:
    uvm_status_t enter(Client *client);
    ~SleepGate() = default;

private:
    std::shared_lock<std::shared_mutex> lock_;
};

// An asleep object of a client is freed (its lock held): it no longer counts
// as given back by the sleep; its image bytes stay until the wake.
void sleep_object_released(Manager &mgr, Mem &mem);

uvm_status_t client_sleep(Manager &mgr, Client &client, const uvm_sleep_params_t &params);
uvm_status_t client_wake(Manager &mgr, Client &client);

// uvm_client_set_sleep_policy on a sleepable client, once the policy is
// known good (sleep_policy_valid).
uvm_status_t client_set_sleep_policy(Manager &mgr, Client &client, const uvm_sleep_policy_t &policy);
bool sleep_policy_valid(const uvm_sleep_policy_t &policy);

// Whether `params` are well formed (known modes, tags given where counted).
bool sleep_params_valid(const uvm_sleep_params_t &params);

}  // namespace uvm
