"""The runtimes' allocator library (libuvm_torch_alloc.so, built from
integrations/torch/uvm_torch_alloc.c where cuda.h is found), shared by
uvm.torch, uvm.cupy and uvm.numba: one manager per process (CUDA backend),
so one set of clients and budgets covers every runtime in it.

Found in the package folder where a wheel bundled it, else through
UVM_TORCH_ALLOC_LIBRARY, else beside the libuvm.so the package loaded (the
build tree, or the lib/ of a `cmake --install` prefix).
"""
import ctypes
import os
import threading

from . import _capi
from .errors import Status, UvmError
from .manager import Manager

_lock = threading.Lock()
_lib = None
_manager = None


class Stat(ctypes.Structure):
    """uvm_runtime_stat_t: now, the most since the peaks were reset, and the
    totals added and taken away since the accumulated figures were."""
    _fields_ = [("current", ctypes.c_int64), ("peak", ctypes.c_int64), ("allocated", ctypes.c_int64),
                ("freed", ctypes.c_int64)]


class MemoryStats(ctypes.Structure):
    """uvm_runtime_memory_stats_t (integrations/torch/uvm_torch_alloc.c says
    what each figure is)."""
    _fields_ = [("allocations", Stat), ("allocated_bytes", Stat), ("requested_bytes", Stat),
                ("reserved_bytes", Stat), ("num_ooms", ctypes.c_uint64)]


def library_path():
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libuvm_torch_alloc.so")
    if os.path.exists(bundled):  # the wheel's, beside the libuvm.so it bundles
        return bundled
    named = os.environ.get("UVM_TORCH_ALLOC_LIBRARY")
    if named:
        return named
    core = _capi.lib()._name
    here = os.path.dirname(os.path.abspath(core)) if os.sep in core else ""
    for candidate in (os.path.join(here, "libuvm_torch_alloc.so"),):
        if os.path.exists(candidate):
            return candidate
    return "libuvm_torch_alloc.so"


def lib():
    """The allocator library, loaded once, its prototypes set. libuvm.so is
    loaded first (uvm._capi), so the library shares it: one copy of the
    manager's code and handles in the process."""
    global _lib
    with _lock:
        if _lib is None:
            _capi.lib()
            path = library_path()
            try:
                loaded = ctypes.CDLL(path)
            except OSError as e:
                raise OSError(f"the runtimes' allocator library was not found ({path}): build the "
                              "project where cuda.h is found, or set UVM_TORCH_ALLOC_LIBRARY") from e
            vp, i, sz, u64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64
            protos = {
                "uvm_runtime_manager": (vp, [ctypes.POINTER(ctypes.c_int)]),
                "uvm_runtime_set_client": (vp, [vp]),
                "uvm_torch_malloc": (vp, [ctypes.c_ssize_t, i, vp]),
                "uvm_torch_free": (None, [vp, sz, i, vp]),
                "uvm_torch_record_stream": (i, [vp, vp]),
                "uvm_torch_empty_cache": (u64, []),
                "uvm_cupy_malloc": (vp, [vp, sz, i]),
                "uvm_cupy_free": (None, [vp, vp, i]),
                "uvm_numba_malloc": (vp, [sz, i]),
                "uvm_numba_free": (None, [vp, i]),
                "uvm_runtime_oom_count": (u64, []),
                "uvm_runtime_last_status": (i, []),
                "uvm_runtime_oom_message": (sz, [ctypes.c_char_p, sz]),
                "uvm_runtime_memory_stats": (i, [i, ctypes.POINTER(MemoryStats)]),
                "uvm_runtime_reset_peak_stats": (None, [i]),
                "uvm_runtime_reset_accumulated_stats": (None, [i]),
                "uvm_runtime_sample_reserved": (None, [i]),
                "uvm_runtime_gpu_memory": (i, [i, ctypes.POINTER(u64), ctypes.POINTER(u64), ctypes.POINTER(u64)]),
                "uvm_runtime_last_new_peak": (i, []),
            }
            for name, (restype, argtypes) in protos.items():
                fn = getattr(loaded, name)
                fn.restype, fn.argtypes = restype, argtypes
            _lib = loaded
    return _lib


def manager():
    """The process's manager (a uvm.Manager that never destroys it)."""
    global _manager
    lib()
    with _lock:
        if _manager is None:
            status = ctypes.c_int(0)
            handle = _lib.uvm_runtime_manager(ctypes.byref(status))
            if not handle:
                raise UvmError("uvm_manager_create", status.value,
                               "the runtimes' manager (CUDA backend) could not be made")
            _manager = Manager.adopt(handle)
    return _manager


def address(name):
    """The address of one of the library's functions, for a runtime's hook."""
    return ctypes.cast(getattr(lib(), name), ctypes.c_void_p).value


def core_address(name):
    """The address of one of libuvm.so's own functions (uvm_status_string)."""
    return ctypes.cast(getattr(_capi.lib(), name), ctypes.c_void_p).value


def last_status():
    """Why this thread's last allocation through the allocator library
    returned what it did (a uvm.Status value; OK for a pointer or size 0)."""
    return int(lib().uvm_runtime_last_status())


def memory_stats(device):
    """The allocator library's figures for GPU `device` (a MemoryStats), the
    reserved bytes read now."""
    out = MemoryStats()
    lib().uvm_runtime_memory_stats(int(device), ctypes.byref(out))
    return out


def oom_message():
    """This thread's last out-of-memory report from the runtimes' manager ("" if none)."""
    needed = lib().uvm_runtime_oom_message(None, 0)
    if not needed:
        return ""
    buf = ctypes.create_string_buffer(needed + 4096)
    lib().uvm_runtime_oom_message(buf, len(buf))
    return buf.value.decode(errors="replace")


_clients = {}


def named_client(name, budget=None, gpu=0, sleepable=False):
    """The runtimes' client `name` (made on first use; later calls may set a
    new budget). sleepable: made with uvm_client_create_sleepable, so that
    it can sleep and wake (uvm.torch.sleep); a client is sleepable or not
    from its first use on: asking for a sleepable one under a name already
    made without raises ValueError, while a later call without `sleepable`
    gets the sleepable client as it is."""
    mgr = manager()
    with _lock:
        client = _clients.get(name)
        if client is None:
            client = mgr.client(name, sleepable=sleepable)
            _clients[name] = client
        elif sleepable and not client.sleepable:
            raise ValueError(f"the runtimes' client {name!r} was made not sleepable (its first use asked for no "
                             "sleepable=True) and cannot become sleepable: ask for sleepable=True where it is "
                             "first used")
    if budget is not None:
        client.set_budget(budget, gpu)
    return client


def sleepable_clients():
    """The runtimes' sleepable clients made so far, by name."""
    with _lock:
        return {name: c for name, c in _clients.items() if c.sleepable}


def set_client(client):
    """Charge this thread's allocations to `client` (None: the default); returns the handle it replaces."""
    handle = client.handle.value if client is not None else None
    return lib().uvm_runtime_set_client(handle)


__all__ = ["lib", "manager", "address", "oom_message", "named_client", "sleepable_clients", "set_client", "Status"]
