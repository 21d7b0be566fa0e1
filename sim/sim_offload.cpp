// The sim's offload (OffloadCapability): a root's pages punched out of the
// memfd that backs its slot (the GPU's, or its run's), so the host memory
// really goes back, while the slot stays taken (PROT_NONE, so that nothing
// touches it unseen) and the memory counts free; restore maps the slot from
// the same memfd again, where the punched pages read zero. Both are all or
// nothing under the GPU's lock, each root checked first (move_roots).
//
// Offloading takes any backed root the sim gave (remappable or not; CUDA
// only remappable ones). Not an exported one (the sim cannot tell whether
// the other process still holds its fd: SimGpu::exported) nor an imported
// one (its pages are the exporter's): NOT_SUPPORTED. A CPU mapping of an
// offloaded root (vidmem_cpu_map) maps its memfd, not its slot: the caller
// takes those down first, as nothing may touch an offloaded root.
#include "sim/sim_backend_private.h"

namespace uvm::sim {

namespace {

// Why `phys` cannot be offloaded, or UVM_OK. gpu.lock held.
uvm_status_t offload_refusal(const SimGpu &gpu, uint64_t phys) {
    const size_t index = phys / kRootChunkSize;
    if (!is_aligned(phys, kRootChunkSize) || index >= gpu.root_fd.size())
        return UVM_ERR_INVALID_ARGUMENT;
    if (index >= gpu.slots())  // the import area: imported, or nothing
        return gpu.root_fd[index] >= 0 ? UVM_ERR_NOT_SUPPORTED : UVM_ERR_INVALID_ARGUMENT;
    if (gpu.free_roots.test(index) || gpu.offloaded.test(index))
        return UVM_ERR_INVALID_ARGUMENT;  // not given, or given and offloaded
    return gpu.exported.test(index) ? UVM_ERR_NOT_SUPPORTED : UVM_OK;
}

uvm_status_t restore_refusal(const SimGpu &gpu, uint64_t phys) {
    const size_t index = phys / kRootChunkSize;
    const bool offloaded = is_aligned(phys, kRootChunkSize) && index < gpu.slots() && gpu.offloaded.test(index);
    return offloaded ? UVM_OK : UVM_ERR_INVALID_ARGUMENT;
}

void mark(SimGpu &gpu, const uint64_t *phys, size_t count, bool offloaded) {
    for (size_t i = 0; i < count; ++i) {
        if (offloaded)
            gpu.offloaded.set(phys[i] / kRootChunkSize);
        else
            gpu.offloaded.clear(phys[i] / kRootChunkSize);
    }
}

// Each root checked by `refusal` and marked `offloaded` (or not) as it
// passes, so that one named twice is refused the second time; a refusal
// puts the marks back as they were. gpu.lock held.
uvm_status_t mark_all(SimGpu &gpu, const uint64_t *phys, size_t count, bool offloaded,
                      uvm_status_t (*refusal)(const SimGpu &, uint64_t)) {
    for (size_t i = 0; i < count; ++i) {
        const uvm_status_t status = refusal(gpu, phys[i]);
        if (status != UVM_OK) {
            mark(gpu, phys, i, !offloaded);
            return status;
        }
        mark(gpu, phys + i, 1, offloaded);
    }
    return UVM_OK;
}

// A given root's slot mapped from its memfd again (the GPU's, or its
// run's), or PROT_NONE (offloaded). False where mmap failed.
bool map_slot(SimGpu &gpu, size_t index, bool backed) {
    uint8_t *at = gpu.memory + index * kRootChunkSize;
    if (!backed)
        return mmap(at, kRootChunkSize, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
                    0) != MAP_FAILED;
    const int fd = gpu.root_fd[index];
    const off_t offset = static_cast<off_t>(fd < 0 ? index * kRootChunkSize : gpu.root_off[index]);
    return mmap(at, kRootChunkSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd < 0 ? gpu.fd : fd, offset) !=
           MAP_FAILED;
}

// Every root's slot mapped as map_slot does, or none: the ones done go back
// as they were where one fails. gpu.lock held.
bool map_slots(SimGpu &gpu, const uint64_t *phys, size_t count, bool backed) {
    for (size_t i = 0; i < count; ++i) {
        if (map_slot(gpu, phys[i] / kRootChunkSize, backed))
            continue;
        for (size_t j = 0; j < i; ++j) {
            const bool undone = map_slot(gpu, phys[j] / kRootChunkSize, !backed);
            UVM_ASSERT(undone);  // best effort, as the failure reported already is
            (void)undone;
        }
        return false;
    }
    return true;
}

// Offload (`away`) or restore, all or nothing: every root checked and
// marked first, then the memory counted and the slots mapped; on the way
// out the slots go out of reach before the pages go (they are still there
// should a mapping fail).
uvm_status_t move_roots(SimGpu &gpu, const uint64_t *phys, size_t count, bool away) {
    std::lock_guard<std::mutex> guard(gpu.lock);
    const uvm_status_t refusal = mark_all(gpu, phys, count, away, away ? offload_refusal : restore_refusal);
    if (refusal != UVM_OK)
        return refusal;
    const uvm_status_t status = !away && count > gpu.roots() - gpu.backed ? UVM_ERR_OUT_OF_MEMORY
                                : !map_slots(gpu, phys, count, !away)     ? UVM_ERR_NO_HOST_MEMORY
                                                                          : UVM_OK;
    if (status != UVM_OK) {
        mark(gpu, phys, count, !away);
        return status;
    }
    if (!away) {
        gpu.backed += count;
        return UVM_OK;
    }
    for (size_t i = 0; i < count; ++i) {
        const size_t index = phys[i] / kRootChunkSize;
        const int fd = gpu.root_fd[index];
        // A hole punched in a memfd does not fail (as in root_chunk_free).
        fallocate(fd < 0 ? gpu.fd : fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(fd < 0 ? phys[i] : gpu.root_off[index]), static_cast<off_t>(kRootChunkSize));
    }
    gpu.backed -= count;
    return UVM_OK;
}

}  // namespace

// The sim has no driver handles: one holder's roots are roots as any.
uvm_status_t SimBackend::root_chunks_alloc_owned(uint32_t g, size_t count, uint64_t *phys) {
    return root_chunks_alloc(g, count, true, phys);
}

uvm_status_t SimBackend::root_chunks_offload(uint32_t g, const uint64_t *phys, size_t count) {
    return move_roots(*gpus_[g], phys, count, true);
}

uvm_status_t SimBackend::root_chunks_restore(uint32_t g, const uint64_t *phys, size_t count) {
    return move_roots(*gpus_[g], phys, count, false);
}

// Each root is a driver allocation of its own here: nothing to shrink.
uvm_status_t SimBackend::root_span_shrink(uint32_t, uint64_t, size_t, uint64_t *released, uint64_t *copied) {
    *released = *copied = 0;
    return UVM_OK;
}

}  // namespace uvm::sim
