#!/usr/bin/env python3
"""The page-size lab in a real browser (docs/page-size-lab.md, "In a browser").

Starts `uvm-lab --serve 0` on loopback, loads the page in headless Chromium
with settings in the query string, and checks that the tables the page shows
are the ones `uvm-lab` prints for the same settings, for two different
settings and a sweep; keeps a screenshot; sends bad input (through the page,
and straight to the JSON endpoint, a malformed trace upload among it) and
checks each gets its sentence and that the server still serves after.

Standard library only. Exits 77 (CTest's skip) with a reason where Chromium
is absent or uvm-lab was built without cpp-httplib.

    test_lab_browser.py UVM_LAB OUTDIR
"""
import base64
import html.parser
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

SKIP = 77


def skip(why):
    print("SKIP: " + why)
    sys.exit(SKIP)


def find_chromium():
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class Dom(html.parser.HTMLParser):
    """The parts of the dumped DOM the test reads: the body's data-state, the
    text of elements by id, and the cells of tables by id."""

    def __init__(self, text):
        super().__init__()
        self.state = None
        self.text = {}
        self.tables = {}
        self._open = []       # ids of the elements we are inside, with their depth
        self._depth = 0
        self._table = None
        self._row = None
        self._cell = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.state = a.get("data-state")
        self._depth += 1
        if "id" in a:
            self._open.append((a["id"], self._depth))
            self.text.setdefault(a["id"], "")
        if tag == "table" and "id" in a:
            self._table = a["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self._row = []
            self.tables[self._table].append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "table":
            self._table = None
            self._row = None
        while self._open and self._open[-1][1] >= self._depth:
            self._open.pop()
        self._depth -= 1

    def handle_data(self, data):
        for ident, _ in self._open:
            self.text[ident] += data
        if self._cell is not None:
            self._cell += data


class Lab:
    def __init__(self, uvm_lab, chromium, outdir):
        self.uvm_lab, self.chromium, self.outdir = uvm_lab, chromium, outdir
        self.profile = tempfile.mkdtemp(prefix="uvm-lab-chromium-")
        self.server = subprocess.Popen([uvm_lab, "--serve", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
        line = self.server.stdout.readline()
        if not line:
            err = self.server.stderr.read()
            self.server.wait()
            if "not supported" in err:
                skip("uvm-lab was built without cpp-httplib: " + err.strip())
            raise SystemExit("uvm-lab --serve did not start: " + err)
        # "uvm-lab: serving the page-size lab on http://127.0.0.1:PORT/"
        self.url = line.strip().rsplit(" ", 1)[-1]
        assert self.url.startswith("http://127.0.0.1:"), "not on loopback by default: " + line

    def close(self):
        self.server.terminate()
        self.server.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)

    def chromium_args(self, wait_for_page=True):
        """Headless, alone (no network beyond the server, no sync, no updates);
        with `wait_for_page`, virtual time runs until the page's fetches are
        answered, so that --dump-dom and --screenshot see the results."""
        return [self.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--user-data-dir=" + self.profile] + (["--virtual-time-budget=60000"] if wait_for_page else [])

    def page(self, query):
        """The DOM of the page opened on `query`, once its script has run."""
        url = self.url + "?" + urllib.parse.urlencode(query)
        for attempt in range(3):
            out = subprocess.run(self.chromium_args() + ["--dump-dom", url], capture_output=True, text=True,
                                 timeout=180)
            dom = Dom(out.stdout)
            if dom.state in ("done", "error"):
                return dom
            time.sleep(1)  # a slow machine: the budget ran out before the fetch came back
        raise AssertionError("the page never finished loading %s (state %r): %s" % (url, dom.state, out.stderr[-2000:]))

    def screenshot(self, query, path):
        url = self.url + "?" + urllib.parse.urlencode(query)
        subprocess.run(self.chromium_args() + ["--window-size=1280,1900", "--screenshot=" + path, url],
                       capture_output=True, timeout=180)
        with open(path, "rb") as f:
            head = f.read(8)
        assert head == b"\x89PNG\r\n\x1a\n", "no PNG screenshot at " + path
        assert os.path.getsize(path) > 20000, "the screenshot is nearly empty: " + path

    def cli(self, args):
        out = subprocess.run([self.uvm_lab] + args, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, "uvm-lab %s: %s" % (" ".join(args), out.stderr)
        return out.stdout.splitlines()

    def http(self, path, body=None):
        """(status, text) of a request straight to the server."""
        req = urllib.request.Request(self.url.rstrip("/") + path, data=body,
                                     headers={"Content-Type": "text/plain"} if body is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()


class WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: text frames out
    (masked, as a client must), text frames in, pings answered."""

    def __init__(self, url):
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        self.sock = socket.create_connection((m.group(1), int(m.group(2))), timeout=120)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           % (m.group(3), m.group(1), m.group(2), key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise AssertionError("the DevTools socket closed during the handshake")
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head

    def _read(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise AssertionError("the DevTools socket closed")
            data += chunk
        return data

    def send(self, text):
        payload = text.encode()
        n = len(payload)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + struct.pack("!H", n) if n < 65536 else
                                bytes([0x80 | 127]) + struct.pack("!Q", n))
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 9:  # ping
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
                continue
            if opcode == 8:
                raise AssertionError("the DevTools socket was closed by the browser")
            message += payload
            if b0 & 0x80:
                return message.decode()


class DevTools:
    """Chromium driven through the DevTools protocol: the page's own controls
    set, its events fired, its DOM read, as a student's clicks would."""

    def __init__(self, lab):
        self.proc = subprocess.Popen(lab.chromium_args(wait_for_page=False) + ["--remote-debugging-port=0", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        browser_url = None
        deadline = time.time() + 60
        while time.time() < deadline and browser_url is None:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                browser_url = m.group(1)
        assert browser_url, "Chromium did not open its DevTools port"
        self.next_id = 0
        self.ws = WebSocket(browser_url)
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        port = re.match(r"ws://[^:/]+:(\d+)/", browser_url).group(1)
        self.ws.sock.close()
        self.ws = WebSocket("ws://127.0.0.1:%s/devtools/page/%s" % (port, target))
        self.call("Runtime.enable")
        self.call("DOM.enable")

    def close(self):
        self.ws.sock.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def call(self, method, params=None):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                assert "error" not in reply, "%s: %s" % (method, reply["error"])
                return reply["result"]

    def js(self, expression):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def open(self, url):
        self.call("Page.navigate", {"url": url})
        return self.settled()

    def settled(self, timeout=120):
        """The page's state once its latest request has come back."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                state = self.js("document.readyState === 'complete' && document.body ? document.body.dataset.state : ''")
            except AssertionError as e:  # mid-navigation: the old document's context is gone
                last = e
                state = None
            if state in ("done", "error"):
                return state
            time.sleep(0.1)
        raise AssertionError("the page did not settle (%s)" % last)

    def change(self, element_id, value):
        """Sets a control as a click or a keystroke would, and fires its change."""
        self.js("(() => { const e = document.getElementById(%s); e.value = %s; document.body.dataset.state = 'loading';"
                " e.dispatchEvent(new Event('change', {bubbles: true})); })()"
                % (json.dumps(element_id), json.dumps(value)))
        return self.settled()

    def results(self):
        return self.js("[...document.querySelectorAll('#results tr')].map(r => [...r.cells].map(c => c.textContent))")

    def upload(self, element_id, path):
        node = self.call("DOM.querySelector", {"nodeId": self.call("DOM.getDocument")["root"]["nodeId"],
                                               "selector": "#" + element_id})["nodeId"]
        self.js("document.body.dataset.state = 'loading'")
        self.call("DOM.setFileInputFiles", {"files": [path], "nodeId": node})
        return self.settled()


def check_clicks(lab):
    """Settings changed through the page's controls, and traces uploaded
    through its file input, as a student would: the page's table against the
    command's for the settings the page put in its address."""
    tools = DevTools(lab)
    try:
        assert tools.open(lab.url + "?workload=random&footprint_mib=64&accesses=100000&policy=4k,2m") == "done"
        before = tools.results()
        assert tools.change("workload", "strided") == "done"
        assert tools.change("footprint_mib", "512") == "done"
        assert tools.change("machine", "h200") == "done"
        after = tools.results()
        assert after != before, "changing the controls changed nothing"
        query = dict(urllib.parse.parse_qsl(tools.js("location.search").lstrip("?")))
        assert query == {"workload": "strided", "footprint_mib": "512", "accesses": "100000", "machine": "h200",
                         "policy": "4k,2m"}, query
        lines = lab.cli(args_of(query))
        assert tools.js("document.getElementById('model').textContent") == lines[0]
        for page_row, line in zip(after[1:], lines[2:]):
            for col, p, c in zip(after[0], page_row, line.split()):
                if col == "policy":
                    assert p == c, (p, c)
                else:
                    same_number(p, c, "clicked %s %s" % (page_row[0], col))
        # A malformed trace through the page's file input: the page says which
        # line and why; then a good one is replayed as the command replays it.
        assert tools.change("workload", "trace") == "error"  # no file chosen yet
        assert "choose a trace file" in tools.js("document.getElementById('error').textContent")
        with tempfile.TemporaryDirectory() as tmp:
            bad, good = os.path.join(tmp, "bad.trace"), os.path.join(tmp, "good.trace")
            with open(bad, "w") as f:
                f.write("alloc 0x10000000000 0x200000\nr 0x10000000000\nread 0x10000000040\n")
            with open(good, "w") as f:
                for i in range(20):
                    f.write("alloc 0x%x 0x200000\nw 0x%x 8\n" % (0x10000000000 + i * 0x400000, 0x10000000000 + i * 0x400000))
            assert tools.upload("trace", bad) == "error"
            error = tools.js("document.getElementById('error').textContent")
            assert "line 3" in error and "HTTP 400" in error, error
            assert tools.upload("trace", good) == "done"
            rows = tools.results()
            lines = lab.cli(["--machine", "h200", "--policy", "4k,2m", "--trace", good])
            assert len(rows) - 1 == len(lines) - 2 == 2, (rows, lines)
            for page_row, line in zip(rows[1:], lines[2:]):
                for col, p, c in zip(rows[0], page_row, line.split()):
                    if col != "policy":
                        same_number(p, c, "uploaded trace %s %s" % (page_row[0], col))
    finally:
        tools.close()


def args_of(query):
    """The command's flags for a query: the same names, "--" and '-' for '_'."""
    order = ["machine", "workload", "footprint_mib", "accesses", "stride", "gpu_mib", "policy", "costs", "sweep"]
    args = []
    for k in order:
        if k in query:
            args += ["--" + k.replace("_", "-"), str(query[k])]
    return args


def same_number(page, cli, what):
    """Equal as printed; a last digit apart is allowed (printf rounds an exact
    tie to even, JavaScript's toFixed up)."""
    p, c = page.rstrip("%"), cli.rstrip("%")
    if p == c:
        return
    digits = len(c.split(".")[1]) if "." in c else 0
    assert abs(float(p) - float(c)) <= 1.01 * 10 ** -digits, "%s: page %s, command %s" % (what, page, cli)


def check_table(lab, query):
    """The page's table for `query` against the command's, cell by cell."""
    dom = lab.page(query)
    assert dom.state == "done", "page state %r, error %r" % (dom.state, dom.text.get("error"))
    lines = lab.cli(args_of(query))
    assert dom.text["model"].strip() == lines[0].strip(), "model line: page %r, command %r" % (dom.text["model"], lines[0])
    command = dom.text["command"].strip()
    assert command == "uvm-lab " + " ".join(args_of(query)), "the page's command: " + command
    rows = dom.tables["results"]
    head, body = rows[0], rows[1:]
    cli_rows = [l.split() for l in lines[2:]]
    assert len(body) == len(cli_rows) == len(query["policy"].split(",")), (body, cli_rows)
    assert len(head) == 15, head
    for page_row, cli_row in zip(body, cli_rows):
        assert len(page_row) == len(cli_row) == 15, (page_row, cli_row)
        assert page_row[0] == cli_row[0], (page_row, cli_row)
        for col, p, c in zip(head[1:], page_row[1:], cli_row[1:]):
            same_number(p, c, "%s %s" % (page_row[0], col))
    return body


def check_sweep(lab, query):
    dom = lab.page(query)
    assert dom.state == "done", dom.text.get("error")
    lines = lab.cli(args_of(query))
    rows = dom.tables["sweep-table"]
    cli_rows = [l.split() for l in lines[2:]]
    assert len(rows) - 1 == len(cli_rows) > 1, (rows, cli_rows)
    for page_row, cli_row in zip(rows[1:], cli_rows):
        assert page_row[0] == cli_row[0] + " " + cli_row[1], (page_row, cli_row)
        for p, c in zip(page_row[1:], cli_row[2:]):
            same_number(p, c, "sweep " + page_row[0])
    assert "sweep-chart" in dom.text, "no sweep chart"


def check_bad_input(lab):
    # Through the page: the error box says why, and no table is left.
    for query, words in (({"workload": "bogus"}, "unknown workload 'bogus'"),
                         ({"workload": "random", "footprint_mib": "100000", "accesses": "1000"},
                          "more than the page allows"),
                         ({"workload": "random", "footprint_mib": "999999999", "accesses": "1000"},
                          "--footprint-mib needs a whole number of MiB, 1-1048576"),
                         ({"workload": "random", "accesses": "-5"}, "--accesses needs")):
        dom = lab.page(query)
        assert dom.state == "error", "%s: state %r" % (query, dom.state)
        assert words in dom.text["error"] and "HTTP 400" in dom.text["error"], dom.text["error"]
        assert "results" not in dom.tables
    # Straight to the endpoint the page posts a trace to.
    cases = [
        ("/api/run?footprint_mib=65537", None, "more than the page allows"),
        ("/api/run?footprint_mib=1099511627776", None, "--footprint-mib needs"),
        ("/api/run?workload=nonsense", None, "unknown workload"),
        ("/api/run?colour=blue", None, "unknown parameter 'colour'"),
        ("/api/run?policy=4k", b"alloc 0x10000000000 0x200000\nw 0x10000000000 8\nzap 12\n", "line 3"),
        ("/api/run?policy=4k", b"alloc 0x10000000000 0x100000000000\n", "more than the page allows"),
        ("/api/run?policy=4k", b"", "the trace is empty"),
        ("/api/run?policy=4k", b"alloc 0x10000000000 0x200000\n\x00\xff\xfe garbage", "line 2: a NUL byte"),
        ("/api/run?policy=4k", b"\xff\xfe garbage\n", "line 1"),
        ("/api/run?policy=4k", b"# only a comment\n", "allocates nothing"),
        ("/api/run?policy=4k", b"# padding\n" * (17 * 2 ** 20 // 10), "more than the page allows (16 MiB)"),
    ]
    for path, body, words in cases:
        status, text = lab.http(path, body)
        assert status == 400, "%s: HTTP %d %r" % (path, status, text[:200])
        assert words in text, "%s: %r" % (path, text[:200])
    status, text = lab.http("/no/such/page")
    assert status == 404 and "no such page: /no/such/page" in text, (status, text)
    # Still serving, and a good trace is replayed as the command replays it.
    assert lab.server.poll() is None, "the server stopped"
    status, page = lab.http("/")
    assert status == 200 and "<title>The page-size lab</title>" in page
    trace = b"".join(b"alloc 0x%x 12288\nw 0x%x 8\n" % (0x10000000000 + i * 0x200000, 0x10000000000 + i * 0x200000)
                     for i in range(100))
    status, text = lab.http("/api/run?policy=4k,2m", trace)
    assert status == 200, text
    with tempfile.NamedTemporaryFile(suffix=".trace") as f:
        f.write(trace)
        f.flush()
        lines = lab.cli(["--policy", "4k,2m", "--trace", f.name])
    got = json.loads(text)
    assert got["command"] == "uvm-lab --policy 4k,2m --trace FILE", got["command"]
    for row, line in zip(got["rows"], lines[2:]):
        cols = line.split()
        assert row["policy"] == cols[0]
        same_number("%.1f" % (row["page_table_bytes"] / 1024), cols[6], row["policy"] + " PT KiB")
        same_number("%.1f" % (row["allocated_bytes"] / 2 ** 20), cols[7], row["policy"] + " alloc MiB")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    uvm_lab, outdir = sys.argv[1], sys.argv[2]
    chromium = find_chromium()
    if not chromium:
        skip("no Chromium (Debian: apt-get install chromium; or set CHROMIUM)")
    os.makedirs(outdir, exist_ok=True)
    lab = Lab(uvm_lab, chromium, outdir)
    try:
        first = {"workload": "random", "footprint_mib": "64", "accesses": "100000", "policy": "4k,64k,2m,mosaic"}
        a = check_table(lab, first)
        # A change of settings: another machine, workload, footprint and costs.
        second = {"machine": "h100", "workload": "growing", "footprint_mib": "512", "gpu_mib": "256",
                  "accesses": "100000", "policy": "4k,2m,mosaic", "costs": "H100"}
        b = check_table(lab, second)
        assert a != b, "the change of settings changed nothing on the page"
        assert float(b[0][13]) > 0 and float(b[0][14]) > 0, "costs given but no pin or move time: %s" % b[0]
        check_sweep(lab, {"workload": "chase", "accesses": "20000", "sweep": "1:64", "policy": "4k,2m"})
        check_clicks(lab)
        shot = os.path.join(outdir, "lab_browser.png")
        lab.screenshot(second, shot)
        check_bad_input(lab)
        print("ok: the page matches uvm-lab on 2 settings, a sweep, settings changed through its controls and an "
              "uploaded trace; bad input refused; screenshot " + shot)
    finally:
        lab.close()


if __name__ == "__main__":
    main()
