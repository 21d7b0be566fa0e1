"""The runtimes' integrations (uvm.torch, uvm.cupy, uvm.numba) and the
allocator library under them.

In CI (no GPU, no PyTorch/CuPy/Numba) the library runs on sim
(UVM_BACKEND=sim) and the runtime parts skip with the reason; on a GPU
machine with the runtimes installed, tools/torch_check.sh runs the real
thing (bench/train_torch.py)."""
import ctypes
import importlib.util
import os
import sys
import threading
import types
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import uvm  # noqa: E402
from uvm import _runtime  # noqa: E402

M = 1 << 20


def have(module):
    return importlib.util.find_spec(module) is not None


class TheAllocatorLibrary(unittest.TestCase):
    """The C symbols the runtimes call, from Python, on the process's manager."""

    def test_one_manager_per_process_that_python_can_use(self):
        mgr = _runtime.manager()
        self.assertIs(_runtime.manager(), mgr)
        self.assertEqual(_runtime.lib().uvm_runtime_manager(None), mgr.handle.value)
        self.assertGreaterEqual(mgr.gpu_count, 1)
        # A second wrapper of the same handle forgets it on close; the manager lives on.
        other = uvm.Manager.adopt(mgr.handle)
        other.close()
        self.assertTrue(other.closed)
        self.assertGreaterEqual(mgr.gpu_count, 1)

    def test_torch_symbols_allocate_find_and_free(self):
        lib = _runtime.lib()
        self.assertIsNone(lib.uvm_torch_malloc(0, 0, None))
        self.assertEqual(_runtime.last_status(), uvm.Status.OK)  # size 0 is no failure
        self.assertIsNone(lib.uvm_torch_malloc(M, 64, None))
        self.assertEqual(_runtime.last_status(), uvm.Status.INVALID_GPU)
        p = lib.uvm_torch_malloc(3 * M, 0, None)
        self.assertTrue(p)
        self.assertEqual(_runtime.last_status(), uvm.Status.OK)
        m = uvm.Manager.adopt(lib.uvm_runtime_manager(None))
        found, offset = m.lookup_gpu_kernel(p + 5, gpu=0)
        self.assertEqual(offset, 5)
        self.assertEqual(found.info().size, 3 * M)
        lib.uvm_torch_free(p, 3 * M, 0, None)
        self.assertIsNone(m.lookup_gpu_kernel(p, gpu=0))

    def test_a_client_budget_gives_an_oom_with_its_report(self):
        lib = _runtime.lib()
        client = _runtime.named_client("py-tenant", budget=4 * M, gpu=0)
        previous = _runtime.set_client(client)
        try:
            held = lib.uvm_torch_malloc(3 * M, 0, None)
            self.assertTrue(held)
            before = lib.uvm_runtime_oom_count()
            self.assertIsNone(lib.uvm_torch_malloc(2 * M, 0, None))
            self.assertEqual(lib.uvm_runtime_oom_count(), before + 1)
            # What tells this NULL from any other (the C++ side raises
            # torch.cuda.OutOfMemoryError only for it): this thread's own.
            self.assertEqual(_runtime.last_status(), uvm.Status.OUT_OF_MEMORY)
            seen = []
            other = threading.Thread(target=lambda: seen.append(_runtime.last_status()))
            other.start()
            other.join()
            self.assertEqual(seen, [uvm.Status.OK])
            self.assertIn("py-tenant", _runtime.oom_message())
            self.assertEqual(client.info().objects, 1)
        finally:
            lib.uvm_runtime_set_client(previous)
        lib.uvm_torch_free(held, 3 * M, 0, None)
        self.assertEqual(client.info().objects, 0)

    def test_a_sleepable_client_keeps_its_pointers_across_sleep_and_wake(self):
        lib = _runtime.lib()
        model = _runtime.named_client("py-sleeper", sleepable=True)
        self.assertTrue(model.sleepable)
        self.assertIs(_runtime.named_client("py-sleeper"), model)  # later uses need not ask again
        self.assertIs(_runtime.sleepable_clients()["py-sleeper"], model)
        plain = _runtime.named_client("py-awake")
        self.assertNotIn("py-awake", _runtime.sleepable_clients())
        with self.assertRaises(ValueError) as cm:
            _runtime.named_client("py-awake", sleepable=True)  # made not sleepable: said, not ignored
        self.assertIn("py-awake", str(cm.exception))
        self.assertFalse(plain.info().sleepable)
        previous = _runtime.set_client(model)
        try:
            p = lib.uvm_torch_malloc(3 * M, 0, None)
            self.assertTrue(p)
        finally:
            lib.uvm_runtime_set_client(previous)
        m = _runtime.manager()
        mem, _ = m.lookup_gpu_kernel(p, gpu=0)
        host = m.alloc(3 * M)
        host.map_cpu_kernel()
        host.map_gpu_kernel(0)
        data = bytes(range(256)) * (3 * M // 256)
        host.write(data)
        m.copy(mem, host, 3 * M)
        model.sleep()
        self.assertEqual(model.info().vidmem_asleep[0], mem.info().alloc_size)
        previous = _runtime.set_client(model)
        try:
            self.assertIsNone(lib.uvm_torch_malloc(M, 0, None))  # allocating in an asleep client
            self.assertEqual(_runtime.last_status(), uvm.Status.ASLEEP)
        finally:
            lib.uvm_runtime_set_client(previous)
        model.wake()
        found, offset = m.lookup_gpu_kernel(p, gpu=0)
        self.assertEqual((found.handle.value, offset), (mem.handle.value, 0))
        self.assertEqual(mem.gpu_kernel_address(0), p)
        m.memset(host, 0, 3 * M)
        m.copy(host, mem, 3 * M)
        self.assertEqual(host.read(), data)
        host.free()
        lib.uvm_torch_free(p, 3 * M, 0, None)
        self.assertEqual(model.info().objects, 0)

    def test_uvm_torch_sleep_and_wake_over_a_stand_in_for_torch(self):
        # uvm.torch's sleep, wake, client and memory_stats need of PyTorch only
        # torch.cuda's device calls: a stand-in says which were made, and when.
        import uvm.torch
        m = _runtime.manager()
        synced = []
        cuda = types.SimpleNamespace(current_device=lambda: 0, init=lambda: None,
                                     synchronize=lambda device=None: synced.append(
                                         (device, {n: c.info().asleep for n, c in _runtime.sleepable_clients().items()
                                                   if n.startswith("torch-")})))
        lib = _runtime.lib()
        with mock.patch.object(uvm.torch, "_torch", lambda: types.SimpleNamespace(cuda=cuda)):
            with uvm.torch.client("torch-weights", sleepable=True) as weights:
                w = lib.uvm_torch_malloc(2 * M, 0, None)
            with uvm.torch.client("torch-kv", sleepable=True) as kv:
                k = lib.uvm_torch_malloc(4 * M, 0, None)
            self.assertTrue(w and k)
            self.assertEqual((weights.info().vidmem_used[0], kv.info().vidmem_used[0]), (2 * M, 4 * M))
            host = m.alloc(4 * M)
            host.map_cpu_kernel()
            host.map_gpu_kernel(0)
            host.write(b"\x5a" * (4 * M))
            for p, size in ((w, 2 * M), (k, 4 * M)):
                m.copy(m.lookup_gpu_kernel(p)[0], host, size)
            self.assertRaises(ValueError, uvm.torch.sleep, mode="snooze")
            self.assertRaises(ValueError, uvm.torch.sleep, ["no-such-client"])
            self.assertEqual(synced, [])  # refused before anything was done
            self.assertEqual(uvm.torch.sleep(["torch-kv"], mode="discard"), 4 * M)
            self.assertEqual(synced, [(0, {"torch-weights": False, "torch-kv": False})])  # synchronized first
            self.assertTrue(kv.info().asleep)
            self.assertFalse(weights.info().asleep)
            gathered = uvm.torch.sleep()  # every sleepable client: the weights now, the KV cache asleep already
            self.assertGreaterEqual(gathered, 6 * M)
            self.assertTrue(weights.info().asleep)
            stats = uvm.torch.memory_stats()
            self.assertEqual(stats["uvm.client.torch-weights.asleep_bytes"], 2 * M)
            self.assertEqual(stats["uvm.client.torch-kv.asleep_bytes"], 4 * M)
            self.assertGreaterEqual(stats["uvm.asleep_bytes"], 6 * M)
            self.assertEqual(stats["uvm.compact.bytes_rebacked"], 0)  # the sim's roots are allocations of their own
            with uvm.torch.client("torch-weights"):  # asleep: no tensor for it
                self.assertIsNone(lib.uvm_torch_malloc(M, 0, None))
                self.assertEqual(_runtime.last_status(), uvm.Status.ASLEEP)
            self.assertGreaterEqual(uvm.torch.wake(), 6 * M)
            self.assertFalse(weights.info().asleep or kv.info().asleep)
            self.assertEqual(uvm.torch.memory_stats()["uvm.asleep_bytes"], 0)
            with self.assertRaises(ValueError):
                with uvm.torch.client("py-awake-torch"):
                    pass
                with uvm.torch.client("py-awake-torch", sleepable=True):
                    pass
        for p, size, want in ((w, 2 * M, b"\x5a"), (k, 4 * M, b"\x00")):
            mem, offset = m.lookup_gpu_kernel(p)
            self.assertEqual((offset, mem.gpu_kernel_address(0)), (0, p))  # the same pointer
            m.memset(host, 0xEE, size)
            m.copy(host, mem, size)
            self.assertEqual(host.read(0, size), want * size, size)  # kept, or back zeroed
        host.free()
        lib.uvm_torch_free(w, 2 * M, 0, None)
        lib.uvm_torch_free(k, 4 * M, 0, None)

    def test_uvm_torch_memory_stats_keep_peaks(self):
        # uvm.torch.memory_stats: the allocator's figures under PyTorch's keys,
        # peaks kept after the frees until reset (torch only for the device).
        import uvm.torch
        cuda = types.SimpleNamespace(current_device=lambda: 0)
        lib = _runtime.lib()
        with mock.patch.object(uvm.torch, "_torch", lambda: types.SimpleNamespace(cuda=cuda)):
            uvm.torch.reset_peaks()
            before = uvm.torch.memory_stats()
            self.assertEqual(before["allocated_bytes.all.peak"], before["allocated_bytes.all.current"])
            a = lib.uvm_torch_malloc(3 * M + 1, 0, None)
            b = lib.uvm_torch_malloc(5 * M, 0, None)
            self.assertTrue(a and b)
            made = sum(_runtime.manager().lookup_gpu_kernel(p)[0].info().alloc_size for p in (a, b))
            during = uvm.torch.memory_stats()
            self.assertEqual(during["allocation.all.current"] - before["allocation.all.current"], 2)
            self.assertEqual(during["allocated_bytes.all.current"] - before["allocated_bytes.all.current"], made)
            self.assertEqual(during["requested_bytes.all.current"] - before["requested_bytes.all.current"], 8 * M + 1)
            self.assertEqual(during["reserved_bytes.all.current"], _runtime.manager().gpu_stats(0).held_bytes)
            lib.uvm_torch_free(a, 3 * M + 1, 0, None)
            lib.uvm_torch_free(b, 5 * M, 0, None)
            after = uvm.torch.memory_stats()
            self.assertEqual(after["allocated_bytes.all.current"], before["allocated_bytes.all.current"])
            self.assertEqual(after["allocated_bytes.all.peak"], during["allocated_bytes.all.current"])
            self.assertGreaterEqual(after["reserved_bytes.all.peak"], during["reserved_bytes.all.current"])
            uvm.torch.reset_peaks()
            self.assertEqual(uvm.torch.memory_stats()["allocated_bytes.all.peak"], after["allocated_bytes.all.current"])

    def test_uvm_torch_sleep_policy_and_host_limit(self):
        # The backups' policy and limit through uvm.torch: a reserve made
        # ready at once, released at the wake, the limit refusing a sleep.
        import uvm.torch
        cuda = types.SimpleNamespace(current_device=lambda: 0, init=lambda: None, synchronize=lambda device=None: None)
        lib = _runtime.lib()
        with mock.patch.object(uvm.torch, "_torch", lambda: types.SimpleNamespace(cuda=cuda)):
            with uvm.torch.client("torch-policy", sleepable=True) as c:
                p = lib.uvm_torch_malloc(4 * M, 0, None)
            self.assertTrue(p)
            self.assertRaises(ValueError, uvm.torch.sleep_policy, "torch-policy", host="hibernate")
            self.assertRaises(ValueError, uvm.torch.sleep_policy, "no-such-client")
            uvm.torch.sleep_policy("torch-policy", host="release", reserve="2MiB")
            info = c.info()
            self.assertEqual((info.sleep_host_policy, info.sleep_host_reserve, info.sleep_host_held),
                             ("release", 2 * M, 2 * M))
            self.assertEqual(uvm.torch.memory_stats()["uvm.client.torch-policy.sleep_host_bytes"], 2 * M)
            uvm.torch.set_sleep_host_limit("3MiB")
            with self.assertRaises(uvm.UvmError) as cm:
                uvm.torch.sleep("torch-policy")
            self.assertEqual(cm.exception.status, uvm.Status.HOST_LIMIT)
            self.assertFalse(c.info().asleep)
            uvm.torch.set_sleep_host_limit(0)
            self.assertEqual(uvm.torch.sleep("torch-policy"), 4 * M)
            self.assertEqual(c.info().sleep_host_held, 4 * M)
            uvm.torch.wake("torch-policy")
            self.assertEqual(c.info().sleep_host_held, 2 * M)  # released down to the reserve
            uvm.torch.sleep_policy("torch-policy")  # back to keep, no reserve
            self.assertEqual(c.info().sleep_host_held, 0)
        lib.uvm_torch_free(p, 4 * M, 0, None)

    def test_uvm_torch_sets_the_growth_slack_of_the_runtimes_manager(self):
        # Needs no torch: the policy is the manager's (uvm_gpu_set_growth_slack).
        import uvm.torch
        m = _runtime.manager()
        try:
            for slack, moved in ((0, 10), (None, 0)):
                uvm.torch.set_growth_slack(slack)
                m.gpu_trim(0)
                before = m.gpu_stats(0).root_chunks_moved
                a, b = m.alloc(20 * M, backing="vidmem"), m.alloc(20 * M, backing="vidmem")
                a.free()
                c = m.alloc(24 * M, backing="vidmem")  # fits in no free run
                self.assertEqual(m.gpu_stats(0).root_chunks_moved - before, moved, slack)
                b.free()
                c.free()
        finally:
            uvm.torch.set_growth_slack(256 * M)  # UVM_GROWTH_SLACK_DEFAULT, for the tests after

    def test_cupy_and_numba_symbols(self):
        lib = _runtime.lib()
        c = lib.uvm_cupy_malloc(None, 5 * M, 0)
        n = lib.uvm_numba_malloc(64 * 1024, 0)
        self.assertTrue(c and n)
        lib.uvm_cupy_free(None, c, 0)
        lib.uvm_numba_free(n, 0)
        m = uvm.Manager.adopt(lib.uvm_runtime_manager(None))
        self.assertIsNone(m.lookup_gpu_kernel(c))
        self.assertGreaterEqual(lib.uvm_torch_empty_cache(), 0)


class TheRuntimes(unittest.TestCase):
    """The runtime parts need the runtime and a GPU; skipped here otherwise."""

    @unittest.skipUnless(have("torch"), "PyTorch is not installed (the GPU check runs it: tools/torch_check.sh)")
    def test_torch_enable_needs_a_gpu(self):
        import torch
        if not torch.cuda.is_available():
            self.skipTest("no CUDA GPU")
        import uvm.torch
        self.assertIn(uvm.torch.enable(), ("extension", "pluggable"))
        x = torch.ones(1 << 20, device="cuda")
        self.assertEqual(float(x.sum()), float(1 << 20))

    @unittest.skipUnless(have("cupy"), "CuPy is not installed (the GPU check runs it)")
    def test_cupy_enable_needs_a_gpu(self):
        import cupy
        import uvm.cupy
        uvm.cupy.enable()
        self.assertEqual(int(cupy.arange(10).sum()), 45)

    @unittest.skipUnless(have("numba"), "Numba is not installed (the GPU check runs it)")
    def test_numba_plugin_imports(self):
        import uvm.numba
        self.assertEqual(uvm.numba.UvmNumbaMemoryManager(context=None).interface_version, 1)


if __name__ == "__main__":
    if not os.path.exists(_runtime.library_path()) and os.sep in _runtime.library_path():
        print("skipped: the allocator library was not built (no cuda.h)")
        sys.exit(77)
    unittest.main(verbosity=2)
