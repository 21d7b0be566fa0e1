// Managed memory (cuMemAllocManaged): an address every processor can use,
// migrated by the driver. A backend capability (backend.h):
// Backend::managed() is null where the backend has none, and
// UVM_BACKING_MANAGED objects are then NOT_SUPPORTED.
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace uvm::backend {

class ManagedCapability {
public:
    virtual uvm_status_t managed_alloc(uint32_t gpu, uint64_t size, uint64_t *address) = 0;
    virtual void managed_free(uint64_t address) = 0;
    // `processor` is a GPU index or UVM_PROCESSOR_CPU.
    virtual uvm_status_t managed_advise(uint64_t address, uint64_t size, uvm_managed_advice_t advice,
                                        int32_t processor) = 0;
    virtual uvm_status_t managed_prefetch(uint64_t address, uint64_t size, int32_t processor) = 0;

protected:
    // Owned by the backend that hands it out, never through this interface.
    ~ManagedCapability() = default;
};

}  // namespace uvm::backend
