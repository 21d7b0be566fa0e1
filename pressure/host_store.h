// Host memory for the bytes of evicted objects (residency.h), per GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"

namespace uvm {

struct HostSlab;  // host_store.cpp; named outside the class so that an object (uvm/mem.h) can hold one unseen

// Host memory for evicted bytes, per GPU: slabs of at least 256 MiB, each
// allocated, DMA-mapped for the GPU (on CUDA registered) once and kept, and
// carved into ranges, so that an eviction or a restore after the first costs
// one copy and no pinning (pinning 1 GiB costs about what copying it does).
// Empty slabs go back on uvm_gpu_trim and at teardown.
class HostStore {
public:
    using Slab = HostSlab;
    HostStore(backend::Backend &backend, uint32_t gpu);
    ~HostStore();
    // A range of `size` bytes: its slab, offset, and DMA address for the GPU.
    uvm_status_t take(uint64_t size, Slab **slab, uint64_t *offset, uint64_t *dma);
    void give(Slab *slab, uint64_t offset, uint64_t size);
    // The DMA address of a range taken earlier.
    static uint64_t dma_of(const Slab *slab, uint64_t offset);
    uint64_t trim();  // release empty slabs; bytes released
    uint64_t held() const;

private:
    backend::Backend &backend_;
    uint32_t gpu_;
    mutable std::mutex lock_;
    std::vector<std::unique_ptr<Slab>> slabs_;
};

}  // namespace uvm
