// The sim's copy engine: every address resolved to host memory by walking
// the GPU's page tree (or its IOMMU) as the GPU's MMU would, and counted.
#include "sim/sim_backend_private.h"

namespace uvm::sim {

bool SimBackend::resolve_physical(uint32_t g, mmu::Aperture aperture, uint32_t peer,
                                  uint64_t address, uint64_t want, uint8_t **host, uint64_t *len) {
    if (aperture == mmu::Aperture::Vid || aperture == mmu::Aperture::Peer) {
        const uint32_t owner = aperture == mmu::Aperture::Vid ? g : peer;
        if (owner >= gpus_.size() || !linked(g, owner))
            return false;
        const SimGpu &gpu = *gpus_[owner];
        // The root slots (an offloaded root's is PROT_NONE: nothing may
        // touch it, and the host would say so).
        const uint64_t slots = 2 * gpu.size;
        if (address < slots) {
            *host = gpu.memory + address;
            *len = std::min(want, slots - address);
            return true;
        }
        // The import area: only a root that is there now, one root at a time.
        if (address >= 3 * gpu.size)
            return false;
        std::lock_guard<std::mutex> guard(const_cast<SimGpu &>(gpu).lock);
        if (gpu.root_fd[address / kRootChunkSize] < 0)
            return false;
        *host = gpu.memory + address;
        *len = std::min(want, kRootChunkSize - address % kRootChunkSize);
        return true;
    }
    if (aperture != mmu::Aperture::Sys)
        return false;
    SimGpu &gpu = *gpus_[g];
    std::lock_guard<std::mutex> guard(gpu.iommu_lock);
    auto it = gpu.iommu.upper_bound(address);
    if (it == gpu.iommu.begin())
        return false;
    --it;
    const uint64_t offset = address - it->first;
    if (offset >= it->second.size)
        return false;  // an IOMMU fault
    *host = it->second.host + offset;
    *len = std::min(want, it->second.size - offset);
    return true;
}

bool SimBackend::resolve(uint32_t g, const backend::CeAddress &a, uint64_t offset, uint64_t want,
                         uint8_t **host, uint64_t *len) {
    if (!a.is_virtual)
        return resolve_physical(g, a.aperture, a.peer_gpu, a.address + offset, want, host, len);
    mmu::Translation t;
    gpus_[g]->ce_translations.fetch_add(1, std::memory_order_relaxed);
    if (!a.tree || !a.tree->translate(a.address + offset, &t))
        return false;  // an MMU fault
    const uint64_t in_page = t.page_size - t.page_offset;
    return resolve_physical(g, t.aperture, t.peer_gpu, t.address, std::min(want, in_page), host,
                            len);
}

bool SimBackend::segments(uint32_t g, const backend::CeAddress &dst, const backend::CeAddress *src, uint64_t size,
                          std::vector<SimOp::Segment> *out) {
    uint64_t done = 0;
    while (done < size) {
        uint8_t *to, *from = nullptr;
        uint64_t to_len, from_len = UINT64_MAX;
        if (!resolve(g, dst, done, size - done, &to, &to_len) ||
            (src && !resolve(g, *src, done, size - done, &from, &from_len)))
            return false;
        const uint64_t n = std::min(to_len, from_len);
        out->push_back({to, from, n});
        done += n;
    }
    return true;
}

void SimBackend::run(SimOp &op) {
    for (const SimOp::Segment &seg : op.segments) {
        if (seg.from)
            std::memmove(seg.to, seg.from, seg.size);
        else
            std::memset(seg.to, op.value, seg.size);
    }
    if (op.kind == SimOp::Kind::Copy || op.kind == SimOp::Kind::Memset) {
        gpus_[op.gpu]->ce_operations.fetch_add(1, std::memory_order_relaxed);
        gpus_[op.gpu]->ce_bytes.fetch_add(op.bytes, std::memory_order_relaxed);
    }
}

uvm_status_t SimBackend::ce_op(uint32_t g, const backend::CeAddress &dst, const backend::CeAddress *src,
                               uint8_t value, uint64_t size, SimOp *op) {
    op->kind = src ? SimOp::Kind::Copy : SimOp::Kind::Memset;
    op->gpu = g;
    op->bytes = size;
    op->value = value;
    try {
        return segments(g, dst, src, size, &op->segments) ? UVM_OK : UVM_ERR_BACKEND;
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;  // a backend call never throws
    }
}

uvm_status_t SimBackend::ce_copy(uint32_t g, const backend::CeAddress &dst,
                                 const backend::CeAddress &src, uint64_t size) {
    SimOp op;
    const uvm_status_t status = ce_op(g, dst, &src, 0, size, &op);
    if (status == UVM_OK)
        run(op);
    return status;
}

uvm_status_t SimBackend::ce_memset(uint32_t g, const backend::CeAddress &dst, uint8_t value,
                                   uint64_t size) {
    SimOp op;
    const uvm_status_t status = ce_op(g, dst, nullptr, value, size, &op);
    if (status == UVM_OK)
        run(op);
    return status;
}

backend::CeCounters SimBackend::ce_counters(uint32_t g) const {
    const SimGpu &gpu = *gpus_[g];
    return {gpu.ce_operations.load(), gpu.ce_bytes.load(), gpu.ce_translations.load()};
}

}  // namespace uvm::sim
