#include "backend/host_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/assert.h"
#include "common/sizes.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif

namespace uvm::backend {

uint64_t host_memory_total() {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    return pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * page_size : 0;
}

// Reserve `size` bytes of address space aligned to `alignment`, so that 2 MiB
// chunks can be backed by huge pages.
static void *reserve_aligned(uint64_t size, uint64_t alignment) {
    const uint64_t span = size + alignment;
    void *raw = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return nullptr;
    const uint64_t start = align_up(reinterpret_cast<uint64_t>(raw), alignment);
    const uint64_t head = start - reinterpret_cast<uint64_t>(raw);
    if (head)
        munmap(raw, head);
    if (span - head > size)
        munmap(reinterpret_cast<void *>(start + size), span - head - size);
    return reinterpret_cast<void *>(start);
}

uvm_status_t host_memory_create(uint64_t size, uint64_t chunk_size, HostAllocation *out) {
    UVM_ASSERT(size > 0 && is_aligned(size, chunk_size));
    if (size > host_memory_total())
        return UVM_ERR_OUT_OF_MEMORY;
    const int fd = static_cast<int>(syscall(SYS_memfd_create, "uvm-sysmem", MFD_CLOEXEC));
    if (fd < 0)
        return errno == ENOMEM || errno == EMFILE || errno == ENFILE ? UVM_ERR_OUT_OF_MEMORY
                                                                      : UVM_ERR_BACKEND;
    if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
        fallocate(fd, 0, 0, static_cast<off_t>(size)) != 0) {
        close(fd);
        return UVM_ERR_OUT_OF_MEMORY;
    }
    void *linear = nullptr;
    if (chunk_size >= kPageSize2M) {
        void *where = reserve_aligned(size, kPageSize2M);
        if (where)
            linear = mmap(where, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
        if (linear != MAP_FAILED && linear)
            madvise(linear, size, MADV_HUGEPAGE);  // best effort: THP may be off
    } else {
        linear = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (!linear || linear == MAP_FAILED) {
        close(fd);
        return UVM_ERR_OUT_OF_MEMORY;
    }
    out->fd = fd;
    out->linear = linear;
    out->size = size;
    out->chunk_size = chunk_size;
    return UVM_OK;
}

void host_memory_destroy(HostAllocation *alloc) {
    if (alloc->linear)
        munmap(alloc->linear, alloc->size);
    if (alloc->fd >= 0)
        close(alloc->fd);
    alloc->linear = nullptr;
    alloc->fd = -1;
}

uvm_status_t host_memory_map(const HostAllocation &alloc, void *fixed, void **out) {
    const int flags = MAP_SHARED | (fixed ? MAP_FIXED_NOREPLACE : 0);
    void *address = mmap(fixed, alloc.size, PROT_READ | PROT_WRITE, flags, alloc.fd, 0);
    if (address == MAP_FAILED)
        return errno == EEXIST ? UVM_ERR_ADDRESS_IN_USE
               : errno == ENOMEM ? UVM_ERR_NO_HOST_MEMORY
                                 : UVM_ERR_BACKEND;
    // Kernels before 4.17 take MAP_FIXED_NOREPLACE as a hint: check that we got the address.
    if (fixed && address != fixed) {
        munmap(address, alloc.size);
        return UVM_ERR_ADDRESS_IN_USE;
    }
    *out = address;
    return UVM_OK;
}

void host_memory_unmap(void *address, uint64_t size) {
    munmap(address, size);
}

}  // namespace uvm::backend
