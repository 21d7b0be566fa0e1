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
import ctypes
import json
import re
import types

from . import _capi
from ._capi import byref, c_char_p, c_int, c_size, c_u16, c_u32, c_u64, c_void_p
from .errors import Status, UvmError, check

_BACKENDS = {"auto": _capi.BACKEND_AUTO, "sim": _capi.BACKEND_SIM, "cuda": _capi.BACKEND_CUDA}
_BACKINGS = {"sysmem": _capi.BACKING_SYSMEM, "vidmem": _capi.BACKING_VIDMEM, "managed": _capi.BACKING_MANAGED}
_VIEWS = {"kernel": _capi.VIEW_KERNEL, "user": _capi.VIEW_USER, "physical": _capi.VIEW_PHYSICAL}
_SPACES = {"kernel": _capi.VA_SPACE_KERNEL, "user": _capi.VA_SPACE_USER}
_TRACE_FORMATS = {"json": _capi.TRACE_CHROME_JSON, "svg": _capi.TRACE_SVG}
_SLEEP_MODES = {"default": _capi.SLEEP_DEFAULT, "keep": _capi.SLEEP_KEEP, "discard": _capi.SLEEP_DISCARD}
_SLEEP_HOST = {"keep": _capi.SLEEP_HOST_KEEP, "release": _capi.SLEEP_HOST_RELEASE}


def _u64(value, what):
    """`value` as a uint64_t argument: ValueError, naming it, where it does not fit."""
    value = parse_size(value)
    if value >= 1 << 64:
        raise ValueError(f"{what} {value} does not fit in 64 bits")
    return value
_PATHS = ("UNKNOWN", "SELF", "PIX", "PXB", "PHB", "NODE", "SYS")
_THP = ("unknown", "never", "madvise", "always")
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 10 ** 3, "KIB": 1 << 10, "M": 1 << 20, "MB": 10 ** 6, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 10 ** 9, "GIB": 1 << 30, "T": 1 << 40, "TB": 10 ** 12, "TIB": 1 << 40}


def parse_size(size):
    """Bytes from an int or a string such as "20GiB", "512 MiB", "1.5G" (K/M/G/T
    alone are binary; KB/MB/GB/TB decimal). ValueError for anything else."""
    if isinstance(size, int) and not isinstance(size, bool):
        if size < 0:
            raise ValueError(f"negative size: {size}")
        return size
    if isinstance(size, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", size)
        if m and m.group(2).upper() in _UNITS:
            return int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    raise ValueError(f"not a size: {size!r}")


def _enum(table, value, what):
    if isinstance(value, str):
        try:
            return table[value.lower()]
        except KeyError:
            raise ValueError(f"unknown {what} {value!r} (one of {', '.join(table)})") from None
    return int(value)


def _as_dict(struct):
    """A ctypes struct as a namespace of Python values: strings decoded,
    arrays as lists, nested structs as namespaces."""
    out = {}
    for name, ctype in struct._fields_:
        value = getattr(struct, name)
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        elif isinstance(value, ctypes.Array):
            value = bytes(value) if ctype._type_ is ctypes.c_uint8 else \
                [(_as_dict(v) if isinstance(v, ctypes.Structure) else v) for v in value]
        elif isinstance(value, ctypes.Structure):
            value = _as_dict(value)
        out[name] = value
    return types.SimpleNamespace(**out)


def _text(call, fn, *args):
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


def leak_report(json_format=False):
    """The report of the objects the calling thread's last Manager.close()
    found alive (uvm_leak_report). UvmError NOT_FOUND where there was none."""
    text = _text("uvm_leak_report", _capi.lib().uvm_leak_report,
                 _capi.REPORT_JSON if json_format else _capi.REPORT_TEXT)
    return json.loads(text) if json_format else text


class Manager:
    """uvm_manager_t. Manager(backend="sim", gpus=2, vidmem="64MiB") makes
    simulated GPUs; backend "auto" (the default) takes CUDA where a GPU and
    a driver are found, and the environment's UVM_BACKEND wins over it.

    Sim options (ignored on CUDA): gpus, vidmem (per GPU, a multiple of
    2 MiB), page_sizes (mask of uvm.PAGE_SIZE_*), peers (False: no GPU reaches
    another's vidmem; or a list of row masks), cpu_coherent, numa_nodes,
    gpu_numa_node (a list)."""

    def __init__(self, backend="auto", gpus=0, vidmem=0, page_sizes=0, peers=True, cpu_coherent=False,
                 numa_nodes=0, gpu_numa_node=None):
        self._lib = _capi.lib()
        self._handle = None
        self._clients = {}  # handle value -> Client, to name the client of a pressure event
        p = _capi.ManagerParams()
        p.backend = _enum(_BACKENDS, backend, "backend")
        p.sim.gpu_count = gpus
        p.sim.vidmem_size = parse_size(vidmem)
        p.sim.page_sizes = page_sizes
        if peers is False:
            p.sim.no_peers = 1
        elif peers is not True:
            for i, row in enumerate(peers):
                p.sim.peer_rows[i] = row
        p.sim.cpu_coherent = int(bool(cpu_coherent))
        p.sim.numa_nodes = numa_nodes
        for i, node in enumerate(gpu_numa_node or []):
            p.sim.gpu_numa_node[i] = node
        handle = c_void_p()
        check("uvm_manager_create", self._lib.uvm_manager_create(byref(p), byref(handle)))
        self._handle = handle

    @classmethod
    def adopt(cls, handle):
        """A Manager over a uvm_manager_t * made elsewhere (an int or
        c_void_p; the runtimes' allocator's, uvm.torch): its calls work as
        on any manager, and close() forgets it without destroying it."""
        self = cls.__new__(cls)
        self._lib = _capi.lib()
        self._clients = {}
        self._borrowed = True
        self._handle = c_void_p(handle.value if isinstance(handle, c_void_p) else handle)
        return self

    # -- lifetime ---------------------------------------------------------
    def close(self):
        """uvm_manager_destroy: frees what is left (UvmError LEAKED_OBJECTS,
        with the leak report as .detail, where objects were left; the manager
        is gone either way). A second close does nothing."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        if getattr(self, "_borrowed", False):
            return  # its owner destroys it
        status = self._lib.uvm_manager_destroy(handle)
        if status == Status.LEAKED_OBJECTS:
            raise UvmError("uvm_manager_destroy", status, leak_report())
        check("uvm_manager_destroy", status)

    @property
    def closed(self):
        return self._handle is None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:  # the exception in flight says more than a leak would
            try:
                self.close()
            except UvmError:
                pass

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            try:
                self.close()
            except UvmError:
                pass

    @property
    def handle(self):
        """The uvm_manager_t * (a ctypes.c_void_p), for other bindings."""
        if self._handle is None:
            raise UvmError("(closed manager)", Status.INVALID_HANDLE, "the manager was closed")
        return self._handle

    def _call(self, name, *args, detail=""):
        check(name, getattr(self._lib, name)(self.handle, *args), detail)

    # -- the manager and its GPUs ------------------------------------------
    @property
    def backend(self):
        """"sim" or "cuda"."""
        out = c_int()
        self._call("uvm_manager_backend", byref(out))
        return {v: k for k, v in _BACKENDS.items()}[out.value]

    @property
    def gpu_count(self):
        out = c_u32()
        self._call("uvm_gpu_count", byref(out))
        return out.value

    def gpu_info(self, gpu):
        """uvm_gpu_info: name, memory_total, memory_free, page_sizes, peer_mask,
        cpu_coherent, granularity, host_numa_id, pci_bus_id, cpus, uuid (bytes)."""
        out = _capi.GpuInfo()
        self._call("uvm_gpu_info", gpu, byref(out))
        return _as_dict(out)

    def gpu_trim(self, gpu):
        """Give fully free root chunks back to the backend; the bytes given back."""
        out = c_u64()
        self._call("uvm_gpu_trim", gpu, byref(out))
        return out.value

    def gpu_compact(self, gpu, wait=False, release=False):
        """Move live vidmem objects of `gpu` behind their addresses so that
        free memory comes together in whole root chunks (uvm_gpu_compact:
        what moves, what pins an object and what the caller must have
        finished is in uvm_pressure.h). `wait`: synchronize the streams whose
        tracked work uses them first; `release`: give the emptied roots back
        to the driver. What moved and what was given back, as uvm_compact_result_t's
        fields (objects_moved, bytes_moved, objects_pinned, ..., bytes_released)."""
        out = _capi.CompactResult()
        flags = (_capi.COMPACT_WAIT if wait else 0) | (_capi.COMPACT_RELEASE if release else 0)
        self._call("uvm_gpu_compact", gpu, flags, byref(out))
        return _as_dict(out)

    def set_compact_on_oom(self, gpu, on):
        """Whether an allocation that finds `gpu`'s free memory in pieces
        compacts before it evicts or fails (off by default: only where all
        GPU work on its objects is tracked or finished when it allocates)."""
        self._call("uvm_gpu_set_compact_on_oom", gpu, int(bool(on)))

    def set_release_threshold(self, gpu, nbytes):
        """Keep at most `nbytes` of whole free root chunks cached on `gpu`
        (uvm_gpu_set_release_threshold); 0 gives idle memory back at once."""
        self._call("uvm_gpu_set_release_threshold", gpu, parse_size(nbytes))

    def set_growth_slack(self, gpu, nbytes):
        """Hold up to `nbytes` more than the peak need before a growth on `gpu`
        gives free memory that cannot serve it back (uvm_gpu_set_growth_slack):
        0 holds the least, "inf" never gives it back; 256 MiB by default."""
        n = (1 << 64) - 1 if nbytes in (None, "inf") else parse_size(nbytes)
        self._call("uvm_gpu_set_growth_slack", gpu, n)

    def host_info(self):
        out = _capi.HostInfo()
        self._call("uvm_host_info", byref(out))
        info = _as_dict(out)
        info.thp, info.shmem_thp = _THP[out.thp], _THP[out.shmem_thp]
        return info

    def numa_node_info(self, index):
        """uvm_numa_node_info: node `index` (< host_info().numa_node_count) of the manager's topology."""
        out = _capi.NumaNodeInfo()
        self._call("uvm_numa_node_info", index, byref(out))
        return _as_dict(out)

    def numa_nodes(self):
        """Every node of the manager's topology, in ascending id."""
        return [self.numa_node_info(i) for i in range(self.host_info().numa_node_count)]

    def gpu_path(self, a, b):
        """The PCI path between two GPUs, as nvidia-smi topo -m names it ("SELF", "PHB", ...)."""
        out = c_int()
        self._call("uvm_gpu_path", a, b, byref(out))
        return _PATHS[out.value]

    def set_sleep_host_limit(self, limit):
        """uvm_manager_set_sleep_host_limit: the most pinned host memory every
        sleepable client's backup may hold together, in bytes or as "64GiB"
        (0: no limit). A sleep or a reserve that would pass it raises
        UvmError HOST_LIMIT and changes nothing; a limit below what is held
        takes nothing back. stats().sleep_host_bytes is what they hold."""
        self._call("uvm_manager_set_sleep_host_limit", _u64(limit, "limit"))

    def set_eviction_policy(self, disabled=False, sysmem_limit=0):
        p = _capi.EvictionPolicy(int(bool(disabled)), parse_size(sysmem_limit))
        self._call("uvm_manager_set_eviction_policy", byref(p))

    # -- objects ----------------------------------------------------------
    def alloc(self, size, backing="sysmem", gpu=0, flags=0, chunk_size=0, client=None, tag=None, placement=None,
              stream=None):
        """uvm_mem_alloc (uvm_mem_alloc_async with `stream`): a Mem.

        backing: "sysmem", "vidmem", "managed" (or uvm.BACKING_*); flags: uvm.MEM_*;
        client: a Client (None: the default client); tag: a label for reports;
        placement: a uvm.Placement for sysmem. OUT_OF_MEMORY carries this
        thread's OOM report as .detail. Size 0 gives None (no object), as
        the C call gives a NULL handle."""
        p = self._alloc_params(size, backing, gpu, flags, chunk_size, client, tag, placement)
        handle = c_void_p()
        if stream is None:
            status = self._lib.uvm_mem_alloc(self.handle, byref(p), byref(handle))
        else:
            status = self._lib.uvm_mem_alloc_async(self.handle, byref(p), stream._handle_of(self), byref(handle))
        call = "uvm_mem_alloc" if stream is None else "uvm_mem_alloc_async"
        check(call, status, lambda: self._oom_detail() if status == Status.OUT_OF_MEMORY else "")
        return Mem(self, handle, tag) if handle.value else None

    def alloc_gpu(self, size, backing="vidmem", gpu=0, flags=0, chunk_size=0, client=None, tag=None, placement=None,
                  stream=None):
        """uvm_mem_alloc_gpu: (Mem, its kernel address on `gpu`) in one call
        (MEM_GPU_MAPPED implied; on `stream` when given). Size 0: (None, 0)."""
        p = self._alloc_params(size, backing, gpu, flags, chunk_size, client, tag, placement)
        handle, address = c_void_p(), c_u64()
        status = self._lib.uvm_mem_alloc_gpu(self.handle, byref(p), stream._handle_of(self) if stream else None,
                                             byref(handle), byref(address))
        check("uvm_mem_alloc_gpu", status, lambda: self._oom_detail() if status == Status.OUT_OF_MEMORY else "")
        return (Mem(self, handle, tag) if handle.value else None), address.value

    def lookup_gpu_kernel(self, address, gpu=0):
        """uvm_mem_lookup_gpu_kernel: (Mem, offset) of the object whose kernel
        mapping on `gpu` holds `address`; None where none does. The Mem is a
        new wrapper of the object's handle."""
        handle, offset = c_void_p(), c_u64()
        status = self._lib.uvm_mem_lookup_gpu_kernel(self.handle, gpu, address, byref(handle), byref(offset))
        if status == Status.NOT_FOUND:
            return None
        check("uvm_mem_lookup_gpu_kernel", status)
        return Mem(self, handle, None), offset.value

    def _alloc_params(self, size, backing, gpu, flags, chunk_size, client, tag, placement):
        p = _capi.MemAllocParams()
        p.size = parse_size(size)
        p.backing = _enum(_BACKINGS, backing, "backing")
        p.gpu = gpu
        p.chunk_size = parse_size(chunk_size)
        p.flags = flags
        if placement is not None:
            p.placement = placement
        p.client = client._handle_of(self) if client is not None else None
        p.tag = tag.encode() if tag is not None else None
        return p

    def _oom_detail(self):
        try:
            return self.oom_report()
        except UvmError:
            return ""

    def import_mem(self, sock, client=None):
        """uvm_mem_import: receive an object another manager exported over
        `sock` (a connected AF_UNIX SOCK_SEQPACKET socket, or its fd)."""
        handle = c_void_p()
        fd = sock if isinstance(sock, int) else sock.fileno()
        self._call("uvm_mem_import", fd, client._handle_of(self) if client is not None else None, byref(handle))
        return Mem(self, handle, None)

    def user_range_reserve(self, size):
        """Reserve a user address range (a multiple of 2 MiB); its start."""
        out = c_u64()
        self._call("uvm_user_range_reserve", parse_size(size), byref(out))
        return out.value

    def user_range_release(self, address):
        self._call("uvm_user_range_release", address)

    # -- copy engine ------------------------------------------------------
    def copy(self, dst, src, size, gpu=0, stream=None):
        """uvm_mem_copy (async on `stream`). dst and src: a Mem, or (Mem, offset)
        or (Mem, offset, view) with view "kernel", "user" or "physical"."""
        d, s = _span(self, dst), _span(self, src)
        if stream is None:
            self._call("uvm_mem_copy", gpu, byref(d), byref(s), parse_size(size))
        else:
            self._call("uvm_mem_copy_async", gpu, byref(d), byref(s), parse_size(size), stream._handle_of(self))

    def memset(self, dst, value, size, gpu=0, stream=None):
        """uvm_mem_memset (async on `stream`); dst as for copy."""
        d = _span(self, dst)
        if stream is None:
            self._call("uvm_mem_memset", gpu, byref(d), value, parse_size(size))
        else:
            self._call("uvm_mem_memset_async", gpu, byref(d), value, parse_size(size), stream._handle_of(self))

    # -- streams and clients ----------------------------------------------
    def stream(self, gpu=0, native=None):
        """uvm_stream_create: a Stream of `gpu` (native: a CUstream to adopt, CUDA only;
        uvm.STREAM_LEGACY / uvm.STREAM_PER_THREAD: the runtime's default stream)."""
        handle = c_void_p()
        self._call("uvm_stream_create", gpu, native, byref(handle))
        return Stream(self, handle, gpu)

    def client(self, name, budget=None, gpu=0, sleepable=False):
        """uvm_client_create (sleepable: uvm_client_create_sleepable, a client
        that can Client.sleep() and wake()), and with `budget` its budget on
        `gpu`."""
        return Client(self, name, budget=budget, gpu=gpu, sleepable=sleepable)

    # -- pressure notices -------------------------------------------------
    def pressure_watermarks(self, percents, gpu=0, client=None):
        """Watermarks (percent) on `gpu`'s held memory, or on `client`'s budget
        there (gpu=uvm.CLIENT_SYSMEM: its sysmem budget). [] removes them."""
        array = (c_u32 * max(len(percents), 1))(*percents)
        self._call("uvm_pressure_watermarks", client._handle_of(self) if client is not None else None, gpu, array,
                   len(percents))

    def pressure_fd(self):
        """The eventfd readable while pressure events wait (the manager's; do not close it)."""
        out = c_int()
        self._call("uvm_pressure_fd", byref(out))
        return out.value

    def pressure_events(self, max_events=64):
        """Take the waiting events, oldest first: namespaces of gpu, client (a
        Client of this manager, or None for the GPU's held memory), percent,
        rising (bool), used, limit."""
        array = (_capi.PressureEvent * max_events)()
        count = c_u32()
        self._call("uvm_pressure_events", array, max_events, byref(count))
        events = []
        for e in array[:count.value]:
            event = _as_dict(e)
            event.rising = bool(e.rising)
            event.client = self._clients.get(e.client) if e.client else None
            events.append(event)
        return events

    # -- statistics, reports, metrics --------------------------------------
    def stats(self):
        out = _capi.ManagerStats()
        self._call("uvm_manager_stats", byref(out))
        return _as_dict(out)

    def gpu_stats(self, gpu):
        out = _capi.GpuStats()
        self._call("uvm_gpu_stats", gpu, byref(out))
        return _as_dict(out)

    def page_tree_info(self, gpu, space="kernel"):
        out = _capi.PageTreeInfo()
        self._call("uvm_gpu_page_tree_info", gpu, _enum(_SPACES, space, "address space"), byref(out))
        info = _as_dict(out)
        info.levels = info.levels[:out.level_count]
        return info

    def oom_report(self, json_format=False):
        """This thread's last OUT_OF_MEMORY report (text, or a dict); UvmError NOT_FOUND where none."""
        text = _text("uvm_oom_report", self._lib.uvm_oom_report, self.handle,
                     _capi.REPORT_JSON if json_format else _capi.REPORT_TEXT)
        return json.loads(text) if json_format else text

    def objects_report(self, json_format=False):
        """Every live object, largest first, with totals by client and tag (text, or a dict)."""
        text = _text("uvm_objects_report", self._lib.uvm_objects_report, self.handle,
                     _capi.REPORT_JSON if json_format else _capi.REPORT_TEXT)
        return json.loads(text) if json_format else text

    def snapshot(self):
        """uvm_manager_snapshot, parsed (a dict)."""
        return json.loads(_text("uvm_manager_snapshot", self._lib.uvm_manager_snapshot, self.handle))

    def metrics(self):
        """uvm_manager_metrics: the Prometheus text exposition format."""
        return _text("uvm_manager_metrics", self._lib.uvm_manager_metrics, self.handle)

    def serve_metrics(self, port=0, address="127.0.0.1"):
        """uvm_metrics_serve: /metrics and /snapshot over HTTP from a thread of
        the library; a MetricsServer (.port is the port bound). UvmError
        NOT_SUPPORTED in a build without cpp-httplib."""
        return MetricsServer(self, port, address)

    # -- trace ------------------------------------------------------------
    def trace_start(self, ring_bytes=0):
        self._call("uvm_trace_start", parse_size(ring_bytes))

    def trace_stop(self):
        self._call("uvm_trace_stop")

    def trace_info(self):
        out = _capi.TraceInfo()
        self._call("uvm_trace_info", byref(out))
        info = _as_dict(out)
        info.enabled = bool(out.enabled)
        return info

    def trace_export(self, format="json"):
        """The trace as Chrome Trace Event JSON ("json", a str) or an SVG ("svg")."""
        return _text("uvm_trace_export", self._lib.uvm_trace_export, self.handle,
                     _enum(_TRACE_FORMATS, format, "trace format"))


def _span(mgr, side):
    if isinstance(side, Mem):
        side = (side,)
    mem, offset, view = (tuple(side) + (0, "kernel"))[:3]
    return _capi.MemSpan(mem._handle_of(mgr), parse_size(offset), _enum(_VIEWS, view, "view"))


class _Owned:
    """A handle that belongs to one manager and dies before it."""
    _what = "handle"

    def _handle_of(self, mgr):
        if self._handle is None:
            raise UvmError(f"({self._what})", Status.INVALID_HANDLE, f"the {self._what} was already released")
        if mgr is not self._mgr:
            raise UvmError(f"({self._what})", Status.INVALID_HANDLE, f"the {self._what} belongs to another manager")
        return self._handle

    @property
    def handle(self):
        """The C handle (a ctypes.c_void_p), for other bindings."""
        return self._handle_of(self._mgr)

    def _call(self, name, *args):
        self._mgr._call(name, self.handle, *args)


class Mem(_Owned):
    """uvm_mem_t: one memory object. `with mgr.alloc(...) as m:` frees it at the end."""
    _what = "object"

    def __init__(self, mgr, handle, tag):
        self._mgr, self._handle, self.tag = mgr, handle, tag

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._handle is not None and not self._mgr.closed:
            self.free()

    def __repr__(self):
        if self._handle is None or self._mgr.closed:
            return "<uvm.Mem (freed)>"
        i = self.info()
        return f"<uvm.Mem {i.size} bytes of {i.backing_name} on GPU {i.gpu}, {i.chunk_size >> 10}K chunks>"

    @property
    def manager(self):
        return self._mgr

    def free(self, stream=None):
        """uvm_mem_free (uvm_mem_free_async on `stream`). The handle is dead after."""
        if stream is None:
            self._call("uvm_mem_free")
        else:
            self._call("uvm_mem_free_async", stream._handle_of(self._mgr))
        self._handle = None

    def info(self):
        """uvm_mem_info, with backing_name ("sysmem", "vidmem", "managed") added."""
        out = _capi.MemInfo()
        self._call("uvm_mem_info", byref(out))
        info = _as_dict(out)
        info.backing_name = {v: k for k, v in _BACKINGS.items()}.get(out.backing, str(out.backing))
        return info

    @property
    def size(self):
        return self.info().size

    # mappings
    def map_cpu_kernel(self):
        self._call("uvm_mem_map_cpu_kernel")

    def unmap_cpu_kernel(self):
        self._call("uvm_mem_unmap_cpu_kernel")

    def map_cpu_user(self, address):
        self._call("uvm_mem_map_cpu_user", address)

    def unmap_cpu_user(self):
        self._call("uvm_mem_unmap_cpu_user")

    def map_gpu_phys(self, gpu):
        self._call("uvm_mem_map_gpu_phys", gpu)

    def unmap_gpu_phys(self, gpu):
        self._call("uvm_mem_unmap_gpu_phys", gpu)

    def map_gpu_kernel(self, gpu):
        self._call("uvm_mem_map_gpu_kernel", gpu)

    def unmap_gpu_kernel(self, gpu):
        self._call("uvm_mem_unmap_gpu_kernel", gpu)

    def map_gpu_user(self, gpu, address=0):
        self._call("uvm_mem_map_gpu_user", gpu, address)

    def unmap_gpu_user(self, gpu):
        self._call("uvm_mem_unmap_gpu_user", gpu)

    # addresses
    def cpu_kernel_address(self, offset=0):
        out = c_void_p()
        self._call("uvm_mem_cpu_kernel_address", offset, byref(out))
        return out.value

    def cpu_user_address(self, offset=0):
        out = c_void_p()
        self._call("uvm_mem_cpu_user_address", offset, byref(out))
        return out.value

    def gpu_phys_address(self, gpu, offset=0, size=1):
        """namespace(address, aperture, peer_gpu, contiguous) of [offset, offset+size) on `gpu`."""
        out = _capi.GpuPhysAddress()
        self._call("uvm_mem_gpu_phys_address", gpu, offset, size, byref(out))
        info = _as_dict(out)
        info.contiguous = bool(out.contiguous)
        return info

    def gpu_kernel_address(self, gpu, offset=0):
        out = c_u64()
        self._call("uvm_mem_gpu_kernel_address", gpu, offset, byref(out))
        return out.value

    def gpu_user_address(self, gpu, offset=0):
        out = c_u64()
        self._call("uvm_mem_gpu_user_address", gpu, offset, byref(out))
        return out.value

    # the bytes, through the CPU kernel mapping
    def read(self, offset=0, size=None):
        """The object's bytes through its CPU kernel mapping (map_cpu_kernel first;
        NOT_MAPPED otherwise)."""
        if size is None:
            size = self.info().size - offset
        if size == 0:
            return b""
        return ctypes.string_at(self.cpu_kernel_address(offset), size)

    def write(self, data, offset=0):
        """Copy `data` (bytes-like) into the object through its CPU kernel mapping."""
        data = bytes(data)
        if not data:
            return
        if offset + len(data) > self.info().alloc_size:
            raise UvmError("(Mem.write)", Status.OUT_OF_RANGE, f"{len(data)} bytes at {offset} overrun the object")
        ctypes.memmove(self.cpu_kernel_address(offset), data, len(data))

    # streams
    def record_use(self, stream):
        self._call("uvm_mem_record_use", stream._handle_of(self._mgr))

    # managed memory
    def advise(self, advice, processor=0):
        self._call("uvm_mem_advise", advice, processor)

    def prefetch(self, processor, offset=0, size=None):
        self._call("uvm_mem_prefetch", offset, self.info().size - offset if size is None else size, processor)

    # residency
    def evict(self):
        self._call("uvm_mem_evict")

    def make_resident(self):
        self._call("uvm_mem_make_resident")

    def touch(self):
        self._call("uvm_mem_touch")

    def residency(self):
        """namespace(resident (bool), evictions, restores, discards)."""
        out = _capi.Residency()
        self._call("uvm_mem_residency", byref(out))
        info = _as_dict(out)
        info.resident = bool(out.resident)
        return info

    # sleep and wake (Client.sleep)
    def set_sleep_mode(self, mode):
        """uvm_mem_set_sleep_mode: what its client's sleep does with this
        object's bytes, whatever the sleep is asked: "keep" (uvm.SLEEP_KEEP),
        "discard" (uvm.SLEEP_DISCARD: back zeroed at the wake), or "default"
        / None (uvm.SLEEP_DEFAULT: as the sleep says)."""
        self._call("uvm_mem_set_sleep_mode", _enum(_SLEEP_MODES, "default" if mode is None else mode, "sleep mode"))

    # sharing
    def export(self, sock):
        """uvm_mem_export over `sock` (a connected AF_UNIX SOCK_SEQPACKET socket, or its fd)."""
        self._call("uvm_mem_export", sock if isinstance(sock, int) else sock.fileno())

    def host_pages(self):
        out = _capi.HostPages()
        self._call("uvm_mem_host_pages", byref(out))
        return _as_dict(out)


class Stream(_Owned):
    """uvm_stream_t: an ordered queue of one GPU's work."""
    _what = "stream"

    def __init__(self, mgr, handle, gpu):
        self._mgr, self._handle, self.gpu = mgr, handle, gpu

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._handle is not None and not self._mgr.closed:
            self.destroy()

    def destroy(self):
        """Wait for the stream's work, release what waited, forget it (BUSY on sim while work is held)."""
        self._call("uvm_stream_destroy")
        self._handle = None

    def synchronize(self):
        self._call("uvm_stream_synchronize")

    @property
    def native(self):
        """The CUstream as an int (None on sim)."""
        out = c_void_p()
        self._call("uvm_stream_native", byref(out))
        return out.value

    def hold(self):
        """Sim only: queue work that stays in flight until release()."""
        self._call("uvm_sim_stream_hold")

    def release(self):
        """Sim only: let the oldest held work finish."""
        self._call("uvm_sim_stream_release")


class Client(_Owned):
    """uvm_client_t: a named owner of objects with budgets per GPU and for
    sysmem. One made sleepable (Manager.client(..., sleepable=True)) can
    give its GPU memory back with sleep() and take it again with wake(),
    every address it was given kept."""
    _what = "client"

    def __init__(self, mgr, name, budget=None, gpu=0, sleepable=False):
        handle = c_void_p()
        create = "uvm_client_create_sleepable" if sleepable else "uvm_client_create"
        mgr._call(create, name.encode(), byref(handle))
        self._mgr, self._handle, self.name, self.sleepable = mgr, handle, name, bool(sleepable)
        mgr._clients[handle.value] = self
        if budget is not None:
            try:
                self.set_budget(budget, gpu)
            except (UvmError, ValueError):
                self.destroy()  # a client made only in part is not left behind
                raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._handle is not None and not self._mgr.closed:
            self.destroy()

    def __repr__(self):
        return f"<uvm.Client {self.name!r}>"

    def destroy(self):
        """uvm_client_destroy (BUSY while it owns objects)."""
        self._call("uvm_client_destroy")
        self._mgr._clients.pop(self._handle.value, None)
        self._handle = None

    def set_budget(self, budget, gpu=0):
        """The budget on `gpu` (or uvm.CLIENT_SYSMEM) in bytes or as "20GiB"; 0 = unlimited."""
        self._call("uvm_client_set_budget", gpu, parse_size(budget))

    def info(self):
        """uvm_client_info: name, objects, vidmem_used/_evictable/_budget (lists by GPU), sysmem_used,
        sysmem_budget; sleepable, asleep (bools), vidmem_asleep (a list by GPU: the bytes of its objects
        the sleep gave back, out of vidmem_used while it sleeps), sleep_host_bytes (of its backup, the
        bytes the sleep keeps there now), vidmem_cached (a list by GPU: freed objects a thread keeps for
        the client's next allocation there, in vidmem_used); sleep_host_held (the pinned host memory its
        backup holds, asleep or awake), sleep_host_reserve, sleep_host_policy ("keep" or "release":
        set_sleep_policy)."""
        out = _capi.ClientInfo()
        self._call("uvm_client_info", byref(out))
        info = _as_dict(out)
        info.sleepable, info.asleep = bool(out.sleepable), bool(out.asleep)
        info.sleep_host_policy = {v: k for k, v in _SLEEP_HOST.items()}.get(out.sleep_host_policy,
                                                                             out.sleep_host_policy)
        return info

    def set_sleep_policy(self, host="keep", reserve=0, pin_threads=0):
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
        p = _capi.SleepPolicy(_enum(_SLEEP_HOST, host, "sleep host policy"), _u64(reserve, "reserve"), pin_threads)
        self._call("uvm_client_set_sleep_policy", byref(p))

    # sleep and wake
    def sleep(self, mode="keep", tags=None, tags_mode=None):
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

    def wake(self):
        """uvm_client_wake: memory again under the same addresses, kept bytes
        back, discarded objects zeroed. Awake already: nothing changes.
        OUT_OF_MEMORY where the GPU or the client's budget has not the room
        (it stays asleep, every kept byte intact; retry later)."""
        self._call("uvm_client_wake")

    @property
    def asleep(self):
        return self.info().asleep


class MetricsServer:
    """uvm_metrics_serve: an HTTP endpoint (/metrics, /snapshot) on a thread of the library."""

    def __init__(self, mgr, port=0, address="127.0.0.1"):
        handle, bound = c_void_p(), c_u16()
        mgr._call("uvm_metrics_serve", address.encode(), port, byref(handle), byref(bound))
        self._mgr, self._handle, self.address, self.port = mgr, handle, address, bound.value

    @property
    def url(self):
        return f"http://{self.address}:{self.port}"

    def stop(self):
        """uvm_metrics_stop (the manager's close stops a server left running)."""
        if self._handle is not None and not self._mgr.closed:
            self._mgr._call("uvm_metrics_stop", self._handle)
        self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def serve_metrics(mgr, port=0, address="127.0.0.1"):
    """Serve `mgr`'s metrics for Prometheus at http://address:port/metrics
    (port 0: one the system picks, in .port). Returns a MetricsServer."""
    return MetricsServer(mgr, port, address)
