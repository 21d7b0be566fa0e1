// The copy engine's operations on objects (uvm_mem_copy, uvm_mem_memset and
// their stream-ordered forms): a span resolved into pieces that are
// contiguous on both sides, then run or queued on the backend's copy engine.
#include "stream/copy.h"

#include <algorithm>
#include <vector>

#include "common/enum_value.h"
#include "backend/stream_capability.h"
#include "stream/stream.h"

namespace uvm {

uvm_status_t mem_copy_engine(Manager &mgr, uint32_t gpu, Mem *d, const uvm_mem_span_t *dst, Mem *s,
                             const uvm_mem_span_t *src, uint8_t value, uint64_t size,
                             const std::shared_ptr<Stream> &stream) {
    uvm_status_t status = UVM_OK;
    if (dst->offset > d->alloc_size || size > d->alloc_size - dst->offset)
        return UVM_ERR_OUT_OF_RANGE;
    if (s && (src->offset > s->alloc_size || size > s->alloc_size - src->offset))
        return UVM_ERR_OUT_OF_RANGE;
    if (s == d && dst->offset < src->offset + size && src->offset < dst->offset + size)
        return UVM_ERR_INVALID_ARGUMENT;
    const int dst_view = enum_value(dst->view);
    const int src_view = s ? enum_value(src->view) : UVM_VIEW_KERNEL;
    for (int view : {dst_view, src_view})
        if (view < UVM_VIEW_KERNEL || view > UVM_VIEW_PHYSICAL)
            return UVM_ERR_INVALID_ARGUMENT;
    // Every piece is resolved before any is run or queued: a bad view
    // or a missing mapping changes nothing.
    struct Piece {
        backend::CeAddress to, from;
        uint64_t size;
    };
    std::vector<Piece> pieces;
    for (uint64_t done = 0; done < size;) {
        Piece p;
        uint64_t to_piece = 0, from_piece = UINT64_MAX;
        status = mem_ce_address(mgr, *d, gpu, static_cast<uvm_gpu_view_t>(dst_view), dst->offset + done,
                                     &p.to, &to_piece);
        if (status == UVM_OK && s)
            status = mem_ce_address(mgr, *s, gpu, static_cast<uvm_gpu_view_t>(src_view),
                                          src->offset + done, &p.from, &from_piece);
        if (status != UVM_OK)
            return status;
        p.size = std::min(size - done, std::min(to_piece, from_piece));
        pieces.push_back(p);
        done += p.size;
    }
    backend::Backend &backend = mgr.backend();
    if (!stream) {
        for (const Piece &p : pieces) {
            status = s ? backend.ce_copy(gpu, p.to, p.from, p.size) : backend.ce_memset(gpu, p.to, value, p.size);
            if (status != UVM_OK)
                return status;
        }
        return UVM_OK;
    }
    {
        std::lock_guard<std::mutex> guard(stream->lock);
        if (stream->destroyed)
            return UVM_ERR_INVALID_HANDLE;
        for (const Piece &p : pieces) {
            status = s ? mgr.backend_streams()->ce_copy_async(gpu, stream->backend, p.to, p.from, p.size)
                       : mgr.backend_streams()->ce_memset_async(gpu, stream->backend, p.to, value, p.size);
            if (status != UVM_OK)
                break;
        }
    }
    // Track even after a failure: earlier pieces may be queued.
    d->users.add(stream);
    if (s)
        s->users.add(stream);
    return status;
}

}  // namespace uvm
