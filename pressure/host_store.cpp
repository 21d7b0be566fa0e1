#include "pressure/host_store.h"

#include <algorithm>
#include <new>

#include "common/assert.h"
#include "common/sizes.h"
#include "mmu/range_allocator.h"

namespace uvm {

namespace {
constexpr uint64_t kSlabSize = 256ull << 20;
}  // namespace

struct HostSlab {
    backend::HostAllocation host;
    uint64_t dma = 0;
    std::unique_ptr<mmu::RangeAllocator> ranges;  // offsets into the slab
    uint64_t used = 0;
};

HostStore::HostStore(backend::Backend &backend, uint32_t gpu) : backend_(backend), gpu_(gpu) {}

HostStore::~HostStore() {
    for (auto &slab : slabs_) {
        UVM_ASSERT(slab->used == 0);  // every evicted object was released first
        backend_.sysmem_dma_unmap(gpu_, slab->host, slab->dma);
        backend_.sysmem_free(&slab->host);
    }
}

uvm_status_t HostStore::take(uint64_t size, Slab **out, uint64_t *offset, uint64_t *dma) {
    std::lock_guard<std::mutex> guard(lock_);
    // Ranges keep 64 KiB alignment: copies of whole chunks stay aligned.
    const uint64_t want = align_up(size, kPageSize64K);
    for (auto &slab : slabs_) {
        const uvm_status_t status = slab->ranges->alloc(want, kPageSize64K, offset);
        if (status == UVM_ERR_NO_HOST_MEMORY)
            return status;
        if (status == UVM_OK) {
            slab->used += want;
            *out = slab.get();
            *dma = slab->dma + *offset;
            return UVM_OK;
        }
    }
    // A new slab: its books first, so that nothing can fail once the backend
    // has given the memory.
    std::unique_ptr<Slab> slab;
    backend::HostRequest request;
    request.size = std::max(kSlabSize, align_up(want, kPageSize2M));
    request.chunk_size = kPageSize2M;  // transparent huge pages where the host allows: pinned twice as fast
    try {
        slab = std::make_unique<Slab>();
        slab->ranges = std::make_unique<mmu::RangeAllocator>(0, request.size);
        slabs_.reserve(slabs_.size() + 1);
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
    uvm_status_t status = slab->ranges->alloc(want, kPageSize64K, offset);
    if (status != UVM_OK)
        return status;
    status = backend_.sysmem_alloc(request, &slab->host);
    if (status != UVM_OK)
        return status;
    status = backend_.sysmem_dma_map(gpu_, slab->host, &slab->dma);
    if (status != UVM_OK) {
        backend_.sysmem_free(&slab->host);
        return status;
    }
    slab->used = want;
    *out = slab.get();
    *dma = slab->dma + *offset;
    slabs_.push_back(std::move(slab));
    return UVM_OK;
}

void HostStore::give(Slab *slab, uint64_t offset, uint64_t size) {
    std::lock_guard<std::mutex> guard(lock_);
    const uint64_t want = align_up(size, kPageSize64K);
    slab->ranges->free(offset, want);
    UVM_ASSERT(slab->used >= want);
    slab->used -= want;
}

uint64_t HostStore::dma_of(const Slab *slab, uint64_t offset) { return slab->dma + offset; }

uint64_t HostStore::trim() {
    std::lock_guard<std::mutex> guard(lock_);
    uint64_t released = 0;
    for (auto it = slabs_.begin(); it != slabs_.end();) {
        Slab &slab = **it;
        if (slab.used != 0) {
            ++it;
            continue;
        }
        released += slab.host.size;
        backend_.sysmem_dma_unmap(gpu_, slab.host, slab.dma);
        backend_.sysmem_free(&slab.host);
        it = slabs_.erase(it);
    }
    return released;
}

uint64_t HostStore::held() const {
    std::lock_guard<std::mutex> guard(lock_);
    uint64_t bytes = 0;
    for (const auto &slab : slabs_)
        bytes += slab->host.size;
    return bytes;
}

}  // namespace uvm
