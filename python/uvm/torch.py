"""uvm.torch: PyTorch's CUDA memory from the library, in one line.

    import uvm.torch
    uvm.torch.enable()                      # before the first CUDA allocation
    with uvm.torch.client("kv-cache", budget="20GiB"):
        cache = torch.empty(..., device="cuda")   # charged to "kv-cache"
    uvm.torch.memory_stats(); uvm.torch.snapshot()

    with uvm.torch.client("weights", sleepable=True):
        model = build_model().cuda()        # parameters in a client that can sleep
    uvm.torch.sleep()                       # GPU memory back to the driver, bytes kept in host memory
    uvm.torch.wake()                        # back under the same addresses: every tensor still valid

enable() swaps PyTorch's CUDA caching allocator for the library's
(integrations/torch/uvm_torch_alloc.c: stream-ordered uvm_mem_alloc_gpu on
the caller's stream, uvm_mem_free_async, one manager per process). It builds
a small C++ extension against the installed PyTorch (python/uvm/_torch_ext.cpp,
cached under UVM_TORCH_EXT_DIR or ~/.cache/uvm-torch; a C++ compiler and
PyTorch's headers, no network) whose allocator raises where the library
refuses an allocation (torch.cuda.OutOfMemoryError with the library's OOM
report as its message for out of memory, RuntimeError for anything else),
makes torch.cuda.empty_cache() trim, forwards Tensor.record_stream and
accepts torch.cuda.MemPool. Where the extension cannot be built, enable()
says why and falls back to torch.cuda.memory.CUDAPluggableAllocator
(extension=False asks for that): memory still comes from the library, but
an out-of-memory returns NULL to PyTorch (which does not check it),
empty_cache does nothing and record_stream is not forwarded.
docs/integrations.md has the details.

Sleep and wake (vLLM's sleep mode, torch_memory_saver): the tensors of a
client made with sleepable=True give their GPU memory back at sleep(),
other processes may use it, and wake() takes it again under the same
addresses, so a tensor's data_ptr() and everything holding it (modules,
optimizers, CUDA graphs) stay valid. Kept bytes come back as they were,
discarded ones zeroed (a KV cache); while asleep, allocating in the client
or copying its memory through the library raises.

For diagnosis: UVM_TORCH_TRACE=1 says each refused allocation on stderr
before raising it; UVM_TORCH_NATIVE_BACKTRACE=1 prints the native stack
where the process dies of a signal (then hands the signal on to Python's
faulthandler, if on, and the default action).
"""
import contextlib
import ctypes
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import threading
from typing import Any, Dict

from . import _runtime
from .errors import Status
from .manager import _SLEEP_MODES, _enum, parse_size

_lock = threading.Lock()
_enabled = None      # "extension" or "pluggable" once enabled
_ext = None          # the built extension module
_ext_error = None    # why the extension was not used
_ext_build: Dict[str, Any] = {}  # how the extension in use was built: pools, std
_pools: Dict[str, Any] = {}      # client name -> torch.cuda.MemPool


def _flag(name):
    value = os.environ.get(name, "")
    return value not in ("", "0")


def _torch():
    import torch  # noqa: F401  (imported on use: the package works without PyTorch)
    return torch


def _extension_dir():
    base = os.environ.get("UVM_TORCH_EXT_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "uvm-torch")
    os.makedirs(base, exist_ok=True)
    return base


def _torch_cxx_std():
    """The C++ standard PyTorch's own extension builder compiles with
    (torch.utils.cpp_extension): the one its headers and libraries were made
    for. The extension's classes are PyTorch's (an allocator subclass, its
    exceptions), so it is built as PyTorch's own extensions are."""
    import inspect
    from torch.utils import cpp_extension
    try:
        text = inspect.getsource(cpp_extension)
    except (OSError, TypeError):
        return "c++17"
    return "c++20" if "-std=c++20" in text else "c++17"


# The optional parts of the C++ side (_torch_ext.cpp's UVM_WITH_* macros),
# which follow PyTorch's allocator interface as it changes between versions:
# tried with the most first, each set dropping the one least likely to match
# the installed PyTorch, down to none.
_FEATURE_SETS = [
    ("pools", "stats", "snapshot", "history", "checkpoint", "options"),
    ("pools", "stats", "snapshot", "history", "checkpoint"),
    ("pools", "stats", "snapshot", "history"),
    ("pools", "stats", "snapshot"),
    ("pools", "stats"),
    ("pools",),
    (),
]


def _build_extension(features, std="c++17"):
    """Compile python/uvm/_torch_ext.cpp against the installed PyTorch with
    the system's C++ compiler (no ninja, no network), with the optional parts
    `features` (names of _FEATURE_SETS); cached by the source's and PyTorch's
    identity."""
    torch = _torch()
    from torch.utils import cpp_extension
    import importlib.util
    src_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch_ext.cpp")
    with open(src_path, "rb") as f:
        source = f.read()
    key = hashlib.sha256(source + torch.__version__.encode() + sys.version.encode() + ",".join(features).encode()
                         + std.encode()).hexdigest()[:16]
    name = f"uvm_torch_ext_{key}"
    out = os.path.join(_extension_dir(), name + sysconfig.get_config_var("EXT_SUFFIX"))
    failed = out + ".failed"
    if os.path.exists(failed):  # this PyTorch cannot build it: said once, not rebuilt by every process
        with open(failed) as f:
            raise RuntimeError(f.read())
    if not os.path.exists(out):
        try:
            includes = cpp_extension.include_paths(device_type="cuda")
        except TypeError:  # older PyTorch
            includes = cpp_extension.include_paths(cuda=True)
        try:
            libdirs = cpp_extension.library_paths(device_type="cuda")
        except TypeError:
            libdirs = cpp_extension.library_paths(cuda=True)
        cxx = os.environ.get("CXX", "c++")
        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
        cmd = [cxx, "-O2", "-shared", "-fPIC", f"-std={std}", src_path, "-o", out + ".tmp",
               f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H",
               f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-I" + sysconfig.get_paths()["include"]]
        cmd += ["-DUVM_WITH_" + f.upper() for f in features]
        cmd += ["-I" + p for p in includes]
        cmd += ["-L" + p for p in libdirs] + ["-Wl,-rpath," + p for p in libdirs]
        cmd += ["-lc10", "-lc10_cuda", "-ltorch", "-ltorch_cpu", "-ltorch_cuda", "-ltorch_python"]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            message = "the C++ side of uvm.torch did not build:\n" + " ".join(cmd) + "\n" + run.stderr[-4000:]
            with open(failed, "w") as f:
                f.write(message)
            raise RuntimeError(message)
        os.replace(out + ".tmp", out)
    spec = importlib.util.spec_from_file_location(name, out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_extension():
    """Build (or take from the cache) and load the C++ side: the largest set
    of optional parts first (_FEATURE_SETS), at PyTorch's C++ standard, then
    at C++17. Sets _ext (None where every try failed) and _ext_error."""
    global _ext, _ext_error
    std = _torch_cxx_std()
    standards = [std] + (["c++17"] if std != "c++17" else [])
    tries = [(features, standard) for standard in standards for features in _FEATURE_SETS]
    failures = []
    for features, standard in tries:
        try:
            _ext = _build_extension(features, standard)
            _ext_build.update(pools="pools" in features, features=list(features), std=standard,
                              failed_tries=failures)
            break
        except Exception as e:  # noqa: BLE001  (any build or load failure: say it, fall back)
            failures.append(f"features={','.join(features) or 'none'} std={standard}: "
                            f"{type(e).__name__}: {str(e)[-600:]}")
            _ext_error = f"{type(e).__name__}: {e}"
    if _ext is not None:
        _ext_error = None


def build_extension():
    """Build the C++ side into its cache now, without touching a GPU or
    enabling anything: for a launcher whose processes all call enable() at
    once (torchrun's ranks), which would otherwise each build it. Returns
    extension_build(); RuntimeError with the compiler's words where no build
    works."""
    with _lock:
        if _ext is None:
            _load_extension()
        if _ext is None:
            raise RuntimeError(_ext_error)
        return extension_build()


def enable(extension=True, verbose=False):
    """Make the library PyTorch's CUDA allocator, for this process. Call it
    before the first CUDA allocation (PyTorch cannot swap an allocator that
    has allocated: RuntimeError). Returns "extension" or "pluggable" (see the
    module's text); a second call returns the same."""
    global _enabled
    torch = _torch()
    with _lock:
        if _enabled:
            return _enabled
        lib = _runtime.lib()
        _runtime.manager()  # the manager first: a failure is said here, not at the first tensor
        if extension and _ext is None:
            _load_extension()
        if extension and _ext is not None:
            a = _runtime.address
            if _flag("UVM_TORCH_NATIVE_BACKTRACE"):
                _ext.native_backtrace_on_crash()
            stats_fns = {name: a(name) for name in (
                "uvm_runtime_memory_stats", "uvm_runtime_reset_peak_stats", "uvm_runtime_reset_accumulated_stats",
                "uvm_runtime_sample_reserved", "uvm_runtime_gpu_memory", "uvm_runtime_last_new_peak",
                "uvm_runtime_enable_peer_access", "uvm_torch_malloc_to_pool", "uvm_runtime_pool_create",
                "uvm_runtime_pool_destroy", "uvm_runtime_keep", "uvm_runtime_free_kept",
                "uvm_runtime_set_memory_limit")}
            _ext.install(a("uvm_torch_malloc"), a("uvm_torch_free"), a("uvm_torch_record_stream"),
                         a("uvm_torch_empty_cache"), a("uvm_runtime_oom_message"), a("uvm_runtime_set_client"),
                         a("uvm_runtime_last_status"), _runtime.core_address("uvm_status_string"),
                         int(Status.OUT_OF_MEMORY), stats_fns)
            _enabled = "extension"
        else:
            if extension:
                print(f"uvm.torch: using the Python-only pluggable allocator ({_ext_error})", file=sys.stderr)
            alloc = torch.cuda.memory.CUDAPluggableAllocator(lib._name, "uvm_torch_malloc", "uvm_torch_free")
            torch.cuda.memory.change_current_allocator(alloc)
            _enabled = "pluggable"
            # PyTorch's enablePeerAccess does not reach a pluggable
            # allocator's memory: every linked pair gets access now.
            mgr = _runtime.manager()
            for g in range(torch.cuda.device_count()):
                for o in range(torch.cuda.device_count()):
                    if g != o and torch.cuda.can_device_access_peer(g, o):
                        mgr.enable_peer_access(g, o)
        if verbose:
            print(f"uvm.torch: enabled ({_enabled})", file=sys.stderr)
        return _enabled


def set_release_threshold(nbytes, device=None):
    """Keep at most `nbytes` of free memory cached on `device` (every GPU
    where None): uvm_gpu_set_release_threshold, cudaMallocAsync's release
    threshold. 0 holds nothing idle and gives free memory back before taking
    more (the lowest peak, some driver calls a step); None or "inf" keeps
    everything until torch.cuda.empty_cache() (the default)."""
    mgr = manager()
    n = (1 << 64) - 1 if nbytes is None or nbytes == "inf" else nbytes
    for g in ([device] if device is not None else range(mgr.gpu_count)):
        mgr.set_release_threshold(g, n)


def set_growth_slack(nbytes, device=None):
    """Hold up to `nbytes` more than the most ever needed at once on `device`
    (every GPU where None) before an allocation that no free run fits gives
    free memory back to grow (uvm_gpu_set_growth_slack). 0 holds the least,
    at the price of some driver calls a step; None or "inf" never gives it
    back (no driver call once the pool is warm); 256 MiB by default."""
    mgr = manager()
    for g in ([device] if device is not None else range(mgr.gpu_count)):
        mgr.set_growth_slack(g, "inf" if nbytes is None else nbytes)


def enabled():
    """"extension", "pluggable", or None."""
    return _enabled


def extension_error():
    """Why the C++ side was not used (None where it was)."""
    return _ext_error


def extension_build():
    """How the C++ side in use was built: {"pools": bool, "features": the
    optional parts it has (_FEATURE_SETS: "pools", "stats", "snapshot",
    "history", "checkpoint", "options"), "std": "c++17" or "c++20", "failed_tries": why
    the builds tried before it failed}; {} without it."""
    return dict(_ext_build)


def checkpoint_counts() -> Dict[str, int]:
    """Checkpoints of CUDA graph pools that PyTorch's graph trees
    (torch.compile(mode="reduce-overhead")) took and set since enable():
    {"taken": n, "set": n}; zeros without the C++ side's checkpoints."""
    if _ext is None or not hasattr(_ext, "checkpoint_counts"):
        return {"taken": 0, "set": 0}
    return {k: int(v) for k, v in _ext.checkpoint_counts().items()}


def manager():
    """The process's uvm.Manager (shared with uvm.cupy and uvm.numba)."""
    return _runtime.manager()


@contextlib.contextmanager
def client(name, budget=None, gpu=None, sleepable=False):
    """Tensors made inside are the client `name`'s and count against its
    budget on `gpu` (default: the current device). With the C++ side, a
    torch.cuda.MemPool is entered too (torch.cuda.use_mem_pool), whose
    allocations the library charges to the client from any thread that
    enters it; either way the calling thread's allocations are charged.
    UVM_TORCH_MEMPOOL=0: the thread's allocations only, no MemPool.
    sleepable: the client can sleep() and wake(); asked for where the name
    is first used (ValueError for a name made without it); later blocks
    may leave it out. With the C++ side, a CUDA graph captured inside a
    sleepable client's block (torch.cuda.graph with its own pool) is the
    client's memory too: it sleeps and wakes with the client and replays
    after the wake; blocks freed in the graph's pool stay its own until
    the graph is gone."""
    torch = _torch()
    if gpu is None:
        gpu = torch.cuda.current_device()
    c = _runtime.named_client(name, budget=parse_size(budget) if budget is not None else None, gpu=gpu,
                              sleepable=sleepable)
    pool = None
    if _ext is not None and _ext.pools and os.environ.get("UVM_TORCH_MEMPOOL", "1") != "0":
        torch.cuda.init()  # the pool's device is the current one: CUDA first
        pool = _pools.get(name)
        if pool is None:
            pool = torch.cuda.MemPool()
            _pools[name] = pool  # kept: tensors of the pool may outlive the block
            # ... and never destroyed, not even at interpreter exit: ~MemPool
            # empties the pool through the allocator, which by then may be
            # torn down with the CUDA context.
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(pool))
            first, second = pool.id
            _ext.register_pool(int(first), int(second), c.handle.value)
    if _enabled == "extension" and hasattr(_ext, "register_sleepable_client") and name in _runtime.sleepable_clients():
        _ext.register_sleepable_client(c.handle.value)  # graphs captured in it sleep with it
    previous = _runtime.lib().uvm_runtime_set_client(c.handle.value)
    try:
        if pool is not None:
            with torch.cuda.use_mem_pool(pool):
                yield c
        else:
            yield c
    finally:
        _runtime.lib().uvm_runtime_set_client(previous)


def _sleepable(names):
    """The sleepable clients called `names` (None: every one made)."""
    clients = _runtime.sleepable_clients()
    if names is None:
        return list(clients.values())
    if isinstance(names, str):
        names = [names]
    missing = [n for n in names if n not in clients]
    if missing:
        raise ValueError(f"no sleepable client {', '.join(map(repr, missing))} (uvm.torch.client(name, "
                         f"sleepable=True) makes one; made: {', '.join(map(repr, clients)) or 'none'})")
    return [clients[n] for n in names]


def sleep(names=None, mode="keep", discard_tags=None):
    """Put the sleepable clients `names` (a name or a list; None: every
    sleepable client made through client()) to sleep: their GPU memory goes
    back to the driver (torch.cuda.mem_get_info counts it free; another
    process may take it), every tensor keeps its address. mode "keep"
    (uvm.SLEEP_KEEP): the bytes go to host memory and come back at the
    wake (weights); "discard" (uvm.SLEEP_DISCARD): they are dropped and come
    back zeroed (a KV cache). discard_tags: objects allocated with one of
    these tags are discarded whatever `mode` (PyTorch's tensors carry no
    tag: give a KV cache a client of its own and sleep it with "discard").

    torch.cuda.synchronize() first, on every device where the clients have
    memory: the library waits for the streams it tracks (those PyTorch
    allocated on), but PyTorch work on other streams, or work queued with
    no allocation of its own, may still read or write the tensors and must
    be done before their memory goes. Tensors of a sleeping client must not
    be used until wake(); allocating in the client raises. Returns the
    bytes given back (vidmem_asleep, summed). Clients put to sleep by this
    call wake again if another of them cannot sleep, and the error is
    raised."""
    torch = _torch()
    mode = _enum(_SLEEP_MODES, mode, "sleep mode")  # ValueError before anything is done
    targets = _sleepable(names)
    devices = {torch.cuda.current_device()}
    for c in targets:
        devices |= {g for g, used in enumerate(c.info().vidmem_used) if used}
    for d in sorted(devices):
        torch.cuda.synchronize(d)
    slept = []
    try:
        for c in targets:
            if not c.info().asleep:
                c.sleep(mode, tags=discard_tags, tags_mode="discard" if discard_tags else None)
                slept.append(c)
    except BaseException:
        for c in slept:
            try:
                c.wake()
            except Exception:  # noqa: BLE001  (the sleep's error is the one to raise; it stays asleep)
                pass
        raise
    return sum(sum(c.info().vidmem_asleep) for c in targets)


def sleep_policy(names=None, host="keep", reserve=0, pin_threads=0):
    """Set what the sleepable clients `names` (None: every one made through
    client()) do with their backups, the pinned host memory their kept
    bytes go to (Client.set_sleep_policy): host "keep" holds it after the
    wake for the next sleep, "release" gives it back to the system (the
    process's resident memory falls back); `reserve` (bytes or "10GiB", per
    client) is made ready now, so that the first sleep runs at the copy
    engine's speed too. uvm.UvmError HOST_LIMIT where a reserve would pass
    set_sleep_host_limit's limit (that client's policy unchanged)."""
    for c in _sleepable(names):
        c.set_sleep_policy(host=host, reserve=reserve, pin_threads=pin_threads)


def set_sleep_host_limit(limit):
    """The most pinned host memory the backups of every sleepable client
    may hold together (0: none); a sleep() past it raises HOST_LIMIT and
    changes nothing."""
    manager().set_sleep_host_limit(limit)


def wake(names=None):
    """Wake the sleepable clients `names` (None: every one made through
    client()): their memory comes back under the same addresses, kept
    bytes as they were, discarded ones zeroed; the tensors are usable
    again at once, nothing else to do. Returns the bytes brought back.
    OUT_OF_MEMORY (uvm.UvmError) where the GPU or a client's budget has not
    the room (the client stays asleep; free memory and call it again)."""
    targets = _sleepable(names)
    total = 0
    for c in targets:
        asleep = sum(c.info().vidmem_asleep)
        c.wake()
        total += asleep
    return total


def memory_stats(device=None):
    """The library's figures under torch.cuda.memory_stats()'s keys where
    they mean the same, with their peaks and totals (".current", ".peak",
    ".allocated", ".freed"), plus "uvm.*" keys of its own. What went through
    the runtimes' allocator (PyTorch, and CuPy and Numba when enabled too):
    allocation (objects), allocated_bytes and active_bytes (their sizes as
    the library made them), requested_bytes (the sizes asked for); what the
    library holds: reserved_bytes (GPU memory held from the driver, every
    client of the manager's), inactive_split_bytes (free chunks it holds).
    With the C++ side these are what torch.cuda.memory_stats() returns too
    (only the "all" figures: the library has no small and large pools).
    Reset with torch.cuda.reset_peak_memory_stats() or reset_peaks()."""
    torch = _torch()
    if device is None:
        device = torch.cuda.current_device()
    mgr = manager()
    g = mgr.gpu_stats(device)
    r = _runtime.memory_stats(device)
    stats = {}
    for key, stat in (("allocation", r.allocations), ("active", r.allocations),
                      ("allocated_bytes", r.allocated_bytes), ("active_bytes", r.allocated_bytes),
                      ("requested_bytes", r.requested_bytes), ("reserved_bytes", r.reserved_bytes)):
        for part in ("current", "peak", "allocated", "freed"):
            stats[f"{key}.all.{part}"] = int(getattr(stat, part))
    stats.update({
        "inactive_split_bytes.all.current": g.held_cached_bytes,
        "num_ooms": int(r.num_ooms),
        "uvm.kernel_mappings": g.kernel_mappings,
        "uvm.evictions": g.evictions,
        "uvm.driver_free_bytes": g.driver_free_bytes,
        "uvm.compact.runs": g.compactions,
        "uvm.compact.objects_moved": g.compact_objects_moved,
        "uvm.compact.bytes_moved": g.compact_bytes_moved,
        "uvm.compact.bytes_released": g.compact_bytes_released,
        "uvm.compact.bytes_rebacked": g.compact_bytes_rebacked,
    })
    for part in ("live", "cached", "pooled", "retiring", "private", "unused", "other"):
        stats[f"uvm.held.{part}_bytes"] = getattr(g, f"held_{part}_bytes")
    stats["uvm.asleep_bytes"] = 0  # of sleeping clients, given back to the driver (sleep())
    for name, c in list(_runtime._clients.items()):
        info = c.info()
        stats[f"uvm.client.{name}.used_bytes"] = info.vidmem_used[device]
        stats[f"uvm.client.{name}.budget_bytes"] = info.vidmem_budget[device]
        if info.sleepable:
            stats[f"uvm.client.{name}.asleep_bytes"] = info.vidmem_asleep[device]
            stats[f"uvm.client.{name}.sleep_host_bytes"] = info.sleep_host_held
            stats["uvm.asleep_bytes"] += info.vidmem_asleep[device]
    return stats


def compact(device=None, release=True):
    """Move the library's live tensors of `device` (default: the current
    one) behind their addresses so that the free memory between them comes
    together in whole root chunks, given back to the driver (`release`) or
    kept for later allocations. Synchronizes the device first, since the
    library does not track the kernels PyTorch launches on its tensors; no
    kernel may run on them until it returns, on this GPU or on a peer that
    reads them (synchronize those first: their memory may be unmapped for a
    moment). A tensor whose address is a view
    of its physical memory stays where it is: on CUDA every tensor of
    PyTorch's allocator is one (its pointer is the kernel mapping), so there
    nothing moves, but with `release` what the library keeps cached goes back
    first (empty_cache) and each driver allocation that live tensors hold
    part of shrinks to their root chunks, copied at the same addresses
    (uvm_pressure.h, UVM_COMPACT_RELEASE). What moved, stayed and was given
    back (Manager.gpu_compact's fields: bytes_rebacked, driver_held_before
    and driver_held_after for the shrinking); the totals are in
    memory_stats() ("uvm.compact.*")."""
    torch = _torch()
    if device is None:
        device = torch.cuda.current_device()
    device = int(device)
    torch.cuda.synchronize(device)
    if release:
        empty_cache()  # memory freed on streams and cached holds chunks no tensor owns
    return manager().gpu_compact(device, release=bool(release))


def reset_peaks(device=None):
    """Peaks back to the current figures (what torch.cuda.reset_peak_memory_stats
    does with the C++ side)."""
    torch = _torch()
    _runtime.lib().uvm_runtime_reset_peak_stats(torch.cuda.current_device() if device is None else int(device))


def snapshot():
    """The manager's snapshot (uvm_manager_snapshot), parsed: GPUs, clients,
    objects by owner, streams. What torch.cuda.memory_snapshot() gives for
    the caching allocator, in the library's terms."""
    return json.loads(manager().snapshot())


def empty_cache():
    """Give what the library holds free back to the driver (what
    torch.cuda.empty_cache() does with the C++ side); the bytes given back."""
    return int(_runtime.lib().uvm_torch_empty_cache())


def oom_report():
    """This thread's last out-of-memory report ("" if none)."""
    return _runtime.oom_message()
