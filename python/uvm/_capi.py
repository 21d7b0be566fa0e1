"""The C API of include/uvm/uvm.h as ctypes sees it: constants, the public
structs field for field, and every function's prototype.

The structs mirror the headers exactly (tests/python/test_uvm.py compares
ctypes.sizeof and every field's offset with a C program built from the real
headers). Enums are C `int`s. Handles are opaque `void *`.

ctypes wraps an int too big for its C type without a word (2**64 + 4096 as a
uint64_t is 4096): every integer the bindings pass is checked instead (fit),
an input struct's fields as they are set, a function's arguments as it is
called, and a value that does not fit raises ValueError naming it.

The library: the one bundled in the package (uvm/libuvm.so: the wheel's, built
with these bindings), else the one the environment variable UVM_LIBRARY names
(a path to libuvm.so), else beside the package (lib/libuvm.so of a `cmake
--install` prefix, for lib/uvm/python/uvm), else in the build tree of a source
checkout (build/libuvm.so), else by the loader's search
(ctypes.util.find_library("uvm")).
"""
import ctypes
import ctypes.util
import operator
import os
from typing import Any, Dict, Tuple

c_u8, c_u16, c_u32, c_u64, c_i32, c_int = (ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64,
                                           ctypes.c_int32, ctypes.c_int)
c_size, c_char_p, c_void_p = ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p
POINTER, byref = ctypes.POINTER, ctypes.byref

VERSION_MAJOR, VERSION_MINOR = 0, 7
MAX_GPUS = 32
MAX_NUMA_NODES = 64
PAGE_SIZE_4K, PAGE_SIZE_64K, PAGE_SIZE_2M = 1 << 12, 1 << 16, 1 << 21
CHUNK_INDEX_4K, CHUNK_INDEX_64K, CHUNK_INDEX_2M = 0, 1, 2
CHUNK_SIZE_COUNT = 3
PAGE_TREE_MAX_LEVELS = 8

# uvm_backend_kind_t
BACKEND_AUTO, BACKEND_SIM, BACKEND_CUDA = 0, 1, 2
# uvm_thp_mode_t
THP_UNKNOWN, THP_NEVER, THP_MADVISE, THP_ALWAYS = range(4)
# uvm_gpu_path_t
GPU_PATH_UNKNOWN, GPU_PATH_SELF, GPU_PATH_PIX, GPU_PATH_PXB, GPU_PATH_PHB, GPU_PATH_NODE, GPU_PATH_SYS = range(7)
# uvm_backing_t
BACKING_SYSMEM, BACKING_VIDMEM, BACKING_MANAGED = 0, 1, 2
# allocation flags
MEM_ZERO = 1 << 0
MEM_EVICTABLE = 1 << 1
MEM_USER_MAPPABLE = 1 << 2
MEM_GPU_MAPPED = 1 << 3
MEM_DISCARDABLE = 1 << 4
# uvm_gpu_compact flags
COMPACT_WAIT = 1 << 0
COMPACT_RELEASE = 1 << 1
# uvm_placement_kind_t
PLACEMENT_GPU_LOCAL, PLACEMENT_NODE, PLACEMENT_INTERLEAVE, PLACEMENT_ANY = range(4)
# uvm_aperture_t
APERTURE_VID, APERTURE_PEER, APERTURE_SYS = range(3)
# uvm_gpu_view_t
VIEW_KERNEL, VIEW_USER, VIEW_PHYSICAL = range(3)
# the runtime's default streams, for uvm_stream_create's `native` (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD)
STREAM_LEGACY, STREAM_PER_THREAD = 0x1, 0x2
# processors and advice
PROCESSOR_CPU = -1
(ADVISE_SET_READ_MOSTLY, ADVISE_UNSET_READ_MOSTLY, ADVISE_SET_PREFERRED_LOCATION,
 ADVISE_UNSET_PREFERRED_LOCATION, ADVISE_SET_ACCESSED_BY, ADVISE_UNSET_ACCESSED_BY) = range(1, 7)
# clients
CLIENT_SYSMEM = 0xFFFFFFFF
# uvm_sleep_mode_t
SLEEP_DEFAULT, SLEEP_KEEP, SLEEP_DISCARD = range(3)
# uvm_sleep_host_t
SLEEP_HOST_KEEP, SLEEP_HOST_RELEASE = range(2)
# uvm_va_space_kind_t
VA_SPACE_KERNEL, VA_SPACE_USER = 0, 1
# uvm_report_format_t
REPORT_TEXT, REPORT_JSON = 0, 1
# uvm_trace_format_t
TRACE_CHROME_JSON, TRACE_SVG = 0, 1

# uvm_status_t, in the header's order.
STATUS_NAMES = (
    "OK", "INVALID_ARGUMENT", "INVALID_HANDLE", "INVALID_GPU", "PAGE_SIZE_NOT_SUPPORTED", "MISALIGNED",
    "OUT_OF_RANGE", "OUT_OF_MEMORY", "NO_HOST_MEMORY", "NOT_SUPPORTED", "NOT_MAPPED", "ALREADY_MAPPED",
    "ADDRESS_IN_USE", "NO_PEER_ACCESS", "NO_DEVICE", "BACKEND", "LEAKED_OBJECTS", "BUSY", "NOT_FOUND",
    "BUFFER_TOO_SMALL", "FORKED", "ASLEEP", "HOST_LIMIT")


# Each integer type the bindings pass: its C name and range. ctypes has one
# type under two names where the sizes match (c_size_t is c_uint64, c_int is
# c_int32 on the 64-bit Linux the library builds for): the later name wins.
INT_TYPES: Dict[Any, Tuple[str, int, int]] = {
    c_size: ("size_t", 0, (1 << 64) - 1), c_u8: ("uint8_t", 0, (1 << 8) - 1),
    c_u16: ("uint16_t", 0, (1 << 16) - 1), c_u32: ("uint32_t", 0, (1 << 32) - 1),
    c_u64: ("uint64_t", 0, (1 << 64) - 1), c_i32: ("int32_t", -(1 << 31), (1 << 31) - 1),
}


def fit(value: Any, ctype: Any, what: str) -> int:
    """`value` as an int of C type `ctype`: any integer (numpy's too, through
    __index__); TypeError for what is not one, ValueError naming `what` for
    one out of the type's range."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    cname, lo, hi = INT_TYPES[ctype]
    if not lo <= v <= hi:
        raise ValueError(f"{what} = {v} does not fit its C type, {cname} ({lo} to {hi})")
    return v


class CheckedStruct(ctypes.Structure):
    """An input struct: each integer field is checked (fit) as it is set, by
    name or by the constructor."""
    _int_fields: Dict[str, Any] = {}
    _cname = ""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._int_fields = {n: t for n, t in cls.__dict__.get("_fields_", ()) if t in INT_TYPES}

    def __setattr__(self, name: str, value: Any) -> None:
        ctype = self._int_fields.get(name)
        if ctype is not None:
            value = fit(value, ctype, f"{self._cname}.{name}")
        super().__setattr__(name, value)


def _checked_argument(ctype: Any) -> Any:
    """An argument type that checks its value (fit) where ctypes would wrap it."""
    cname = INT_TYPES[ctype][0]

    def from_param(cls: Any, value: Any) -> Any:
        return ctype(fit(value, ctype, f"a {cname} argument"))  # an int alone would go as a C int
    return type(f"checked_{cname}", (ctype,), {"from_param": classmethod(from_param)})


_CHECKED_ARGUMENTS = {t: _checked_argument(t) for t in INT_TYPES}


class SimParams(CheckedStruct):
    _fields_ = [("gpu_count", c_u32), ("vidmem_size", c_u64), ("page_sizes", c_u64),
                ("peer_rows", c_u32 * MAX_GPUS), ("no_peers", c_int), ("cpu_coherent", c_int),
                ("numa_nodes", c_u32), ("gpu_numa_node", c_i32 * MAX_GPUS)]


class ManagerParams(CheckedStruct):
    _fields_ = [("backend", c_int), ("sim", SimParams)]


class GpuInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 96), ("memory_total", c_u64), ("memory_free", c_u64),
                ("page_sizes", c_u64), ("peer_mask", c_u32), ("cpu_coherent", c_int), ("granularity", c_u64),
                ("host_numa_id", c_i32), ("pci_bus_id", ctypes.c_char * 32), ("cpus", ctypes.c_char * 256),
                ("uuid", c_u8 * 16)]


class HostInfo(ctypes.Structure):
    _fields_ = [("numa_node_count", c_u32), ("from_hwloc", c_int), ("thp", c_int), ("shmem_thp", c_int)]


class NumaNodeInfo(ctypes.Structure):
    _fields_ = [("id", c_i32), ("host_node", c_i32), ("memory_total", c_u64), ("memory_free", c_u64),
                ("cpus", ctypes.c_char * 256)]


class Placement(CheckedStruct):
    _fields_ = [("kind", c_int), ("node", c_u32), ("node_mask", c_u64), ("strict", c_int)]


class MemAllocParams(CheckedStruct):
    _fields_ = [("size", c_u64), ("backing", c_int), ("gpu", c_u32), ("chunk_size", c_u64), ("flags", c_u32),
                ("placement", Placement), ("client", c_void_p), ("tag", c_char_p), ("pool", c_void_p)]


class MemInfo(ctypes.Structure):
    _fields_ = [("size", c_u64), ("alloc_size", c_u64), ("backing", c_int), ("gpu", c_u32),
                ("chunk_size", c_u64), ("chunk_count", c_u64), ("cpu_kernel_mapped", c_int),
                ("cpu_user_mapped", c_int), ("user_address", c_u64), ("gpu_phys_mask", c_u32),
                ("gpu_kernel_mask", c_u32), ("gpu_user_mask", c_u32), ("numa_node", c_i32),
                ("numa_node_mask", c_u64), ("flags", c_u32), ("gpu_kernel_address", c_u64)]


class PoolInfo(ctypes.Structure):
    _fields_ = [("gpu", c_u32), ("streams", c_u32), ("objects", c_u64), ("live_bytes", c_u64),
                ("free_bytes", c_u64), ("held_bytes", c_u64)]


class GpuPhysAddress(ctypes.Structure):
    _fields_ = [("address", c_u64), ("aperture", c_int), ("peer_gpu", c_u32), ("contiguous", c_int)]


class MemSpan(CheckedStruct):
    _fields_ = [("mem", c_void_p), ("offset", c_u64), ("view", c_int)]


class HostPages(ctypes.Structure):
    _fields_ = [("resident_bytes", c_u64), ("huge_bytes", c_u64), ("node_bytes", c_u64 * MAX_NUMA_NODES)]


class Residency(ctypes.Structure):
    _fields_ = [("resident", c_int), ("evictions", c_u64), ("restores", c_u64), ("discards", c_u64)]


class EvictionPolicy(CheckedStruct):
    _fields_ = [("disabled", c_int), ("sysmem_limit", c_u64)]


class ClientInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 64), ("objects", c_u64), ("vidmem_used", c_u64 * MAX_GPUS),
                ("vidmem_evictable", c_u64 * MAX_GPUS), ("vidmem_budget", c_u64 * MAX_GPUS),
                ("sysmem_used", c_u64), ("sysmem_budget", c_u64), ("sleepable", c_int), ("asleep", c_int),
                ("vidmem_asleep", c_u64 * MAX_GPUS), ("sleep_host_bytes", c_u64),
                ("vidmem_cached", c_u64 * MAX_GPUS), ("sleep_host_held", c_u64), ("sleep_host_reserve", c_u64),
                ("sleep_host_policy", c_u32)]


class SleepParams(CheckedStruct):
    _fields_ = [("mode", c_int), ("tags", ctypes.POINTER(ctypes.c_char_p)), ("tag_count", c_u32),
                ("tags_mode", c_int)]


class SleepPolicy(CheckedStruct):
    _fields_ = [("host", c_int), ("host_reserve", c_u64), ("pin_threads", c_u32)]


class PressureEvent(ctypes.Structure):
    _fields_ = [("gpu", c_u32), ("client", c_void_p), ("percent", c_u32), ("rising", c_int), ("used", c_u64),
                ("limit", c_u64)]


class PageTreeLevel(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 16), ("va_bit_hi", c_u32), ("va_bit_lo", c_u32), ("tables", c_u64),
                ("bytes", c_u64)]


class PageTreeInfo(ctypes.Structure):
    _fields_ = [("level_count", c_u32), ("levels", PageTreeLevel * PAGE_TREE_MAX_LEVELS), ("table_bytes", c_u64),
                ("mapped_bytes", c_u64 * CHUNK_SIZE_COUNT)]


class GpuStats(ctypes.Structure):
    _fields_ = ([("root_chunks", c_u64)] +
                [(n, c_u64 * CHUNK_SIZE_COUNT) for n in ("bytes_free", "bytes_pinned", "bytes_evictable",
                                                          "chunks_split")] +
                [(n, c_u64) for n in ("largest_free_block", "vidmem_objects", "phys_mappings", "kernel_mappings",
                                      "user_mappings", "peer_mappings", "page_table_bytes", "ce_operations",
                                      "ce_bytes", "ce_translations", "evictions", "restores", "bytes_evicted",
                                      "bytes_restored", "evicted_objects", "evicted_bytes", "held_bytes",
                                      "held_live_bytes", "held_cached_bytes", "held_pooled_bytes",
                                      "held_retiring_bytes", "held_private_bytes", "held_unused_bytes",
                                      "held_other_bytes", "driver_free_bytes", "root_chunks_grown",
                                      "root_chunks_moved", "compactions", "compact_objects_moved",
                                      "compact_bytes_moved", "compact_bytes_released", "compactions_on_oom",
                                      "compactions_on_oom_served", "compact_bytes_rebacked")])


class CompactResult(ctypes.Structure):
    _fields_ = [(n, c_u64) for n in ("objects_moved", "bytes_moved", "objects_pinned", "objects_busy",
                                     "objects_kept", "held_before", "held_after", "free_whole_before",
                                     "free_whole_after", "largest_free_before", "largest_free_after",
                                     "bytes_released", "bytes_rebacked", "driver_held_before",
                                     "driver_held_after")]


class ManagerStats(ctypes.Structure):
    _fields_ = [(n, c_u64) for n in ("objects", "sysmem_objects", "sysmem_bytes", "cpu_kernel_mappings",
                                     "cpu_user_mappings", "managed_objects", "managed_bytes", "prefetches",
                                     "prefetched_bytes", "streams", "retiring_objects", "retiring_bytes",
                                     "stream_pool_bytes", "sleep_host_bytes", "sleep_host_limit")]


class TraceInfo(ctypes.Structure):
    _fields_ = [("enabled", c_int), ("ring_bytes", c_u64), ("capacity", c_u64), ("recorded", c_u64),
                ("overwritten", c_u64)]


# Every public struct under its C name (the layout test walks this table).
STRUCTS = {
    "uvm_sim_params_t": SimParams, "uvm_manager_params_t": ManagerParams, "uvm_gpu_info_t": GpuInfo,
    "uvm_host_info_t": HostInfo, "uvm_numa_node_info_t": NumaNodeInfo, "uvm_placement_t": Placement,
    "uvm_mem_alloc_params_t": MemAllocParams, "uvm_mem_info_t": MemInfo, "uvm_pool_info_t": PoolInfo,
    "uvm_gpu_phys_address_t": GpuPhysAddress, "uvm_mem_span_t": MemSpan, "uvm_host_pages_t": HostPages,
    "uvm_residency_t": Residency, "uvm_eviction_policy_t": EvictionPolicy, "uvm_client_info_t": ClientInfo,
    "uvm_sleep_params_t": SleepParams, "uvm_sleep_policy_t": SleepPolicy,
    "uvm_pressure_event_t": PressureEvent, "uvm_page_tree_level_t": PageTreeLevel,
    "uvm_page_tree_info_t": PageTreeInfo, "uvm_gpu_stats_t": GpuStats, "uvm_manager_stats_t": ManagerStats,
    "uvm_trace_info_t": TraceInfo, "uvm_compact_result_t": CompactResult,
}

for _cname, _struct in STRUCTS.items():
    _struct._cname = _cname  # type: ignore[attr-defined]

_M = c_void_p      # uvm_manager_t *
_H = c_void_p      # any other opaque handle
_PH = POINTER(c_void_p)
_S = c_int         # uvm_status_t

# name: argument types (every function returns uvm_status_t but the TEXT ones).
PROTOTYPES: Dict[str, Any] = {
    "uvm_manager_create": [POINTER(ManagerParams), _PH],
    "uvm_manager_destroy": [_M],
    "uvm_manager_backend": [_M, POINTER(c_int)],
    "uvm_gpu_count": [_M, POINTER(c_u32)],
    "uvm_gpu_info": [_M, c_u32, POINTER(GpuInfo)],
    "uvm_gpu_trim": [_M, c_u32, POINTER(c_u64)],
    "uvm_gpu_set_release_threshold": [_M, c_u32, c_u64],
    "uvm_gpu_set_growth_slack": [_M, c_u32, c_u64],
    "uvm_gpu_compact": [_M, c_u32, c_u32, POINTER(CompactResult)],
    "uvm_gpu_set_compact_on_oom": [_M, c_u32, c_int],
    "uvm_host_info": [_M, POINTER(HostInfo)],
    "uvm_numa_node_info": [_M, c_u32, POINTER(NumaNodeInfo)],
    "uvm_gpu_path": [_M, c_u32, c_u32, POINTER(c_int)],
    "uvm_gpu_enable_peer_access": [_M, c_u32, c_u32],
    "uvm_gpu_malloc_async": [_M, POINTER(MemAllocParams), _H, POINTER(c_u64), POINTER(c_u64)],
    "uvm_gpu_free_async": [_M, c_u32, c_u64, _H, POINTER(c_u64), POINTER(c_u64)],
    "uvm_mem_alloc": [_M, POINTER(MemAllocParams), _PH],
    "uvm_mem_free": [_M, _H],
    "uvm_mem_info": [_M, _H, POINTER(MemInfo)],
    "uvm_mem_map_cpu_kernel": [_M, _H],
    "uvm_mem_unmap_cpu_kernel": [_M, _H],
    "uvm_mem_map_cpu_user": [_M, _H, c_void_p],
    "uvm_mem_unmap_cpu_user": [_M, _H],
    "uvm_mem_map_gpu_phys": [_M, _H, c_u32],
    "uvm_mem_unmap_gpu_phys": [_M, _H, c_u32],
    "uvm_mem_map_gpu_kernel": [_M, _H, c_u32],
    "uvm_mem_unmap_gpu_kernel": [_M, _H, c_u32],
    "uvm_mem_map_gpu_user": [_M, _H, c_u32, c_u64],
    "uvm_mem_unmap_gpu_user": [_M, _H, c_u32],
    "uvm_user_range_reserve": [_M, c_u64, POINTER(c_u64)],
    "uvm_user_range_release": [_M, c_u64],
    "uvm_mem_cpu_kernel_address": [_M, _H, c_u64, _PH],
    "uvm_mem_cpu_user_address": [_M, _H, c_u64, _PH],
    "uvm_mem_gpu_phys_address": [_M, _H, c_u32, c_u64, c_u64, POINTER(GpuPhysAddress)],
    "uvm_mem_gpu_kernel_address": [_M, _H, c_u32, c_u64, POINTER(c_u64)],
    "uvm_mem_gpu_user_address": [_M, _H, c_u32, c_u64, POINTER(c_u64)],
    "uvm_mem_copy": [_M, c_u32, POINTER(MemSpan), POINTER(MemSpan), c_u64],
    "uvm_mem_memset": [_M, c_u32, POINTER(MemSpan), c_u8, c_u64],
    "uvm_stream_create": [_M, c_u32, c_void_p, _PH],
    "uvm_stream_destroy": [_M, _H],
    "uvm_stream_native": [_M, _H, _PH],
    "uvm_stream_synchronize": [_M, _H],
    "uvm_mem_record_use": [_M, _H, _H],
    "uvm_mem_alloc_async": [_M, POINTER(MemAllocParams), _H, _PH],
    "uvm_mem_free_async": [_M, _H, _H],
    "uvm_mem_alloc_gpu": [_M, POINTER(MemAllocParams), _H, _PH, POINTER(c_u64)],
    "uvm_mem_lookup_gpu_kernel": [_M, c_u32, c_u64, _PH, POINTER(c_u64)],
    "uvm_mem_copy_async": [_M, c_u32, POINTER(MemSpan), POINTER(MemSpan), c_u64, _H],
    "uvm_mem_memset_async": [_M, c_u32, POINTER(MemSpan), c_u8, c_u64, _H],
    "uvm_pool_create": [_M, c_u32, _PH],
    "uvm_pool_destroy": [_M, _H],
    "uvm_stream_set_pool": [_M, _H, _H],
    "uvm_pool_info": [_M, _H, POINTER(PoolInfo)],
    "uvm_mem_advise": [_M, _H, c_int, c_i32],
    "uvm_mem_prefetch": [_M, _H, c_u64, c_u64, c_i32],
    # uvm_share.h
    "uvm_mem_export": [_M, _H, c_int],
    "uvm_mem_import": [_M, c_int, _H, _PH],
    "uvm_mem_host_pages": [_M, _H, POINTER(HostPages)],
    # uvm_pressure.h
    "uvm_mem_evict": [_M, _H],
    "uvm_mem_make_resident": [_M, _H],
    "uvm_mem_touch": [_M, _H],
    "uvm_mem_residency": [_M, _H, POINTER(Residency)],
    "uvm_manager_set_eviction_policy": [_M, POINTER(EvictionPolicy)],
    "uvm_client_create": [_M, c_char_p, _PH],
    "uvm_client_destroy": [_M, _H],
    "uvm_client_set_budget": [_M, _H, c_u32, c_u64],
    "uvm_client_info": [_M, _H, POINTER(ClientInfo)],
    "uvm_client_create_sleepable": [_M, c_char_p, _PH],
    "uvm_client_sleep": [_M, _H, POINTER(SleepParams)],
    "uvm_client_wake": [_M, _H],
    "uvm_mem_set_sleep_mode": [_M, _H, c_int],
    "uvm_client_set_sleep_policy": [_M, _H, POINTER(SleepPolicy)],
    "uvm_manager_set_sleep_host_limit": [_M, c_u64],
    "uvm_pressure_watermarks": [_M, _H, c_u32, POINTER(c_u32), c_u32],
    "uvm_pressure_fd": [_M, POINTER(c_int)],
    "uvm_pressure_events": [_M, POINTER(PressureEvent), c_u32, POINTER(c_u32)],
    # uvm_observe.h
    "uvm_gpu_page_tree_info": [_M, c_u32, c_int, POINTER(PageTreeInfo)],
    "uvm_gpu_stats": [_M, c_u32, POINTER(GpuStats)],
    "uvm_manager_stats": [_M, POINTER(ManagerStats)],
    "uvm_oom_report": [_M, c_int, c_void_p, c_size, POINTER(c_size)],
    "uvm_manager_snapshot": [_M, c_void_p, c_size, POINTER(c_size)],
    "uvm_manager_metrics": [_M, c_void_p, c_size, POINTER(c_size)],
    "uvm_metrics_serve": [_M, c_char_p, c_u16, _PH, POINTER(c_u16)],
    "uvm_metrics_stop": [_M, _H],
    "uvm_objects_report": [_M, c_int, c_void_p, c_size, POINTER(c_size)],
    "uvm_leak_report": [c_int, c_void_p, c_size, POINTER(c_size)],
    "uvm_trace_start": [_M, c_u64],
    "uvm_trace_stop": [_M],
    "uvm_trace_info": [_M, POINTER(TraceInfo)],
    "uvm_trace_export": [_M, c_int, c_void_p, c_size, POINTER(c_size)],
    # uvm_sim.h
    "uvm_sim_stream_hold": [_M, _H],
    "uvm_sim_stream_release": [_M, _H],
}
# Integer arguments are checked as they are passed (fit).
PROTOTYPES = {name: [_CHECKED_ARGUMENTS.get(t, t) for t in types] for name, types in PROTOTYPES.items()}
# The functions that return text (const char *): name: argument types.
TEXT_PROTOTYPES: Dict[str, Any] = {
    "uvm_status_string": [c_int],
    "uvm_last_error_message": [],
}

_LIB = None


def bundled_library():
    """The library a wheel carries in the package folder (None where there is none)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libuvm.so")
    return path if os.path.exists(path) else None


def library_candidates():
    """Where the library is looked for, in order (the first that loads wins)."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = ctypes.util.find_library("uvm")
    return [p for p in (
        bundled_library(),
        os.environ.get("UVM_LIBRARY"),
        os.path.normpath(os.path.join(here, "..", "..", "..", "libuvm.so")),  # <prefix>/lib/uvm/python/uvm
        os.path.normpath(os.path.join(here, "..", "..", "build", "libuvm.so")),  # a source checkout
        found,
        "libuvm.so") if p]


def lib():
    """The loaded library with every prototype set (loaded once, on first use)."""
    global _LIB
    if _LIB is None:
        loaded, errors = None, []
        bundled, named = bundled_library(), os.environ.get("UVM_LIBRARY")
        # A bundled library is the one these bindings were built with, and
        # the only one tried; so is a library named in the environment where
        # none is bundled: falling back to another would hide a wrong path.
        for path in [bundled] if bundled else [named] if named else library_candidates():
            if os.sep in path and not os.path.exists(path):
                errors.append(f"{path}: no such file")
                continue
            try:
                loaded = ctypes.CDLL(path)
                break
            except OSError as e:
                errors.append(f"{path}: {e}")
        if loaded is None:
            raise OSError("libuvm.so not found (set UVM_LIBRARY to its path): " + "; ".join(errors))
        for name, argtypes in TEXT_PROTOTYPES.items():
            getattr(loaded, name).restype = c_char_p
            getattr(loaded, name).argtypes = argtypes
        for name, argtypes in PROTOTYPES.items():
            fn = getattr(loaded, name)
            fn.restype = _S
            fn.argtypes = argtypes
        _LIB = loaded
    return _LIB
