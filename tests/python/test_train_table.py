"""bench/train_torch.py's --peers harness without PyTorch: the rounds, their
order and END_AT with the runs stood in for, and the tables of medians,
output equality and the library's ratios to its peers from known figures.
(The runs themselves need PyTorch and a GPU: tools/train_ab.sh MODE=peers;
MODE=peers DRY_RUN=1 runs them small on a CPU with PyTorch installed.)"""
import contextlib
import importlib.util
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("train_torch", os.path.join(HERE, "..", "..", "bench", "train_torch.py"))
tt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tt)

# Figures per allocator: step ms, peak MiB, after MiB; GPT-2's loss by allocator.
FIGURES = {"default": (70.0, 15000.0, 900.0), "expandable": (69.0, 14600.0, 880.0),
           "async": (71.0, 15100.0, 990.0), "uvm": (70.5, 14500.0, 870.0)}


def fake_result(workload, label, rnd):
    step, peak, after = FIGURES[label]
    r = {"model": workload, "alloc": label, "median_step_ms": step + rnd, "peak_driver_used_mib": peak + 10 * rnd,
         "after_release_driver_used_mib": after, "base_driver_used_mib": 500.0, "device": "test",
         "torch": "test", "phases_s": {"import_s": 0.0, "cuda_init_s": 1.0, "work_s": 4.0}}
    if workload == "generate":
        r["output_sha256"] = "b" if label == "async" and rnd == 2 else "a"
    else:
        loss = 10.5 if label != "expandable" else 10.5 + 2e-5
        r.update(final_loss=loss, final_loss_hex=float.hex(loss))
    return r


def quiet(f, *args):
    """f(*args) with its table (stdout) and progress lines (stderr) kept out of the test's output."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return f(*args)


class Peers(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.work, self.out = os.path.join(self.dir, "work"), os.path.join(self.dir, "out")
        self.calls = []
        self.saved = (tt.fresh_run, dict(os.environ))

        def fresh_run(workload, label, dry, result_path, log_path, timeout):
            rnd = int(os.path.basename(result_path).split("-")[0][1:])
            self.calls.append((rnd, workload, label))
            with open(log_path, "w") as f:
                f.write("stage: model\n")
            if workload == "varlen" and label == "uvm" and rnd == 1:
                return 1  # a failed run: no JSON
            with open(result_path, "w") as f:
                json.dump(fake_result(workload, label, rnd), f)
            return 0

        tt.fresh_run = fresh_run
        os.environ.update(SPAWN="fresh", ROUNDS="2", TRAIN_WORKLOADS="gpt2 varlen generate",
                          TRAIN_ALLOCS="default expandable async uvm")
        os.environ.pop("END_AT", None)

    def tearDown(self):
        tt.fresh_run = self.saved[0]
        os.environ.clear()
        os.environ.update(self.saved[1])
        shutil.rmtree(self.dir)

    def test_rounds_alternate_the_allocators_order_and_every_run_is_tabled(self):
        os.environ["BUDGET_S"] = "600"
        rc = quiet(tt.peers, self.work, self.out)
        self.assertEqual(rc, 1)  # one run failed
        order = ["default", "expandable", "async", "uvm"]
        expected = [(1, w, a) for w in ("gpt2", "varlen", "generate") for a in order] + \
                   [(2, w, a) for w in ("gpt2", "varlen", "generate") for a in order[::-1]]
        self.assertEqual(self.calls, expected)
        with open(os.path.join(self.out, "train_peers.json")) as f:
            data = json.load(f)
        self.assertEqual(len(data["runs"]), 24)
        self.assertEqual(sum("error" in r for r in data["runs"]), 1)
        with open(os.path.join(self.out, "train_peers.md")) as f:
            md = f.read()
        # Medians over the two rounds, with their range.
        self.assertIn("| GPT-2 training | step, ms | 71.5 (71.0-72.0) | 70.5 (70.0-71.0) | 72.5 (72.0-73.0) | "
                      "72.0 (71.5-72.5) |", md)
        self.assertIn("| variable-length GPT-2 training | step, ms | 71.5 (71.0-72.0) | 70.5 (70.0-71.0) | "
                      "72.5 (72.0-73.0) | 72.5 |", md)  # one round of the library's: no range
        self.assertIn("| GPT-2 training | peak, MiB | 15015 (15010-15020) |", md)
        # The loss against PyTorch's caching allocator's; generate's token ids.
        self.assertIn("| GPT-2 training | outputs | loss bit-equal (reference) | loss |Δ| ≤ 2.0e-05 | loss bit-equal |", md)
        self.assertIn("| GPT-2 generate() serving | outputs | ids same (reference) | ids same | ids differ in 1 of 2 |", md)
        # The failed run: said, and one round missing for its cell.
        self.assertIn("round 1 varlen uvm (fresh): exit 1: model", md)
        self.assertIn("uvm: 1 failed, 0 skipped", md)
        # The library against its peers: 72.0 / 71.5 and / 70.5, 14515 / min(14615, 15115), 870 / 900.
        self.assertIn("| GPT-2 training | 1.007 missed | 1.021 (expandable_segments) missed | "
                      "0.993 (expandable_segments) met | 0.993 (expandable_segments) met | 0.967 met |", md)
        with tarfile.open(os.path.join(self.out, "train_peers_logs.tar.gz")) as tar:
            names = tar.getnames()
        self.assertIn("train_peers/logs/r2-generate-uvm.json", names)
        self.assertIn("train_peers/logs/r1-varlen-uvm.log", names)

    def test_a_run_starts_only_where_it_can_end_before_END_AT(self):
        os.environ["END_AT"] = str(time.time() + 30)  # less than a first run of any workload is given (60 s)
        rc = quiet(tt.peers, self.work, self.out)
        self.assertEqual(rc, 1)
        self.assertEqual(self.calls, [])
        with open(os.path.join(self.out, "train_peers.json")) as f:
            runs = json.load(f)["runs"]
        self.assertEqual(len(runs), 24)
        self.assertTrue(all("skipped" in r for r in runs))
        with open(os.path.join(self.out, "train_peers.md")) as f:
            self.assertIn("default: 0 failed, 2 skipped", f.read())

    def test_unknown_workloads_are_refused_before_any_run(self):
        os.environ["TRAIN_WORKLOADS"] = "gpt2 bogus"
        with self.assertRaises(SystemExit) as e:
            tt.peers(self.work, self.out)
        self.assertIn("bogus", str(e.exception))
        self.assertEqual(self.calls, [])


if __name__ == "__main__":
    unittest.main()
