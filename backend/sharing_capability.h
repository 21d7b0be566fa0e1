// Sharing with other processes (uvm_mem_export / uvm_mem_import): root
// chunks as file descriptors another process can map, and the memory of
// another process taken in. A backend capability (backend.h):
// Backend::sharing() is null where the backend cannot share, and exporting
// vidmem or importing anything then says NOT_SUPPORTED (a shareable sysmem
// object's memfd is exported without the backend).
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace uvm::backend {

class SharingCapability {
public:
    // A remappable root chunk as a file descriptor another process can map,
    // and where in it the root is (sim: a dup of its run's memfd; CUDA:
    // cuMemExportToShareableHandle of its own handle, a POSIX fd, offset 0).
    // The memory lives while any process holds it.
    virtual uvm_status_t root_chunk_export(uint32_t gpu, uint64_t phys, int *fd, uint64_t *offset) = 0;
    // What root_chunk_export gives: 1 a memfd, 2 a CUDA POSIX fd (ipc::ShareHandleKind).
    virtual int export_handle_kind() const = 0;
    // `count` exported root chunks (`fds` at `offsets`, which stay the caller's) placed
    // side by side from *phys in `gpu`'s physical space beyond its own memory,
    // reachable by `gpu` and every GPU granted peer access to it. Each can be
    // mapped on its own (as remappable roots). OUT_OF_MEMORY where the space
    // has no such hole; INVALID_ARGUMENT for an fd of the wrong kind or size.
    virtual uvm_status_t roots_import(uint32_t gpu, const int *fds, const uint64_t *offsets, size_t count,
                                      uint64_t *phys) = 0;
    virtual void roots_import_release(uint32_t gpu, uint64_t phys, size_t count) = 0;
    // Host memory of another process: `size` bytes of memfd `fd` (which
    // stays the caller's; the allocation keeps its own), as a shareable
    // allocation.
    virtual uvm_status_t sysmem_import(int fd, uint64_t size, uint64_t chunk_size, HostAllocation *out) = 0;

protected:
    // Owned by the backend that hands it out, never through this interface.
    ~SharingCapability() = default;
};

}  // namespace uvm::backend
