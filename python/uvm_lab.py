"""Python bindings of the page-size lab (include/uvm/uvm_lab.h), with ctypes.

    import uvm_lab
    lab = uvm_lab.Lab(uvm_lab.Model(l2_entries=2048, l2_ways=16), uvm_lab.PAGES_2M)
    lab.allocate(1 << 40, 256 << 20)
    lab.run(uvm_lab.Workload(uvm_lab.RANDOM, footprint=256 << 20, accesses=100000), 1 << 40)
    print(lab.stats().l2_misses)

The library: the one the `uvm` package loaded (uvm.lab), else UVM_LIBRARY (a
path to libuvm.so), else the build tree beside this folder (build/libuvm.so),
else the loader's search.
"""
import ctypes
import os

PAGES_4K, PAGES_64K, PAGES_2M, ADAPTIVE, MOSAIC = range(5)
POLICY_NAMES = {PAGES_4K: "4K", PAGES_64K: "64K", PAGES_2M: "2M", ADAPTIVE: "adaptive", MOSAIC: "mosaic"}
SEQUENTIAL, RANDOM, STRIDED, POINTER_CHASE, GRAPH_WALK, GROWING_SET = range(6)

_STATUS_OK = 0


class Model(ctypes.Structure):
    _fields_ = [("sms", ctypes.c_uint32),
                ("l1_entries", ctypes.c_uint32), ("l1_ways", ctypes.c_uint32),
                ("l2_entries", ctypes.c_uint32), ("l2_ways", ctypes.c_uint32),
                ("pwc_entries", ctypes.c_uint32),
                ("l1_hit_ns", ctypes.c_double), ("l2_hit_ns", ctypes.c_double), ("walk_ref_ns", ctypes.c_double),
                ("gpu_memory", ctypes.c_uint64), ("coalesce_bytes", ctypes.c_uint64),
                ("random_replacement", ctypes.c_int32), ("reserved", ctypes.c_uint32)]

    def __init__(self, sms=132, l1_entries=16, l1_ways=16, l2_entries=2048, l2_ways=16, pwc_entries=64,
                 l1_hit_ns=1.0, l2_hit_ns=10.0, walk_ref_ns=100.0, gpu_memory=0, coalesce_bytes=0,
                 random_replacement=False):
        """The defaults are uvm-lab's example model for teaching, not a measured GPU
        (Model.preset("h100") gives the one calibrated on an H100)."""
        super().__init__(sms, l1_entries, l1_ways, l2_entries, l2_ways, pwc_entries,
                         l1_hit_ns, l2_hit_ns, walk_ref_ns, gpu_memory, coalesce_bytes, int(random_replacement), 0)

    @staticmethod
    def preset(name):
        """A named machine: "example", "h100" or "h200"."""
        m = Model()
        status = _lib().uvm_lab_preset(name.encode(), ctypes.byref(m))
        if status != _STATUS_OK:
            raise LabError("uvm_lab_preset", status, name)
        return m


class Access(ctypes.Structure):
    _fields_ = [("address", ctypes.c_uint64), ("size", ctypes.c_uint32), ("processor", ctypes.c_uint32),
                ("write", ctypes.c_int32), ("reserved", ctypes.c_uint32)]


class Workload(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_int), ("footprint", ctypes.c_uint64), ("accesses", ctypes.c_uint64),
                ("stride", ctypes.c_uint64), ("processors", ctypes.c_uint32), ("access_size", ctypes.c_uint32),
                ("seed", ctypes.c_uint64)]

    def __init__(self, pattern, footprint, accesses, stride=0, processors=1, access_size=8, seed=1):
        super().__init__(pattern, footprint, accesses, stride, processors, access_size, seed)


class Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "accesses", "l1_misses", "l2_misses", "pwc_hits", "walk_refs", "unmapped",
        "allocated_bytes", "touched_bytes", "page_table_bytes", "coalesced_frames",
        "faults", "bytes_migrated_in", "bytes_migrated_out")] + \
        [("time_l1_ns", ctypes.c_double), ("time_l2_ns", ctypes.c_double), ("time_walks_ns", ctypes.c_double),
         ("time_mapping_ns", ctypes.c_double), ("time_migration_ns", ctypes.c_double)]

    def l2_miss_rate(self):
        return self.l2_misses / self.accesses if self.accesses else 0.0


_LIB = None
# The `uvm` package sets it to the library it loaded, tried first so that
# uvm.lab uses that one (a wheel's bundled library wins over UVM_LIBRARY).
LIBRARY = None


def _lib():
    global _LIB
    if _LIB is None:
        here = os.path.dirname(os.path.abspath(__file__))
        candidates = [LIBRARY, os.environ.get("UVM_LIBRARY"), os.path.join(here, "..", "build", "libuvm.so"), "libuvm.so"]
        lib, last = None, None
        for path in candidates:
            if not path:
                continue
            try:
                lib = ctypes.CDLL(path)
                break
            except OSError as e:
                last = e
        if lib is None:
            raise OSError(f"libuvm.so not found (set UVM_LIBRARY): {last}")
        lib.uvm_status_string.restype = ctypes.c_char_p
        lib.uvm_status_string.argtypes = [ctypes.c_int]
        lib.uvm_lab_create.argtypes = [ctypes.POINTER(Model), ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
        lib.uvm_lab_destroy.argtypes = [ctypes.c_void_p]
        lib.uvm_lab_allocate.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]
        lib.uvm_lab_free.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        lib.uvm_lab_access.argtypes = [ctypes.c_void_p, ctypes.POINTER(Access), ctypes.c_size_t]
        lib.uvm_lab_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(Workload), ctypes.c_uint64]
        lib.uvm_lab_replay.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.uvm_lab_stats.argtypes = [ctypes.c_void_p, ctypes.POINTER(Stats)]
        lib.uvm_lab_preset.argtypes = [ctypes.c_char_p, ctypes.POINTER(Model)]
        lib.uvm_lab_set_costs.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_size_t]
        _LIB = lib
    return _LIB


class LabError(Exception):
    def __init__(self, call, status, detail=""):
        text = _lib().uvm_status_string(status).decode()
        super().__init__(f"{call}: {text}" + (f" ({detail})" if detail else ""))
        self.status = status


class Lab:
    """One simulator: a machine model and a page-size policy. Not thread-safe."""

    def __init__(self, model=None, policy=PAGES_4K):
        self._handle = ctypes.c_void_p()
        status = _lib().uvm_lab_create(ctypes.byref(model or Model()), policy, ctypes.byref(self._handle))
        if status != _STATUS_OK:
            self._handle = None
            raise LabError("uvm_lab_create", status)

    def close(self):
        if self._handle:
            _lib().uvm_lab_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check(self, call, status, detail=""):
        if status != _STATUS_OK:
            raise LabError(call, status, detail)

    def allocate(self, base, size):
        self._check("uvm_lab_allocate", _lib().uvm_lab_allocate(self._handle, base, size))

    def free(self, base):
        self._check("uvm_lab_free", _lib().uvm_lab_free(self._handle, base))

    def access(self, addresses, size=8, processor=0, write=False):
        """Replay reads (or writes) of `size` bytes at each address."""
        array = (Access * len(addresses))(*[Access(a, size, processor, int(write), 0) for a in addresses])
        self._check("uvm_lab_access", _lib().uvm_lab_access(self._handle, array, len(addresses)))

    def run(self, workload, base):
        self._check("uvm_lab_run", _lib().uvm_lab_run(self._handle, ctypes.byref(workload), base))

    def replay(self, path):
        error = ctypes.create_string_buffer(256)
        status = _lib().uvm_lab_replay(self._handle, path.encode(), error, len(error))
        self._check("uvm_lab_replay", status, error.value.decode())

    def set_costs(self, device, path=None):
        """Charge pinning and migration at `device`'s calibrated costs (lab/calibration.csv or `path`)."""
        error = ctypes.create_string_buffer(256)
        status = _lib().uvm_lab_set_costs(self._handle, path.encode() if path else None, device.encode(), error,
                                          len(error))
        self._check("uvm_lab_set_costs", status, error.value.decode())

    def stats(self):
        s = Stats()
        self._check("uvm_lab_stats", _lib().uvm_lab_stats(self._handle, ctypes.byref(s)))
        return s
