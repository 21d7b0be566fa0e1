"""One model across two GPUs in one process through uvm.torch (issue 42,
item 3): tensors on cuda:0 and cuda:1 from the library, copies between
them, a budget per GPU, and one sleepable client with memory on both GPUs
going to sleep and waking with every pointer and byte as it was.

Needs PyTorch and two GPUs; exits 77 (skipped) otherwise. Its own process:
uvm.torch.enable() must come before PyTorch's first CUDA allocation.
tools/multi_gpu_check.sh runs it on a GPU pair; the same at the C level
runs on sim's two simulated GPUs in CI (tests/pressure/sleep_test.cpp,
AModelOnTwoGpusSleepsAndWakesWithEveryAddressAndByteOnBoth)."""
import importlib.util
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

M = 1 << 20


def two_gpus():
    """Why the test cannot run here, or None."""
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed"
    import torch
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        return f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} CUDA GPU(s) here, two needed"
    return None


class AModelAcrossTwoGpus(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch
        import uvm.torch
        cls.torch, cls.ut = torch, uvm.torch
        cls.mode = uvm.torch.enable()

    def used(self, gpu):
        free, total = self.torch.cuda.mem_get_info(gpu)
        return total - free

    def test_1_tensors_on_both_gpus_and_copies_between_them(self):
        torch, ut = self.torch, self.ut
        a = torch.arange(4 * M, dtype=torch.int32, device="cuda:0")
        b = a.to("cuda:1")  # a peer copy
        self.assertEqual(b.device, torch.device("cuda", 1))
        self.assertTrue(torch.equal(b.cpu(), a.cpu()))
        c = (b * 3).to("cuda:0")  # and back
        self.assertTrue(torch.equal(c, a * 3))
        b.copy_(c, non_blocking=True)  # across the GPUs on the current stream of cuda:1's side
        torch.cuda.synchronize(1)
        self.assertTrue(torch.equal(b.cpu(), (a * 3).cpu()))
        # Every block came from the library, on its own GPU.
        mgr = ut.manager()
        for t, g in ((a, 0), (b, 1), (c, 0)):
            found = mgr.lookup_gpu_kernel(t.data_ptr(), gpu=g)
            self.assertIsNotNone(found, f"cuda:{g} tensor not the library's")
        self.assertGreater(ut.memory_stats(0)["allocated_bytes.all.current"], 0)
        self.assertGreater(ut.memory_stats(1)["allocated_bytes.all.current"], 0)

    def test_2_a_budget_per_gpu(self):
        torch, ut = self.torch, self.ut
        with torch.cuda.device(1):
            with ut.client("tenant", budget="64MiB", gpu=1):
                keep = torch.empty(48 * M, dtype=torch.uint8, device="cuda:1")
                with self.assertRaises(torch.cuda.OutOfMemoryError) as cm:
                    torch.empty(32 * M, dtype=torch.uint8, device="cuda:1")
                self.assertIn("GPU 1", str(cm.exception))
                self.assertIn("tenant", str(cm.exception))
                # GPU 0 has no budget for the client: the same request is taken there.
                other = torch.empty(32 * M, dtype=torch.uint8, device="cuda:0")
                self.assertEqual(other.numel(), 32 * M)
        self.assertEqual(ut.memory_stats(1)["uvm.client.tenant.used_bytes"], 48 * M)
        self.assertEqual(ut.memory_stats(1)["uvm.client.tenant.budget_bytes"], 64 * M)
        del keep, other

    def test_3_a_sleepable_client_on_both_gpus_sleeps_and_wakes_intact(self):
        torch, ut = self.torch, self.ut
        torch.manual_seed(0)
        layers = []
        for g in (0, 1):  # a two-stage model: the first half on cuda:0, the second on cuda:1
            with torch.cuda.device(g), ut.client("pipeline", sleepable=True, gpu=g):
                layers.append(torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                                  torch.nn.Linear(4096, 1024)).to(f"cuda:{g}"))
        x = torch.randn(64, 1024, device="cuda:0")

        def forward():
            return layers[1](layers[0](x).to("cuda:1"))

        with torch.no_grad():
            before = forward().cpu()
        tensors = [p for layer in layers for p in layer.parameters()]
        pointers = [t.data_ptr() for t in tensors]
        saved = [t.detach().cpu().clone() for t in tensors]
        from uvm import _runtime
        client = _runtime.sleepable_clients()["pipeline"]
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        ut.empty_cache()  # the driver's figures below are then the client's, and its use its live tensors
        held = client.info().vidmem_used
        self.assertGreater(held[0], 0)
        self.assertGreater(held[1], 0)
        used = [self.used(0), self.used(1)]
        given = ut.sleep(["pipeline"])
        info = client.info()
        self.assertTrue(info.asleep)
        self.assertEqual(given, held[0] + held[1])
        self.assertEqual((info.vidmem_asleep[0], info.vidmem_asleep[1]), (held[0], held[1]))
        for g in (0, 1):
            self.assertLessEqual(self.used(g), used[g] - held[g] * 99 // 100, f"GPU {g}'s memory went back")
        ut.wake(["pipeline"])
        self.assertFalse(client.info().asleep)
        self.assertEqual([t.data_ptr() for t in tensors], pointers)
        for t, s in zip(tensors, saved):
            self.assertTrue(torch.equal(t.detach().cpu(), s), f"a tensor of {t.device} changed")
        with torch.no_grad():
            after = forward().cpu()
        # The same weights and input: the same output (within what a GEMM
        # algorithm picked again may change in the last bits).
        self.assertTrue(torch.allclose(before, after, rtol=0, atol=1e-4), "the model's output after the wake")


if __name__ == "__main__":
    why = two_gpus()
    if why:
        print(f"skipped: {why}")
        sys.exit(77)
    unittest.main(verbosity=2)
