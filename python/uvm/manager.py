"""Python objects over the C API: a Manager owns GPUs, objects (Mem), streams,
clients and metrics servers; each method is one C call, checked.

Lifetimes are the C API's: an object lives until .free() (or the end of its
`with` block), a client until .destroy(), a stream until .destroy(); what is
left when the manager closes is freed by uvm_manager_destroy, which reports
the objects as leaks (UvmError LEAKED_OBJECTS from Manager.close()). Nothing
is freed by the garbage collector: a handle dropped in Python is still alive
in the manager, as a pointer dropped in C would be.

Thread safety is the C API's too: calls may come from any thread, except
Manager.close(), which must be the last.
"""
from __future__ import annotations

import ctypes
import json
import operator
import re
import types
from typing import Any, Dict, List, Mapping, Optional, Sequence, SupportsIndex, Tuple, Union

from . import _capi
from ctypes import c_void_p

from ._capi import byref, c_char_p, c_i32, c_int, c_size, c_u8, c_u16, c_u32, c_u64, fit
from .enums import Aperture, Backend, Backing, SleepHost, SleepMode, View
from .errors import Status, UvmError, check, fail
from .info import (ClientInfo, GpuInfo, GpuPhysAddress, GpuStats, HostInfo, HostPages, ManagerStats, MemInfo,
                   NumaNodeInfo, PageTreeInfo, PressureEvent, Residency, TraceInfo, values)

# A byte count: an int (numpy's too) or a string such as "20GiB".
Size = Union[int, str, SupportsIndex]
# An integer of the C API, or a member of uvm.enums.
Int = Union[int, SupportsIndex]

_BACKENDS = {"auto": Backend.AUTO, "sim": Backend.SIM, "cuda": Backend.CUDA}
_BACKINGS = {"sysmem": Backing.SYSMEM, "vidmem": Backing.VIDMEM, "managed": Backing.MANAGED}
_VIEWS = {"kernel": View.KERNEL, "user": View.USER, "physical": View.PHYSICAL}
_SPACES = {"kernel": _capi.VA_SPACE_KERNEL, "user": _capi.VA_SPACE_USER}
_TRACE_FORMATS = {"json": _capi.TRACE_CHROME_JSON, "svg": _capi.TRACE_SVG}
_SLEEP_MODES = {"default": SleepMode.DEFAULT, "keep": SleepMode.KEEP, "discard": SleepMode.DISCARD}
_SLEEP_HOST = {"keep": SleepHost.KEEP, "release": SleepHost.RELEASE}
_PATHS = ("UNKNOWN", "SELF", "PIX", "PXB", "PHB", "NODE", "SYS")
_THP = ("unknown", "never", "madvise", "always")
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 10 ** 3, "KIB": 1 << 10, "M": 1 << 20, "MB": 10 ** 6, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 10 ** 9, "GIB": 1 << 30, "T": 1 << 40, "TB": 10 ** 12, "TIB": 1 << 40}


def parse_size(size: Size) -> int:
    """Bytes from an integer (a Python or numpy one) or a string such as
    "20GiB", "512 MiB", "1.5G" (K/M/G/T alone are binary; KB/MB/GB/TB
    decimal). ValueError for anything else. Whether it fits the C call's
    uint64_t is checked where it is passed."""
    if isinstance(size, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", size)
        if m and m.group(2).upper() in _UNITS:
            return int(float(m.group(1)) * _UNITS[m.group(2).upper()])
        raise ValueError(f"not a size: {size!r}")
    if isinstance(size, bool):
        raise ValueError(f"not a size: {size!r}")
    try:
        n = operator.index(size)
    except TypeError:
        raise ValueError(f"not a size: {size!r}") from None
    if n < 0:
        raise ValueError(f"negative size: {n}")
    return n


def _size(size: Size, what: str) -> int:
    """parse_size, as a uint64_t argument named `what`."""
    return fit(parse_size(size), c_u64, what)


def _u32(value: Int, what: str) -> int:
    return fit(value, c_u32, what)


def _u64(value: Int, what: str) -> int:
    return fit(value, c_u64, what)


def _enum(table: Mapping[str, int], value: Union[str, Int], what: str) -> int:
    if isinstance(value, str):
        try:
            return table[value.lower()]
        except KeyError:
            raise ValueError(f"unknown {what} {value!r} (one of {', '.join(table)})") from None
    return fit(value, c_int, what)


def _text(call: str, fn: Any, *args: Any) -> str:
    """A call of the report family: ask the size, then fill a buffer (asking
    again with room to spare where the text grew in between, as a running
    trace does)."""
    needed = c_size(0)
    status = fn(*args, None, 0, byref(needed))
    if status == Status.OK:  # nothing to write is still a NUL
        return ""
    check(call, status if status != Status.BUFFER_TOO_SMALL else Status.OK)
    for _ in range(8):
        size = needed.value + needed.value // 4 + 64
        buf = ctypes.create_string_buffer(size)
        status = fn(*args, buf, size, byref(needed))
        if status != Status.BUFFER_TOO_SMALL:
            check(call, status)
            return buf.value.decode()
    raise UvmError(call, Status.BUFFER_TOO_SMALL, "the text kept growing faster than it was read")


def leak_report(json_format: bool = False) -> Any:
    """The report of the objects the calling thread's last Manager.close()
    found alive (uvm_leak_report): text, or a dict. UvmError NOT_FOUND where
    there was none."""
    text = _text("uvm_leak_report", _capi.lib().uvm_leak_report,
                 _capi.REPORT_JSON if json_format else _capi.REPORT_TEXT)
    return json.loads(text) if json_format else text


class Manager:
    """uvm_manager_t. Manager(backend="sim", gpus=2, vidmem="64MiB") makes
    simulated GPUs; backend "auto" (the default) takes CUDA where a GPU and
    a driver are found, and the environment's UVM_BACKEND wins over it.

    Sim options (ignored on CUDA): gpus, vidmem (per GPU, a multiple of
    2 MiB), page_sizes (a uvm.PageSize mask), peers (False: no GPU reaches
    another's vidmem; or a list of row masks), cpu_coherent, numa_nodes,
    gpu_numa_node (a list)."""

    _handle: Optional[c_void_p]

    def __init__(self, backend: Union[str, Int] = "auto", gpus: Int = 0, vidmem: Size = 0, page_sizes: Int = 0,
                 peers: Union[bool, Sequence[Int]] = True, cpu_coherent: bool = False, numa_nodes: Int = 0,
                 gpu_numa_node: Optional[Sequence[Int]] = None) -> None:
        self._lib = _capi.lib()
        self._handle = None
        self._borrowed = False
        self._clients: Dict[int, Client] = {}  # handle value -> Client, to name the client of a pressure event
        p = _capi.ManagerParams()
        p.backend = _enum(_BACKENDS, backend, "backend")
        p.sim.gpu_count = _u32(gpus, "gpus")
        p.sim.vidmem_size = _size(vidmem, "vidmem")
        p.sim.page_sizes = _u64(page_sizes, "page_sizes")
        if peers is False:
            p.sim.no_peers = 1
        elif peers is not True:
            rows = list(peers)
            if len(rows) > _capi.MAX_GPUS:
                raise ValueError(f"peers has {len(rows)} rows: at most {_capi.MAX_GPUS} (uvm.MAX_GPUS)")
            for i, row in enumerate(rows):
                p.sim.peer_rows[i] = _u32(row, f"peers[{i}]")
        p.sim.cpu_coherent = int(bool(cpu_coherent))
        p.sim.numa_nodes = _u32(numa_nodes, "numa_nodes")
        nodes = list(gpu_numa_node or [])
        if len(nodes) > _capi.MAX_GPUS:
            raise ValueError(f"gpu_numa_node has {len(nodes)} entries: at most {_capi.MAX_GPUS} (uvm.MAX_GPUS)")
        for i, node in enumerate(nodes):
            p.sim.gpu_numa_node[i] = fit(node, c_i32, f"gpu_numa_node[{i}]")
        handle = c_void_p()
        check("uvm_manager_create", self._lib.uvm_manager_create(byref(p), byref(handle)))
        self._handle = handle

    @classmethod
    def adopt(cls, handle: Union[int, c_void_p]) -> Manager:
        """A Manager over a uvm_manager_t * made elsewhere (an int or
        c_void_p; the runtimes' allocator's, uvm.torch): its calls work as
        on any manager, and close() forgets it without destroying it."""
        self = cls.__new__(cls)
        self._lib = _capi.lib()
        self._clients = {}
        self._borrowed = True
        self._handle = c_void_p(handle.value if isinstance(handle, c_void_p) else handle)
        return self

    def __repr__(self) -> str:
        if self._handle is None:
            return "<uvm.Manager (closed)>"
        return f"<uvm.Manager {self.backend}, {self.gpu_count} GPUs>"

    # -- lifetime ---------------------------------------------------------
    def close(self) -> None:
        """uvm_manager_destroy: frees what is left (UvmError LEAKED_OBJECTS,
        with the leak report as .detail, where objects were left; the manager
        is gone either way). A second close does nothing."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        if self._borrowed:
            return  # its owner destroys it
        status = self._lib.uvm_manager_destroy(handle)
        if status == Status.LEAKED_OBJECTS:
            fail("uvm_manager_destroy", status, leak_report)
        check("uvm_manager_destroy", status)

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self) -> Manager:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:  # the exception in flight says more than a leak would
            try:
                self.close()
            except UvmError:
                pass

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            try:
                self.close()
            except UvmError:
                pass

    @property
    def handle(self) -> c_void_p:
        """The uvm_manager_t * (a ctypes.c_void_p), for other bindings."""
        if self._handle is None:
            raise UvmError("(closed manager)", Status.INVALID_HANDLE, "the manager was closed")
        return self._handle

    def _call(self, name: str, *args: Any, detail: str = "") -> None:
        check(name, getattr(self._lib, name)(self.handle, *args), detail)

    # -- the manager and its GPUs ------------------------------------------
    @property
    def backend(self) -> str:
        """"sim" or "cuda"."""
        out = c_int()
        self._call("uvm_manager_backend", byref(out))
        return Backend(out.value).name.lower()

    @property
    def gpu_count(self) -> int:
        out = c_u32()
        self._call("uvm_gpu_count", byref(out))
        return out.value

    def gpu_info(self, gpu: Int) -> GpuInfo:
        """uvm_gpu_info: name, memory_total, memory_free, page_sizes (a
        uvm.PageSize mask), peer_mask, cpu_coherent, granularity,
        host_numa_id, pci_bus_id, cpus, uuid (a uuid.UUID)."""
        out = _capi.GpuInfo()
        self._call("uvm_gpu_info", _u32(gpu, "gpu"), byref(out))
        return GpuInfo.of(out)

    def gpu_trim(self, gpu: Int) -> int:
        """Give fully free root chunks back to the backend; the bytes given back."""
        out = c_u64()
        self._call("uvm_gpu_trim", _u32(gpu, "gpu"), byref(out))
        return out.value

    def gpu_compact(self, gpu: Int, wait: bool = False, release: bool = False) -> Any:
        """Move live vidmem objects of `gpu` behind their addresses so that
        free memory comes together in whole root chunks (uvm_gpu_compact:
        what moves, what pins an object and what the caller must have
        finished is in uvm_pressure.h). `wait`: synchronize the streams whose
        tracked work uses them first; `release`: give the emptied roots back
        to the driver. What moved and what was given back, as uvm_compact_result_t's
        fields (objects_moved, bytes_moved, objects_pinned, ..., bytes_released)."""
        out = _capi.CompactResult()
        flags = (_capi.COMPACT_WAIT if wait else 0) | (_capi.COMPACT_RELEASE if release else 0)
        self._call("uvm_gpu_compact", _u32(gpu, "gpu"), flags, byref(out))
        return types.SimpleNamespace(**{name: int(getattr(out, name)) for name, _ in out._fields_})

    def set_compact_on_oom(self, gpu: Int, on: bool) -> None:
        """Whether an allocation that finds `gpu`'s free memory in pieces
        compacts before it evicts or fails (off by default: only where all
        GPU work on its objects is tracked or finished when it allocates)."""
        self._call("uvm_gpu_set_compact_on_oom", _u32(gpu, "gpu"), int(bool(on)))

    def set_release_threshold(self, gpu: Int, nbytes: Size) -> None:
        """Keep at most `nbytes` of whole free root chunks cached on `gpu`
        (uvm_gpu_set_release_threshold); 0 gives idle memory back at once."""
        self._call("uvm_gpu_set_release_threshold", _u32(gpu, "gpu"), _size(nbytes, "nbytes"))

    def set_growth_slack(self, gpu: Int, nbytes: Optional[Size]) -> None:
        """Hold up to `nbytes` more than the peak need before a growth on `gpu`
        gives free memory that cannot serve it back (uvm_gpu_set_growth_slack):
        0 holds the least, "inf" (or None) never gives it back; 256 MiB by default."""
        n = (1 << 64) - 1 if nbytes is None or nbytes == "inf" else _size(nbytes, "nbytes")
        self._call("uvm_gpu_set_growth_slack", _u32(gpu, "gpu"), n)

    def host_info(self) -> HostInfo:
        """uvm_host_info: numa_node_count, from_hwloc, thp and shmem_thp ("never", "madvise", ...)."""
        out = _capi.HostInfo()
        self._call("uvm_host_info", byref(out))
        return HostInfo(numa_node_count=out.numa_node_count, from_hwloc=bool(out.from_hwloc),
                        thp=_THP[out.thp], shmem_thp=_THP[out.shmem_thp])

    def numa_node_info(self, index: Int) -> NumaNodeInfo:
        """uvm_numa_node_info: node `index` (< host_info().numa_node_count) of the manager's topology."""
        out = _capi.NumaNodeInfo()
        self._call("uvm_numa_node_info", _u32(index, "index"), byref(out))
        return NumaNodeInfo(**values(out))

    def numa_nodes(self) -> List[NumaNodeInfo]:
        """Every node of the manager's topology, in ascending id."""
        return [self.numa_node_info(i) for i in range(self.host_info().numa_node_count)]

    def gpu_path(self, a: Int, b: Int) -> str:
        """The PCI path between two GPUs, as nvidia-smi topo -m names it ("SELF", "PHB", ...)."""
        out = c_int()
        self._call("uvm_gpu_path", _u32(a, "a"), _u32(b, "b"), byref(out))
        return _PATHS[out.value]

    def enable_peer_access(self, gpu: Int, owner: Int) -> None:
        """uvm_gpu_enable_peer_access: GPU `gpu` reaches all of GPU `owner`'s
        memory, made before and after, at the owner's addresses. Once per
        pair; again does nothing. UvmError NO_PEER_ACCESS without a link."""
        self._call("uvm_gpu_enable_peer_access", _u32(gpu, "gpu"), _u32(owner, "owner"))

    def set_sleep_host_limit(self, limit: Size) -> None:
        """uvm_manager_set_sleep_host_limit: the most pinned host memory every
        sleepable client's backup may hold together, in bytes or as "64GiB"
        (0: no limit). A sleep or a reserve that would pass it raises
        UvmError HOST_LIMIT and changes nothing; a limit below what is held
        takes nothing back. stats().sleep_host_bytes is what they hold."""
        self._call("uvm_manager_set_sleep_host_limit", _size(limit, "limit"))

    def set_eviction_policy(self, disabled: bool = False, sysmem_limit: Size = 0) -> None:
        p = _capi.EvictionPolicy(int(bool(disabled)), _size(sysmem_limit, "sysmem_limit"))
        self._call("uvm_manager_set_eviction_policy", byref(p))

    # -- objects ----------------------------------------------------------
    def alloc(self, size: Size, backing: Union[str, Int] = "sysmem", gpu: Int = 0, flags: Int = 0,
              chunk_size: Size = 0, client: Optional[Client] = None, tag: Optional[str] = None,
              placement: Optional[_capi.Placement] = None, stream: Optional[Stream] = None) -> Optional[Mem]:
        """uvm_mem_alloc (uvm_mem_alloc_async with `stream`): a Mem.

        backing: "sysmem", "vidmem", "managed" (or a uvm.Backing); flags: a
        uvm.MemFlag set; client: a Client (None: the default client); tag: a
        label for reports; placement: a uvm.Placement for sysmem. OUT_OF_MEMORY
        carries this thread's OOM report as .detail. Size 0 gives None (no
        object), as the C call gives a NULL handle."""
        p = self._alloc_params(size, backing, gpu, flags, chunk_size, client, tag, placement)
        handle = c_void_p()
        if stream is None:
            status = self._lib.uvm_mem_alloc(self.handle, byref(p), byref(handle))
        else:
            status = self._lib.uvm_mem_alloc_async(self.handle, byref(p), stream._handle_of(self), byref(handle))
        call = "uvm_mem_alloc" if stream is None else "uvm_mem_alloc_async"
        check(call, status, lambda: self._oom_detail() if status == Status.OUT_OF_MEMORY else "")
        return Mem(self, handle, tag) if handle.value else None

    def alloc_gpu(self, size: Size, backing: Union[str, Int] = "vidmem", gpu: Int = 0, flags: Int = 0,
                  chunk_size: Size = 0, client: Optional[Client] = None, tag: Optional[str] = None,
                  placement: Optional[_capi.Placement] = None,
                  stream: Optional[Stream] = None) -> Tuple[Optional[Mem], int]:
        """uvm_mem_alloc_gpu: (Mem, its kernel address on `gpu`) in one call
        (MEM_GPU_MAPPED implied; on `stream` when given). Size 0: (None, 0)."""
        p = self._alloc_params(size, backing, gpu, flags, chunk_size, client, tag, placement)
        handle, address = c_void_p(), c_u64()
        status = self._lib.uvm_mem_alloc_gpu(self.handle, byref(p), stream._handle_of(self) if stream else None,
                                             byref(handle), byref(address))
        check("uvm_mem_alloc_gpu", status, lambda: self._oom_detail() if status == Status.OUT_OF_MEMORY else "")
        return (Mem(self, handle, tag) if handle.value else None), address.value

    def lookup_gpu_kernel(self, address: Int, gpu: Int = 0) -> Optional[Tuple[Mem, int]]:
        """uvm_mem_lookup_gpu_kernel: (Mem, offset) of the object whose kernel
        mapping on `gpu` holds `address`; None where none does. The Mem is a
        new wrapper of the object's handle."""
        handle, offset = c_void_p(), c_u64()
        status = self._lib.uvm_mem_lookup_gpu_kernel(self.handle, _u32(gpu, "gpu"), _u64(address, "address"),
                                                     byref(handle), byref(offset))
        if status == Status.NOT_FOUND:
            return None
        check("uvm_mem_lookup_gpu_kernel", status)
        return Mem(self, handle, None), offset.value

    def _alloc_params(self, size: Size, backing: Union[str, Int], gpu: Int, flags: Int, chunk_size: Size,
                      client: Optional[Client], tag: Optional[str],
                      placement: Optional[_capi.Placement]) -> _capi.MemAllocParams:
        p = _capi.MemAllocParams()
        p.size = _size(size, "size")
        p.backing = _enum(_BACKINGS, backing, "backing")
        p.gpu = _u32(gpu, "gpu")
        p.chunk_size = _size(chunk_size, "chunk_size")
        p.flags = _u32(flags, "flags")
        if placement is not None:
            p.placement = placement
        p.client = client._handle_of(self) if client is not None else None
        p.tag = tag.encode() if tag is not None else None
        return p

    def _oom_detail(self) -> str:
        try:
            return self.oom_report()
        except UvmError:
            return ""

    def import_mem(self, sock: Any, client: Optional[Client] = None) -> Mem:
        """uvm_mem_import: receive an object another manager exported over
        `sock` (a connected AF_UNIX SOCK_SEQPACKET socket, or its fd)."""
        handle = c_void_p()
        fd = sock if isinstance(sock, int) else sock.fileno()
        self._call("uvm_mem_import", fit(fd, c_int, "sock"), client._handle_of(self) if client is not None else None,
                   byref(handle))
        return Mem(self, handle, None)

    def user_range_reserve(self, size: Size) -> int:
        """Reserve a user address range (a multiple of 2 MiB); its start."""
        out = c_u64()
        self._call("uvm_user_range_reserve", _size(size, "size"), byref(out))
        return out.value

    def user_range_release(self, address: Int) -> None:
        self._call("uvm_user_range_release", _u64(address, "address"))

    # -- copy engine ------------------------------------------------------
    def copy(self, dst: Any, src: Any, size: Size, gpu: Int = 0, stream: Optional[Stream] = None) -> None:
        """uvm_mem_copy (async on `stream`). dst and src: a Mem, or (Mem, offset)
        or (Mem, offset, view) with view "kernel", "user" or "physical" (or a uvm.View)."""
        d, s = _span(self, dst), _span(self, src)
        if stream is None:
            self._call("uvm_mem_copy", _u32(gpu, "gpu"), byref(d), byref(s), _size(size, "size"))
        else:
            self._call("uvm_mem_copy_async", _u32(gpu, "gpu"), byref(d), byref(s), _size(size, "size"),
                       stream._handle_of(self))

    def memset(self, dst: Any, value: Int, size: Size, gpu: Int = 0, stream: Optional[Stream] = None) -> None:
        """uvm_mem_memset (async on `stream`) of the byte `value`; dst as for copy."""
        d = _span(self, dst)
        byte = fit(value, c_u8, "value")
        if stream is None:
            self._call("uvm_mem_memset", _u32(gpu, "gpu"), byref(d), byte, _size(size, "size"))
        else:
            self._call("uvm_mem_memset_async", _u32(gpu, "gpu"), byref(d), byte, _size(size, "size"),
                       stream._handle_of(self))

    # -- streams and clients ----------------------------------------------
    def stream(self, gpu: Int = 0, native: Optional[int] = None) -> Stream:
        """uvm_stream_create: a Stream of `gpu` (native: a CUstream to adopt, CUDA only;
        uvm.STREAM_LEGACY / uvm.STREAM_PER_THREAD: the runtime's default stream)."""
        handle = c_void_p()
        self._call("uvm_stream_create", _u32(gpu, "gpu"), native, byref(handle))
        return Stream(self, handle, int(gpu))

    def client(self, name: str, budget: Optional[Size] = None, gpu: Int = 0, sleepable: bool = False) -> Client:
        """uvm_client_create (sleepable: uvm_client_create_sleepable, a client
        that can Client.sleep() and wake()), and with `budget` its budget on
        `gpu`."""
        return Client(self, name, budget=budget, gpu=gpu, sleepable=sleepable)

    # -- pressure notices -------------------------------------------------
    def pressure_watermarks(self, percents: Sequence[Int], gpu: Int = 0, client: Optional[Client] = None) -> None:
        """Watermarks (percent) on `gpu`'s held memory, or on `client`'s budget
        there (gpu=uvm.CLIENT_SYSMEM: its sysmem budget). [] removes them."""
        marks = [_u32(p, f"percents[{i}]") for i, p in enumerate(percents)]
        array = (c_u32 * max(len(marks), 1))(*marks)
        self._call("uvm_pressure_watermarks", client._handle_of(self) if client is not None else None,
                   _u32(gpu, "gpu"), array, _u32(len(marks), "len(percents)"))

    def pressure_fd(self) -> int:
        """The eventfd readable while pressure events wait (the manager's; do not close it)."""
        out = c_int()
        self._call("uvm_pressure_fd", byref(out))
        return out.value

    def pressure_events(self, max_events: Int = 64) -> List[PressureEvent]:
        """Take the waiting events, oldest first: gpu, client (a Client of
        this manager, or None for the GPU's held memory), percent, rising
        (bool), used, limit."""
        n = _u32(max_events, "max_events")
        array = (_capi.PressureEvent * n)()
        count = c_u32()
        self._call("uvm_pressure_events", array, n, byref(count))
        return [PressureEvent(gpu=e.gpu, client=self._clients.get(e.client) if e.client else None,
                              percent=e.percent, rising=bool(e.rising), used=e.used, limit=e.limit)
                for e in array[:count.value]]

    # -- statistics, reports, metrics --------------------------------------
    def stats(self) -> ManagerStats:
        out = _capi.ManagerStats()
        self._call("uvm_manager_stats", byref(out))
        return ManagerStats(**values(out))

    def gpu_stats(self, gpu: Int) -> GpuStats:
        out = _capi.GpuStats()
        self._call("uvm_gpu_stats", _u32(gpu, "gpu"), byref(out))
        return GpuStats(**values(out))

    def page_tree_info(self, gpu: Int, space: Union[str, Int] = "kernel") -> PageTreeInfo:
        out = _capi.PageTreeInfo()
        self._call("uvm_gpu_page_tree_info", _u32(gpu, "gpu"), _enum(_SPACES, space, "address space"), byref(out))
        info = PageTreeInfo(**values(out))
        info.levels = info.levels[:out.level_count]
        return info

    def oom_report(self, json_format: bool = False) -> Any:
        """This thread's last OUT_OF_MEMORY report (text, or a dict); UvmError NOT_FOUND where none."""
        text = _text("uvm_oom_report", self._lib.uvm_oom_report, self.handle,
                     _capi.REPORT_JSON if json_format else _capi.REPORT_TEXT)
        return json.loads(text) if json_format else text

    def objects_report(self, json_format: bool = False) -> Any:
        """Every live object, largest first, with totals by client and tag (text, or a dict)."""
        text = _text("uvm_objects_report", self._lib.uvm_objects_report, self.handle,
                     _capi.REPORT_JSON if json_format else _capi.REPORT_TEXT)
        return json.loads(text) if json_format else text

    def snapshot(self) -> Dict[str, Any]:
        """uvm_manager_snapshot, parsed (a dict)."""
        return json.loads(_text("uvm_manager_snapshot", self._lib.uvm_manager_snapshot, self.handle))

    def metrics(self) -> str:
        """uvm_manager_metrics: the Prometheus text exposition format."""
        return _text("uvm_manager_metrics", self._lib.uvm_manager_metrics, self.handle)

    def serve_metrics(self, port: Int = 0, address: str = "127.0.0.1") -> MetricsServer:
        """uvm_metrics_serve: /metrics and /snapshot over HTTP from a thread of
        the library; a MetricsServer (.port is the port bound). UvmError
        ADDRESS_IN_USE where another socket (of this process or another)
        listens on the port; NOT_SUPPORTED in a build without cpp-httplib."""
        return MetricsServer(self, port, address)

    # -- trace ------------------------------------------------------------
    def trace_start(self, ring_bytes: Size = 0) -> None:
        self._call("uvm_trace_start", _size(ring_bytes, "ring_bytes"))

    def trace_stop(self) -> None:
        self._call("uvm_trace_stop")

    def trace_info(self) -> TraceInfo:
        out = _capi.TraceInfo()
        self._call("uvm_trace_info", byref(out))
        info = TraceInfo(**values(out))
        info.enabled = bool(out.enabled)
        return info

    def trace_export(self, format: str = "json") -> str:
        """The trace as Chrome Trace Event JSON ("json", a str) or an SVG ("svg")."""
        return _text("uvm_trace_export", self._lib.uvm_trace_export, self.handle,
                     _enum(_TRACE_FORMATS, format, "trace format"))


def _span(mgr: Manager, side: Any) -> _capi.MemSpan:
    if isinstance(side, Mem):
        side = (side,)
    mem, offset, view = (tuple(side) + (0, "kernel"))[:3]
    return _capi.MemSpan(mem._handle_of(mgr), _size(offset, "offset"), _enum(_VIEWS, view, "view"))


class _Owned:
    """A handle that belongs to one manager and dies before it."""
    _what = "handle"
    _mgr: Manager
    _handle: Optional[c_void_p]

    def _handle_of(self, mgr: Manager) -> c_void_p:
        if self._handle is None:
            raise UvmError(f"({self._what})", Status.INVALID_HANDLE, f"the {self._what} was already released")
        if mgr is not self._mgr:
            raise UvmError(f"({self._what})", Status.INVALID_HANDLE, f"the {self._what} belongs to another manager")
        return self._handle

    @property
    def handle(self) -> c_void_p:
        """The C handle (a ctypes.c_void_p), for other bindings."""
        return self._handle_of(self._mgr)

    def _call(self, name: str, *args: Any) -> None:
        self._mgr._call(name, self.handle, *args)


class Mem(_Owned):
    """uvm_mem_t: one memory object. `with mgr.alloc(...) as m:` frees it at the end."""
    _what = "object"

    def __init__(self, mgr: Manager, handle: c_void_p, tag: Optional[str]) -> None:
        self._mgr, self._handle, self.tag = mgr, handle, tag

    def __enter__(self) -> Mem:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None and not self._mgr.closed:
            self.free()

    def __repr__(self) -> str:
        if self._handle is None or self._mgr.closed:
            return "<uvm.Mem (freed)>"
        i = self.info()
        return f"<uvm.Mem {i.size} bytes of {i.backing_name} on GPU {i.gpu}, {i.chunk_size >> 10}K chunks>"

    @property
    def manager(self) -> Manager:
        return self._mgr

    def free(self, stream: Optional[Stream] = None) -> None:
        """uvm_mem_free (uvm_mem_free_async on `stream`). The handle is dead after."""
        if stream is None:
            self._call("uvm_mem_free")
        else:
            self._call("uvm_mem_free_async", stream._handle_of(self._mgr))
        self._handle = None

    def info(self) -> MemInfo:
        """uvm_mem_info: backing (a uvm.Backing), flags (a uvm.MemFlag set), ...,
        and backing_name ("sysmem", "vidmem", "managed")."""
        out = _capi.MemInfo()
        self._call("uvm_mem_info", byref(out))
        return MemInfo.of(out)

    @property
    def size(self) -> int:
        return self.info().size

    # mappings
    def map_cpu_kernel(self) -> None:
        self._call("uvm_mem_map_cpu_kernel")

    def unmap_cpu_kernel(self) -> None:
        self._call("uvm_mem_unmap_cpu_kernel")

    def map_cpu_user(self, address: Optional[int]) -> None:
        self._call("uvm_mem_map_cpu_user", address)

    def unmap_cpu_user(self) -> None:
        self._call("uvm_mem_unmap_cpu_user")

    def map_gpu_phys(self, gpu: Int) -> None:
        self._call("uvm_mem_map_gpu_phys", _u32(gpu, "gpu"))

    def unmap_gpu_phys(self, gpu: Int) -> None:
        self._call("uvm_mem_unmap_gpu_phys", _u32(gpu, "gpu"))

    def map_gpu_kernel(self, gpu: Int) -> None:
        self._call("uvm_mem_map_gpu_kernel", _u32(gpu, "gpu"))

    def unmap_gpu_kernel(self, gpu: Int) -> None:
        self._call("uvm_mem_unmap_gpu_kernel", _u32(gpu, "gpu"))

    def map_gpu_user(self, gpu: Int, address: Int = 0) -> None:
        self._call("uvm_mem_map_gpu_user", _u32(gpu, "gpu"), _u64(address, "address"))

    def unmap_gpu_user(self, gpu: Int) -> None:
        self._call("uvm_mem_unmap_gpu_user", _u32(gpu, "gpu"))

    # addresses
    def cpu_kernel_address(self, offset: Int = 0) -> int:
        out = c_void_p()
        self._call("uvm_mem_cpu_kernel_address", _u64(offset, "offset"), byref(out))
        return out.value or 0

    def cpu_user_address(self, offset: Int = 0) -> int:
        out = c_void_p()
        self._call("uvm_mem_cpu_user_address", _u64(offset, "offset"), byref(out))
        return out.value or 0

    def gpu_phys_address(self, gpu: Int, offset: Int = 0, size: Size = 1) -> GpuPhysAddress:
        """address, aperture (a uvm.Aperture), peer_gpu, contiguous of [offset, offset+size) on `gpu`."""
        out = _capi.GpuPhysAddress()
        self._call("uvm_mem_gpu_phys_address", _u32(gpu, "gpu"), _u64(offset, "offset"), _size(size, "size"),
                   byref(out))
        return GpuPhysAddress(address=out.address, aperture=Aperture(out.aperture), peer_gpu=out.peer_gpu,
                              contiguous=bool(out.contiguous))

    def gpu_kernel_address(self, gpu: Int, offset: Int = 0) -> int:
        out = c_u64()
        self._call("uvm_mem_gpu_kernel_address", _u32(gpu, "gpu"), _u64(offset, "offset"), byref(out))
        return out.value

    def gpu_user_address(self, gpu: Int, offset: Int = 0) -> int:
        out = c_u64()
        self._call("uvm_mem_gpu_user_address", _u32(gpu, "gpu"), _u64(offset, "offset"), byref(out))
        return out.value

    # the bytes, through the CPU kernel mapping
    def read(self, offset: Int = 0, size: Optional[Size] = None) -> bytes:
        """The object's bytes through its CPU kernel mapping (map_cpu_kernel first;
        NOT_MAPPED otherwise)."""
        start = _u64(offset, "offset")
        n = self.info().size - start if size is None else parse_size(size)
        if n == 0:
            return b""
        return ctypes.string_at(self.cpu_kernel_address(start), n)

    def write(self, data: Any, offset: Int = 0) -> None:
        """Copy `data` (bytes-like) into the object through its CPU kernel mapping."""
        data = bytes(data)
        if not data:
            return
        start = _u64(offset, "offset")
        if start + len(data) > self.info().alloc_size:
            raise UvmError("(Mem.write)", Status.OUT_OF_RANGE, f"{len(data)} bytes at {start} overrun the object")
        ctypes.memmove(self.cpu_kernel_address(start), data, len(data))

    # streams
    def record_use(self, stream: Stream) -> None:
        self._call("uvm_mem_record_use", stream._handle_of(self._mgr))

    # managed memory
    def advise(self, advice: Int, processor: Int = 0) -> None:
        """uvm_mem_advise: a uvm.Advice for `processor` (a GPU, or uvm.PROCESSOR_CPU)."""
        self._call("uvm_mem_advise", fit(advice, c_int, "advice"), fit(processor, c_i32, "processor"))

    def prefetch(self, processor: Int, offset: Int = 0, size: Optional[Size] = None) -> None:
        start = _u64(offset, "offset")
        n = self.info().size - start if size is None else _size(size, "size")
        self._call("uvm_mem_prefetch", start, n, fit(processor, c_i32, "processor"))

    # residency
    def evict(self) -> None:
        self._call("uvm_mem_evict")

    def make_resident(self) -> None:
        self._call("uvm_mem_make_resident")

    def touch(self) -> None:
        self._call("uvm_mem_touch")

    def residency(self) -> Residency:
        """resident (bool), evictions, restores, discards."""
        out = _capi.Residency()
        self._call("uvm_mem_residency", byref(out))
        return Residency(resident=bool(out.resident), evictions=out.evictions, restores=out.restores,
                         discards=out.discards)

    # sleep and wake (Client.sleep)
    def set_sleep_mode(self, mode: Union[str, Int, None]) -> None:
        """uvm_mem_set_sleep_mode: what its client's sleep does with this
        object's bytes, whatever the sleep is asked: "keep" (uvm.SLEEP_KEEP),
        "discard" (uvm.SLEEP_DISCARD: back zeroed at the wake), or "default"
        / None (uvm.SLEEP_DEFAULT: as the sleep says)."""
        self._call("uvm_mem_set_sleep_mode", _enum(_SLEEP_MODES, "default" if mode is None else mode, "sleep mode"))

    # sharing
    def export(self, sock: Any) -> None:
        """uvm_mem_export over `sock` (a connected AF_UNIX SOCK_SEQPACKET socket, or its fd)."""
        self._call("uvm_mem_export", fit(sock if isinstance(sock, int) else sock.fileno(), c_int, "sock"))

    def host_pages(self) -> HostPages:
        """resident_bytes, huge_bytes, and node_bytes by node id (as many as the
        manager's topology has ids)."""
        out = _capi.HostPages()
        self._call("uvm_mem_host_pages", byref(out))
        ids = [n.id for n in self._mgr.numa_nodes()]
        return HostPages(resident_bytes=out.resident_bytes, huge_bytes=out.huge_bytes,
                         node_bytes=list(out.node_bytes[:max(ids) + 1 if ids else 0]))


class Stream(_Owned):
    """uvm_stream_t: an ordered queue of one GPU's work."""
    _what = "stream"

    def __init__(self, mgr: Manager, handle: c_void_p, gpu: int) -> None:
        self._mgr, self._handle, self.gpu = mgr, handle, gpu

    def __repr__(self) -> str:
        return f"<uvm.Stream of GPU {self.gpu}{' (destroyed)' if self._handle is None else ''}>"

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None and not self._mgr.closed:
            self.destroy()

    def destroy(self) -> None:
        """Wait for the stream's work, release what waited, forget it (BUSY on sim while work is held)."""
        self._call("uvm_stream_destroy")
        self._handle = None

    def synchronize(self) -> None:
        self._call("uvm_stream_synchronize")

    @property
    def native(self) -> Optional[int]:
        """The CUstream as an int (None on sim)."""
        out = c_void_p()
        self._call("uvm_stream_native", byref(out))
        return out.value

    def hold(self) -> None:
        """Sim only: queue work that stays in flight until release()."""
        self._call("uvm_sim_stream_hold")

    def release(self) -> None:
        """Sim only: let the oldest held work finish."""
        self._call("uvm_sim_stream_release")


class Client(_Owned):
    """uvm_client_t: a named owner of objects with budgets per GPU and for
    sysmem. One made sleepable (Manager.client(..., sleepable=True)) can
    give its GPU memory back with sleep() and take it again with wake(),
    every address it was given kept."""
    _what = "client"

    def __init__(self, mgr: Manager, name: str, budget: Optional[Size] = None, gpu: Int = 0,
                 sleepable: bool = False) -> None:
        handle = c_void_p()
        create = "uvm_client_create_sleepable" if sleepable else "uvm_client_create"
        mgr._call(create, name.encode(), byref(handle))
        self._mgr, self._handle, self.name, self.sleepable = mgr, handle, name, bool(sleepable)
        mgr._clients[handle.value or 0] = self
        if budget is not None:
            try:
                self.set_budget(budget, gpu)
            except (UvmError, ValueError, TypeError):
                self.destroy()  # a client made only in part is not left behind
                raise

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None and not self._mgr.closed:
            self.destroy()

    def __repr__(self) -> str:
        return f"<uvm.Client {self.name!r}>"

    def destroy(self) -> None:
        """uvm_client_destroy (BUSY while it owns objects)."""
        handle = self.handle
        self._call("uvm_client_destroy")
        self._mgr._clients.pop(handle.value or 0, None)
        self._handle = None

    def set_budget(self, budget: Size, gpu: Int = 0) -> None:
        """The budget on `gpu` (or uvm.CLIENT_SYSMEM) in bytes or as "20GiB"; 0 = unlimited."""
        self._call("uvm_client_set_budget", _u32(gpu, "gpu"), _size(budget, "budget"))

    def info(self) -> ClientInfo:
        """uvm_client_info: name, objects, vidmem_used/_evictable/_budget (lists by GPU), sysmem_used,
        sysmem_budget; sleepable, asleep (bools), vidmem_asleep (a list by GPU: the bytes of its objects
        the sleep gave back, out of vidmem_used while it sleeps), sleep_host_bytes (of its backup, the
        bytes the sleep keeps there now), vidmem_cached (a list by GPU: freed objects a thread keeps for
        the client's next allocation there, in vidmem_used); sleep_host_held (the pinned host memory its
        backup holds, asleep or awake), sleep_host_reserve, sleep_host_policy ("keep" or "release":
        set_sleep_policy). The lists have one entry per GPU of the manager."""
        out = _capi.ClientInfo()
        self._call("uvm_client_info", byref(out))
        info = ClientInfo(**values(out))
        gpus = self._mgr.gpu_count
        for name in ("vidmem_used", "vidmem_evictable", "vidmem_budget", "vidmem_asleep", "vidmem_cached"):
            setattr(info, name, getattr(info, name)[:gpus])
        info.sleepable, info.asleep = bool(out.sleepable), bool(out.asleep)
        info.sleep_host_policy = {v: k for k, v in _SLEEP_HOST.items()}.get(out.sleep_host_policy,
                                                                             out.sleep_host_policy)
        return info

    def set_sleep_policy(self, host: Union[str, Int] = "keep", reserve: Size = 0, pin_threads: int = 0) -> None:
        """uvm_client_set_sleep_policy, for a sleepable client: what becomes
        of its backup (the pinned host memory its sleeps keep bytes in) at
        the wake, "keep" (uvm.SLEEP_HOST_KEEP: pinned for the next sleep,
        which then pins nothing) or "release" (uvm.SLEEP_HOST_RELEASE: back
        to the system, the process's resident memory with it); `reserve`
        (bytes or "10GiB"): host memory made ready now and held whatever the
        policy, so that a sleep within it runs at the copy engine's speed
        the first time too; pin_threads: threads that pin (0: the default).
        Awake, the backup is made exactly the reserve on return. UvmError
        HOST_LIMIT where the reserve would pass the manager's limit
        (Manager.set_sleep_host_limit), OUT_OF_MEMORY where the host has not
        the memory; either way nothing changes."""
        if not isinstance(pin_threads, int) or isinstance(pin_threads, bool) or not 0 <= pin_threads <= 64:
            raise ValueError(f"pin_threads is an int from 0 to 64, not {pin_threads!r}")
        p = _capi.SleepPolicy(_enum(_SLEEP_HOST, host, "sleep host policy"), _size(reserve, "reserve"),
                              pin_threads)
        self._call("uvm_client_set_sleep_policy", byref(p))

    # sleep and wake
    def sleep(self, mode: Union[str, Int] = "keep", tags: Union[None, str, bytes, Sequence[Union[str, bytes]]] = None,
              tags_mode: Union[None, str, Int] = None) -> None:
        """uvm_client_sleep: the client's GPU memory goes back to the driver;
        every address of its objects stays theirs. mode: what becomes of the
        objects' bytes, "keep" (uvm.SLEEP_KEEP: copied to host memory and
        back at the wake) or "discard" (uvm.SLEEP_DISCARD: back zeroed);
        objects allocated with a tag in `tags` (a str or a list of them) go
        as `tags_mode` says (None: as `mode`); an object's own mode
        (Mem.set_sleep_mode) wins over both. While it sleeps, every call
        that needs its objects' memory raises UvmError ASLEEP. Work queued
        on the manager's streams is waited for first; work it does not know
        of must be finished by the caller. Asleep already: nothing changes.
        A failed sleep (BUSY: an object shared with another process, or
        stream work that cannot finish) moves nothing."""
        if isinstance(tags, (str, bytes)):
            tags = [tags]
        names = [t.encode() if isinstance(t, str) else t for t in (tags or ())]
        if not all(isinstance(t, bytes) for t in names):  # ctypes would take an int as a pointer
            raise TypeError(f"tags are str or bytes, not {tags!r}")
        array = (c_char_p * max(len(names), 1))(*names)  # alive through the call
        p = _capi.SleepParams()
        p.mode = _enum(_SLEEP_MODES, mode, "sleep mode")
        p.tags_mode = _enum(_SLEEP_MODES, "default" if tags_mode is None else tags_mode, "sleep mode")
        p.tags = ctypes.cast(array, _capi.POINTER(c_char_p)) if names else None
        p.tag_count = len(names)
        self._call("uvm_client_sleep", byref(p))

    def wake(self) -> None:
        """uvm_client_wake: memory again under the same addresses, kept bytes
        back, discarded objects zeroed. Awake already: nothing changes.
        OUT_OF_MEMORY where the GPU or the client's budget has not the room
        (it stays asleep, every kept byte intact; retry later)."""
        self._call("uvm_client_wake")

    @property
    def asleep(self) -> bool:
        return self.info().asleep


class MetricsServer:
    """uvm_metrics_serve: an HTTP endpoint (/metrics, /snapshot) on a thread of the library."""

    def __init__(self, mgr: Manager, port: Int = 0, address: str = "127.0.0.1") -> None:
        handle, bound = c_void_p(), c_u16()
        mgr._call("uvm_metrics_serve", address.encode(), fit(port, c_u16, "port"), byref(handle), byref(bound))
        self._mgr: Manager = mgr
        self._handle: Optional[c_void_p] = handle
        self.address, self.port = address, bound.value

    def __repr__(self) -> str:
        return f"<uvm.MetricsServer {self.url}{' (stopped)' if self._handle is None else ''}>"

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def stop(self) -> None:
        """uvm_metrics_stop (the manager's close stops a server left running)."""
        if self._handle is not None and not self._mgr.closed:
            self._mgr._call("uvm_metrics_stop", self._handle)
        self._handle = None

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def serve_metrics(mgr: Manager, port: Int = 0, address: str = "127.0.0.1") -> MetricsServer:
    """Serve `mgr`'s metrics for Prometheus at http://address:port/metrics
    (port 0: one the system picks, in .port). Returns a MetricsServer."""
    return MetricsServer(mgr, port, address)
