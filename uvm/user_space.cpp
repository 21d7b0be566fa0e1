// The shared user address space: see user_space.h.
#include "uvm/user_space.h"

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

// Addresses the manager picks come from [32 TiB, 64 TiB), where a process's
// own mappings rarely are: Linux places mmap top-down from near 128 TiB, and
// programs and their heaps near 85-94 TiB.
constexpr uint64_t kPickBase = 1ull << 45;
constexpr uint64_t kPickSize = 1ull << 45;
constexpr int kPickTries = 16;

}  // namespace

UserSpace::UserSpace(backend::Backend *backend)
    : backend_(backend), space_(kUserVaBase, kUserVaEnd - kUserVaBase), picks_(kPickBase, kPickSize) {}

UserSpace::~UserSpace() {
    for (auto &[start, r] : reservations_)
        if (r.backend)
            backend_->user_range_release(start, r.size);
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
    // Candidates the caller or the process already use are kept aside until
    // the pick is done, then given back to the span.
    std::vector<uint64_t> skipped;
    uvm_status_t status = UVM_ERR_OUT_OF_MEMORY;
    for (int tries = 0; tries < kPickTries; ++tries) {
        uint64_t at = 0;
        if (picks_.alloc(size, align, &at) != UVM_OK)
            break;
        if (space_.reserve(at, size) != UVM_OK) {
            skipped.push_back(at);
            continue;
        }
        if (!backend::host_range_free(at, size)) {
            space_.free(at, size);
            skipped.push_back(at);
            continue;
        }
        *out = at;
        status = UVM_OK;
        break;
    }
    for (uint64_t at : skipped)
        picks_.free(at, size);
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
        picks_.free(address, size);
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
    if (size == 0 || !is_aligned(size, kPageSize2M) || size > kPickSize / 2)
        return UVM_ERR_INVALID_ARGUMENT;
    std::lock_guard<std::mutex> guard(lock_);
    uint64_t at = 0;
    bool from_backend = false;
    uvm_status_t status = backend_->user_range_reserve(size, &at);
    if (status == UVM_OK && at != 0) {
        from_backend = true;
        status = space_.reserve(at, size);  // a caller's claim may already sit there
        if (status != UVM_OK) {
            backend_->user_range_release(at, size);
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
    if (r.backend) {
        backend_->user_range_release(address, r.size);
        space_.free(address, r.size);
    } else {
        space_.free(address, r.size);
        picks_.free(address, r.size);
    }
    reservations_.erase(it);
    return UVM_OK;
}

bool UserSpace::in_backend_reservation(uint64_t address, uint64_t size) {
    std::lock_guard<std::mutex> guard(lock_);
    bool straddles = false;
    Reservation *r = find(address, size, &straddles);
    return r && r->backend;
}

}  // namespace uvm
