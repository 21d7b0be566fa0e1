// The sim's sharing (SharingCapability): a remappable root's memfd handed
// out, and other processes' roots mapped into the import area of a GPU
// (above its root slots: SimGpu).
#include "sim/sim_backend_private.h"

namespace uvm::sim {

uvm_status_t SimBackend::root_chunk_export(uint32_t g, uint64_t phys, int *fd, uint64_t *offset) {
    SimGpu &gpu = *gpus_[g];
    std::lock_guard<std::mutex> guard(gpu.lock);
    const size_t index = phys / kRootChunkSize;
    if (!is_aligned(phys, kRootChunkSize) || index >= gpu.root_fd.size() || gpu.root_fd[index] < 0)
        return UVM_ERR_NOT_SUPPORTED;  // not a remappable (or imported) root
    if (index < gpu.slots() && gpu.offloaded.test(index))
        return UVM_ERR_INVALID_ARGUMENT;  // no memory to share until restored
    const int copy = fcntl(gpu.root_fd[index], F_DUPFD_CLOEXEC, 0);
    if (copy < 0)
        return UVM_ERR_BACKEND;
    if (index < gpu.slots() && !gpu.exported.test(index))
        gpu.exported.set(index);  // never offloaded from now on (SimGpu::exported)
    *fd = copy;
    *offset = gpu.root_off[index];
    return UVM_OK;
}

uvm_status_t SimBackend::roots_import(uint32_t g, const int *fds, const uint64_t *offsets, size_t count,
                                      uint64_t *phys) {
    SimGpu &gpu = *gpus_[g];
    for (size_t i = 0; i < count; ++i) {
        struct stat st;
        if (fstat(fds[i], &st) != 0 || !S_ISREG(st.st_mode) || !is_aligned(offsets[i], kRootChunkSize) ||
            static_cast<uint64_t>(st.st_size) < offsets[i] + kRootChunkSize)
            return UVM_ERR_INVALID_ARGUMENT;
    }
    std::lock_guard<std::mutex> guard(gpu.lock);
    const size_t at = count ? gpu.free_imports.find_run(count) : Bitmap::npos;
    if (at == Bitmap::npos)
        return UVM_ERR_OUT_OF_MEMORY;
    const size_t base = gpu.slots();
    for (size_t i = 0; i < count; ++i) {
        const size_t index = base + at + i;
        const int own = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        if (own < 0 || mmap(gpu.memory + index * kRootChunkSize, kRootChunkSize, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_FIXED, own, static_cast<off_t>(offsets[i])) == MAP_FAILED) {
            if (own >= 0)
                close(own);
            for (size_t j = 0; j < i; ++j)
                drop_import(gpu, base + at + j);
            return UVM_ERR_NO_HOST_MEMORY;
        }
        gpu.root_fd[index] = own;
        gpu.root_off[index] = offsets[i];
    }
    gpu.free_imports.clear_range(at, count);
    *phys = (base + at) * kRootChunkSize;
    return UVM_OK;
}

// An imported root's slot goes back to PROT_NONE. gpu.lock held.
void SimBackend::drop_import(SimGpu &gpu, size_t index) {
    void *got = mmap(gpu.memory + index * kRootChunkSize, kRootChunkSize, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    UVM_ASSERT(got != MAP_FAILED);
    (void)got;
    close(gpu.root_fd[index]);
    gpu.root_fd[index] = -1;
}

void SimBackend::roots_import_release(uint32_t g, uint64_t phys, size_t count) {
    SimGpu &gpu = *gpus_[g];
    std::lock_guard<std::mutex> guard(gpu.lock);
    const size_t base = gpu.slots(), first = phys / kRootChunkSize;
    UVM_ASSERT(first >= base && first + count <= base + gpu.roots());
    for (size_t i = first; i < first + count; ++i)
        drop_import(gpu, i);
    gpu.free_imports.set_range(first - base, count);
}

}  // namespace uvm::sim
