// Host memory for sysmem objects, shared by every backend. The pages are
// allocated up front (so exhaustion is a status, never a SIGBUS later), after
// the object's NUMA policy is set on its range, and are either private
// anonymous memory (2M chunks on transparent huge pages) or, for objects that
// need a second CPU mapping, a memfd mapped once as the manager's linear
// mapping and again wherever asked.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace uvm::backend {

uvm_status_t host_memory_create(const HostRequest &request, HostAllocation *out);
void host_memory_destroy(HostAllocation *alloc);
// A shareable allocation over `size` bytes of another process's memfd `fd`
// (dup'd: the caller keeps `fd`). INVALID_ARGUMENT where `fd` is not a
// regular file of at least `size` bytes.
uvm_status_t host_memory_adopt(int fd, uint64_t size, uint64_t chunk_size, HostAllocation *out);

// Map the pages at `fixed` without replacing anything there, or anywhere.
// NOT_SUPPORTED for private (non-shareable) allocations.
uvm_status_t host_memory_map(const HostAllocation &alloc, void *fixed, void **out);
void host_memory_unmap(void *address, uint64_t size);

// CPU address-space reservations (PROT_NONE, no memory behind them), which
// keep a range the manager hands out from the process's other mappings.
// A new one of `size`, aligned to `align`, where the kernel places it:
uvm_status_t host_range_reserve(uint64_t size, uint64_t align, uint64_t *out);
// Reserve [address, address + size) again (never replacing anything: false
// where something else is there now), or give the reservation up.
bool host_range_cover(uint64_t address, uint64_t size);
void host_range_uncover(uint64_t address, uint64_t size);

}  // namespace uvm::backend
