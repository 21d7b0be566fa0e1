"""The Python package `uvm` (python/uvm) on the sim backend: every group of
bindings against what the C API promises, the ctypes structs against the C
compiler's layout, and the binding table against the headers.

    UVM_LIBRARY=build/libuvm.so UVM_STRUCT_LAYOUT=build/tests/python_struct_layout \
        python3 tests/python/test_uvm.py
"""
import ctypes
import json
import os
import random
import re
import select
import socket
import subprocess
import sys
import threading
import unittest
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import uvm  # noqa: E402
from uvm import _capi  # noqa: E402

K, M = 1 << 10, 1 << 20
S = uvm.Status
PUBLIC_HEADERS = ("uvm.h", "uvm_share.h", "uvm_pressure.h", "uvm_observe.h", "uvm_sim.h")


def sim(gpus=2, vidmem=64 * M, **kw):
    return uvm.Manager(backend="sim", gpus=gpus, vidmem=vidmem, **kw)


class Case(unittest.TestCase):
    def assertStatus(self, status, fn, *args, **kw):
        with self.assertRaises(uvm.UvmError) as cm:
            fn(*args, **kw)
        self.assertEqual(cm.exception.status, status, str(cm.exception))
        self.assertEqual(cm.exception.name, S(status).name)
        return cm.exception


class TheBindingsMirrorTheHeaders(Case):
    def header(self, name):
        with open(os.path.join(ROOT, "include", "uvm", name)) as f:
            return f.read()

    def test_every_public_function_has_a_prototype_and_exists_in_the_library(self):
        declared = set()
        for name in PUBLIC_HEADERS:
            declared |= set(re.findall(r"UVM_API\s+[^;]*?\b(uvm_\w+)\s*\(", self.header(name)))
        self.assertGreater(len(declared), 60)
        for name in _capi.TEXT_PROTOTYPES:  # those that return text, set apart
            self.assertIn(name, declared)
            declared.discard(name)
        self.assertEqual(sorted(declared - set(_capi.PROTOTYPES)), [], "declared in the headers, not bound")
        self.assertEqual(sorted(set(_capi.PROTOTYPES) - declared), [], "bound, not in the headers")
        lib = _capi.lib()
        for name in _capi.PROTOTYPES:
            self.assertTrue(hasattr(lib, name), name)

    def test_the_status_enum_is_the_headers_in_order(self):
        body = re.search(r"typedef enum uvm_status \{(.*?)\} uvm_status_t;", self.header("uvm.h"), re.S).group(1)
        names = [n[len("UVM_ERR_"):] if n.startswith("UVM_ERR_") else n[len("UVM_"):]
                 for n in re.findall(r"\b(UVM_(?:ERR_)?[A-Z_]+)\b", re.sub(r"/\*.*?\*/", "", body, flags=re.S))]
        self.assertEqual(names, [s.name for s in S])
        self.assertEqual(names, list(_capi.STATUS_NAMES))
        for s in S:
            self.assertEqual(uvm.status_string(s), _capi.lib().uvm_status_string(int(s)).decode())

    def test_every_public_struct_has_a_mirror(self):
        # Public structs are `typedef struct uvm_x_s { ... } uvm_x_t;`; handles are
        # opaque (`typedef struct uvm_manager uvm_manager_t;`) and need none.
        text = "".join(self.header(n) for n in PUBLIC_HEADERS)
        declared = {name + "_t" for name in re.findall(r"typedef struct (uvm_\w+)_s \{", text)}
        self.assertGreater(len(declared), 15)
        self.assertEqual(sorted(declared ^ set(_capi.STRUCTS)), [])

    def test_every_struct_has_the_c_compilers_size_and_offsets(self):
        program = os.environ.get("UVM_STRUCT_LAYOUT")
        if not program:
            self.skipTest("UVM_STRUCT_LAYOUT (the program tests/python/struct_layout.c) is not set: "
                          "run through ctest")
        layout = {}
        for line in subprocess.run([program], check=True, capture_output=True, text=True).stdout.splitlines():
            key, value = line.split()
            layout[key] = int(value)
        self.assertEqual(set(k for k in layout if "." not in k), set(_capi.STRUCTS))
        for cname, struct in _capi.STRUCTS.items():
            self.assertEqual(ctypes.sizeof(struct), layout[cname], cname)
            for field, _ in struct._fields_:
                self.assertEqual(getattr(struct, field).offset, layout[f"{cname}.{field}"], f"{cname}.{field}")

    def test_constants_match_the_headers(self):
        text = "".join(self.header(n) for n in PUBLIC_HEADERS)
        for name in ("MEM_ZERO", "MEM_EVICTABLE", "MEM_USER_MAPPABLE", "MEM_GPU_MAPPED", "MEM_DISCARDABLE"):
            shift = int(re.search(r"#define UVM_%s\s+\(1u << (\d+)\)" % name, text).group(1))
            self.assertEqual(getattr(uvm, name), 1 << shift, name)
        self.assertEqual(uvm.MAX_GPUS, int(re.search(r"#define UVM_MAX_GPUS (\d+)", text).group(1)))
        body = re.search(r"typedef enum uvm_sleep_mode_e \{(.*?)\} uvm_sleep_mode_t;", text, re.S).group(1)
        modes = re.findall(r"\bUVM_(SLEEP_[A-Z]+)\b", re.sub(r"/\*.*?\*/", "", body, flags=re.S))
        self.assertEqual(modes, ["SLEEP_DEFAULT", "SLEEP_KEEP", "SLEEP_DISCARD"])
        self.assertEqual([getattr(uvm, m) for m in modes], [0, 1, 2])
        major = int(re.search(r"#define UVM_VERSION_MAJOR (\d+)", text).group(1))
        minor = int(re.search(r"#define UVM_VERSION_MINOR (\d+)", text).group(1))
        self.assertEqual((uvm.VERSION_MAJOR, uvm.VERSION_MINOR), (major, minor))


class ManagerAndGpus(Case):
    def test_a_sim_manager_has_the_gpus_it_was_asked_for(self):
        with sim(gpus=3, vidmem=32 * M) as mgr:
            self.assertEqual(mgr.backend, "sim")
            self.assertEqual(mgr.gpu_count, 3)
            info = mgr.gpu_info(0)
            self.assertEqual(info.memory_total, 32 * M)
            self.assertEqual(info.memory_free, 32 * M)
            self.assertEqual(info.page_sizes, uvm.PAGE_SIZE_4K | uvm.PAGE_SIZE_64K | uvm.PAGE_SIZE_2M)
            self.assertEqual(info.pci_bus_id, "0000:10:00.0")
            self.assertEqual(info.peer_mask & 0b110, 0b110)  # every pair linked by default
            self.assertIsInstance(info.uuid, uuid.UUID)
            self.assertNotEqual(info.uuid, mgr.gpu_info(1).uuid)
            self.assertIn("Simulated", info.name)
            self.assertEqual(mgr.gpu_path(1, 1), "SELF")
            self.assertIn(mgr.gpu_path(0, 1), ("PIX", "PXB", "PHB", "NODE", "SYS"))
            mgr.enable_peer_access(1, 0)
            mgr.enable_peer_access(1, 0)  # again: nothing to do
            with self.assertRaises(uvm.UvmError) as e:
                mgr.enable_peer_access(1, 1)
            self.assertEqual(e.exception.status, uvm.Status.INVALID_ARGUMENT)
            host = mgr.host_info()
            self.assertGreaterEqual(host.numa_node_count, 1)
            self.assertIn(host.thp, ("unknown", "never", "madvise", "always"))
            nodes = mgr.numa_nodes()
            self.assertEqual(len(nodes), host.numa_node_count)
            self.assertGreater(nodes[0].memory_total, 0)

    def test_no_peers_and_a_configured_numa_topology(self):
        with sim(gpus=2, vidmem=16 * M, peers=False, numa_nodes=2, gpu_numa_node=[1, 0]) as mgr:
            self.assertEqual(mgr.gpu_info(0).peer_mask & 0b10, 0)
            self.assertEqual(mgr.gpu_info(0).host_numa_id, 1)
            self.assertEqual(mgr.gpu_info(1).host_numa_id, 0)
            self.assertEqual(len(mgr.numa_nodes()), 2)

    def test_a_closed_manager_refuses_calls_and_a_second_close_is_harmless(self):
        mgr = sim()
        mgr.close()
        self.assertTrue(mgr.closed)
        self.assertStatus(S.INVALID_HANDLE, lambda: mgr.gpu_count)
        mgr.close()

    def test_trim_gives_free_root_chunks_back(self):
        with sim(gpus=1, vidmem=16 * M) as mgr:
            mgr.alloc(4 * M, backing="vidmem").free()
            self.assertEqual(mgr.gpu_stats(0).root_chunks, 2)
            self.assertEqual(mgr.gpu_trim(0), 4 * M)
            self.assertEqual(mgr.gpu_stats(0).root_chunks, 0)

    def test_compaction_moves_live_objects_and_gives_the_roots_back(self):
        with sim(gpus=1, vidmem=8 * M) as mgr:
            objs = []
            while True:
                try:
                    objs.append(mgr.alloc(64 * 1024, backing="vidmem", chunk_size=64 * 1024))
                except uvm.UvmError:
                    break
            kept = objs[::8]
            for o in objs:
                if all(o is not k for k in kept):
                    o.free()
            for i, k in enumerate(kept):
                mgr.memset((k, 0, "physical"), i + 1, 64 * 1024)
            r = mgr.gpu_compact(0, release=True)
            self.assertEqual((r.objects_moved, r.held_before, r.held_after), (12, 8 * M, 2 * M))
            self.assertEqual(r.bytes_released, 6 * M)
            host = mgr.alloc(64 * 1024)
            host.map_gpu_phys(0)
            host.map_cpu_kernel()
            for i, k in enumerate(kept):
                mgr.copy((host, 0, "physical"), (k, 0, "physical"), 64 * 1024)
                self.assertEqual(host.read(), bytes([i + 1]) * 64 * 1024)
            host.free()
            s = mgr.gpu_stats(0)
            self.assertEqual((s.compactions, s.compact_objects_moved), (1, 12))
            mgr.set_compact_on_oom(0, True)
            with self.assertRaises(uvm.UvmError):
                mgr.gpu_compact(3)
            for k in kept:
                k.free()

    def test_a_release_threshold_of_zero_gives_idle_memory_back_without_trim(self):
        with sim(gpus=1, vidmem=64 * M) as mgr:
            mgr.set_release_threshold(0, "0B")
            mgr.alloc(12 * M, backing="vidmem").free()
            s = mgr.gpu_stats(0)
            self.assertEqual((s.root_chunks, s.held_bytes, s.held_cached_bytes), (0, 0, 0))
            self.assertEqual(mgr.gpu_stats(0).driver_free_bytes, 64 * M)
            with self.assertRaises(uvm.UvmError):
                mgr.set_release_threshold(5, 0)


    def test_growth_slack_chooses_between_moving_free_memory_and_keeping_it(self):
        for slack, held, moved in ((0, 44 * M, 10), ("inf", 64 * M, 0)):
            with sim(gpus=1, vidmem=128 * M) as mgr:
                mgr.set_growth_slack(0, slack)
                a, b = mgr.alloc(20 * M, backing="vidmem"), mgr.alloc(20 * M, backing="vidmem")
                a.free()
                c = mgr.alloc(24 * M, backing="vidmem")  # fits in no free run
                s = mgr.gpu_stats(0)
                self.assertEqual((s.held_bytes, s.root_chunks_moved), (held, moved))
                b.free()
                c.free()
                with self.assertRaises(uvm.UvmError):
                    mgr.set_growth_slack(5, 0)


class Objects(Case):
    def test_alloc_info_and_free(self):
        with sim() as mgr:
            with mgr.alloc("6MiB", backing="vidmem", gpu=1, flags=uvm.MEM_GPU_MAPPED, tag="weights") as m:
                i = m.info()
                self.assertEqual((i.size, i.alloc_size, i.backing_name, i.gpu), (6 * M, 6 * M, "vidmem", 1))
                self.assertEqual((i.chunk_size, i.chunk_count), (2 * M, 3))
                self.assertEqual(i.flags, uvm.MEM_GPU_MAPPED)
                self.assertEqual(i.gpu_kernel_mask, 1 << 1)
                self.assertNotEqual(i.gpu_kernel_address, 0)
                self.assertEqual(mgr.stats().objects, 1)
                self.assertEqual(mgr.gpu_stats(1).vidmem_objects, 1)
            self.assertEqual(mgr.stats().objects, 0)
            s = mgr.alloc(10 * K, chunk_size=uvm.PAGE_SIZE_4K)
            self.assertEqual((s.info().alloc_size, s.info().chunk_count, s.info().backing_name), (12 * K, 3, "sysmem"))
            s.free()
            self.assertStatus(S.INVALID_HANDLE, s.free)
            self.assertStatus(S.INVALID_HANDLE, s.info)

    def test_a_freed_handle_is_refused_by_the_library_itself(self):
        with sim() as mgr:
            m = mgr.alloc(4 * K)
            raw = m.handle
            m.free()
            self.assertEqual(_capi.lib().uvm_mem_free(mgr.handle, raw), S.INVALID_HANDLE)

    def test_an_object_of_another_manager_is_refused(self):
        with sim() as a, sim() as b:
            with a.alloc(4 * K) as m:
                self.assertStatus(S.INVALID_HANDLE, b.copy, m, m, 16)

    def test_zeroed_sysmem_reads_as_zeroes_and_host_pages_are_resident(self):
        with sim() as mgr, mgr.alloc(64 * K, flags=uvm.MEM_ZERO) as m:
            m.map_cpu_kernel()
            self.assertEqual(m.read(), bytes(64 * K))
            m.write(b"\xff" * (64 * K))
            self.assertGreaterEqual(m.host_pages().resident_bytes, 64 * K)

    def test_page_trees_describe_their_levels(self):
        with sim() as mgr, mgr.alloc(2 * M, backing="vidmem", flags=uvm.MEM_GPU_MAPPED):
            tree = mgr.page_tree_info(0, "kernel")
            self.assertGreater(len(tree.levels), 2)
            self.assertTrue(all(level.name for level in tree.levels))
            self.assertGreater(tree.table_bytes, 0)
            self.assertEqual(tree.mapped_bytes[2], 2 * M)


class MappingsAndAddresses(Case):
    def test_cpu_kernel_and_user_mappings_show_the_same_pages(self):
        with sim() as mgr:
            base = mgr.user_range_reserve(2 * M)
            with mgr.alloc(64 * K, flags=uvm.MEM_USER_MAPPABLE) as m:
                m.map_cpu_kernel()
                m.map_cpu_user(base)
                i = m.info()
                self.assertEqual((i.cpu_kernel_mapped, i.cpu_user_mapped, i.user_address), (1, 1, base))
                self.assertEqual(m.cpu_user_address(100), base + 100)
                m.write(b"through the kernel mapping", 4096)
                self.assertEqual(ctypes.string_at(m.cpu_user_address(4096), 26), b"through the kernel mapping")
                self.assertStatus(S.ALREADY_MAPPED, m.map_cpu_kernel)
                m.unmap_cpu_user()
                self.assertStatus(S.NOT_MAPPED, m.unmap_cpu_user)
                self.assertStatus(S.NOT_MAPPED, m.cpu_user_address)
            mgr.user_range_release(base)
            self.assertStatus(S.INVALID_ARGUMENT, mgr.user_range_release, base)

    def test_gpu_mappings_and_their_addresses(self):
        with sim() as mgr:
            with mgr.alloc(4 * M, backing="vidmem", gpu=0) as v:
                own = v.gpu_phys_address(0, 0, 4 * M)
                self.assertEqual(own.aperture, uvm.APERTURE_VID)
                self.assertTrue(own.contiguous)
                self.assertStatus(S.ALREADY_MAPPED, v.map_gpu_phys, 0)
                v.map_gpu_phys(1)  # a peer
                peer = v.gpu_phys_address(1, 2 * M)
                self.assertEqual((peer.aperture, peer.peer_gpu), (uvm.APERTURE_PEER, 0))
                v.map_gpu_kernel(0)
                self.assertEqual(v.gpu_kernel_address(0, 4096), v.info().gpu_kernel_address + 4096)
                v.map_gpu_user(0)
                user = v.info().user_address
                self.assertNotEqual(user, 0)
                self.assertEqual(v.gpu_user_address(0, 8), user + 8)
                self.assertEqual(v.info().gpu_user_mask, 1)
                v.unmap_gpu_user(0)
                self.assertStatus(S.NOT_MAPPED, v.gpu_user_address, 0)
                v.unmap_gpu_kernel(0)
                self.assertEqual(v.info().gpu_kernel_mask, 0)
                v.unmap_gpu_phys(1)
                self.assertStatus(S.NOT_SUPPORTED, v.unmap_gpu_phys, 0)
            with mgr.alloc(64 * K) as s:
                self.assertStatus(S.NOT_MAPPED, s.gpu_phys_address, 1)
                s.map_gpu_phys(1)
                self.assertEqual(s.gpu_phys_address(1).aperture, uvm.APERTURE_SYS)
                self.assertEqual(s.info().gpu_phys_mask, 1 << 1)
                self.assertStatus(S.MISALIGNED, s.map_gpu_user, 1, 12345)

    def test_vidmem_is_not_cpu_mappable_on_a_pcie_platform_and_is_on_a_coherent_one(self):
        with sim() as mgr, mgr.alloc(64 * K, backing="vidmem") as v:
            self.assertStatus(S.NOT_SUPPORTED, v.map_cpu_kernel)
        with sim(cpu_coherent=True) as mgr, mgr.alloc(64 * K, backing="vidmem") as v:
            v.map_cpu_kernel()
            v.write(b"coherent")
            self.assertEqual(v.read(0, 8), b"coherent")


class CopiesAndMemset(Case):
    def test_copy_and_memset_through_every_view_read_back_on_the_cpu(self):
        with sim() as mgr:
            src = mgr.alloc(256 * K)
            dst = mgr.alloc(256 * K)
            vid = mgr.alloc(256 * K, backing="vidmem", flags=uvm.MEM_GPU_MAPPED)
            for m in (src, dst):
                m.map_cpu_kernel()
                m.map_gpu_kernel(0)
            pattern = bytes((i * 7 + 3) & 0xFF for i in range(256 * K))
            src.write(pattern)
            mgr.copy(vid, src, 256 * K, gpu=0)
            mgr.memset((vid, 1000), 0xAB, 24)
            mgr.copy(dst, vid, 256 * K)
            want = pattern[:1000] + b"\xab" * 24 + pattern[1024:]
            self.assertEqual(dst.read(), want)
            # Physical views, chunk by chunk, and an offset on both sides.
            mgr.memset(dst, 0, 256 * K)
            mgr.copy((dst, 4096, "physical"), (vid, 0, "physical"), 8192)
            self.assertEqual(dst.read(4096, 8192), want[:8192])
            self.assertEqual(dst.read(0, 4096), bytes(4096))
            stats = mgr.gpu_stats(0)
            self.assertEqual(stats.ce_operations, 5)
            self.assertEqual(stats.ce_bytes, 256 * K + 24 + 256 * K + 256 * K + 8192)
            self.assertStatus(S.NOT_MAPPED, mgr.copy, (dst, 0, "user"), vid, 16)
            self.assertStatus(S.OUT_OF_RANGE, mgr.memset, (dst, 255 * K), 1, 2 * K)
            self.assertStatus(S.INVALID_ARGUMENT, mgr.copy, (dst, 0), (dst, 16), 64)
            for m in (src, dst, vid):
                m.free()


class Streams(Case):
    def test_held_work_keeps_freed_memory_until_released(self):
        with sim() as mgr:
            stream = mgr.stream(0)
            self.assertIsNone(stream.native)
            v = mgr.alloc(2 * M, backing="vidmem", flags=uvm.MEM_GPU_MAPPED)
            stream.hold()
            mgr.memset(v, 0x5A, 2 * M, stream=stream)
            v.free(stream=stream)
            self.assertEqual(mgr.stats().streams, 1)
            self.assertEqual(mgr.stats().retiring_objects + mgr.stats().stream_pool_bytes // (2 * M), 1)
            self.assertStatus(S.BUSY, stream.synchronize)
            self.assertStatus(S.BUSY, stream.destroy)
            stream.release()
            stream.synchronize()
            self.assertEqual(mgr.stats().retiring_objects, 0)
            self.assertStatus(S.INVALID_ARGUMENT, stream.release)
            # Stream-ordered allocation and a copy queued on the stream.
            a = mgr.alloc(64 * K, backing="vidmem", flags=uvm.MEM_GPU_MAPPED, stream=stream)
            s = mgr.alloc(64 * K)
            s.map_cpu_kernel()
            s.map_gpu_kernel(0)
            mgr.memset(a, 0x11, 64 * K, stream=stream)
            mgr.copy(s, a, 64 * K, stream=stream)
            stream.synchronize()
            self.assertEqual(s.read(), b"\x11" * (64 * K))
            s.record_use(stream)
            s.free()
            a.free(stream=stream)
            stream.destroy()
            self.assertEqual(mgr.stats().streams, 0)
            self.assertStatus(S.INVALID_HANDLE, stream.synchronize)
            self.assertStatus(S.INVALID_ARGUMENT, mgr.stream, 0, native=0x1234)
            self.assertStatus(S.INVALID_GPU, mgr.stream, 7)

    def test_the_default_stream_constants_make_streams(self):
        with sim() as mgr:
            self.assertEqual((uvm.STREAM_LEGACY, uvm.STREAM_PER_THREAD), (1, 2))
            for native in (uvm.STREAM_LEGACY, uvm.STREAM_PER_THREAD):
                with mgr.stream(1, native=native) as stream:
                    m, address = mgr.alloc_gpu(64 * K, gpu=1, stream=stream)
                    self.assertEqual(address, m.info().gpu_kernel_address)
                    m.free(stream=stream)


class RuntimeCalls(Case):
    """What a runtime's allocator uses: size 0, alloc_gpu, the address lookup."""

    def test_size_zero_is_no_object(self):
        with sim() as mgr:
            self.assertIsNone(mgr.alloc(0, backing="vidmem"))
            self.assertEqual(mgr.alloc_gpu(0), (None, 0))
            self.assertStatus(S.INVALID_GPU, mgr.alloc, 0, backing="vidmem", gpu=9)
            self.assertEqual(mgr.stats().objects, 0)

    def test_lookup_finds_an_object_by_any_address_inside_it(self):
        with sim() as mgr:
            small, a = mgr.alloc_gpu(12 * K)
            big, b = mgr.alloc_gpu(3 * M, gpu=1)
            for mem, base, size, gpu in ((small, a, 12 * K, 0), (big, b, 4 * M, 1)):
                for off in (0, 1, size - 1):
                    found, offset = mgr.lookup_gpu_kernel(base + off, gpu=gpu)
                    self.assertEqual(found.handle.value, mem.handle.value)
                    self.assertEqual(offset, off)
            # GPU 1's kernel addresses are its own: the same number names no object of GPU 0 there.
            other = mgr.lookup_gpu_kernel(a, gpu=1)
            self.assertTrue(other is None or other[0].handle.value != small.handle.value)
            small.free()
            self.assertIsNone(mgr.lookup_gpu_kernel(a))
            big.free()
            self.assertStatus(S.INVALID_GPU, mgr.lookup_gpu_kernel, b, 5)


class ClientsAndBudgets(Case):
    def test_a_budget_is_enforced_with_an_oom_report(self):
        with sim(gpus=1, vidmem=64 * M) as mgr:
            kv = mgr.client("kv-cache", budget="4MiB")
            self.assertEqual(kv.info().name, "kv-cache")
            self.assertEqual(kv.info().vidmem_budget[0], 4 * M)
            a = mgr.alloc(2 * M, backing="vidmem", client=kv)
            err = self.assertStatus(S.OUT_OF_MEMORY, mgr.alloc, 4 * M, backing="vidmem", client=kv)
            self.assertEqual(err.text, uvm.status_string(S.OUT_OF_MEMORY))
            self.assertIn("kv-cache", err.detail)  # the OOM report names who holds what
            self.assertIn("OUT_OF_MEMORY", str(err))
            report = mgr.oom_report(json_format=True)
            self.assertIsInstance(report, dict)
            self.assertIn("kv-cache", json.dumps(report))
            info = kv.info()
            self.assertEqual((info.objects, info.vidmem_used[0]), (1, 2 * M))
            self.assertStatus(S.BUSY, kv.destroy)
            kv.set_budget(0)  # unlimited
            b = mgr.alloc(4 * M, backing="vidmem", client=kv)
            kv.set_budget("64KiB", gpu=uvm.CLIENT_SYSMEM)
            self.assertEqual(kv.info().sysmem_budget, 64 * K)
            self.assertStatus(S.OUT_OF_MEMORY, mgr.alloc, 128 * K, client=kv)
            for m in (a, b):
                m.free()
            kv.destroy()
            self.assertStatus(S.INVALID_HANDLE, kv.info)
            self.assertStatus(S.INVALID_ARGUMENT, mgr.client, "")
            self.assertStatus(S.INVALID_ARGUMENT, mgr.client, "x" * 64)
            self.assertStatus(S.INVALID_GPU, mgr.client, "elsewhere", budget="1MiB", gpu=5)
            self.assertEqual([c["name"] for c in mgr.snapshot()["clients"]], ["default"])  # none left behind

    def test_a_freed_object_stays_cached_for_its_client(self):
        with sim(gpus=1, vidmem=64 * M) as mgr:
            kv = mgr.client("kv-cache", budget="4MiB")
            mgr.alloc(64 * K, backing="vidmem", client=kv, chunk_size=64 * K).free()
            info = kv.info()  # parked for the client's next allocation, still charged to it
            self.assertEqual((info.objects, info.vidmem_used[0], info.vidmem_cached[0]), (0, 64 * K, 64 * K))
            again = mgr.alloc(64 * K, backing="vidmem", client=kv, chunk_size=64 * K)
            info = kv.info()
            self.assertEqual((info.objects, info.vidmem_used[0], info.vidmem_cached[0]), (1, 64 * K, 0))
            again.free()
            mgr.gpu_trim(0)
            self.assertEqual(kv.info().vidmem_used[0], 0)
            kv.destroy()


class SleepAndWake(Case):
    """A sleepable client's GPU memory goes back to the driver and comes back
    under the same addresses (uvm_pressure.h, "Sleep and wake")."""

    @staticmethod
    def staging(mgr, size):
        """A sysmem object the CPU writes and the copy engine reads (vidmem is
        not CPU-mappable on a PCIe sim)."""
        host = mgr.alloc(size)
        host.map_cpu_kernel()
        host.map_gpu_kernel(0)
        return host

    @staticmethod
    def pattern(size, seed):
        return random.Random(seed).getrandbits(size * 8).to_bytes(size, "little")

    def put(self, mgr, host, mem, data):
        host.write(data)
        mgr.copy(mem, host, len(data))

    @staticmethod
    def release(client, *objects):
        for mem in objects:
            mem.free()
        client.destroy()

    def get(self, mgr, host, mem, size):
        mgr.memset(host, 0xEE, size)  # nothing left over from the write
        mgr.copy(host, mem, size)
        return host.read(0, size)

    def test_kept_bytes_come_back_under_the_same_addresses(self):
        with sim(gpus=1, vidmem=64 * M) as mgr:
            model = mgr.client("model", sleepable=True)
            self.assertEqual((model.sleepable, model.info().sleepable, model.info().asleep), (True, True, False))
            host = self.staging(mgr, 4 * M)
            sizes = (4 * M, 3 * M + 8 * K, 64 * K)
            objects = [mgr.alloc_gpu(size, client=model, tag="weights") for size in sizes]
            for seed, ((mem, _), size) in enumerate(zip(objects, sizes)):
                self.put(mgr, host, mem, self.pattern(size, seed))
            user = mgr.alloc(64 * K, backing="vidmem", client=model, flags=uvm.MEM_GPU_MAPPED)
            user.map_gpu_user(0)
            user_address = user.info().user_address
            total = sum(m.info().alloc_size for m, _ in objects) + user.info().alloc_size
            free_before = mgr.gpu_stats(0).driver_free_bytes

            model.sleep()
            info = model.info()
            self.assertTrue(info.asleep)
            self.assertTrue(model.asleep)
            self.assertEqual(info.vidmem_asleep[0], total)
            self.assertEqual(info.vidmem_used[0], 0)
            self.assertGreaterEqual(info.sleep_host_bytes, total)
            self.assertGreaterEqual(mgr.gpu_stats(0).driver_free_bytes, free_before + total * 99 // 100)
            mem, address = objects[0]
            self.assertStatus(S.ASLEEP, mgr.copy, host, mem, 4 * K)
            self.assertStatus(S.ASLEEP, mgr.copy, mem, host, 4 * K)
            self.assertStatus(S.ASLEEP, mgr.memset, mem, 0, 4 * K)
            self.assertStatus(S.ASLEEP, mem.gpu_kernel_address, 0)
            self.assertStatus(S.ASLEEP, mgr.alloc, 64 * K, backing="vidmem", client=model)
            self.assertEqual(mem.info().size, 4 * M)  # reading about it still works
            self.assertEqual(mgr.lookup_gpu_kernel(address)[0].handle.value, mem.handle.value)
            with mgr.alloc(64 * K, client=model):  # its sysmem is not touched
                pass
            model.sleep()  # asleep already: nothing changes
            self.assertEqual(model.info().vidmem_asleep[0], total)

            model.wake()
            info = model.info()
            self.assertFalse(info.asleep)
            self.assertEqual((info.vidmem_asleep[0], info.vidmem_used[0], info.sleep_host_bytes), (0, total, 0))
            for seed, ((mem, address), size) in enumerate(zip(objects, sizes)):
                self.assertEqual(self.get(mgr, host, mem, size), self.pattern(size, seed), size)
                self.assertEqual(mem.gpu_kernel_address(0), address)
                found, offset = mgr.lookup_gpu_kernel(address)
                self.assertEqual((found.handle.value, offset), (mem.handle.value, 0))
            self.assertEqual(user.info().user_address, user_address)
            model.wake()  # awake already: nothing changes
            # Again, as a serving engine does between phases.
            model.sleep("keep")
            model.wake()
            for seed, ((mem, _), size) in enumerate(zip(objects, sizes)):
                self.assertEqual(self.get(mgr, host, mem, size), self.pattern(size, seed), size)
            self.release(model, user, host, *(mem for mem, _ in objects))

    def test_discarded_objects_come_back_zeroed_by_tag_by_mode_or_by_their_own(self):
        with sim(gpus=1, vidmem=64 * M) as mgr:
            model = mgr.client("model", sleepable=True)
            host = self.staging(mgr, 2 * M)
            weights, _ = mgr.alloc_gpu(2 * M, client=model, tag="weights")
            kv, _ = mgr.alloc_gpu(2 * M, client=model, tag="kv-cache")
            pinned, _ = mgr.alloc_gpu(256 * K, client=model, tag="kv-cache")
            pinned.set_sleep_mode("keep")  # its own mode wins over its tag's
            objects = ((weights, 2 * M, 1), (kv, 2 * M, 2), (pinned, 256 * K, 3))
            for mem, size, seed in objects:
                self.put(mgr, host, mem, self.pattern(size, seed))
            # vLLM's level 1: the KV cache dropped, the weights kept.
            model.sleep(tags=["kv-cache"], tags_mode="discard")
            self.assertEqual(model.info().sleep_host_bytes, 2 * M + 256 * K)  # only the kept bytes
            model.wake()
            self.assertEqual(self.get(mgr, host, weights, 2 * M), self.pattern(2 * M, 1))
            self.assertEqual(self.get(mgr, host, kv, 2 * M), bytes(2 * M))
            self.assertEqual(self.get(mgr, host, pinned, 256 * K), self.pattern(256 * K, 3))
            # Everything dropped but what says otherwise (the constants, a tag as a str).
            for mem, size, seed in objects:
                self.put(mgr, host, mem, self.pattern(size, seed))
            model.sleep(uvm.SLEEP_DISCARD, tags="weights", tags_mode=uvm.SLEEP_KEEP)
            self.assertEqual(model.info().sleep_host_bytes, 2 * M + 256 * K)
            model.wake()
            self.assertEqual(self.get(mgr, host, weights, 2 * M), self.pattern(2 * M, 1))
            self.assertEqual(self.get(mgr, host, kv, 2 * M), bytes(2 * M))
            self.assertEqual(self.get(mgr, host, pinned, 256 * K), self.pattern(256 * K, 3))
            # An object's own mode back to the default: the sleep's mode again.
            pinned.set_sleep_mode(None)
            model.sleep("discard")
            self.assertEqual(model.info().sleep_host_bytes, 0)
            model.wake()
            self.assertEqual(self.get(mgr, host, pinned, 256 * K), bytes(256 * K))
            self.release(model, host, *(mem for mem, _, _ in objects))

    def test_a_wake_over_the_budget_is_refused_and_leaves_it_asleep(self):
        with sim(gpus=1, vidmem=64 * M) as mgr:
            model = mgr.client("model", budget="8MiB", sleepable=True)
            host = self.staging(mgr, 6 * M)
            mem, address = mgr.alloc_gpu(6 * M, client=model)
            self.put(mgr, host, mem, self.pattern(6 * M, 4))
            model.sleep()
            model.set_budget("4MiB")
            self.assertStatus(S.OUT_OF_MEMORY, model.wake)
            self.assertEqual((model.info().asleep, model.info().vidmem_asleep[0]), (True, 6 * M))
            model.set_budget("6MiB")
            model.wake()
            self.assertEqual(self.get(mgr, host, mem, 6 * M), self.pattern(6 * M, 4))
            self.assertEqual(mem.gpu_kernel_address(0), address)
            self.release(model, mem, host)

    def test_freed_while_asleep_and_destroyed(self):
        with sim(gpus=1, vidmem=64 * M) as mgr:
            model = mgr.client("model", sleepable=True)
            a, _ = mgr.alloc_gpu(4 * M, client=model)
            b, _ = mgr.alloc_gpu(128 * K, client=model)
            model.sleep()
            self.assertStatus(S.BUSY, model.destroy)
            b.free()
            self.assertEqual(model.info().vidmem_asleep[0], 4 * M)
            a.free()
            self.assertEqual(model.info().vidmem_asleep[0], 0)
            model.destroy()  # asleep, its host copy goes with it

    def test_bad_input(self):
        with sim(gpus=1) as mgr:
            model = mgr.client("model", sleepable=True)
            mem, _ = mgr.alloc_gpu(64 * K, client=model)
            # Unknown names: ValueError before any C call (nothing moved).
            self.assertRaises(ValueError, model.sleep, "hibernate")
            self.assertRaises(ValueError, model.sleep, tags=["kv"], tags_mode="later")
            self.assertRaises(ValueError, mem.set_sleep_mode, "maybe")
            self.assertRaises(TypeError, model.sleep, tags=[42])
            self.assertFalse(model.info().asleep)
            # Unknown numbers: the library's own refusal.
            self.assertStatus(S.INVALID_ARGUMENT, model.sleep, 7)
            self.assertStatus(S.INVALID_ARGUMENT, model.sleep, "keep", tags=["kv"], tags_mode=9)
            self.assertStatus(S.INVALID_ARGUMENT, mem.set_sleep_mode, 5)
            self.assertFalse(model.info().asleep)
            # A client not made sleepable cannot sleep.
            plain = mgr.client("plain")
            self.assertFalse(plain.sleepable)
            self.assertFalse(plain.info().sleepable)
            self.assertStatus(S.NOT_SUPPORTED, plain.sleep)
            self.assertStatus(S.INVALID_ARGUMENT, mgr.client, "", sleepable=True)
            mem.free()
            for c in (model, plain):
                c.destroy()
            self.assertStatus(S.INVALID_HANDLE, model.sleep)
            self.assertStatus(S.INVALID_HANDLE, model.wake)

    def test_host_policy_reserve_and_limit(self):
        """The backup (uvm_pressure.h, "Host memory of a sleep"): exactly the
        kept bytes, kept or released at the wake as the policy says, a
        reserve ready ahead, a limit that refuses a sleep with nothing
        changed."""
        with sim(gpus=1, vidmem=64 * M) as mgr:
            model = mgr.client("model", sleepable=True)
            host = self.staging(mgr, 4 * M)
            mem, _ = mgr.alloc_gpu(4 * M, client=model)
            self.put(mgr, host, mem, self.pattern(4 * M, 7))
            info = model.info()
            self.assertEqual((info.sleep_host_held, info.sleep_host_reserve, info.sleep_host_policy), (0, 0, "keep"))
            model.sleep()
            self.assertEqual((model.info().sleep_host_held, mgr.stats().sleep_host_bytes), (4 * M, 4 * M))
            model.wake()
            self.assertEqual(model.info().sleep_host_held, 4 * M)  # "keep": pinned for the next sleep
            model.set_sleep_policy("release", reserve="1MiB", pin_threads=2)
            info = model.info()
            self.assertEqual((info.sleep_host_held, info.sleep_host_reserve, info.sleep_host_policy),
                             (1 * M, 1 * M, "release"))
            model.sleep()
            self.assertEqual(model.info().sleep_host_held, 4 * M)
            model.wake()
            self.assertEqual(model.info().sleep_host_held, 1 * M)  # "release": down to the reserve
            self.assertEqual(self.get(mgr, host, mem, 4 * M), self.pattern(4 * M, 7))
            # The limit: refused, clearly, nothing changed.
            mgr.set_sleep_host_limit("2MiB")
            self.assertEqual(mgr.stats().sleep_host_limit, 2 * M)
            self.assertStatus(S.HOST_LIMIT, model.sleep)
            self.assertFalse(model.info().asleep)
            self.assertEqual(model.info().sleep_host_held, 1 * M)
            self.assertEqual(uvm.Status.HOST_LIMIT.name, "HOST_LIMIT")
            self.assertStatus(S.HOST_LIMIT, model.set_sleep_policy, "keep", reserve="6MiB")
            self.assertEqual(model.info().sleep_host_policy, "release")
            mgr.set_sleep_host_limit(0)
            model.sleep()
            model.wake()
            self.assertEqual(self.get(mgr, host, mem, 4 * M), self.pattern(4 * M, 7))
            # Bad input: Python's refusals before any call, then the library's.
            self.assertRaises(ValueError, model.set_sleep_policy, "hibernate")
            self.assertRaises(ValueError, model.set_sleep_policy, "keep", reserve=-1)
            self.assertRaises(ValueError, model.set_sleep_policy, "keep", reserve=2 ** 64)
            self.assertRaises(ValueError, model.set_sleep_policy, "keep", pin_threads=65)
            self.assertRaises(ValueError, model.set_sleep_policy, "keep", pin_threads=-1)
            self.assertRaises(ValueError, mgr.set_sleep_host_limit, 2 ** 64)
            self.assertStatus(S.INVALID_ARGUMENT, model.set_sleep_policy, 5)
            self.assertStatus(S.OUT_OF_MEMORY, model.set_sleep_policy, "keep", reserve=2 ** 60)
            self.assertEqual(model.info().sleep_host_policy, "release")
            plain = mgr.client("plain")
            self.assertStatus(S.NOT_SUPPORTED, plain.set_sleep_policy, "keep")
            self.release(model, mem, host)
            self.assertEqual(mgr.stats().sleep_host_bytes, 0)  # its backup went with it
            self.assertStatus(S.INVALID_HANDLE, model.set_sleep_policy, "keep")
            plain.destroy()


class Residency(Case):
    def test_evict_restore_and_eviction_under_pressure(self):
        with sim(gpus=1, vidmem=8 * M) as mgr:
            a = mgr.alloc(4 * M, backing="vidmem", flags=uvm.MEM_EVICTABLE | uvm.MEM_GPU_MAPPED)
            host = mgr.alloc(4 * M)
            host.map_cpu_kernel()
            host.map_gpu_kernel(0)
            mgr.memset(a, 0x42, 4 * M)
            a.evict()
            self.assertEqual((a.residency().resident, a.residency().evictions), (False, 1))
            self.assertEqual(mgr.gpu_stats(0).evicted_objects, 1)
            a.make_resident()
            self.assertEqual((a.residency().resident, a.residency().restores), (True, 1))
            mgr.copy(host, a, 4 * M)
            self.assertEqual(host.read(0, 4 * M), b"\x42" * (4 * M))
            # A full GPU evicts the least recently used object.
            b = mgr.alloc(4 * M, backing="vidmem", flags=uvm.MEM_EVICTABLE)
            b.touch()
            c = mgr.alloc(4 * M, backing="vidmem", flags=uvm.MEM_EVICTABLE)
            self.assertFalse(a.residency().resident)
            self.assertTrue(b.residency().resident)
            self.assertEqual(mgr.gpu_stats(0).evictions, 2)
            # With eviction off, a full GPU is OUT_OF_MEMORY.
            mgr.set_eviction_policy(disabled=True)
            self.assertStatus(S.OUT_OF_MEMORY, mgr.alloc, 4 * M, backing="vidmem")
            pinned = mgr.alloc(64 * K)
            self.assertStatus(S.NOT_SUPPORTED, pinned.evict)
            for m in (a, b, c, host, pinned):
                m.free()


class PressureNotices(Case):
    def test_watermarks_queue_events_on_an_eventfd(self):
        with sim(gpus=1, vidmem=16 * M) as mgr:
            fd = mgr.pressure_fd()
            self.assertEqual(select.select([fd], [], [], 0)[0], [])
            mgr.pressure_watermarks([50, 90])
            kv = mgr.client("kv")
            kv.set_budget(8 * M)
            mgr.pressure_watermarks([75], client=kv)
            m = mgr.alloc(10 * M, backing="vidmem")  # the default client: 62% of the GPU held
            self.assertEqual(select.select([fd], [], [], 1)[0], [fd])
            events = mgr.pressure_events()
            self.assertEqual([(e.client, e.gpu, e.percent, e.rising, e.used, e.limit) for e in events],
                             [(None, 0, 50, True, 10 * M, 16 * M)])
            self.assertEqual(select.select([fd], [], [], 0)[0], [])
            m.free()
            m = mgr.alloc(6 * M, backing="vidmem", client=kv)  # 75% of the budget
            events = mgr.pressure_events()
            client_events = [e for e in events if e.client is not None]
            self.assertEqual(len(client_events), 1)
            self.assertIs(client_events[0].client, kv)
            self.assertEqual((client_events[0].percent, client_events[0].rising, client_events[0].limit),
                             (75, True, 8 * M))
            m.free()
            events = mgr.pressure_events()
            self.assertIn((75, False), [(e.percent, e.rising) for e in events if e.client is kv])
            self.assertStatus(S.INVALID_ARGUMENT, mgr.pressure_watermarks, [0])
            self.assertStatus(S.INVALID_GPU, mgr.pressure_watermarks, [50], gpu=3)
            kv.destroy()


class Reports(Case):
    def test_snapshot_objects_report_and_oom_report_parse(self):
        with sim(gpus=2, vidmem=16 * M) as mgr:
            trainer = mgr.client("trainer")
            m = mgr.alloc(4 * M, backing="vidmem", client=trainer, tag="activations")
            snap = mgr.snapshot()
            self.assertEqual(len(snap["gpus"]), 2)
            text = mgr.objects_report()
            self.assertIn("activations", text)
            objects = mgr.objects_report(json_format=True)
            self.assertIn("activations", json.dumps(objects))
            self.assertIn("trainer", json.dumps(objects))
            result = {}
            thread = threading.Thread(target=lambda: result.update(
                none=self.assertStatus(S.NOT_FOUND, mgr.oom_report)))
            thread.start()
            thread.join()
            self.assertIn("none", result)  # another thread has had no OOM
            self.assertStatus(S.OUT_OF_MEMORY, mgr.alloc, 32 * M, backing="vidmem", gpu=1)  # beyond the GPU: as cudaMalloc says
            big = mgr.alloc(12 * M, backing="vidmem", gpu=1)
            self.assertStatus(S.OUT_OF_MEMORY, mgr.alloc, 8 * M, backing="vidmem", gpu=1)
            text = mgr.oom_report()
            self.assertIn("out of memory", text)
            self.assertIn("GPU 1", text)
            report = mgr.oom_report(json_format=True)
            self.assertEqual((report["request"]["size"], report["request"]["gpu"]), (8 * M, 1))
            self.assertEqual(report["gpu"]["held"], 12 * M)
            self.assertEqual(report["gpu"]["largest_request_that_fits"], 4 * M)
            big.free()
            m.free()
            trainer.destroy()

    def test_a_leak_is_reported_at_close(self):
        mgr = sim()
        mgr.alloc(64 * K, tag="forgotten")
        err = self.assertStatus(S.LEAKED_OBJECTS, mgr.close)
        self.assertIn("forgotten", err.detail)
        self.assertTrue(mgr.closed)
        leak = uvm.leak_report(json_format=True)
        self.assertIn("forgotten", json.dumps(leak))

    def test_metrics_text_names_every_family(self):
        with sim() as mgr, mgr.client("trainer", budget="8MiB"):
            text = mgr.metrics()
            for name in ("uvm_gpu_memory_total_bytes", "uvm_gpu_held_bytes", "uvm_gpu_chunk_bytes",
                         "uvm_gpu_evictions_total", "uvm_gpu_restores_total", "uvm_gpu_oom_total",
                         "uvm_client_vidmem_bytes", "uvm_client_vidmem_budget_bytes", "uvm_objects"):
                self.assertIn(f"# TYPE {name} ", text)
            self.assertIn('uvm_gpu_memory_total_bytes{gpu="1"} %d' % (64 * M), text)
            self.assertIn('uvm_client_vidmem_budget_bytes{client="trainer",gpu="0"} %d' % (8 * M), text)

    def test_serve_metrics_over_http(self):
        with sim() as mgr:
            try:
                server = uvm.serve_metrics(mgr, 0)
            except uvm.UvmError as e:
                if e.status == S.NOT_SUPPORTED:
                    self.skipTest("built without cpp-httplib: uvm_metrics_serve is NOT_SUPPORTED")
                raise
            with server:
                self.assertNotEqual(server.port, 0)
                body = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
                self.assertEqual(body, mgr.metrics())
                snap = json.loads(urllib.request.urlopen(server.url + "/snapshot", timeout=10).read())
                self.assertEqual(len(snap["gpus"]), 2)
            # An address it cannot listen on (the header: ADDRESS_IN_USE).
            self.assertStatus(S.INVALID_ARGUMENT, uvm.serve_metrics, mgr, 0, address="not an address")

    def test_a_port_another_process_serves_is_address_in_use(self):
        # Another process serves its manager's metrics on a port; this one
        # must not share it (the kernel would split the scrapes), nor may a
        # second server of this process.
        code = ("import sys; sys.path.insert(0, %r); import uvm\n"
                "mgr = uvm.Manager(backend='sim', gpus=1, vidmem=64 << 20)\n"
                "try:\n    server = uvm.serve_metrics(mgr, 0)\n"
                "except uvm.UvmError as e:\n    print(e.name, flush=True); sys.exit(0)\n"
                "print(server.port, flush=True)\nsys.stdin.read()\nserver.stop()\nmgr.close()\n"
                % os.path.join(ROOT, "python"))
        other = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            line = other.stdout.readline().strip()
            if line == "NOT_SUPPORTED":
                self.skipTest("built without cpp-httplib: uvm_metrics_serve is NOT_SUPPORTED")
            port = int(line)
            with sim() as mgr:
                self.assertStatus(S.ADDRESS_IN_USE, uvm.serve_metrics, mgr, port)
                with uvm.serve_metrics(mgr, 0) as server:
                    self.assertStatus(S.ADDRESS_IN_USE, uvm.serve_metrics, mgr, server.port)
        finally:
            other.stdin.close()
            self.assertEqual(other.wait(timeout=60), 0)
            other.stdout.close()


class Trace(Case):
    def test_start_record_export_stop(self):
        with sim() as mgr:
            self.assertStatus(S.NOT_FOUND, mgr.trace_export)
            mgr.trace_start(1 * M)
            self.assertStatus(S.BUSY, mgr.trace_start)
            mgr.alloc(2 * M, backing="vidmem", tag="traced").free()
            info = mgr.trace_info()
            self.assertTrue(info.enabled)
            self.assertEqual(info.ring_bytes, 1 * M)
            self.assertGreaterEqual(info.recorded, 2)
            trace = json.loads(mgr.trace_export("json"))
            self.assertIn("traced", json.dumps(trace))
            self.assertIn("<svg", mgr.trace_export("svg"))
            mgr.trace_stop()
            self.assertFalse(mgr.trace_info().enabled)
            self.assertStatus(S.NOT_FOUND, mgr.trace_stop)
            self.assertStatus(S.INVALID_ARGUMENT, mgr.trace_start, 1)


class ExportImport(Case):
    def test_sysmem_and_vidmem_cross_between_two_managers(self):
        with sim() as a, sim() as b:
            left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with left, right:
                src = a.alloc(2 * M, flags=uvm.MEM_USER_MAPPABLE)
                src.map_cpu_kernel()
                src.write(b"shared pages")
                src.export(left)
                dst = b.import_mem(right)
                self.assertEqual(dst.info().size, 2 * M)
                self.assertEqual(dst.info().backing_name, "sysmem")
                dst.map_cpu_kernel()
                self.assertEqual(dst.read(0, 12), b"shared pages")
                dst.write(b"answer", 100)
                self.assertEqual(src.read(100, 6), b"answer")
                # Vidmem of 2M chunks, user-mappable: the importer's copy engine sees the bytes.
                v = a.alloc(2 * M, backing="vidmem", gpu=1, flags=uvm.MEM_USER_MAPPABLE | uvm.MEM_GPU_MAPPED)
                a.memset(v, 0x77, 2 * M, gpu=1)
                v.export(left.fileno())
                w = b.import_mem(right.fileno(), client=b.client("importer"))
                self.assertEqual((w.info().backing_name, w.info().gpu), ("vidmem", 1))
                host = b.alloc(4 * K)
                host.map_cpu_kernel()
                host.map_gpu_kernel(1)
                w.map_gpu_kernel(1)
                b.copy(host, (w, 2 * M - 4 * K), 4 * K, gpu=1)
                self.assertEqual(host.read(), b"\x77" * (4 * K))
                # What cannot be exported, and a closed peer.
                private = a.alloc(4 * K)
                self.assertStatus(S.NOT_SUPPORTED, private.export, left)
                for m in (src, v, private):
                    m.free()
                for m in (dst, w, host):
                    m.free()
                left.close()
                self.assertStatus(S.NOT_FOUND, b.import_mem, right)


class BadInput(Case):
    def test_bad_arguments_raise_with_the_right_status(self):
        with sim() as mgr:
            self.assertStatus(S.INVALID_ARGUMENT, mgr.alloc, 1 << 62)
            self.assertStatus(S.INVALID_ARGUMENT, mgr.alloc, 4 * K, flags=1 << 20)
            self.assertStatus(S.INVALID_GPU, mgr.alloc, 4 * K, backing="vidmem", gpu=9)
            self.assertStatus(S.PAGE_SIZE_NOT_SUPPORTED, mgr.alloc, 4 * M, backing="vidmem", chunk_size=8 * K)
            self.assertStatus(S.NOT_SUPPORTED, mgr.alloc, 4 * K, backing="managed")
            self.assertStatus(S.INVALID_GPU, mgr.gpu_info, 2)
            self.assertStatus(S.INVALID_ARGUMENT, mgr.numa_node_info, 99)
            with mgr.alloc(4 * K) as m:
                self.assertStatus(S.NOT_SUPPORTED, m.advise, uvm.ADVISE_SET_READ_MOSTLY)
                self.assertStatus(S.NOT_SUPPORTED, m.prefetch, uvm.PROCESSOR_CPU)
                self.assertStatus(S.NOT_MAPPED, m.cpu_kernel_address)
                m.map_cpu_kernel()
                self.assertStatus(S.OUT_OF_RANGE, m.cpu_kernel_address, 8 * K)
            self.assertStatus(S.INVALID_ARGUMENT, uvm.Manager, backend="sim", vidmem=3 * M)
            self.assertRaises(ValueError, uvm.Manager, backend="tpu")
            self.assertRaises(ValueError, mgr.alloc, 4 * K, backing="texture")

    def test_the_error_carries_status_name_and_text(self):
        with sim() as mgr:
            try:
                mgr.alloc(1 << 62)
            except uvm.UvmError as e:
                self.assertIsInstance(e.status, int)
                self.assertEqual(e.status, 1)
                self.assertEqual(e.name, "INVALID_ARGUMENT")
                self.assertEqual(e.text, _capi.lib().uvm_status_string(1).decode())
                self.assertEqual(e.call, "uvm_mem_alloc")
                self.assertEqual(e.message, "size 4 EiB is over the maximum object size, 256 TiB")
                self.assertEqual(str(e), f"uvm_mem_alloc: {e.message} (UVM_ERR_INVALID_ARGUMENT)")
            else:
                self.fail("an absurd size was accepted")

    def test_sizes_parse(self):
        self.assertEqual(uvm.parse_size("20GiB"), 20 << 30)
        self.assertEqual(uvm.parse_size("512 MiB"), 512 << 20)
        self.assertEqual(uvm.parse_size("1.5G"), 3 << 29)
        self.assertEqual(uvm.parse_size("2MB"), 2000000)
        self.assertEqual(uvm.parse_size(4096), 4096)
        for bad in ("lots", "-1", -1, "3 parsecs", True, 4096.0):
            self.assertRaises(ValueError, uvm.parse_size, bad)


class ErrorsSayWhy(Case):
    """UvmError.message: the library's words for why the call failed
    (uvm_last_error_message), naming the argument, limit or variable."""

    def test_an_unknown_backend_in_the_environment_is_named(self):
        old = os.environ.get("UVM_BACKEND")
        os.environ["UVM_BACKEND"] = "bogus"
        try:
            e = self.assertStatus(S.INVALID_ARGUMENT, uvm.Manager)
        finally:
            if old is None:
                del os.environ["UVM_BACKEND"]
            else:
                os.environ["UVM_BACKEND"] = old
        self.assertEqual(e.message, "UVM_BACKEND=bogus: no such backend; sim or cuda")
        self.assertIn("UVM_BACKEND=bogus: no such backend; sim or cuda", str(e))

    def test_limits_and_sizes_are_named(self):
        e = self.assertStatus(S.INVALID_ARGUMENT, uvm.Manager, backend="sim", gpus=100)
        self.assertEqual(e.message, "sim.gpu_count 100 is over the limit of 32 GPUs (UVM_MAX_GPUS)")
        with sim(vidmem=64 * M) as mgr:
            e = self.assertStatus(S.INVALID_ARGUMENT, mgr.alloc, 2 ** 63)
            self.assertEqual(e.message, "size 8 EiB is over the maximum object size, 256 TiB")
            e = self.assertStatus(S.OUT_OF_MEMORY, mgr.alloc, "1TiB", backing="vidmem")
            self.assertEqual(e.message, "size 1 TiB is more than GPU 0's memory, 64 MiB")
            self.assertIn("1024.00 GiB", e.detail)  # the OOM report, read after the message
            e = self.assertStatus(S.INVALID_GPU, mgr.gpu_trim, 5)
            self.assertEqual(e.message, "gpu 5 is out of range: the manager has 2 GPUs (0 to 1)")
            # Nothing more to say: the status's own words.
            with mgr.alloc(4 * K) as m:
                e = self.assertStatus(S.NOT_MAPPED, m.cpu_kernel_address)
                self.assertEqual(e.message, "the object has no CPU kernel mapping")
            self.assertIsNone(mgr.lookup_gpu_kernel(0x1000))
            self.assertEqual(uvm.last_error_message(), uvm.status_string(S.NOT_FOUND))
            self.assertEqual(mgr.gpu_count, 2)
            self.assertEqual(uvm.last_error_message(), "success")

    def test_each_thread_reads_its_own_calls_words(self):
        with sim() as mgr:
            wrong = []

            def fail_with(gpu):
                want = f"gpu {gpu} is out of range: the manager has 2 GPUs (0 to 1)"
                for _ in range(100):
                    try:
                        mgr.gpu_trim(gpu)
                        wrong.append("no error")
                    except uvm.UvmError as e:
                        if getattr(e, "message", None) != want:
                            wrong.append(str(e))
            threads = [threading.Thread(target=fail_with, args=(10 + t,)) for t in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(wrong, [])


class ValuesFitTheirCTypes(Case):
    """Every integer is checked against its C type before the call: ctypes
    would wrap it (2**64 + 4096 as a uint64_t is 4096)."""

    def test_sizes_ports_and_indices_too_big_are_refused_by_name(self):
        with sim() as mgr:
            for size in (2 ** 64, 2 ** 64 + 4096):
                with self.assertRaises(ValueError) as cm:
                    mgr.alloc(size)
                self.assertIn("size = %d does not fit its C type, uint64_t" % size, str(cm.exception))
            with self.assertRaises(ValueError) as cm:
                uvm.serve_metrics(mgr, 70000)
            self.assertIn("port = 70000 does not fit its C type, uint16_t", str(cm.exception))
            with self.assertRaises(ValueError) as cm:
                mgr.gpu_trim(2 ** 32)
            self.assertIn("gpu = 4294967296", str(cm.exception))
            with mgr.alloc(4 * K) as m:
                with self.assertRaises(ValueError) as cm:
                    mgr.memset(m, 256, 4 * K)
                self.assertIn("value = 256 does not fit its C type, uint8_t", str(cm.exception))
                self.assertRaises(ValueError, m.gpu_kernel_address, 0, -1)
            self.assertRaises(ValueError, mgr.alloc, 4 * K, flags=1 << 32)
            self.assertRaises(ValueError, mgr.set_release_threshold, 0, 2 ** 64)
            self.assertRaises(ValueError, uvm.Manager, backend="sim", gpus=2 ** 32)
            self.assertRaises(TypeError, mgr.gpu_trim, 1.5)
            self.assertEqual(mgr.stats().objects, 0)  # nothing was allocated on the way
        # A struct checks each field as it is set, and names it.
        with self.assertRaises(ValueError) as cm:
            uvm.Placement(uvm.PLACEMENT_NODE, 2 ** 32)
        self.assertIn("uvm_placement_t.node = 4294967296", str(cm.exception))
        # And a function called directly: a checked argument, not a wrapped one.
        with sim() as mgr:
            self.assertRaises(ctypes.ArgumentError, _capi.lib().uvm_gpu_trim, mgr.handle, 2 ** 32, None)

    def test_numpy_integers_are_sizes_and_indices(self):
        try:
            import numpy
        except ImportError:
            self.skipTest("numpy is not installed")
        self.assertEqual(uvm.parse_size(numpy.int64(4096)), 4096)
        with sim() as mgr:
            with mgr.alloc(numpy.uint64(8 * K), backing="vidmem", gpu=numpy.int32(1)) as m:
                self.assertEqual((m.info().size, m.info().gpu), (8 * K, 1))
            self.assertEqual(mgr.gpu_info(numpy.uint8(1)).memory_total, 64 * M)
            self.assertRaises(ValueError, mgr.alloc, numpy.int64(-1))


class PythonicResults(Case):
    """Enums and flag sets by name, per-GPU lists as long as the GPUs, records
    that read, and types that mirror the C structs."""

    def test_enums_and_flags_read_by_name_and_equal_their_ints(self):
        with sim(gpus=3) as mgr:
            info = mgr.gpu_info(0)
            self.assertIsInstance(info.page_sizes, uvm.PageSize)
            self.assertIn(uvm.PageSize.SIZE_2M, info.page_sizes)
            self.assertEqual(info.page_sizes, (1 << 12) | (1 << 16) | (1 << 21))
            self.assertIs(info.cpu_coherent, False)
            self.assertEqual(len(str(info.uuid)), 36)
            with mgr.alloc(64 * K, backing=uvm.Backing.VIDMEM, flags=uvm.MemFlag.ZERO | uvm.MemFlag.EVICTABLE) as m:
                i = m.info()
                self.assertIs(i.backing, uvm.Backing.VIDMEM)
                self.assertEqual(i.backing, 1)
                self.assertEqual(i.backing, uvm.BACKING_VIDMEM)
                self.assertEqual(i.flags, uvm.MemFlag.ZERO | uvm.MemFlag.EVICTABLE)
                self.assertIsInstance(i.flags, uvm.MemFlag)
                self.assertIs(i.cpu_kernel_mapped, False)
                self.assertIn("backing=Backing.VIDMEM", repr(i))
                self.assertIn("flags=MemFlag.ZERO|EVICTABLE", repr(i))
            self.assertTrue(repr(info).startswith("GpuInfo(name='"), repr(info))
            self.assertIn("page_sizes=PageSize.SIZE_4K|SIZE_64K|SIZE_2M", repr(info))
            self.assertIn("uuid=UUID('%s')" % info.uuid, repr(info))
            self.assertNotIn("\\x00", repr(info))
            self.assertEqual(repr(mgr), "<uvm.Manager sim, 3 GPUs>")
            self.assertIsInstance(self.assertStatus(S.INVALID_GPU, mgr.gpu_info, 3).status, uvm.Status)

    def test_per_gpu_figures_are_as_long_as_the_gpus(self):
        with sim(gpus=3) as mgr:
            with mgr.client("c", budget=8 * M, gpu=2) as c:
                info = c.info()
                for name in ("vidmem_used", "vidmem_evictable", "vidmem_budget", "vidmem_asleep", "vidmem_cached"):
                    self.assertEqual(len(getattr(info, name)), 3, name)
                self.assertEqual(info.vidmem_budget, [0, 0, 8 * M])
                self.assertIn("vidmem_budget=[0, 0, %d]" % (8 * M), repr(info))
            with mgr.alloc(4 * K) as m:
                ids = [n.id for n in mgr.numa_nodes()]
                self.assertEqual(len(m.host_pages().node_bytes), max(ids) + 1)

    def test_every_record_names_its_structs_fields(self):
        for record, struct in ((uvm.GpuInfo, _capi.GpuInfo), (uvm.HostInfo, _capi.HostInfo),
                               (uvm.NumaNodeInfo, _capi.NumaNodeInfo), (uvm.MemInfo, _capi.MemInfo),
                               (uvm.GpuPhysAddress, _capi.GpuPhysAddress), (uvm.HostPages, _capi.HostPages),
                               (uvm.Residency, _capi.Residency), (uvm.ClientInfo, _capi.ClientInfo),
                               (uvm.PressureEvent, _capi.PressureEvent), (uvm.PageTreeInfo, _capi.PageTreeInfo),
                               (uvm.GpuStats, _capi.GpuStats), (uvm.ManagerStats, _capi.ManagerStats),
                               (uvm.TraceInfo, _capi.TraceInfo)):
            fields = [name for name, _ in struct._fields_]
            self.assertEqual([n for n in record.__annotations__ if n in fields], fields, record.__name__)

    def test_the_package_says_it_is_typed(self):
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(uvm.__file__), "py.typed")))


class Lab(Case):
    def test_the_lab_is_a_submodule(self):
        import uvm.lab
        with uvm.lab.Lab(uvm.lab.Model(sms=1, l2_entries=64, l2_ways=4), uvm.lab.PAGES_4K) as lab:
            lab.allocate(1 << 40, 1 * M)
            lab.access([(1 << 40) + p * 4 * K for p in range(16)], size=4)
            self.assertEqual(lab.stats().accesses, 16)
            self.assertEqual(lab.stats().l2_misses, 16)


if __name__ == "__main__":
    unittest.main(verbosity=2)
