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

// Map the pages at `fixed` without replacing anything there, or anywhere.
// NOT_SUPPORTED for private (non-shareable) allocations.
uvm_status_t host_memory_map(const HostAllocation &alloc, void *fixed, void **out);
void host_memory_unmap(void *address, uint64_t size);

// Whether nothing is mapped in the process at [address, address + size).
bool host_range_free(uint64_t address, uint64_t size);

}  // namespace uvm::backend
