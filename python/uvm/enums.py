"""The C API's enums and flag sets as IntEnum and IntFlag: each member equals
its C value (uvm.Backing.VIDMEM == 1), so they go wherever the ints went,
and results read by name (MemInfo.backing is Backing.VIDMEM, GpuInfo.page_sizes
PageSize.SIZE_4K | PageSize.SIZE_64K | PageSize.SIZE_2M).

The package's old constants (uvm.BACKING_VIDMEM, uvm.MEM_ZERO, ...) are these
members under their C names."""
from __future__ import annotations

import enum

from . import _capi


class Backend(enum.IntEnum):
    """uvm_backend_kind_t."""
    AUTO = _capi.BACKEND_AUTO
    SIM = _capi.BACKEND_SIM
    CUDA = _capi.BACKEND_CUDA


class Backing(enum.IntEnum):
    """uvm_backing_t: where an object's memory is."""
    SYSMEM = _capi.BACKING_SYSMEM
    VIDMEM = _capi.BACKING_VIDMEM
    MANAGED = _capi.BACKING_MANAGED


class PageSize(enum.IntFlag):
    """UVM_PAGE_SIZE_*: a page or chunk size, and masks of them (what a GPU supports)."""
    SIZE_4K = _capi.PAGE_SIZE_4K
    SIZE_64K = _capi.PAGE_SIZE_64K
    SIZE_2M = _capi.PAGE_SIZE_2M


class MemFlag(enum.IntFlag):
    """UVM_MEM_*: allocation flags."""
    ZERO = _capi.MEM_ZERO
    EVICTABLE = _capi.MEM_EVICTABLE
    USER_MAPPABLE = _capi.MEM_USER_MAPPABLE
    GPU_MAPPED = _capi.MEM_GPU_MAPPED
    DISCARDABLE = _capi.MEM_DISCARDABLE


class PlacementKind(enum.IntEnum):
    """uvm_placement_kind_t: where a sysmem object's pages go."""
    GPU_LOCAL = _capi.PLACEMENT_GPU_LOCAL
    NODE = _capi.PLACEMENT_NODE
    INTERLEAVE = _capi.PLACEMENT_INTERLEAVE
    ANY = _capi.PLACEMENT_ANY


class Aperture(enum.IntEnum):
    """uvm_aperture_t: how a GPU reaches a physical address."""
    VID = _capi.APERTURE_VID
    PEER = _capi.APERTURE_PEER
    SYS = _capi.APERTURE_SYS


class View(enum.IntEnum):
    """uvm_gpu_view_t: how the copy engine reaches one side of a copy."""
    KERNEL = _capi.VIEW_KERNEL
    USER = _capi.VIEW_USER
    PHYSICAL = _capi.VIEW_PHYSICAL


class SleepMode(enum.IntEnum):
    """uvm_sleep_mode_t: what a client's sleep does with an object's bytes."""
    DEFAULT = _capi.SLEEP_DEFAULT
    KEEP = _capi.SLEEP_KEEP
    DISCARD = _capi.SLEEP_DISCARD


class SleepHost(enum.IntEnum):
    """uvm_sleep_host_t: what a sleeping client's host copy holds on to."""
    KEEP = _capi.SLEEP_HOST_KEEP
    RELEASE = _capi.SLEEP_HOST_RELEASE


class Advice(enum.IntEnum):
    """uvm_managed_advice_t."""
    SET_READ_MOSTLY = _capi.ADVISE_SET_READ_MOSTLY
    UNSET_READ_MOSTLY = _capi.ADVISE_UNSET_READ_MOSTLY
    SET_PREFERRED_LOCATION = _capi.ADVISE_SET_PREFERRED_LOCATION
    UNSET_PREFERRED_LOCATION = _capi.ADVISE_UNSET_PREFERRED_LOCATION
    SET_ACCESSED_BY = _capi.ADVISE_SET_ACCESSED_BY
    UNSET_ACCESSED_BY = _capi.ADVISE_UNSET_ACCESSED_BY


def flag_names(value: enum.IntFlag) -> str:
    """"SIZE_4K|SIZE_2M" for a flag set (every Python version's way), "0" for none."""
    names = [m.name for m in type(value) if m.value and (value & m) == m and m.name]
    rest = int(value) & ~sum(int(m) for m in type(value))
    if rest:
        names.append(hex(rest))
    return "|".join(names) or "0"
