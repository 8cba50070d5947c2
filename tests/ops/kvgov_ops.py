"""Shared helpers of the operations tests (tests/ops/*_test.py).

Starts a real `kvgov serve` on a loopback port chosen by the kernel, talks
HTTP to it, parses the Prometheus text exposition, and reads the metric
names and labels a PromQL expression uses. Python 3 standard library only.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

SKIP = 77  # ctest SKIP_RETURN_CODE


class TestFailure(Exception):
    pass


def fail(message):
    raise TestFailure(message)


def run_main(main):
    """Runs an ops test's main() as its script: its return code, or 1 with
    the failure on stderr."""
    try:
        sys.exit(main())
    except TestFailure as error:
        print(f"FAIL: {error}", file=sys.stderr)
        sys.exit(1)


def wait_for(what, predicate, timeout_s, interval_s=0.05, process=None):
    """Polls predicate() until it returns a truthy value; fails after
    timeout_s, or at once when `process` has exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if process is not None and process.poll() is not None:
            fail(f"{what}: the process exited with {process.returncode} first")
        if time.monotonic() > deadline:
            fail(f"{what}: not within {timeout_s} s")
        time.sleep(interval_s)


def free_port():
    """A loopback port that was free a moment ago (for servers that cannot
    listen on port 0 and report the port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_port_file(path):
    """The port a ready file holds, or None until one is written."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def stop_process(process, grace_s=15, pid=None):
    """SIGTERM (to `pid`, by default the process itself), then SIGKILL to the
    process after `grace_s`; waits for it either way."""
    if process.poll() is not None:
        return
    os.kill(pid or process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()


def rss_budget(budget_bytes):
    """A test's RSS budget for the kvgov under test: as stated in a plain
    build; under AddressSanitizer (make test-asan sets ASAN_OPTIONS), whose
    shadow memory, redzones and quarantine grow every allocation, four times
    that and 64 MiB more."""
    if os.environ.get("ASAN_OPTIONS"):
        return budget_bytes * 4 + (64 << 20)
    return budget_bytes


def rss_bytes(pid):
    """A process's resident set size, from /proc."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    fail(f"no VmRSS for pid {pid}")


class Kvgov:
    """`kvgov serve --listen 127.0.0.1:0` (or another `listen`) in `workdir`
    (its data in `data_dir`, by default workdir/data; `env` as Popen's),
    stopped by its PID;
    `url` is on loopback either way."""

    def __init__(self, binary, workdir, extra_args=(), timeout_s=30, listen="127.0.0.1:0",
                 data_dir=None, env=None):
        self.data_dir = data_dir or os.path.join(workdir, "data")
        self.ready_file = os.path.join(workdir, "ready")
        self.log_path = os.path.join(workdir, "kvgov.log")
        self.log = open(self.log_path, "wb")
        if os.path.exists(self.ready_file):  # an earlier run's port
            os.unlink(self.ready_file)
        args = [binary, "serve", "--listen", listen, "--data-dir", self.data_dir,
                "--ready-file", self.ready_file, *extra_args]
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env)
        try:
            port = wait_for("kvgov's ready file", self._read_port, timeout_s,
                            process=self.process)
        except TestFailure:
            self.stop()
            raise TestFailure(f"kvgov did not start; its log:\n{self.read_log()}")
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def _read_port(self):
        return read_port_file(self.ready_file)

    def read_log(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self):
        stop_process(self.process)
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class RedisServer:
    """A real redis-server on a free loopback port, with no persistence, in
    `workdir`, optionally with a password (`url` never carries it); stopped
    by its PID."""

    def __init__(self, workdir, timeout_s=10, password=None):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.log = open(os.path.join(workdir, "redis.log"), "wb")
        auth = ["--requirepass", password] if password else []
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", workdir, *auth],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            wait_for("redis-server's PONG", self._pong, timeout_s, process=self.process)
        except TestFailure:
            self.stop()
            raise

    def _pong(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith((b"+PONG", b"-NOAUTH"))  # up, either way
        except OSError:
            return False

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def http(method, url, body=None, headers=None, timeout_s=10):
    """(status, body text) of one request; never raises on an HTTP error."""
    data = None
    headers = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", errors="replace")


def listed_quarantines(url):
    """kvgov's quarantines by id (GET /v1/quarantines), failing on an error."""
    status, body = http("GET", url + "/v1/quarantines")
    if status != 200:
        fail(f"GET /v1/quarantines: {status} {body}")
    return {q["id"]: q for q in json.loads(body)["quarantines"]}


# ---- the Prometheus text exposition -------------------------------------

SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$")
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*')


def parse_exposition(text):
    """({family: type}, [(sample name, {label: value}, value)])."""
    types = {}
    samples = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind.strip()
            continue
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if not match:
            fail(f"unparseable exposition line: {line!r}")
        labels = dict(LABEL.findall(match.group(3) or ""))
        samples.append((match.group(1), labels, match.group(4)))
    return types, samples


def series_names(types):
    """Every series name a scrape of these families can produce, mapped to
    its family: counters and gauges by their own name, histograms only by
    _bucket, _sum and _count (the bare name is no series), summaries by the
    bare name (quantiles), _sum and _count."""
    names = {}
    for family, kind in types.items():
        if kind == "histogram":
            suffixes = ("_bucket", "_sum", "_count")
        elif kind == "summary":
            suffixes = ("", "_sum", "_count")
        else:
            suffixes = ("",)
        for suffix in suffixes:
            names[family + suffix] = family
    return names


# ---- PromQL ---------------------------------------------------------------

PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and",
    "or", "unless", "atan2", "inf", "nan",
}
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^{}]*)\}")
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|\'[^\']*\')')
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
NUMBER = re.compile(r"(?<![A-Za-z0-9_:])(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)")


def analyze_promql(expr):
    """What a PromQL expression refers to:
    {'names': set of metric names, 'grouping': set of label names in
    by/without/on/ignoring/group_*, 'matchers': [(metric or None, label, op,
    value)]}. Grafana variables ($x, ${x}, [[x]]) count as opaque values.
    A `{__name__="..."}` matcher names a metric too."""
    text = re.sub(r"\$\{[^}]*\}|\[\[[^\]]*\]\]|\$[A-Za-z_][A-Za-z0-9_]*", "VAR", expr)
    matchers = []
    names = set()
    for selector in SELECTOR.finditer(text):
        metric = selector.group(1)
        if metric in PROMQL_KEYWORDS:
            metric = None
        for label, op, value in MATCHER.findall(selector.group(2)):
            value = value[1:-1]
            if label == "__name__" and op == "=":
                names.add(value)
                metric = metric or value
            matchers.append((metric, label, op, value))
    grouping = set()
    for group in GROUPING.finditer(text):
        grouping.update(l.strip() for l in group.group(2).split(",") if l.strip())
    stripped = STRING.sub(" ", text)
    stripped = re.sub(r"\{[^{}]*\}", " ", stripped)
    stripped = re.sub(r"\[[^\[\]]*\]", " ", stripped)
    stripped = GROUPING.sub(" ", stripped)
    stripped = re.sub(r"\boffset\s+-?[0-9a-z]+", " ", stripped)
    stripped = NUMBER.sub(" ", stripped)
    for ident in IDENT.finditer(stripped):
        word = ident.group(0)
        after = stripped[ident.end():].lstrip()
        if word.lower() in PROMQL_KEYWORDS or word == "VAR" or after.startswith("("):
            continue
        names.add(word)
    return {"names": names, "grouping": grouping, "matchers": matchers}
