// Host memory for sysmem objects, shared by every backend: a memfd whose pages
// are allocated up front (so exhaustion is a status, never a SIGBUS later),
// mapped once as the manager's linear mapping and again wherever asked.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace uvm::backend {

uvm_status_t host_memory_create(uint64_t size, uint64_t chunk_size, HostAllocation *out);
void host_memory_destroy(HostAllocation *alloc);

// Map the pages at `fixed` without replacing anything there, or anywhere.
uvm_status_t host_memory_map(const HostAllocation &alloc, void *fixed, void **out);
void host_memory_unmap(void *address, uint64_t size);

// Bytes of physical host memory; sysmem objects larger than this are refused.
uint64_t host_memory_total();

}  // namespace uvm::backend
