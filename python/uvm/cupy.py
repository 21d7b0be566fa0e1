"""uvm.cupy: CuPy's device memory from the library, in one line.

    import uvm.cupy
    uvm.cupy.enable()

Allocations go through cupy.cuda.memory.CFunctionAllocator over the C
symbols of the runtimes' allocator (integrations/torch/uvm_torch_alloc.c),
on the same manager, clients and budgets as uvm.torch and uvm.numba. CuPy's
allocator interface gives no stream and no size at free: memory is
allocated and freed in order on the legacy default stream, which CuPy's
default (blocking) streams synchronise with; memory used on a non-blocking
stream of your own must be synchronised before the array is freed, as with
cudaFreeAsync on stream 0. An allocation the library refuses raises
cupy.cuda.memory.OutOfMemoryError with the library's OOM report appended.
"""
from . import _runtime

_allocator = None


def enable(check_oom=True):
    """cupy.cuda.set_allocator to the library's. check_oom=False hands the
    CFunctionAllocator to CuPy directly (one Python call less per
    allocation; an out-of-memory then gives CuPy a NULL pointer)."""
    global _allocator
    import cupy
    lib = _runtime.lib()
    _runtime.manager()
    cfa = cupy.cuda.memory.CFunctionAllocator(0, _runtime.address("uvm_cupy_malloc"), _runtime.address("uvm_cupy_free"),
                                              lib)

    def malloc(size):
        mem = cfa.malloc(size)
        if size and not mem.ptr:
            device = cupy.cuda.Device().id
            total = _runtime.manager().gpu_info(device).memory_total
            error = cupy.cuda.memory.OutOfMemoryError(size, total)
            error.args = (f"{error}\n{_runtime.oom_message()}",)
            raise error
        return mem

    _allocator = malloc if check_oom else cfa.malloc
    cupy.cuda.set_allocator(_allocator)
    return _allocator


def manager():
    """The process's uvm.Manager (shared with uvm.torch and uvm.numba)."""
    return _runtime.manager()
