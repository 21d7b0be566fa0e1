"""The Python bindings of the page-size lab (python/uvm_lab.py), against cases
computed by hand and the C++ tests' figures."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import uvm_lab  # noqa: E402

K, M = 1024, 1024 * 1024
BASE = 1 << 40


def small_model(**kw):
    args = dict(sms=1, l1_entries=16, l1_ways=4, l2_entries=64, l2_ways=4, pwc_entries=8)
    args.update(kw)
    return uvm_lab.Model(**args)


class LabTest(unittest.TestCase):
    def test_sequential_4k_pages_miss_once_per_page(self):
        with uvm_lab.Lab(small_model(), uvm_lab.PAGES_4K) as lab:
            lab.allocate(BASE, 1 * M)
            lab.access([BASE + p * 4 * K for p in range(256)], size=4)
            s = lab.stats()
            self.assertEqual(s.accesses, 256)
            self.assertEqual(s.l2_misses, 256)
            self.assertEqual(s.walk_refs, 6 + 255 * 2)
            self.assertAlmostEqual(s.time_walks_ns, 100.0 * (6 + 255 * 2))

    def test_large_pages_cut_misses_on_a_random_working_set(self):
        misses = {}
        for policy in (uvm_lab.PAGES_4K, uvm_lab.PAGES_2M):
            with uvm_lab.Lab(small_model(l1_ways=16, l2_entries=512, l2_ways=16, pwc_entries=16), policy) as lab:
                lab.allocate(BASE, 256 * M)
                lab.run(uvm_lab.Workload(uvm_lab.RANDOM, footprint=256 * M, accesses=200000), BASE)
                misses[policy] = lab.stats().l2_misses
        self.assertGreater(misses[uvm_lab.PAGES_4K], 190000)
        self.assertLess(misses[uvm_lab.PAGES_2M], 1000)

    def test_out_of_core_small_pages_move_fewer_bytes(self):
        moved = {}
        for policy in (uvm_lab.PAGES_4K, uvm_lab.PAGES_2M, uvm_lab.MOSAIC):
            with uvm_lab.Lab(small_model(gpu_memory=64 * M), policy) as lab:
                lab.allocate(BASE, 128 * M)
                lab.run(uvm_lab.Workload(uvm_lab.RANDOM, footprint=128 * M, accesses=20000), BASE)
                moved[policy] = lab.stats().bytes_migrated_in
        self.assertLess(moved[uvm_lab.PAGES_4K] * 10, moved[uvm_lab.PAGES_2M])
        self.assertEqual(moved[uvm_lab.MOSAIC], moved[uvm_lab.PAGES_4K])

    def test_a_trace_replays_and_a_bad_line_is_named(self):
        with tempfile.NamedTemporaryFile("w", suffix=".trace", delete=False) as f:
            f.write("alloc 0x10000000000 0x200000\nr 0x10000000000\nnonsense\n")
            path = f.name
        try:
            with uvm_lab.Lab(small_model(), uvm_lab.PAGES_4K) as lab:
                with self.assertRaises(uvm_lab.LabError) as e:
                    lab.replay(path)
                self.assertIn("line 3", str(e.exception))
                self.assertEqual(lab.stats().accesses, 1)
        finally:
            os.unlink(path)

    def test_bad_input_raises(self):
        with self.assertRaises(uvm_lab.LabError):
            uvm_lab.Lab(small_model(l1_entries=15), uvm_lab.PAGES_4K)  # not a multiple of its ways
        with self.assertRaises(uvm_lab.LabError):
            uvm_lab.Lab(small_model(), 9)  # no such policy
        with uvm_lab.Lab(small_model(), uvm_lab.PAGES_2M) as lab:
            with self.assertRaises(uvm_lab.LabError):
                lab.allocate(BASE + 4 * K, 2 * M)  # misaligned for 2M pages
            lab.allocate(BASE, 2 * M)
            with self.assertRaises(uvm_lab.LabError):
                lab.allocate(BASE, 2 * M)  # overlaps
            with self.assertRaises(uvm_lab.LabError):
                lab.free(BASE + 2 * M)
            with self.assertRaises(uvm_lab.LabError):
                lab.access([BASE], size=0)

    def test_presets_and_calibrated_costs(self):
        h100 = uvm_lab.Model.preset("h100")
        self.assertEqual(h100.coalesce_bytes, 32 * M)
        self.assertEqual(h100.random_replacement, 1)
        with self.assertRaises(uvm_lab.LabError):
            uvm_lab.Model.preset("no-such-gpu")
        with uvm_lab.Lab(h100, uvm_lab.PAGES_4K) as lab:
            lab.set_costs("H100")  # the lab's own calibration file
            lab.allocate(BASE, 64 * M)
            s = lab.stats()
            # Pinning 64 MiB of 4K pages: the fit of the H100's rows gives 2-6 ms (measured 3.9 ms).
            self.assertGreater(s.time_mapping_ns, 2e6)
            self.assertLess(s.time_mapping_ns, 6e6)
            self.assertEqual(s.time_migration_ns, 0)
            with self.assertRaises(uvm_lab.LabError):
                lab.set_costs("NVIDIA")  # matches both GPUs of the file
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write("device,date,quantity,bytes,page_bytes,samples,median_us,min_us,max_us\n")
            f.write("GPU,2026-11-23,host_register,4096\n")
        try:
            with uvm_lab.Lab(h100, uvm_lab.PAGES_4K) as lab:
                with self.assertRaisesRegex(uvm_lab.LabError, "line 2"):
                    lab.set_costs("GPU", f.name)
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
