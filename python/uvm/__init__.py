"""uvm: Python bindings of the user-space unified memory manager (include/uvm/uvm.h).

    import uvm
    with uvm.Manager(backend="sim", gpus=2, vidmem="256MiB") as mgr:
        with mgr.client("kv-cache", budget="64MiB") as kv:
            with mgr.alloc("6MiB", backing="vidmem", gpu=0, flags=uvm.MEM_GPU_MAPPED, client=kv) as m:
                print(m.info().gpu_kernel_address)
        server = uvm.serve_metrics(mgr, 9400)      # Prometheus scrapes /metrics

Every failed C call raises uvm.UvmError (.status, .name, .text).

ctypes over the shared library (no compiled part: the package installs and
runs wherever libuvm.so does). The library: the one a wheel bundles, else
UVM_LIBRARY, else beside the package, else the loader's search (see uvm._capi). Submodules: uvm.lab (the
page-size lab); the runtime integrations (uvm.torch, uvm.cupy, uvm.numba)
come beside them.
"""
from ._capi import (  # noqa: F401  constants of the C API, under their C names less the prefix
    ADVISE_SET_ACCESSED_BY, ADVISE_SET_PREFERRED_LOCATION, ADVISE_SET_READ_MOSTLY, ADVISE_UNSET_ACCESSED_BY,
    ADVISE_UNSET_PREFERRED_LOCATION, ADVISE_UNSET_READ_MOSTLY, APERTURE_PEER, APERTURE_SYS, APERTURE_VID,
    BACKEND_AUTO, BACKEND_CUDA, BACKEND_SIM, BACKING_MANAGED, BACKING_SYSMEM, BACKING_VIDMEM, CHUNK_SIZE_COUNT,
    CLIENT_SYSMEM, COMPACT_RELEASE, COMPACT_WAIT, MAX_GPUS, MAX_NUMA_NODES, MEM_DISCARDABLE, MEM_EVICTABLE, MEM_GPU_MAPPED, MEM_USER_MAPPABLE,
    MEM_ZERO, PAGE_SIZE_2M, PAGE_SIZE_4K, PAGE_SIZE_64K, PLACEMENT_ANY, PLACEMENT_GPU_LOCAL, PLACEMENT_INTERLEAVE,
    PLACEMENT_NODE, PROCESSOR_CPU, SLEEP_DEFAULT, SLEEP_DISCARD, SLEEP_HOST_KEEP, SLEEP_HOST_RELEASE, SLEEP_KEEP,
    STREAM_LEGACY, STREAM_PER_THREAD,
    VERSION_MAJOR, VERSION_MINOR, Placement)
from .errors import Status, UvmError  # noqa: F401
from .manager import Client, Manager, Mem, MetricsServer, Stream, leak_report, parse_size, serve_metrics  # noqa: F401

__version__ = f"{VERSION_MAJOR}.{VERSION_MINOR}.0"


def status_string(status):
    """uvm_status_string: the library's text for a status."""
    from ._capi import lib
    return lib().uvm_status_string(int(status)).decode()
