#include "backend/host_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend/os.h"
#include "common/assert.h"
#include "common/sizes.h"

namespace uvm::backend {

namespace {

// Every allocation sits between two PROT_NONE guard pages. They keep the
// kernel from merging it with a neighbouring mapping of the same flags, so
// that its pages (huge or not, on which node) can be read off its own entry in
// /proc/self/smaps, and they catch overruns.
constexpr uint64_t kGuard = kPageSize4K;

// Reserve the guards and `size` bytes between them, the start aligned to
// `alignment`, so that 2 MiB chunks can be backed by huge pages.
void *reserve_aligned(uint64_t size, uint64_t alignment) {
    const uint64_t span = size + alignment + 2 * kGuard;
    void *raw = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return nullptr;
    const uint64_t base = reinterpret_cast<uint64_t>(raw);
    const uint64_t start = align_up(base + kGuard, alignment);
    const uint64_t head = start - kGuard - base;
    const uint64_t tail = span - head - size - 2 * kGuard;
    if (head)
        munmap(raw, head);
    if (tail)
        munmap(reinterpret_cast<void *>(start + size + kGuard), tail);
    return reinterpret_cast<void *>(start);
}

void release_reservation(void *start, uint64_t size) {
    munmap(static_cast<uint8_t *>(start) - kGuard, size + 2 * kGuard);
}

uvm_status_t errno_status(int error) {
    return error == ENOMEM || error == ENOSPC || error == EMFILE || error == ENFILE || error == EFBIG
               ? UVM_ERR_OUT_OF_MEMORY
               : UVM_ERR_BACKEND;
}

// Allocate the pages of a private mapping now, where its policy says.
uvm_status_t populate_private(void *address, uint64_t size) {
    if (madvise(address, size, MADV_POPULATE_WRITE) == 0)
        return UVM_OK;
    if (errno != EINVAL)
        return errno_status(errno);
    // Kernels before 5.14: touch each page. Exhaustion is then the kernel's
    // OOM handling rather than a status.
    volatile uint8_t *p = static_cast<uint8_t *>(address);
    for (uint64_t off = 0; off < size; off += kPageSize4K)
        p[off] = 0;
    return UVM_OK;
}

}  // namespace

uvm_status_t host_memory_create(const HostRequest &request, HostAllocation *out) {
    const uint64_t size = request.size;
    UVM_ASSERT(size > 0 && is_aligned(size, request.chunk_size));
    if (size > topo::host_memory_bytes(false))  // larger than the host: refused
        return UVM_ERR_OUT_OF_MEMORY;
    const bool huge = request.chunk_size >= kPageSize2M;

    int fd = -1;
    if (request.shareable) {
        fd = static_cast<int>(syscall(SYS_memfd_create, "uvm-sysmem", MFD_CLOEXEC));
        if (fd < 0)
            return errno_status(errno);
        if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
            const int error = errno;
            close(fd);
            return errno_status(error);
        }
    }
    void *where = reserve_aligned(size, huge ? kPageSize2M : kPageSize4K);
    if (!where) {
        if (fd >= 0)
            close(fd);
        return UVM_ERR_OUT_OF_MEMORY;
    }
    void *linear = fd >= 0 ? mmap(where, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0)
                           : mmap(where, size, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    uvm_status_t status = linear == MAP_FAILED ? errno_status(errno) : UVM_OK;
    if (status == UVM_OK) {
        // 2M chunks ask for huge pages; smaller chunks are kept on base pages
        // even where THP is "always", so that each chunk size means its page size.
        // Best effort: THP may be off, and that is reported, not an error.
        madvise(linear, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        // The policy goes on before any page exists, so every page follows it.
        status = topo::apply_policy(linear, size, request.policy);
    }
    if (status == UVM_OK) {
        if (fd >= 0)
            status = fallocate(fd, 0, 0, static_cast<off_t>(size)) == 0 ? UVM_OK : errno_status(errno);
        else
            status = populate_private(linear, size);
    }
    if (status != UVM_OK) {
        release_reservation(where, size);
        if (fd >= 0)
            close(fd);
        return status;
    }
    out->fd = fd;
    out->linear = linear;
    out->size = size;
    out->chunk_size = request.chunk_size;
    return UVM_OK;
}

uvm_status_t host_memory_adopt(int fd, uint64_t size, uint64_t chunk_size, HostAllocation *out) {
    struct stat st;
    if (size == 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) < size)
        return UVM_ERR_INVALID_ARGUMENT;
    const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0)
        return errno_status(errno);
    void *where = reserve_aligned(size, chunk_size >= kPageSize2M ? kPageSize2M : kPageSize4K);
    if (!where) {
        close(own);
        return UVM_ERR_OUT_OF_MEMORY;
    }
    void *linear = mmap(where, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, own, 0);
    if (linear == MAP_FAILED) {
        const uvm_status_t status = errno_status(errno);
        release_reservation(where, size);
        close(own);
        return status;
    }
    out->fd = own;
    out->linear = linear;
    out->size = size;
    out->chunk_size = chunk_size;
    return UVM_OK;
}

void host_memory_destroy(HostAllocation *alloc) {
    if (alloc->linear)
        release_reservation(alloc->linear, alloc->size);
    if (alloc->fd >= 0)
        close(alloc->fd);
    alloc->linear = nullptr;
    alloc->fd = -1;
}

uvm_status_t host_memory_map(const HostAllocation &alloc, void *fixed, void **out) {
    if (alloc.fd < 0)
        return UVM_ERR_NOT_SUPPORTED;
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

uvm_status_t host_range_reserve(uint64_t size, uint64_t align, uint64_t *out) {
    const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void *p = mmap(nullptr, size + align, PROT_NONE, flags, -1, 0);
    if (p == MAP_FAILED)
        return UVM_ERR_OUT_OF_MEMORY;
    // Keep the aligned middle, give the ends back.
    const uint64_t start = reinterpret_cast<uintptr_t>(p);
    const uint64_t at = (start + align - 1) & ~(align - 1);
    if (at > start)
        munmap(p, at - start);
    if (start + size + align > at + size)
        munmap(reinterpret_cast<void *>(static_cast<uintptr_t>(at + size)), start + size + align - at - size);
    *out = at;
    return UVM_OK;
}

bool host_range_cover(uint64_t address, uint64_t size) {
    void *want = reinterpret_cast<void *>(static_cast<uintptr_t>(address));
    void *got = mmap(want, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (got == MAP_FAILED)
        return false;
    if (got != want) {  // kernels before 4.17 take the address as a hint
        munmap(got, size);
        return false;
    }
    return true;
}

void host_range_uncover(uint64_t address, uint64_t size) {
    munmap(reinterpret_cast<void *>(static_cast<uintptr_t>(address)), size);
}

}  // namespace uvm::backend
