#!/usr/bin/env python3
"""PyTorch's own allocator-facing tests under uvm.torch.enable() (issue 40, item 6).

    python3 tools/torch_tests.py PATH/test_cuda.py --out "$OUT" [--baseline] [-k REGEX]

PATH/test_cuda.py is PyTorch's test/test_cuda.py at the tag of the
installed PyTorch (not part of this repository: keep it in the ignored
folder .torch-tests/). The tests whose names match the allocator's topics
(graphs, record_stream, MemPool, out of memory, memory statistics and
snapshots, caching_allocator_alloc/delete, empty_cache; or -k REGEX) are
run in a process where uvm.torch.enable() came first; with --baseline the
same tests run again under PyTorch's own allocator, so a failure that is
PyTorch's or the machine's is told apart from one of the library's. A test
that kills its process is marked "crashed" and the rest go on in a new one.

Writes torch_tests.md (a table: test, result under uvm, under PyTorch's
allocator, reason) and torch_tests.json to --out. Exits 1 where a test fails
under uvm and passes (or was not run) under PyTorch's allocator.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import traceback

TOPICS = (r"graph|record_stream|mem_?pool|MemPool|out_of_memory|oom|memory_stats|memory_allocat|"
          r"max_memory|reset_peak|memory_reserved|caching_allocator|empty_cache|snapshot|memory_viz|"
          r"record_memory_history|allocator|cudaMallocAsync|set_per_process_memory_fraction|mem_get_info|"
          r"block_state|checkpoint_pool|cuda_memory_leak")
# Classes of test_cuda.py that hold allocator tests (TestCudaMallocAsync tests
# the cudaMallocAsync backend, not a pluggable allocator: left out).
CLASSES = ("TestCuda", "TestMemPool", "TestBlockStateAbsorption", "TestCudaOptims", "TestCudaAutocast")


# ---------------------------------------------------------------------------
# The worker: runs the listed tests in this process, one JSON line each.
# ---------------------------------------------------------------------------

def _missing_helper(module_name, name):
    """A helper of torch.testing._internal that the test file names but the
    installed PyTorch lacks (the file is from a nearby version): a test that
    uses it (calls it, enters it, or is decorated by it) is skipped, saying
    so; a class it decorates is left as it is."""
    import functools
    import unittest
    why = f"{module_name}.{name} is not in the installed PyTorch"

    class Missing:
        def __call__(self, *args, **kwargs):
            if len(args) == 1 and not kwargs and isinstance(args[0], type):
                return args[0]
            if len(args) == 1 and not kwargs and callable(args[0]):
                @functools.wraps(args[0])
                def skipped(*a, **k):
                    raise unittest.SkipTest(why)
                return skipped
            return Missing()  # a decorator's or a context's arguments

        def __enter__(self):
            raise unittest.SkipTest(why)

        def __exit__(self, *exc):
            return False

        def __bool__(self):
            return False

    return Missing()


def load_module(path):
    """PyTorch's test file as a module. Where it imports a name the installed
    PyTorch's test helpers lack (`cannot import name X from M`, a file of a
    nearby version), X is made a stand-in that skips what uses it, and the
    names so made are printed (MISSING ...) for the report."""
    import importlib
    import importlib.util
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    made = []
    for _ in range(40):
        spec = importlib.util.spec_from_file_location("test_cuda_under_test", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            break
        except ImportError as e:
            m = re.match(r"cannot import name '(\w+)' from '([\w.]+)'", str(e))
            if not m or not m.group(2).startswith("torch.testing._internal"):
                raise
            setattr(importlib.import_module(m.group(2)), m.group(1), _missing_helper(m.group(2), m.group(1)))
            made.append(f"{m.group(2)}.{m.group(1)}")
    if made:
        print("MISSING " + json.dumps(made), flush=True)
    return module


def list_tests(module):
    import unittest
    loader = unittest.TestLoader()
    found = []
    for name in dir(module):
        cls = getattr(module, name)
        if isinstance(cls, type) and issubclass(cls, unittest.TestCase) and (name in CLASSES or
                                                                          name.startswith(CLASSES)):
            for test in loader.getTestCaseNames(cls):
                found.append(f"{name}.{test}")
    return found


def worker(args):
    import unittest
    if args.allocator == "uvm":
        import uvm.torch
        how = uvm.torch.enable()
        print("ENABLED " + json.dumps({"enabled": how, "build": {k: v for k, v in uvm.torch.extension_build().items()
                                                                  if k != "failed_tries"}}), flush=True)
    module = load_module(args.path)
    if args.list:
        print("TESTS " + json.dumps(list_tests(module)), flush=True)
        return 0
    names = args.tests.split(",")
    loader = unittest.TestLoader()

    class Result(unittest.TestResult):
        def __init__(self):
            super().__init__()
            self.outcome = ("pass", "")

        def addFailure(self, test, err):
            self.outcome = ("fail", "".join(traceback.format_exception_only(err[0], err[1])).strip())

        def addError(self, test, err):
            self.outcome = ("error", "".join(traceback.format_exception_only(err[0], err[1])).strip())

        def addSkip(self, test, reason):
            self.outcome = ("skip", str(reason))

        def addExpectedFailure(self, test, err):
            self.outcome = ("xfail", "".join(traceback.format_exception_only(err[0], err[1])).strip())

        def addUnexpectedSuccess(self, test):
            self.outcome = ("xpass", "expected to fail, passed")

    for name in names:
        print("START " + name, flush=True)
        started = time.time()
        result = Result()
        try:
            loader.loadTestsFromName(name, module).run(result)
        except BaseException as e:  # noqa: BLE001  (a test that escapes unittest: its result)
            result.outcome = ("error", f"{type(e).__name__}: {e}")
        status, reason = result.outcome
        print("RESULT " + json.dumps({"test": name, "status": status, "reason": reason[-1500:],
                                      "seconds": round(time.time() - started, 2)}), flush=True)
    return 0


# ---------------------------------------------------------------------------
# The runner: lists, runs in workers (restarting after a crash), tabulates.
# ---------------------------------------------------------------------------

def run_worker(args, allocator, extra, log, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), args.path, "--worker", "--allocator", allocator] + extra
    env = dict(os.environ)
    env.setdefault("PYTORCH_TEST_WITH_SLOW", "0")
    with open(log, "a") as f:
        f.write(f"\n== {' '.join(cmd)}\n")
        f.flush()
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True, timeout=timeout, env=env)
            out, rc = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""), "timeout"
        f.write(out)
    return out, rc


def run_all(args, allocator, tests, log):
    results = {}
    pending = list(tests)
    while pending:
        out, rc = run_worker(args, allocator, ["--tests", ",".join(pending)], log, args.timeout)
        started = None
        for line in out.splitlines():
            if line.startswith("START "):
                started = line[6:]
            elif line.startswith("RESULT "):
                r = json.loads(line[7:])
                results[r["test"]] = r
                started = None
        done = [t for t in pending if t in results]
        if started and started not in results:
            results[started] = {"test": started, "status": "crashed",
                                "reason": f"the process ended during it (rc {rc}; see {os.path.basename(log)})"}
        elif len(done) < len(pending) and not started:
            for t in pending:
                if t not in results:
                    results[t] = {"test": t, "status": "not run", "reason": f"the worker ended first (rc {rc})"}
        pending = [t for t in pending if t not in results]
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="PyTorch's test/test_cuda.py at the installed PyTorch's tag")
    ap.add_argument("--out", default=os.environ.get("OUT", "torch-logs"))
    ap.add_argument("-k", dest="pattern", default=TOPICS, help="regex of the tests to run (default: the allocator's)")
    ap.add_argument("--baseline", action="store_true", help="run them under PyTorch's own allocator too")
    ap.add_argument("--timeout", type=int, default=1500, help="seconds for one worker process")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--allocator", choices=("uvm", "native"), default="uvm", help=argparse.SUPPRESS)
    ap.add_argument("--list", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tests", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    os.makedirs(args.out, exist_ok=True)
    log = os.path.join(args.out, "torch_tests.log")
    open(log, "w").close()
    out, rc = run_worker(args, "native", ["--list"], log, 600)
    listed = []
    for line in out.splitlines():
        if line.startswith("TESTS "):
            listed = json.loads(line[6:])
    if not listed:
        print(f"no tests listed from {args.path} (rc {rc}): see {log}")
        return 1
    pick = re.compile(args.pattern, re.I)
    tests = [t for t in listed if pick.search(t)]
    print(f"{len(tests)} of {len(listed)} tests of {args.path} picked", flush=True)
    under = run_all(args, "uvm", tests, log)
    native = run_all(args, "native", tests, log) if args.baseline else {}
    enabled = re.search(r"^ENABLED (.*)$", open(log).read(), re.M)
    rows, failing = [], 0
    for t in tests:
        u = under.get(t, {"status": "not run", "reason": ""})
        n = native.get(t, {"status": "-", "reason": ""})
        bad = u["status"] in ("fail", "error", "crashed", "not run", "xpass")
        ours = bad and n["status"] not in ("fail", "error", "crashed")
        failing += ours
        reason = u["reason"].splitlines()[-1] if u["reason"] else ""
        if bad and not ours:
            reason = "fails under PyTorch's allocator too: " + reason
        rows.append({"test": t, "uvm": u["status"], "native": n["status"], "reason": reason,
                     "uvm_reason": u["reason"], "native_reason": n["reason"], "library_failure": ours})
    counts = {}
    for r in rows:
        counts[r["uvm"]] = counts.get(r["uvm"], 0) + 1
    lines = [f"PyTorch's tests from {args.path} under uvm.torch.enable() "
             f"({enabled.group(1) if enabled else 'enable() not reached'})", "",
             "under uvm: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())), "",
             "| test | under uvm | PyTorch's allocator | reason |", "| --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['test']} | {r['uvm']} | {r['native']} | {r['reason'].replace('|', '/')[:300]} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "torch_tests.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "torch_tests.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(text)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
