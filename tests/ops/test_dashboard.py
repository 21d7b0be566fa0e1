"""The operator's kit against a real Prometheus (Debian package prometheus):
this process serves a simulated manager's metrics with the Python package
(uvm.serve_metrics), a Prometheus started here scrapes it every second and
evaluates ops/prometheus/uvm-alerts.yml; then every PromQL query of
ops/grafana/uvm-dashboard.json (panels and template variables) goes through
Prometheus' HTTP API and must succeed with results, a few against values
known from the workload, and the alerts the workload provokes must be
pending or firing.

Exit code 77 (CTest: skipped) where prometheus is not installed or the
library was built without its HTTP endpoint.

    UVM_LIBRARY=build/libuvm.so python3 tests/ops/test_dashboard.py
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import uvm  # noqa: E402

M = 1 << 20
DASHBOARD = os.path.join(ROOT, "ops", "grafana", "uvm-dashboard.json")
RULES = os.path.join(ROOT, "ops", "prometheus", "uvm-alerts.yml")
SKIP = 77
# What Grafana puts in place of its variables: every value of a multi-value
# variable ("All" is the allValue .*), and windows that span several 1 s scrapes.
GRAFANA_VARIABLES = {"$__rate_interval": "30s", "$__interval": "5s", "$__range": "5m",
                     "$instance": ".*", "$gpu": ".*", "$client": ".*"}


def substitute(expr):
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    assert "$" not in expr, f"a Grafana variable the test does not know: {expr}"
    return expr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """A Prometheus server on loopback with a configuration and data folder of its own."""

    def __init__(self, target_port):
        self.dir = tempfile.mkdtemp(prefix="uvm-prometheus-")
        self.port = free_port()
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    f"rule_files:\n  - {RULES}\n"
                    "scrape_configs:\n  - job_name: uvm\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{target_port}']\n")
        self.log = open(os.path.join(self.dir, "prometheus.log"), "w")
        self.process = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={self.dir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=subprocess.STDOUT)

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:  # a bad query is a 400 with a JSON body
            return json.loads(e.read())

    def query(self, expr):
        return self.api("query", query=expr)

    def wait_for(self, expr, predicate, seconds=60):
        """The result of `expr` once predicate(result) holds; the last one after `seconds`."""
        deadline, answer = time.time() + seconds, None
        while time.time() < deadline:
            try:
                answer = self.query(expr)
                if answer.get("status") == "success" and predicate(answer["data"]["result"]):
                    return answer["data"]["result"]
            except (OSError, ValueError):
                pass
            time.sleep(0.25)
        self.log.flush()
        with open(os.path.join(self.dir, "prometheus.log")) as f:
            log = f.read()[-3000:]
        raise AssertionError(f"{expr}: no answer as expected in {seconds} s (last: {answer}); "
                             f"the end of prometheus' log:\n{log}")

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def dashboard_queries(dashboard):
    """(panel title, refId, expr) of every target of every panel, rows' panels included."""
    out = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                out.append((p["title"], t["refId"], t["expr"]))
    walk(dashboard["panels"])
    return out


def by_labels(result, **labels):
    return [float(r["value"][1]) for r in result if all(r["metric"].get(k) == v for k, v in labels.items())]


class DashboardAndAlerts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.mgr = uvm.Manager(backend="sim", gpus=2, vidmem=64 * M)
        cls.server = uvm.serve_metrics(cls.mgr, 0)
        cls.objects = []
        cls.prometheus = Prometheus(cls.server.port)
        try:
            cls.workload()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def workload(cls):
        mgr, alloc = cls.mgr, lambda *a, **k: cls.objects.append(cls.mgr.alloc(*a, **k)) or cls.objects[-1]
        # GPU 0: kv-cache at 75% of a 32 MiB budget, trainer at 100% of 16 MiB.
        cls.kv = mgr.client("kv-cache", budget=32 * M)
        cls.trainer = mgr.client("trainer", budget=16 * M)
        alloc(24 * M, backing="vidmem", client=cls.kv, tag="kv")
        alloc(8 * M, backing="vidmem", client=cls.trainer, tag="weights")
        cls.cache = alloc(8 * M, backing="vidmem", client=cls.trainer, flags=uvm.MEM_EVICTABLE | uvm.MEM_GPU_MAPPED)
        alloc(64 * 1024, backing="sysmem", client=cls.trainer, tag="host")
        # GPU 1: 58 of 64 MiB held (above 85%).
        alloc(58 * M, backing="vidmem", gpu=1, tag="ballast")
        # The first scrape, before the events that counters must show as increases.
        cls.prometheus.wait_for('uvm_gpu_oom_total{job="uvm"}', lambda r: len(r) == 2)
        try:
            mgr.alloc(8 * M, backing="vidmem", gpu=1)
            raise AssertionError("an 8 MiB allocation fit in the 6 MiB left on GPU 1")
        except uvm.UvmError as e:
            assert e.status == uvm.Status.OUT_OF_MEMORY, e
        for _ in range(3):
            cls.cache.evict()
            cls.cache.make_resident()
        mgr.memset(cls.cache, 0x5A, 8 * M)
        # Counters that moved must be seen by a scrape after it, twice over.
        cls.prometheus.wait_for('uvm_gpu_restores_total{job="uvm",gpu="0"}', lambda r: r and r[0]["value"][1] == "3")
        time.sleep(2.5)

    @classmethod
    def tearDownClass(cls):
        cls.prometheus.stop()
        cls.server.stop()
        for m in cls.objects:
            m.free()
        cls.kv.destroy()
        cls.trainer.destroy()
        cls.mgr.close()

    def test_every_dashboard_query_runs_and_has_results(self):
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        queries = dashboard_queries(dashboard)
        self.assertGreater(len(queries), 20)
        for title, ref, expr in queries:
            with self.subTest(panel=title, refId=ref):
                answer = self.prometheus.query(substitute(expr))
                self.assertEqual(answer.get("status"), "success", f"{expr}: {answer}")
                self.assertEqual(answer["data"]["resultType"], "vector")
                self.assertTrue(answer["data"]["result"], f"no series for {expr}")
                for r in answer["data"]["result"]:  # from the scrape, not made up by the query
                    self.assertEqual(r["metric"].get("instance"), f"127.0.0.1:{self.server.port}", r)

    def test_template_variables_list_the_processes_gpus_and_clients(self):
        with open(DASHBOARD) as f:
            variables = {v["name"]: v for v in json.load(f)["templating"]["list"]}
        want = {"instance": {f"127.0.0.1:{self.server.port}"}, "gpu": {"0", "1"}, "client": {"kv-cache", "trainer"}}
        self.assertEqual(set(variables) - {"datasource"}, set(want))
        for name, values in want.items():
            m = re.fullmatch(r"label_values\((.*), (\w+)\)", variables[name]["query"]["query"])
            self.assertIsNotNone(m, variables[name])
            self.assertEqual(m.group(2), name)
            answer = self.prometheus.api(f"label/{name}/values", **{"match[]": substitute(m.group(1))})
            self.assertEqual(answer.get("status"), "success", answer)
            self.assertEqual(set(answer["data"]), values)

    def panel_result(self, title):
        """The series of every target of the panel, one list."""
        with open(DASHBOARD) as f:
            queries = [q for q in dashboard_queries(json.load(f)) if q[0] == title]
        self.assertTrue(queries, title)
        return [r for q in queries for r in self.prometheus.query(substitute(q[2]))["data"]["result"]]

    def test_panels_show_the_workloads_values(self):
        budget = self.panel_result("Client vidmem, % of budget")
        self.assertEqual(by_labels(budget, client="kv-cache", gpu="0"), [75.0])
        self.assertEqual(by_labels(budget, client="trainer", gpu="0"), [100.0])
        self.assertEqual(by_labels(budget, client="kv-cache", gpu="1"), [])  # no budget there
        held = self.panel_result("Held memory (% of the GPU)")
        stats = self.mgr.gpu_stats(1)
        self.assertEqual(by_labels(held, gpu="1"), [100.0 * stats.root_chunks * 2 * M / (64 * M)])
        self.assertGreater(by_labels(held, gpu="1")[0], 85)
        ooms = self.panel_result("OUT_OF_MEMORY in the time range")
        self.assertGreater(by_labels(ooms, gpu="1")[0], 0)
        self.assertEqual(by_labels(ooms, gpu="0"), [0.0])
        moves = self.panel_result("Evictions and restores")
        self.assertTrue(any(v > 0 for v in by_labels(moves, gpu="0")))
        self.assertEqual(by_labels(moves, gpu="1"), [0.0, 0.0])
        sysmem = self.panel_result("Client sysmem")
        self.assertEqual(by_labels(sysmem, client="trainer"), [64.0 * 1024])

    def test_the_alert_rules_load_and_the_workload_raises_them(self):
        rules = self.prometheus.api("rules")
        self.assertEqual(rules["status"], "success")
        loaded = {r["name"]: r for g in rules["data"]["groups"] for r in g["rules"]}
        self.assertEqual(set(loaded), {"UvmGpuHeldMemoryHigh", "UvmClientNearBudget", "UvmOutOfMemory",
                                       "UvmEvictionThrash"})
        for name, rule in loaded.items():
            self.assertEqual(rule["health"], "ok", f"{name}: {rule.get('lastError')}")

        def states():
            alerts = self.prometheus.api("alerts")["data"]["alerts"]
            return {(a["labels"]["alertname"], a["labels"].get("gpu"), a["labels"].get("client")): a["state"]
                    for a in alerts}
        deadline = time.time() + 30
        want = {("UvmOutOfMemory", "1", None): "firing",
                ("UvmGpuHeldMemoryHigh", "1", None): "pending",   # for: 5m
                ("UvmClientNearBudget", "0", "trainer"): "pending"}  # for: 1m
        while time.time() < deadline and states() != want:
            time.sleep(0.5)
        self.assertEqual(states(), want)


if __name__ == "__main__":
    if shutil.which("prometheus") is None:
        print("prometheus is not installed (Debian package prometheus): the dashboard's queries are not run")
        sys.exit(SKIP)
    with uvm.Manager(backend="sim", gpus=1, vidmem=2 * M) as probe:
        try:
            uvm.serve_metrics(probe, 0).stop()
        except uvm.UvmError as e:
            if e.status != uvm.Status.NOT_SUPPORTED:
                raise
            print("libuvm was built without cpp-httplib: no metrics endpoint for Prometheus to scrape")
            sys.exit(SKIP)
    sys.exit(0 if unittest.main(verbosity=2, exit=False).result.wasSuccessful() else 1)
