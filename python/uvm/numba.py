"""uvm.numba: a Numba External Memory Management (EMM) plugin over the
library, on the same manager as uvm.torch and uvm.cupy.

    import uvm.numba
    uvm.numba.enable()        # before Numba makes its CUDA context
    # or: NUMBA_CUDA_MEMORY_MANAGER=uvm.numba

Device memory (cuda.device_array, to_device, ...) is allocated by the
library, in order on the legacy default stream (Numba's EMM interface names
no stream); Numba defers its frees and makes them at its own sync points.
Host (pinned, mapped) memory stays Numba's own (HostOnlyCUDAMemoryManager).
IPC handles of this memory are not supported.
"""
import ctypes
import functools
import inspect

from . import _runtime

from numba import cuda as _cuda  # noqa: E402  (the plugin needs numba)
from numba.cuda.cudadrv import driver as _driver  # noqa: E402


def _device_pointer(ptr):
    binding = getattr(_driver, "binding", None)
    if binding is not None and hasattr(binding, "CUdeviceptr") and getattr(_driver, "USE_NV_BINDING", True):
        return binding.CUdeviceptr(ptr)
    return ctypes.c_uint64(ptr)


_TAKES_CONTEXT = "context" in inspect.signature(_driver.MemoryPointer.__init__).parameters


class UvmNumbaMemoryManager(_cuda.HostOnlyCUDAMemoryManager):
    """The EMM plugin: memalloc from the library; host memory Numba's."""

    def initialize(self):
        _runtime.manager()

    def memalloc(self, size):
        device = self.context.device.id
        lib = _runtime.lib()
        ptr = lib.uvm_numba_malloc(size, device) if size else 0
        if size and not ptr:
            raise _driver.CudaAPIError(2, "out of memory (uvm): " + str(size) + " bytes on GPU " + str(device) + "\n" +
                                       _runtime.oom_message())
        finalizer = functools.partial(lib.uvm_numba_free, ptr, device)
        if _TAKES_CONTEXT:
            return _driver.MemoryPointer(self.context, _device_pointer(ptr or 0), size, finalizer=finalizer)
        return _driver.MemoryPointer(_device_pointer(ptr or 0), size, finalizer=finalizer)

    def get_memory_info(self):
        info = _runtime.manager().gpu_info(self.context.device.id)
        return _driver.MemoryInfo(free=info.memory_free, total=info.memory_total)

    def get_ipc_handle(self, memory):
        raise NotImplementedError("uvm.numba: IPC handles of library memory are not supported")

    @property
    def interface_version(self):
        return 1


# NUMBA_CUDA_MEMORY_MANAGER=uvm.numba looks for this name.
_numba_memory_manager = UvmNumbaMemoryManager


def enable():
    """numba.cuda.set_memory_manager(UvmNumbaMemoryManager)."""
    _cuda.set_memory_manager(UvmNumbaMemoryManager)
    return UvmNumbaMemoryManager
