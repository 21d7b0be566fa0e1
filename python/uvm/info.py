"""What the query calls return: the C structs as Python records, field for
field, with Python values (str, bool, int, uuid.UUID, the enums of
uvm.enums), per-GPU figures as lists as long as the manager has GPUs, and a
repr that reads. Each is a types.SimpleNamespace: attributes, ==, vars()."""
from __future__ import annotations

import ctypes
import enum
import types
import uuid as _uuid
from typing import Any, Dict, List

from .enums import Aperture, Backing, MemFlag, PageSize, flag_names


class Record(types.SimpleNamespace):
    """A result: its fields as attributes."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={_show(v)}' for k, v in vars(self).items())})"


def _show(value: Any) -> str:
    if isinstance(value, enum.IntFlag):
        return f"{type(value).__name__}.{flag_names(value)}"
    if isinstance(value, enum.IntEnum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, _uuid.UUID):
        return f"UUID('{value}')"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)


def values(struct: ctypes.Structure) -> Dict[str, Any]:
    """A ctypes struct's fields as Python values: strings decoded, arrays as
    lists, nested structs as Records."""
    out: Dict[str, Any] = {}
    for name, ctype in struct._fields_:
        value = getattr(struct, name)
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        elif isinstance(value, ctypes.Array):
            value = bytes(value) if ctype._type_ is ctypes.c_uint8 else \
                [(Record(**values(v)) if isinstance(v, ctypes.Structure) else v) for v in value]
        elif isinstance(value, ctypes.Structure):
            value = Record(**values(value))
        out[name] = value
    return out


class GpuInfo(Record):
    """uvm_gpu_info_t."""
    name: str
    memory_total: int
    memory_free: int
    page_sizes: PageSize
    peer_mask: int
    cpu_coherent: bool
    granularity: int
    host_numa_id: int
    pci_bus_id: str
    cpus: str
    uuid: _uuid.UUID

    @classmethod
    def of(cls, struct: ctypes.Structure) -> GpuInfo:
        v = values(struct)
        v["page_sizes"] = PageSize(v["page_sizes"])
        v["cpu_coherent"] = bool(v["cpu_coherent"])
        v["uuid"] = _uuid.UUID(bytes=v["uuid"])
        return cls(**v)


class HostInfo(Record):
    """uvm_host_info_t (thp and shmem_thp by name: "never", "madvise", "always", "unknown")."""
    numa_node_count: int
    from_hwloc: bool
    thp: str
    shmem_thp: str


class NumaNodeInfo(Record):
    """uvm_numa_node_info_t."""
    id: int
    host_node: int
    memory_total: int
    memory_free: int
    cpus: str


class MemInfo(Record):
    """uvm_mem_info_t, with backing_name ("sysmem", "vidmem", "managed")."""
    size: int
    alloc_size: int
    backing: Backing
    gpu: int
    chunk_size: int
    chunk_count: int
    cpu_kernel_mapped: bool
    cpu_user_mapped: bool
    user_address: int
    gpu_phys_mask: int
    gpu_kernel_mask: int
    gpu_user_mask: int
    numa_node: int
    numa_node_mask: int
    flags: MemFlag
    gpu_kernel_address: int
    backing_name: str

    @classmethod
    def of(cls, struct: ctypes.Structure) -> MemInfo:
        v = values(struct)
        v["backing"] = Backing(v["backing"])
        v["flags"] = MemFlag(v["flags"])
        v["cpu_kernel_mapped"] = bool(v["cpu_kernel_mapped"])
        v["cpu_user_mapped"] = bool(v["cpu_user_mapped"])
        v["backing_name"] = v["backing"].name.lower()
        return cls(**v)


class GpuPhysAddress(Record):
    """uvm_gpu_phys_address_t."""
    address: int
    aperture: Aperture
    peer_gpu: int
    contiguous: bool


class HostPages(Record):
    """uvm_host_pages_t (node_bytes by node id, up to the topology's highest)."""
    resident_bytes: int
    huge_bytes: int
    node_bytes: List[int]


class Residency(Record):
    """uvm_residency_t."""
    resident: bool
    evictions: int
    restores: int
    discards: int


class ClientInfo(Record):
    """uvm_client_info_t; the vidmem_* lists have one entry per GPU."""
    name: str
    objects: int
    vidmem_used: List[int]
    vidmem_evictable: List[int]
    vidmem_budget: List[int]
    sysmem_used: int
    sysmem_budget: int
    sleepable: bool
    asleep: bool
    vidmem_asleep: List[int]
    sleep_host_bytes: int
    vidmem_cached: List[int]
    sleep_host_held: int
    sleep_host_reserve: int
    sleep_host_policy: str


class PressureEvent(Record):
    """uvm_pressure_event_t (client: the Client, or None for the GPU's held memory)."""
    gpu: int
    client: Any
    percent: int
    rising: bool
    used: int
    limit: int


class PageTreeInfo(Record):
    """uvm_page_tree_info_t (levels: Records of name, va_bit_hi, va_bit_lo, tables, bytes)."""
    level_count: int
    levels: List[Record]
    table_bytes: int
    mapped_bytes: List[int]


class GpuStats(Record):
    """uvm_gpu_stats_t (the per-size lists in uvm.CHUNK_INDEX_* order: 4K, 64K, 2M)."""
    root_chunks: int
    bytes_free: List[int]
    bytes_pinned: List[int]
    bytes_evictable: List[int]
    chunks_split: List[int]
    largest_free_block: int
    vidmem_objects: int
    phys_mappings: int
    kernel_mappings: int
    user_mappings: int
    peer_mappings: int
    page_table_bytes: int
    ce_operations: int
    ce_bytes: int
    ce_translations: int
    evictions: int
    restores: int
    bytes_evicted: int
    bytes_restored: int
    evicted_objects: int
    evicted_bytes: int
    held_bytes: int
    held_live_bytes: int
    held_cached_bytes: int
    held_pooled_bytes: int
    held_retiring_bytes: int
    held_private_bytes: int
    held_unused_bytes: int
    held_other_bytes: int
    driver_free_bytes: int
    root_chunks_grown: int
    root_chunks_moved: int
    compactions: int
    compact_objects_moved: int
    compact_bytes_moved: int
    compact_bytes_released: int
    compactions_on_oom: int
    compactions_on_oom_served: int
    compact_bytes_rebacked: int


class ManagerStats(Record):
    """uvm_manager_stats_t."""
    objects: int
    sysmem_objects: int
    sysmem_bytes: int
    cpu_kernel_mappings: int
    cpu_user_mappings: int
    managed_objects: int
    managed_bytes: int
    prefetches: int
    prefetched_bytes: int
    streams: int
    retiring_objects: int
    retiring_bytes: int
    stream_pool_bytes: int
    sleep_host_bytes: int
    sleep_host_limit: int


class TraceInfo(Record):
    """uvm_trace_info_t."""
    enabled: bool
    ring_bytes: int
    capacity: int
    recorded: int
    overwritten: int
