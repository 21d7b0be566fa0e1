// Shrinking the driver allocations that live objects hold part of
// (compact_private.h).
#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "backend/offload_capability.h"
#include "common/sizes.h"
#include "compact/compact_private.h"

namespace uvm {

namespace {

// The driver allocations of a GPU that hold root chunks its PMM does not
// (free in the backend) beside ones it does, with the live objects in each.
struct PartialSpan {
    uint64_t first = 0;      // phys of its first root
    size_t count = 0;        // root chunks
    size_t held = 0;         // of those, the PMM's (what a shrink copies)
    std::vector<std::shared_ptr<Mem>> objects;
};

// The bytes of `mem`'s chunks (locked) inside [first, first + size).
uint64_t overlap(const Mem &mem, uint64_t first, uint64_t size) {
    if (!holds_memory(mem))
        return 0;
    uint64_t bytes = 0;
    for_each_run(mem, [&](size_t run, size_t count) {
        const uint64_t a = std::max(mem.chunks[run], first);
        const uint64_t b = std::min(mem.chunks[run] + count * mem.chunk_size, first + size);
        bytes += a < b ? b - a : 0;
    });
    return bytes;
}

// The lowest and the end of `mem`'s chunks (locked, holding memory).
void extent(const Mem &mem, uint64_t *a, uint64_t *end) {
    *a = mem.chunks[0];
    *end = mem.chunks[0] + mem.alloc_size;
    if (!mem.stitched)
        return;
    for (size_t i = 0; i < mem.chunks.size(); ++i) {
        *a = std::min(*a, mem.chunks[i]);
        *end = std::max(*end, mem.chunks[i] + mem.chunk_size);
    }
}

// Shrink `span` (OffloadCapability::root_span_shrink) where every chunk the
// PMM has allocated in it belongs to its objects, each locked here (only
// tried: several are held at once, and on the OOM path the caller holds
// some), idle on its streams and mapped by no CPU. An object missed (locked
// elsewhere, or made since) leaves the PMM's count above theirs, so the
// span is left alone. The PMM's lock is held across the shrink: nothing is
// handed out or freed there meanwhile. OK where it was shrunk or left alone
// (*copied says); another status where the backend failed.
uvm_status_t shrink_span(Manager &mgr, uint32_t gpu, PartialSpan &span, const CompactOptions &options,
                         uint64_t *copied) {
    *copied = 0;
    const uint64_t size = span.count * kRootChunkSize;
    std::vector<std::unique_lock<Mutex>> locks;
    locks.reserve(span.objects.size());
    uint64_t bytes = 0;
    for (const std::shared_ptr<Mem> &m : span.objects) {
        if (m.get() == options.skip[0] || m.get() == options.skip[1])
            return UVM_OK;  // the caller holds it, and may be using its memory
        std::unique_lock<Mutex> guard(m->lock, std::try_to_lock);
        if (!guard.owns_lock())
            return UVM_OK;
        const uint64_t in = overlap(*m, span.first, size);
        if (in && (m->cpu_kernel || m->cpu_user || m->exported || m->imported || m->stitched))
            return UVM_OK;  // named by a mapping the backend does not make again
        if (in && busy_on_streams(mgr, *m))
            return UVM_OK;
        bytes += in;
        locks.push_back(std::move(guard));
    }
    backend::OffloadCapability *offload = mgr.backend().offload();
    uint64_t released = 0;  // the driver's count says it (driver_held_*)
    const uvm_status_t status = mgr.gpu(gpu).pmm.with_roots_still(span.first, span.count, [&](uint64_t used) {
        if (used != bytes)
            return UVM_OK;  // memory of no object here (cached, pooled, pending): its user may touch it
        return offload->root_span_shrink(gpu, span.first, span.count, &released, copied);
    });
    // Not failures of the compaction: NOT_SUPPORTED, an allocation the
    // backend cannot shrink (one holder's, remappable) or a capture under
    // way; INVALID_ARGUMENT, the span is another allocation now;
    // OUT_OF_MEMORY, no memory for its copies (a sparser one may fit).
    if (status == UVM_ERR_NOT_SUPPORTED || status == UVM_ERR_INVALID_ARGUMENT || status == UVM_ERR_OUT_OF_MEMORY)
        return UVM_OK;
    return status;
}

}  // namespace

uvm_status_t shrink_spans(Manager &mgr, uint32_t gpu, const CompactOptions &options, uvm_compact_result_t *out) {
    if (!mgr.backend().offload())
        return UVM_OK;
    std::vector<PartialSpan> spans;
    {
        const std::vector<chunk::Pmm::RootUsage> usage = mgr.gpu(gpu).pmm.root_usage();
        std::map<uint64_t, PartialSpan> by_first;
        for (size_t i = 0; i < usage.size(); ++i) {
            if (usage[i].free + usage[i].pinned + usage[i].evictable == 0)
                continue;
            uint64_t first = 0;
            size_t count = 0;
            mgr.backend().root_chunk_span(gpu, i * kRootChunkSize, &first, &count);
            PartialSpan &s = by_first[first];
            s.first = first;
            s.count = count;
            s.held++;
        }
        for (auto &entry : by_first)  // by first root: the objects' lookup below
            if (entry.second.held < entry.second.count)
                spans.push_back(std::move(entry.second));
    }
    if (spans.empty())
        return UVM_OK;
    for (std::shared_ptr<Mem> &m : mgr.live_objects()) {
        if (!m->is_vidmem() || m->owner != gpu || m.get() == options.skip[0] || m.get() == options.skip[1])
            continue;
        uint64_t a = 0, end = 0;
        {
            std::unique_lock<Mutex> guard(m->lock, std::try_to_lock);
            if (!guard.owns_lock() || m->own_pmm || overlap(*m, 0, UINT64_MAX) == 0)
                continue;  // one missed here keeps its span as it is (shrink_span)
            extent(*m, &a, &end);
        }
        auto it = std::upper_bound(spans.begin(), spans.end(), a,
                                   [](uint64_t x, const PartialSpan &s) { return x < s.first; });
        if (it != spans.begin())
            --it;
        for (; it != spans.end() && it->first < end; ++it)
            if (it->first + it->count * kRootChunkSize > a)
                it->objects.push_back(m);
    }
    std::stable_sort(spans.begin(), spans.end(), [](const PartialSpan &a, const PartialSpan &b) {
        // held / (count - held), the bytes copied for each byte given back, ascending
        return a.held * (b.count - b.held) < b.held * (a.count - a.held);
    });
    for (PartialSpan &span : spans) {
        uint64_t copied = 0;
        const uvm_status_t status = shrink_span(mgr, gpu, span, options, &copied);
        if (status != UVM_OK)
            return status;
        out->bytes_rebacked += copied;
    }
    return UVM_OK;
}

}  // namespace uvm
