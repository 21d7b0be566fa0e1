// The user address space one manager shares between the CPU and every GPU
// (unified addressing: an object's user mappings all sit at one address).
// Three ways to an address:
//   - claim: the caller names it (uvm_mem_map_cpu_user, uvm_mem_map_gpu_user);
//   - pick: the manager chooses one (address 0 and none set): the kernel
//     places a CPU reservation (PROT_NONE, no memory) and the range is that,
//     so nothing else in the process lands there while it is held;
//   - reservations: the caller takes a range once (uvm_user_range_reserve) and
//     places objects inside it with claims. On a backend that reserves GPU
//     addresses in the driver (CUDA), the range is the driver's own, so GPU
//     user mappings can go anywhere inside it.
// A claim lies wholly inside one reservation or outside all of them. A CPU
// mapping at a range the manager keeps reserved on the CPU (a pick, or inside
// a reservation of the manager's own) uncovers it first and covers it again
// when it goes.
//
// Thread safety: every method may be called concurrently (one lock).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "backend/placement_capability.h"
#include "mmu/range_allocator.h"
#include "uvm/uvm.h"

namespace uvm {

class UserSpace {
public:
    // `placement`: the backend's (its driver reserves GPU user ranges), or
    // null where the manager reserves every range itself.
    explicit UserSpace(backend::PlacementCapability *placement);
    ~UserSpace();  // gives every reservation back
    UserSpace(const UserSpace &) = delete;
    UserSpace &operator=(const UserSpace &) = delete;

    // Take [address, address + size). ADDRESS_IN_USE where any of it is
    // taken or it straddles a reservation's edge; OUT_OF_RANGE beyond the space.
    uvm_status_t claim(uint64_t address, uint64_t size);
    // An address of the manager's choosing. OUT_OF_MEMORY where none is found.
    uvm_status_t pick(uint64_t size, uint64_t align, uint64_t *out);
    // Give back a claim (picked: from pick).
    void release(uint64_t address, uint64_t size, bool picked);

    // Around a CPU mapping at [address, address + size) of a claim: give up
    // the manager's CPU reservation there first (where it holds one), and take
    // it again once the mapping is gone. `picked` as for release.
    void uncover_for_cpu(uint64_t address, uint64_t size, bool picked);
    void cover_after_cpu(uint64_t address, uint64_t size, bool picked);

    // A range of `size` (2 MiB multiple) for the caller to place objects in.
    uvm_status_t reserve(uint64_t size, uint64_t *out);
    // INVALID_ARGUMENT if no reservation starts at `address`; ADDRESS_IN_USE
    // while anything is claimed inside it.
    uvm_status_t unreserve(uint64_t address);
    // [address, address + size) lies in a reservation the backend holds (the
    // CPU cannot map there).
    bool in_backend_reservation(uint64_t address, uint64_t size);

private:
    struct Reservation {
        uint64_t size;
        bool backend;  // the backend reserved it (else only the manager's books)
        std::unique_ptr<mmu::RangeAllocator> claims;
    };
    // The reservation holding [address, address + size), or null; `straddles`
    // is set where the range overlaps one without lying inside it.
    Reservation *find(uint64_t address, uint64_t size, bool *straddles);
    uvm_status_t pick_locked(uint64_t size, uint64_t align, uint64_t *out);
    void give_back(uint64_t start, const Reservation &r);
    bool cpu_reserved(uint64_t address, uint64_t size, bool picked);  // lock held

    backend::PlacementCapability *placement_;
    std::mutex lock_;
    mmu::RangeAllocator space_;  // everything claimed, picked or reserved
    std::map<uint64_t, Reservation> reservations_;  // by start
};

}  // namespace uvm
