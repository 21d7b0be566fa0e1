// Root chunks of one GPU in large driver handles: see root_pool.h.
#include "cuda/root_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/assert.h"
#include "common/last_error.h"
#include "common/sizes.h"

namespace uvm::cuda {

uvm_status_t to_status(CUresult r, const char *what) {
    if (r == CUDA_SUCCESS)
        return UVM_OK;
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return fail(UVM_ERR_OUT_OF_MEMORY, "%s: the driver is out of memory", what);
    if (std::getenv("UVM_DEBUG"))
        std::fprintf(stderr, "uvm: %s failed: %s\n", what, driver_error_string(r));
    return fail(UVM_ERR_BACKEND, "%s failed: %s", what, driver_error_string(r));
}

RootPool::RootPool(const DriverApi *api, CUdevice device) : api_(api), device_(device) {}

RootPool::~RootPool() {
    for (Handle *h : roots_)
        UVM_ASSERT(!h || h->given == 0);
    UVM_ASSERT(offloaded_.count() == 0);  // the client frees offloaded roots too
    // Handles still held are fully ready (the PMM gave every root back).
    for (size_t i = 0; i < roots_.size(); ++i)
        if (roots_[i])
            release(roots_[i]);
    if (window_)
        api_->cuMemAddressFree(window_, window_size_);
}

uvm_status_t RootPool::init(uint64_t memory_total) {
    // Twice the memory: handles come and go at any place and in any size, and
    // a new one must find a hole even where the window has been cut up.
    window_size_ = 2 * memory_total;
    const CUresult r = api_->cuMemAddressReserve(&window_, window_size_, kRootChunkSize, 0, 0);
    if (r != CUDA_SUCCESS) {
        window_ = 0;
        return to_status(r, "cuMemAddressReserve (window)");
    }
    window_space_ = std::make_unique<mmu::RangeAllocator>(0, window_size_);
    roots_.assign(window_size_ / kRootChunkSize, nullptr);
    ready_.resize(roots_.size());
    ready_exact_.resize(roots_.size());
    ready_remappable_.resize(roots_.size());
    parked_.resize(roots_.size());
    offloaded_.resize(roots_.size());
    return UVM_OK;
}

uvm_status_t RootPool::set_access(uint64_t phys, uint64_t size, const std::vector<CUmemAccessDesc> &access) {
    CUresult r = api_->cuMemSetAccess(window_ + phys, size, access.data(), access.size());
    if ((r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED) && size > kRootChunkSize) {
        // A range over several handles: where the driver refuses it as such,
        // one each (any other error is the answer).
        r = CUDA_SUCCESS;
        for (uint64_t off = 0; off < size && r == CUDA_SUCCESS;) {
            const Handle *h = roots_[(phys + off) / kRootChunkSize];
            UVM_ASSERT(h);
            r = api_->cuMemSetAccess(window_ + h->phys, h->size, access.data(), access.size());
            off = h->phys + h->size - phys;
        }
    }
    return to_status(r, "cuMemSetAccess");
}

// Create a handle of `size` and map it at `phys` in the window (already taken
// from window_space_). Access is the caller's to grant.
uvm_status_t RootPool::make_handle(uint64_t phys, uint64_t size, bool remappable, Handle **out) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    if (remappable)  // one root each: these can be shared with other processes
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    auto h = std::make_unique<Handle>();
    CUresult r = api_->cuMemCreate(&h->handle, size, &prop, 0);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemCreate");
    r = api_->cuMemMap(window_ + phys, size, 0, h->handle, 0);
    if (r != CUDA_SUCCESS) {
        api_->cuMemRelease(h->handle);
        return to_status(r, "cuMemMap");
    }
    h->phys = phys;
    h->size = size;
    h->remappable = remappable;
    for (uint64_t off = 0; off < size; off += kRootChunkSize)
        roots_[(phys + off) / kRootChunkSize] = h.get();
    handle_count_++;
    handle_bytes_ += size;
    *out = h.release();
    return UVM_OK;
}

// A handle with no root given: back to the driver, with its window range.
void RootPool::release(Handle *h) {
    UVM_ASSERT(h->given == 0);
    const size_t first = h->phys / kRootChunkSize, count = h->size / kRootChunkSize;
    Bitmap &ready = h->restored ? parked_ : ready_of(*h);
    for (size_t i = first; i < first + count; ++i)
        if (ready.test(i))
            ready.clear(i);
    window_space_->free(h->phys, h->size);
    drop(h);
}

// Unmap and release the handle and forget it; its window range stays taken
// (the caller's to give back or keep) and its roots' bits are the caller's.
void RootPool::drop(Handle *h) {
    const size_t first = h->phys / kRootChunkSize, count = h->size / kRootChunkSize;
    for (size_t i = first; i < first + count; ++i)
        roots_[i] = nullptr;
    api_->cuMemUnmap(window_ + h->phys, h->size);
    api_->cuMemRelease(h->handle);
    handle_count_--;
    handle_bytes_ -= h->size;
    if (h->imported)
        imported_bytes_ -= h->size;
    delete h;
}

// `count` root chunks side by side in one window range, in handles of up to
// `handle_size` (the last one shorter), with one grant of access: a long run
// (handles of up to kMaxExactHandle), remappable roots (one each), or one
// holder's (alloc_owned: handles of up to kMaxRestoredHandle, all given).
// Each handle gives its own piece of the window range back when it goes.
uvm_status_t RootPool::grow_handles(size_t count, uint64_t handle_size, Grown kind,
                                    const std::vector<CUmemAccessDesc> &access, size_t *at) {
    const bool remappable = kind == Grown::kRemappable;
    const uint64_t size = count * kRootChunkSize;
    uint64_t phys = 0;
    if (window_space_->alloc(size, kRootChunkSize, &phys) != UVM_OK)
        return UVM_ERR_OUT_OF_MEMORY;
    std::vector<Handle *> made;
    uvm_status_t status = UVM_OK;
    uint64_t off = 0;
    while (off < size && status == UVM_OK) {
        const uint64_t piece = std::min(handle_size, size - off);
        Handle *h = nullptr;
        status = make_handle(phys + off, piece, remappable, &h);
        if (status == UVM_OK) {
            made.push_back(h);
            off += piece;
        }
    }
    if (status == UVM_OK)
        status = set_access(phys, size, access);
    if (status != UVM_OK) {
        for (Handle *h : made)
            release(h);
        if (off < size)
            window_space_->free(phys + off, size - off);
        return status;
    }
    for (Handle *h : made) {
        h->exact = kind == Grown::kExact;
        if (kind == Grown::kOwned) {
            h->restored = true;  // the holder's alone: a freed root is parked
            h->given = static_cast<uint32_t>(h->size / kRootChunkSize);
        }
    }
    if (kind != Grown::kOwned)
        (remappable ? ready_remappable_ : ready_exact_).set_range(phys / kRootChunkSize, count);
    *at = phys / kRootChunkSize;
    return UVM_OK;
}

// One new pooled handle holding at least `count` root chunks (a run of up to
// kMaxPooledHandle): twice the last (up to kMaxPooledHandle), smaller (never
// below the run) where the driver or the window has not that much.
uvm_status_t RootPool::grow_pooled(size_t count, const std::vector<CUmemAccessDesc> &access, size_t *at) {
    const uint64_t need = count * kRootChunkSize;
    if (need > kMaxPooledHandle)
        return grow_handles(count, kMaxExactHandle, Grown::kExact, access, at);
    uint64_t size = std::max(next_handle_, need);
    for (;;) {
        uint64_t phys = 0;
        uvm_status_t status = window_space_->alloc(size, kRootChunkSize, &phys);
        Handle *h = nullptr;
        if (status == UVM_OK) {
            status = make_handle(phys, size, false, &h);
            if (status == UVM_OK) {
                status = set_access(phys, size, access);
                if (status != UVM_OK) {
                    release(h);
                    return status;
                }
                ready_of(*h).set_range(phys / kRootChunkSize, size / kRootChunkSize);
                next_handle_ = std::min(size * 2, kMaxPooledHandle);
                *at = phys / kRootChunkSize;
                return UVM_OK;
            }
            window_space_->free(phys, size);
        }
        if (status != UVM_OK && status != UVM_ERR_OUT_OF_MEMORY)
            return status;
        if (size == need)
            return UVM_ERR_OUT_OF_MEMORY;
        size = std::max(need, (size / 2) & ~(kRootChunkSize - 1));
    }
}

uvm_status_t RootPool::alloc(size_t count, bool remappable, const std::vector<CUmemAccessDesc> &access,
                             uint64_t *phys) {
    if (count == 0 || count > roots_.size())
        return UVM_ERR_OUT_OF_MEMORY;
    const bool exact = !remappable && count * kRootChunkSize > kMaxPooledHandle;
    Bitmap &ready = remappable ? ready_remappable_ : exact ? ready_exact_ : ready_;
    size_t at = ready.find_run(count);
    if (at == Bitmap::npos) {
        const uvm_status_t status =
            remappable ? grow_handles(count, kRootChunkSize, Grown::kRemappable, access, &at)
                       : grow_pooled(count, access, &at);
        if (status != UVM_OK)
            return status;
    }
    ready.clear_range(at, count);
    for (size_t i = at; i < at + count; ++i)
        roots_[i]->given++;
    *phys = at * kRootChunkSize;
    return UVM_OK;
}

bool RootPool::frees_handle(uint64_t phys) const {
    const Handle *h = roots_[phys / kRootChunkSize];
    return h && h->given == 1;
}

void RootPool::release_empty(const std::function<bool(uint64_t, uint64_t)> &keep) {
    uint64_t kept = 0;
    for (size_t i = 0; i < roots_.size(); ++i) {
        Handle *h = roots_[i];
        if (!h || h->given != 0 || i != h->phys / kRootChunkSize)
            continue;
        if (keep && keep(h->phys, h->size))
            kept++;
        else
            release(h);  // its roots' entries go null: seen once
    }
    kept_empty_ = kept;
}

void RootPool::free(uint64_t phys, bool keep_empty) {
    const size_t index = phys / kRootChunkSize;
    Handle *h = roots_[index];
    if (!h) {
        // Offloaded: no memory to give back, only the window range it kept.
        UVM_ASSERT(offloaded_.test(index));
        offloaded_.clear(index);
        window_space_->free(phys, kRootChunkSize);
        return;
    }
    UVM_ASSERT(h->given > 0);
    // A restored handle's roots are the sleeping client's alone: parked until
    // the last one comes back, never handed out to anyone else.
    Bitmap &ready = h->restored ? parked_ : ready_of(*h);
    UVM_ASSERT(!ready.test(index));
    ready.set(index);
    if (--h->given == 0) {
        if (keep_empty)
            kept_empty_++;
        else
            release(h);
    }
}

void RootPool::span(uint64_t phys, uint64_t *first, size_t *count) const {
    const size_t index = phys / kRootChunkSize;
    const Handle *h = index < roots_.size() ? roots_[index] : nullptr;  // null: offloaded, on its own
    *first = h ? h->phys : phys;
    *count = h ? static_cast<size_t>(h->size / kRootChunkSize) : 1;
}

uvm_status_t RootPool::whole_handles(uint64_t phys, size_t count,
                                     std::vector<std::pair<CUmemGenericAllocationHandle, uint64_t>> *out) const {
    const uint64_t end = phys + count * kRootChunkSize;
    for (uint64_t at = phys; at < end;) {
        const size_t index = at / kRootChunkSize;
        const Handle *h = index < roots_.size() ? roots_[index] : nullptr;
        if (!h || h->imported || h->phys != at || h->phys + h->size > end)
            return UVM_ERR_NOT_SUPPORTED;
        for (uint64_t r = h->phys; r < h->phys + h->size; r += kRootChunkSize)
            if (!is_given(r))
                return UVM_ERR_NOT_SUPPORTED;
        out->emplace_back(h->handle, h->size);
        at += h->size;
    }
    return UVM_OK;
}

uvm_status_t RootPool::export_root(uint64_t phys, int *fd) {
    const size_t index = phys / kRootChunkSize;
    const Handle *h = index < roots_.size() ? roots_[index] : nullptr;
    if (!h || !h->remappable || h->given == 0)
        return UVM_ERR_NOT_SUPPORTED;
    int out = -1;
    const CUresult r = api_->cuMemExportToShareableHandle(&out, h->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS)
        return to_status(r, "cuMemExportToShareableHandle");
    roots_[index]->exported = true;  // another process may map it: it never goes while given
    *fd = out;
    return UVM_OK;
}

uvm_status_t RootPool::import(const int *fds, size_t count, const std::vector<CUmemAccessDesc> &access,
                              uint64_t *phys) {
    const uint64_t size = count * kRootChunkSize;
    uint64_t at = 0;
    if (count == 0 || window_space_->alloc(size, kRootChunkSize, &at) != UVM_OK)
        return UVM_ERR_OUT_OF_MEMORY;
    std::vector<Handle *> made;
    uvm_status_t status = UVM_OK;
    for (size_t i = 0; i < count && status == UVM_OK; ++i) {
        auto h = std::make_unique<Handle>();
        CUresult r = api_->cuMemImportFromShareableHandle(
            &h->handle, reinterpret_cast<void *>(static_cast<uintptr_t>(fds[i])),
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r != CUDA_SUCCESS) {
            status = r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_INVALID_HANDLE
                         ? UVM_ERR_INVALID_ARGUMENT
                         : to_status(r, "cuMemImportFromShareableHandle");
            break;
        }
        const uint64_t where = at + i * kRootChunkSize;
        r = api_->cuMemMap(window_ + where, kRootChunkSize, 0, h->handle, 0);
        if (r != CUDA_SUCCESS) {
            api_->cuMemRelease(h->handle);
            // A handle of another size (not one exported root chunk) does not map here.
            status = r == CUDA_ERROR_INVALID_VALUE ? UVM_ERR_INVALID_ARGUMENT : to_status(r, "cuMemMap");
            break;
        }
        h->phys = where;
        h->size = kRootChunkSize;
        h->remappable = true;
        h->imported = true;
        h->given = 1;
        roots_[where / kRootChunkSize] = h.get();
        handle_count_++;
        handle_bytes_ += kRootChunkSize;
        imported_bytes_ += kRootChunkSize;
        made.push_back(h.release());
    }
    if (status == UVM_OK)
        status = set_access(at, size, access);
    if (status != UVM_OK) {
        for (Handle *h : made) {
            h->given = 0;
            release(h);  // gives each handle's piece of the window back
        }
        for (size_t i = made.size(); i < count; ++i)
            window_space_->free(at + i * kRootChunkSize, kRootChunkSize);
        return status;
    }
    *phys = at;
    return UVM_OK;
}

void RootPool::release_import(uint64_t phys, size_t count) {
    for (size_t i = 0; i < count; ++i) {
        Handle *h = roots_[phys / kRootChunkSize + i];
        UVM_ASSERT(h && h->imported && h->given == 1);
        h->given = 0;
        release(h);
    }
}

uvm_status_t RootPool::grant(const std::vector<CUmemAccessDesc> &access) {
    for (size_t i = 0; i < roots_.size();) {
        const Handle *h = roots_[i];
        if (!h) {
            ++i;
            continue;
        }
        const uvm_status_t status = set_access(h->phys, h->size, access);
        if (status != UVM_OK)
            return status;
        i = (h->phys + h->size) / kRootChunkSize;
    }
    return UVM_OK;
}

CUmemGenericAllocationHandle RootPool::own_handle(uint64_t phys) const {
    const size_t index = phys / kRootChunkSize;
    const Handle *h = index < roots_.size() ? roots_[index] : nullptr;
    return h && h->remappable ? h->handle : 0;
}

bool RootPool::is_given(uint64_t phys) const {
    const size_t index = phys / kRootChunkSize;
    const Handle *h = index < roots_.size() ? roots_[index] : nullptr;
    return h && !(h->restored ? parked_ : ready_of(*h)).test(index);
}

bool RootPool::is_offloaded(uint64_t phys) const {
    const size_t index = phys / kRootChunkSize;
    return phys % kRootChunkSize == 0 && index < roots_.size() && offloaded_.test(index);
}

// The list as root indices, sorted; INVALID_ARGUMENT where one is not a root
// in the state asked for (given and backed, or offloaded) or is listed twice.
uvm_status_t RootPool::sorted_roots(const uint64_t *phys, size_t count, bool offloaded,
                                    std::vector<size_t> *out) const {
    out->clear();
    out->reserve(count);
    for (size_t i = 0; i < count; ++i) {
        if (offloaded ? !is_offloaded(phys[i]) : (phys[i] % kRootChunkSize != 0 || !is_given(phys[i])))
            return UVM_ERR_INVALID_ARGUMENT;
        out->push_back(phys[i] / kRootChunkSize);
    }
    std::sort(out->begin(), out->end());
    if (std::adjacent_find(out->begin(), out->end()) != out->end())
        return UVM_ERR_INVALID_ARGUMENT;
    return UVM_OK;
}

uvm_status_t RootPool::offload(const uint64_t *phys, size_t count, const std::function<bool(uint64_t)> &pinned) {
    std::vector<size_t> roots;
    uvm_status_t status = sorted_roots(phys, count, false, &roots);
    if (status != UVM_OK)
        return status;
    // The handles touched, each with how many of its roots the list names
    // (sorted, so one handle's roots are side by side). Every given root of
    // a handle must go with it: the driver releases a handle only whole.
    std::vector<std::pair<Handle *, uint32_t>> handles;
    for (size_t r : roots) {
        Handle *h = roots_[r];
        if (h->imported || h->exported || (pinned && pinned(r * kRootChunkSize)))
            return UVM_ERR_NOT_SUPPORTED;
        if (handles.empty() || handles.back().first != h)
            handles.emplace_back(h, 0);
        handles.back().second++;
    }
    for (const auto &[h, listed] : handles)
        if (listed != h->given)
            return UVM_ERR_NOT_SUPPORTED;
    for (const auto &entry : handles) {
        Handle *h = entry.first;
        const size_t first = h->phys / kRootChunkSize, n = h->size / kRootChunkSize;
        Bitmap &idle = h->restored ? parked_ : ready_of(*h);
        for (size_t i = first; i < first + n; ++i) {
            if (idle.test(i)) {
                // Nobody's: its window range is free for anything again.
                idle.clear(i);
                window_space_->free(i * kRootChunkSize, kRootChunkSize);
            } else {
                offloaded_.set(i);  // keeps its window range
            }
        }
        drop(h);
    }
    return UVM_OK;
}

uvm_status_t RootPool::alloc_owned(size_t count, const std::vector<CUmemAccessDesc> &access, uint64_t *phys) {
    if (count == 0 || count > roots_.size())
        return UVM_ERR_OUT_OF_MEMORY;
    size_t at = 0;
    const uvm_status_t status = grow_handles(count, kMaxRestoredHandle, Grown::kOwned, access, &at);
    if (status == UVM_OK)
        *phys = at * kRootChunkSize;
    return status;
}

uvm_status_t RootPool::restore(const uint64_t *phys, size_t count, const std::vector<CUmemAccessDesc> &access) {
    std::vector<size_t> roots;
    uvm_status_t status = sorted_roots(phys, count, true, &roots);
    if (status != UVM_OK)
        return status;
    // One handle per run of adjacent roots, cut at kMaxRestoredHandle: the
    // driver's cost is per handle.
    constexpr size_t kMaxRun = kMaxRestoredHandle / kRootChunkSize;
    std::vector<Handle *> made;
    for (size_t i = 0; i < roots.size() && status == UVM_OK;) {
        size_t n = 1;
        while (n < kMaxRun && i + n < roots.size() && roots[i + n] == roots[i] + n)
            ++n;
        Handle *h = nullptr;
        status = make_handle(roots[i] * kRootChunkSize, n * kRootChunkSize, false, &h);
        if (status == UVM_OK) {
            made.push_back(h);
            status = set_access(h->phys, h->size, access);
        }
        i += n;
    }
    if (status != UVM_OK) {
        for (Handle *h : made)
            drop(h);  // the roots stay offloaded, their window ranges kept
        return status;
    }
    for (Handle *h : made) {
        h->restored = true;
        h->given = static_cast<uint32_t>(h->size / kRootChunkSize);
        offloaded_.clear_range(h->phys / kRootChunkSize, h->given);
    }
    return UVM_OK;
}

uvm_status_t RootPool::shrink(uint64_t first_phys, size_t span_count, const std::vector<CUmemAccessDesc> &access,
                              const Copy &copy, uint64_t *released, uint64_t *copied) {
    *released = *copied = 0;
    const size_t index = first_phys / kRootChunkSize;
    Handle *h = first_phys % kRootChunkSize == 0 && index < roots_.size() ? roots_[index] : nullptr;
    // The span the caller checked, still one handle: not one grown since at
    // the same place, whose other roots nobody checked.
    if (!h || h->phys != first_phys || h->size != span_count * kRootChunkSize || h->given == 0)
        return UVM_ERR_INVALID_ARGUMENT;
    if (h->restored || h->remappable || h->imported || h->exported)
        return UVM_ERR_NOT_SUPPORTED;
    const size_t first = h->phys / kRootChunkSize, count = h->size / kRootChunkSize;
    if (h->given == count)
        return UVM_OK;  // nothing of it is free
    Bitmap &ready = ready_of(*h);

    // The runs of given roots, each in a new handle at a free window range
    // with its bytes: the old handle stays mapped until every copy is made.
    struct Piece {
        size_t root = 0;   // first root of the run
        size_t count = 0;
        uint64_t at = 0;   // its window range meanwhile
        Handle *made = nullptr;
    };
    std::vector<Piece> pieces;
    for (size_t i = first; i < first + count;) {
        if (ready.test(i)) {
            ++i;
            continue;
        }
        size_t n = 1;
        while (i + n < first + count && !ready.test(i + n))
            ++n;
        pieces.push_back({i, n});
        i += n;
    }
    auto undo = [&](size_t made) {  // each piece still at its temporary range, nothing given
        for (size_t k = 0; k < made; ++k)
            release(pieces[k].made);
    };
    uvm_status_t status = UVM_OK;
    size_t made = 0;
    for (Piece &p : pieces) {
        const uint64_t size = p.count * kRootChunkSize;
        if (window_space_->alloc(size, kRootChunkSize, &p.at) != UVM_OK) {
            status = UVM_ERR_OUT_OF_MEMORY;
            break;
        }
        status = make_handle(p.at, size, false, &p.made);
        if (status != UVM_OK) {
            window_space_->free(p.at, size);
            break;
        }
        ++made;
        status = set_access(p.at, size, access);
        if (status == UVM_OK)
            status = copy(window_ + p.at, window_ + p.root * kRootChunkSize, size);
        if (status != UVM_OK)
            break;
    }
    if (status != UVM_OK) {
        undo(made);
        return status;
    }

    // The swap: the old handle out of the window, each piece in at its run.
    auto map_at = [&](uint64_t phys, uint64_t size, CUmemGenericAllocationHandle handle) {
        CUresult r = api_->cuMemMap(window_ + phys, size, 0, handle, 0);
        if (r == CUDA_SUCCESS) {
            r = api_->cuMemSetAccess(window_ + phys, size, access.data(), access.size());
            if (r != CUDA_SUCCESS)
                api_->cuMemUnmap(window_ + phys, size);
        }
        return r;
    };
    auto place_pieces = [&]() {
        for (size_t k = 0; k < pieces.size(); ++k) {
            const CUresult r = map_at(pieces[k].root * kRootChunkSize, pieces[k].count * kRootChunkSize,
                                      pieces[k].made->handle);
            if (r != CUDA_SUCCESS) {
                for (size_t j = 0; j < k; ++j)
                    api_->cuMemUnmap(window_ + pieces[j].root * kRootChunkSize, pieces[j].count * kRootChunkSize);
                return r;
            }
        }
        return CUDA_SUCCESS;
    };
    CUresult r = api_->cuMemUnmap(window_ + h->phys, h->size);
    if (r != CUDA_SUCCESS) {
        undo(made);
        return to_status(r, "cuMemUnmap (shrink)");
    }
    r = place_pieces();
    if (r != CUDA_SUCCESS) {
        status = to_status(r, "cuMemMap (shrink)");
        // The old handle back where it was, with its bytes (never released).
        if (map_at(h->phys, h->size, h->handle) == CUDA_SUCCESS) {
            undo(made);
            return status;
        }
        // Refused too: the pieces once more, which hold the same bytes.
        if (place_pieces() != CUDA_SUCCESS) {
            // Nothing maps there: both handles kept, so that no byte is lost
            // while the roots stay given; the driver is not answering.
            return fail(UVM_ERR_BACKEND, "a shrink could map neither the old handle nor the new ones at %#llx",
                        static_cast<unsigned long long>(h->phys));
        }
    }

    // Committed: the temporary ranges and the old handle go; the pieces are
    // the given roots' handles, of the old one's kind (the PMM keeps pooled
    // and exact roots apart).
    for (Piece &p : pieces) {
        Handle *n = p.made;
        api_->cuMemUnmap(window_ + p.at, n->size);
        window_space_->free(p.at, n->size);
        for (size_t k = 0; k < p.count; ++k) {
            roots_[p.at / kRootChunkSize + k] = nullptr;
            roots_[p.root + k] = n;
        }
        n->phys = p.root * kRootChunkSize;
        n->given = static_cast<uint32_t>(p.count);
        n->exact = h->exact;
        *copied += n->size;
    }
    for (size_t i = first; i < first + count; ++i) {
        if (!ready.test(i))
            continue;
        ready.clear(i);
        roots_[i] = nullptr;
        window_space_->free(i * kRootChunkSize, kRootChunkSize);
        *released += kRootChunkSize;
    }
    api_->cuMemRelease(h->handle);
    handle_count_--;
    handle_bytes_ -= h->size;
    delete h;
    return UVM_OK;
}

uint64_t RootPool::largest_free_run(const Bitmap &given_back, uint64_t driver_free) const {
    Bitmap ready(roots_.size());
    ready.merge(ready_);
    ready.merge(ready_exact_);  // the largest run is a long one, which may take either kind
    std::vector<std::pair<uint64_t, uint64_t>> released;  // window ranges of handles that would go
    uint64_t released_bytes = 0;
    for (size_t i = 0; i < roots_.size();) {
        const Handle *h = roots_[i];
        if (!h) {
            ++i;
            continue;
        }
        const size_t first = h->phys / kRootChunkSize, count = h->size / kRootChunkSize;
        i = first + count;
        if (h->remappable)
            continue;  // neither the PMM's roots nor a pooled run
        uint32_t back = 0;
        for (size_t j = first; j < first + count; ++j)
            back += j < given_back.size() && given_back.test(j) && is_given(j * kRootChunkSize);
        if (back == 0)
            continue;
        if (back == h->given) {
            // Its last root back: free() would give the handle to the driver.
            released.emplace_back(h->phys, h->size);
            released_bytes += h->size;
            for (size_t j = first; j < first + count; ++j)
                if (ready.test(j))
                    ready.clear(j);
            continue;
        }
        if (h->restored)
            continue;  // its roots back are parked, not ready for anyone
        for (size_t j = first; j < first + count; ++j)
            if (j < given_back.size() && given_back.test(j) && !ready.test(j))
                ready.set(j);
    }
    const uint64_t memory = (driver_free + released_bytes) & ~(kRootChunkSize - 1);
    const uint64_t fresh = std::min(memory, window_space_->largest_free_range_with(released)) / kRootChunkSize;
    return std::max<uint64_t>(ready.longest_run(), fresh);
}

uint64_t RootPool::ready_bytes() const {
    return (ready_.count() + ready_exact_.count() + ready_remappable_.count()) * kRootChunkSize;
}

}  // namespace uvm::cuda
