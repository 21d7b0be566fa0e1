// The shared user address space: see user_space.h.
#include "uvm/user_space.h"

#include <new>
#include <vector>

#include "backend/host_memory.h"
#include "common/assert.h"
#include "common/sizes.h"
#include "mmu/page_tree.h"

namespace uvm {

namespace {

// The user address space spans the GPU's 57-bit VA less its first page.
constexpr uint64_t kUserVaBase = 1ull << 12;
constexpr uint64_t kUserVaEnd = 1ull << mmu::PageTree::kVaBits;

// Picks the kernel places where a claim already is are set aside and tried again.
constexpr int kPickTries = 16;

}  // namespace

UserSpace::UserSpace(backend::PlacementCapability *placement)
    : placement_(placement), space_(kUserVaBase, kUserVaEnd - kUserVaBase) {}

UserSpace::~UserSpace() {
    for (auto &[start, r] : reservations_)
        give_back(start, r);
}

// A reservation's range back to whoever holds it: the backend's driver, or
// the manager's own CPU reservation.
void UserSpace::give_back(uint64_t start, const Reservation &r) {
    if (r.backend)
        placement_->user_range_release(start, r.size);  // only a backend with placement reserves
    else
        backend::host_range_uncover(start, r.size);
}

UserSpace::Reservation *UserSpace::find(uint64_t address, uint64_t size, bool *straddles) {
    *straddles = false;
    auto it = reservations_.upper_bound(address);
    if (it != reservations_.end() && it->first < address + size) {
        *straddles = true;  // one starts inside the range
        return nullptr;
    }
    if (it == reservations_.begin())
        return nullptr;
    --it;
    const uint64_t end = it->first + it->second.size;
    if (address >= end)
        return nullptr;
    if (address + size > end) {
        *straddles = true;
        return nullptr;
    }
    return &it->second;
}

uvm_status_t UserSpace::claim(uint64_t address, uint64_t size) {
    if (address < kUserVaBase || address >= kUserVaEnd || size > kUserVaEnd - address)
        return UVM_ERR_OUT_OF_RANGE;
    std::lock_guard<std::mutex> guard(lock_);
    bool straddles = false;
    Reservation *r = find(address, size, &straddles);
    if (straddles)
        return UVM_ERR_ADDRESS_IN_USE;
    if (r)
        return r->claims->reserve(address, size);
    return space_.reserve(address, size);
}

uvm_status_t UserSpace::pick_locked(uint64_t size, uint64_t align, uint64_t *out) {
    // The kernel's placement keeps clear of every CPU mapping; a claim with
    // no CPU mapping (a GPU user mapping on sim) may still sit there: such a
    // candidate stays reserved until the pick is done, so it is not offered again.
    std::vector<uint64_t> skipped;
    try {
        skipped.reserve(kPickTries);  // so that the loop cannot fail half way
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
    uvm_status_t status = UVM_ERR_OUT_OF_MEMORY;
    for (int tries = 0; tries < kPickTries; ++tries) {
        uint64_t at = 0;
        status = backend::host_range_reserve(size, align, &at);
        if (status != UVM_OK)
            break;
        status = space_.reserve(at, size);
        if (status == UVM_OK) {
            *out = at;
            break;
        }
        skipped.push_back(at);
        if (status == UVM_ERR_NO_HOST_MEMORY)
            break;
        status = UVM_ERR_OUT_OF_MEMORY;
    }
    for (uint64_t at : skipped)
        backend::host_range_uncover(at, size);
    return status;
}

uvm_status_t UserSpace::pick(uint64_t size, uint64_t align, uint64_t *out) {
    std::lock_guard<std::mutex> guard(lock_);
    return pick_locked(size, align, out);
}

void UserSpace::release(uint64_t address, uint64_t size, bool picked) {
    std::lock_guard<std::mutex> guard(lock_);
    if (picked) {
        space_.free(address, size);
        backend::host_range_uncover(address, size);
        return;
    }
    bool straddles = false;
    Reservation *r = find(address, size, &straddles);
    UVM_ASSERT(!straddles);
    if (r)
        r->claims->free(address, size);
    else
        space_.free(address, size);
}

uvm_status_t UserSpace::reserve(uint64_t size, uint64_t *out) {
    if (size == 0 || !is_aligned(size, kPageSize2M) || size > (kUserVaEnd >> 2))
        return UVM_ERR_INVALID_ARGUMENT;
    std::lock_guard<std::mutex> guard(lock_);
    uint64_t at = 0;
    bool from_backend = false;
    // Without placement the manager picks (as a backend that names no range).
    uvm_status_t status = placement_ ? placement_->user_range_reserve(size, &at) : UVM_OK;
    if (status == UVM_OK && at != 0) {
        from_backend = true;
        status = space_.reserve(at, size);  // a caller's claim may already sit there
        if (status != UVM_OK) {
            placement_->user_range_release(at, size);
            return UVM_ERR_OUT_OF_MEMORY;
        }
    } else if (status == UVM_OK) {
        status = pick_locked(size, kPageSize2M, &at);
    }
    if (status != UVM_OK)
        return status;
    Reservation r{size, from_backend, std::make_unique<mmu::RangeAllocator>(at, size)};
    reservations_.emplace(at, std::move(r));
    *out = at;
    return UVM_OK;
}

uvm_status_t UserSpace::unreserve(uint64_t address) {
    std::lock_guard<std::mutex> guard(lock_);
    auto it = reservations_.find(address);
    if (it == reservations_.end())
        return UVM_ERR_INVALID_ARGUMENT;
    Reservation &r = it->second;
    if (r.claims->free_bytes() != r.size)
        return UVM_ERR_ADDRESS_IN_USE;
    give_back(address, r);
    space_.free(address, r.size);
    reservations_.erase(it);
    return UVM_OK;
}

bool UserSpace::cpu_reserved(uint64_t address, uint64_t size, bool picked) {
    if (picked)
        return true;
    bool straddles = false;
    const Reservation *r = find(address, size, &straddles);
    return r && !r->backend;
}

void UserSpace::uncover_for_cpu(uint64_t address, uint64_t size, bool picked) {
    std::lock_guard<std::mutex> guard(lock_);
    if (cpu_reserved(address, size, picked))
        backend::host_range_uncover(address, size);
}

void UserSpace::cover_after_cpu(uint64_t address, uint64_t size, bool picked) {
    std::lock_guard<std::mutex> guard(lock_);
    // Another mapping may have taken the range in the moment it was open:
    // then it stays uncovered, which costs nothing but the guard.
    if (cpu_reserved(address, size, picked))
        backend::host_range_cover(address, size);
}

bool UserSpace::in_backend_reservation(uint64_t address, uint64_t size) {
    std::lock_guard<std::mutex> guard(lock_);
    bool straddles = false;
    Reservation *r = find(address, size, &straddles);
    return r && r->backend;
}

}  // namespace uvm
