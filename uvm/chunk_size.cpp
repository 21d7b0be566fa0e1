// The adaptive chunk-size rule.
#include "common/sizes.h"
#include "uvm/mem.h"

namespace uvm {

uvm_status_t pick_chunk_size(uvm_backing_t backing, uint64_t size, uint64_t requested,
                             uint64_t supported, uint64_t *out) {
    if (backing == UVM_BACKING_SYSMEM) {
        // Host chunks: any of the three sizes. The driver uses the CPU page
        // size; we go to 2 MiB (huge pages) from 2 MiB up, because pinning
        // cost and TLB reach are per page.
        supported = kAllPageSizes;
    }
    if (requested) {
        if (chunk_size_index(requested) < 0 || !(supported & requested))
            return UVM_ERR_PAGE_SIZE_NOT_SUPPORTED;
        *out = requested;
        return UVM_OK;
    }
    uint64_t pick;
    if (backing == UVM_BACKING_SYSMEM)
        pick = size >= kPageSize2M ? kPageSize2M : kPageSize4K;
    else if (size < kPageSize64K)  // below the big page size
        pick = kPageSize4K;
    else if (size < kPageSize2M)   // below the largest page size
        pick = kPageSize64K;
    else
        pick = kPageSize2M;
    // Where the GPU lacks the size, take the largest supported one below it,
    // else the smallest above it.
    if (!(supported & pick)) {
        uint64_t below = 0, above = 0;
        for (int i = 0; i < 3; ++i) {
            const uint64_t s = chunk_size_of_index(i);
            if (!(supported & s))
                continue;
            if (s < pick)
                below = s;
            else if (!above)
                above = s;
        }
        pick = below ? below : above;
    }
    if (!pick)
        return UVM_ERR_PAGE_SIZE_NOT_SUPPORTED;
    *out = pick;
    return UVM_OK;
}

}  // namespace uvm
