"""uvm: Python bindings of the user-space unified memory manager (include/uvm/uvm.h).

    import uvm
    with uvm.Manager(backend="sim", gpus=2, vidmem="256MiB") as mgr:
        with mgr.client("kv-cache", budget="64MiB") as kv:
            with mgr.alloc("6MiB", backing="vidmem", gpu=0, flags=uvm.MEM_GPU_MAPPED, client=kv) as m:
                print(m.info().gpu_kernel_address)
        server = uvm.serve_metrics(mgr, 9400)      # Prometheus scrapes /metrics

Every failed C call raises uvm.UvmError: .status (a uvm.Status), .name,
.text, and .message, the library's words for why (uvm_last_error_message).
Enums and flag sets are IntEnum and IntFlag (uvm.Backing, uvm.PageSize,
uvm.MemFlag, ...); the query calls return records (uvm.GpuInfo, uvm.MemInfo,
...) with per-GPU lists as long as the manager has GPUs. Sizes are ints
(numpy's too) or strings ("20GiB"); a value too big for its C type raises
ValueError naming the argument. Typed (PEP 561: py.typed).

ctypes over the shared library (no compiled part: the package installs and
runs wherever libuvm.so does). The library: the one a wheel bundles, else
UVM_LIBRARY, else beside the package, else the loader's search (see uvm._capi). Submodules: uvm.lab (the
page-size lab); the runtime integrations (uvm.torch, uvm.cupy, uvm.numba)
come beside them.
"""
from ._capi import (  # noqa: F401  constants of the C API, under their C names less the prefix
    CHUNK_SIZE_COUNT, CLIENT_SYSMEM, COMPACT_RELEASE, COMPACT_WAIT, MAX_GPUS, MAX_NUMA_NODES,
    PROCESSOR_CPU, STREAM_LEGACY, STREAM_PER_THREAD, VERSION_MAJOR, VERSION_MINOR, Placement)
from .enums import Advice, Aperture, Backend, Backing, MemFlag, PageSize, PlacementKind, SleepHost, SleepMode, View  # noqa: F401
from .errors import Status, UvmError, last_error_message  # noqa: F401
from .info import (  # noqa: F401
    ClientInfo, GpuInfo, GpuPhysAddress, GpuStats, HostInfo, HostPages, ManagerStats, MemInfo, NumaNodeInfo,
    PageTreeInfo, PressureEvent, Residency, TraceInfo)
from .manager import Client, Manager, Mem, MetricsServer, Stream, leak_report, parse_size, serve_metrics  # noqa: F401

# The C names of the enums' members (uvm.BACKING_VIDMEM is uvm.Backing.VIDMEM).
BACKEND_AUTO, BACKEND_SIM, BACKEND_CUDA = Backend.AUTO, Backend.SIM, Backend.CUDA
BACKING_SYSMEM, BACKING_VIDMEM, BACKING_MANAGED = Backing.SYSMEM, Backing.VIDMEM, Backing.MANAGED
PAGE_SIZE_4K, PAGE_SIZE_64K, PAGE_SIZE_2M = PageSize.SIZE_4K, PageSize.SIZE_64K, PageSize.SIZE_2M
MEM_ZERO, MEM_EVICTABLE, MEM_USER_MAPPABLE = MemFlag.ZERO, MemFlag.EVICTABLE, MemFlag.USER_MAPPABLE
MEM_GPU_MAPPED, MEM_DISCARDABLE = MemFlag.GPU_MAPPED, MemFlag.DISCARDABLE
PLACEMENT_GPU_LOCAL, PLACEMENT_NODE = PlacementKind.GPU_LOCAL, PlacementKind.NODE
PLACEMENT_INTERLEAVE, PLACEMENT_ANY = PlacementKind.INTERLEAVE, PlacementKind.ANY
SLEEP_DEFAULT, SLEEP_KEEP, SLEEP_DISCARD = SleepMode.DEFAULT, SleepMode.KEEP, SleepMode.DISCARD
SLEEP_HOST_KEEP, SLEEP_HOST_RELEASE = SleepHost.KEEP, SleepHost.RELEASE
APERTURE_VID, APERTURE_PEER, APERTURE_SYS = Aperture.VID, Aperture.PEER, Aperture.SYS
(ADVISE_SET_READ_MOSTLY, ADVISE_UNSET_READ_MOSTLY, ADVISE_SET_PREFERRED_LOCATION, ADVISE_UNSET_PREFERRED_LOCATION,
 ADVISE_SET_ACCESSED_BY, ADVISE_UNSET_ACCESSED_BY) = tuple(Advice)

__version__ = f"{VERSION_MAJOR}.{VERSION_MINOR}.0"


def status_string(status: int) -> str:
    """uvm_status_string: the library's text for a status."""
    from ._capi import lib
    return lib().uvm_status_string(int(status)).decode()
