#!/usr/bin/env python3
"""A real Prometheus scrapes a real kvgov with deploy/prometheus/prometheus.yml.

Usage: prometheus_e2e_test.py KVGOV_BINARY SOURCE_DIR

Starts `kvgov serve` on a kernel-chosen loopback port with one engine, writes
a copy of deploy/prometheus/prometheus.yml (and its rule file) whose only
change is the kvgov target, checks it with promtool, starts
/usr/bin/prometheus on a free loopback port with a temporary TSDB, and polls
its HTTP API (no fixed sleeps) until the kvgov target is up and scraped.
Then it asserts that:

  - `up{job="kvgov"}` is 1 for that target;
  - a kvgov series is queryable with kvgov's value
    (`kvgov_residency_blocks{worker="w1",tier="hbm"}` = 0,
    `kvgov_route_decisions_total{outcome="routed"}` = 1 after one route);
  - the alert rule group from deploy/prometheus/kvgov-alerts.yml is loaded.

Both processes are stopped by PID. Exits 77 (skipped) when Prometheus is
not installed (scripts/install-deps.sh installs the `prometheus` package).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvgov_ops import SKIP, Kvgov, TestFailure, free_port, http, run_main, wait_for  # noqa: E402

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
SHIPPED_TARGET = '- targets: ["127.0.0.1:8787"]'


def generate_config(source_dir, tmp, kvgov_port):
    """The shipped config with the kvgov target pointed at the test's kvgov."""
    shipped = os.path.join(source_dir, "deploy", "prometheus")
    with open(os.path.join(shipped, "prometheus.yml"), encoding="utf-8") as f:
        text = f.read()
    if text.count(SHIPPED_TARGET) != 1:
        raise TestFailure(f"deploy/prometheus/prometheus.yml: want exactly one "
                          f"'{SHIPPED_TARGET}' line to point at the test's kvgov")
    text = text.replace(SHIPPED_TARGET, f'- targets: ["127.0.0.1:{kvgov_port}"]')
    config = os.path.join(tmp, "prometheus.yml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(text)
    shutil.copyfile(os.path.join(shipped, "kvgov-alerts.yml"),
                    os.path.join(tmp, "kvgov-alerts.yml"))
    return config


def api(port, path, **params):
    url = f"http://127.0.0.1:{port}{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    status, body = quiet_http("GET", url, timeout_s=5)
    if status != 200:
        return None
    answer = json.loads(body)
    return answer["data"] if answer.get("status") == "success" else None


def query(port, promql):
    data = api(port, "/api/v1/query", query=promql)
    return data["result"] if data else None


class Prometheus:
    def __init__(self, config, tmp):
        self.log_path = os.path.join(tmp, "prometheus.log")
        self.log = open(self.log_path, "wb")
        self.process = None
        # Prometheus cannot listen on port 0 and report the port, so take a
        # free one; if another process grabs it first, try another.
        for _ in range(5):
            self.port = free_port()
            self.process = subprocess.Popen(
                [PROMETHEUS, f"--config.file={config}",
                 f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            url = f"http://127.0.0.1:{self.port}/-/ready"
            wait_for("Prometheus ready (or exited)",
                     lambda: (self.process.poll() is not None or
                              quiet_http("GET", url, timeout_s=2)[0] == 200), 60, interval_s=0.1)
            if self.process.poll() is None:
                return
            if "address already in use" not in self.read_log():
                break
        raise TestFailure(f"Prometheus did not start; its log:\n{self.read_log()}")

    def read_log(self):
        self.log.flush()
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self):
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


def quiet_http(*args, **kwargs):
    try:
        return http(*args, **kwargs)
    except OSError:
        return 0, ""


def main():
    binary, source_dir = sys.argv[1], sys.argv[2]
    if not os.access(PROMETHEUS, os.X_OK):
        print(f"SKIP: {PROMETHEUS} is not installed (scripts/install-deps.sh installs "
              "the prometheus package)")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="kvgov-prometheus-e2e-") as tmp:
        kvgov_dir = os.path.join(tmp, "kvgov")
        os.mkdir(kvgov_dir)
        engine = f"id=w1,kind=vllm,events=tcp://127.0.0.1:{free_port()},model=sim-model"
        with Kvgov(binary, kvgov_dir, ["--engine", engine]) as kvgov:
            status, body = http("POST", kvgov.url + "/v1/route",
                                {"model": "sim-model", "token_ids": list(range(32))})
            if status != 200:
                raise TestFailure(f"POST /v1/route: {status} {body}")
            config = generate_config(source_dir, tmp, kvgov.port)
            if os.access(PROMTOOL, os.X_OK):
                check = subprocess.run([PROMTOOL, "check", "config", config],
                                       capture_output=True, text=True, check=False)
                if check.returncode != 0:
                    raise TestFailure(f"promtool check config: {check.stdout}{check.stderr}")
            started = time.monotonic()
            prometheus = Prometheus(config, tmp)
            try:
                port = prometheus.port
                target = f"127.0.0.1:{kvgov.port}"

                def scraped():
                    data = api(port, "/api/v1/targets", state="active")
                    for t in (data or {}).get("activeTargets", []):
                        if t["labels"].get("job") == "kvgov" and \
                                t["labels"].get("instance") == target:
                            if t["health"] == "down":
                                raise TestFailure(f"Prometheus reports the kvgov target "
                                                  f"down: {t.get('lastError')}")
                            return t if t["health"] == "up" else None
                    return None

                found = wait_for("a Prometheus scrape of kvgov", scraped, 60, interval_s=0.2,
                                 process=prometheus.process)
                if found["scrapeUrl"] != f"http://{target}/metrics":
                    raise TestFailure(f"scrape URL {found['scrapeUrl']}")
                if found.get("scrapeInterval") not in (None, "5s"):
                    raise TestFailure(f"scrape interval {found['scrapeInterval']}, want 5s")

                # The TSDB answers once the scrape's samples are committed.
                def series(promql):
                    return lambda: query(port, promql) or None

                up = wait_for("up{job='kvgov'}", series(f'up{{job="kvgov",instance="{target}"}}'),
                              30, interval_s=0.2, process=prometheus.process)
                if up[0]["value"][1] != "1":
                    raise TestFailure(f"up = {up[0]['value'][1]}, want 1")
                residency = wait_for(
                    "a kvgov series",
                    series('kvgov_residency_blocks{job="kvgov",worker="w1",tier="hbm"}'),
                    30, interval_s=0.2, process=prometheus.process)
                sample = residency[0]
                if sample["metric"].get("instance") != target or sample["value"][1] != "0":
                    raise TestFailure(f"kvgov_residency_blocks: {sample}, want 0 from {target}")
                routed = query(port, 'kvgov_route_decisions_total{job="kvgov",outcome="routed"}')
                if not routed or routed[0]["value"][1] != "1":
                    raise TestFailure(f"kvgov_route_decisions_total{{outcome=routed}}: {routed}, "
                                      "want 1")
                rules = api(port, "/api/v1/rules") or {}
                groups = {g["name"]: g for g in rules.get("groups", [])}
                if "kvgov" not in groups or not groups["kvgov"]["rules"]:
                    raise TestFailure(f"rule group kvgov not loaded: {sorted(groups)}")
                unhealthy = [r["name"] for r in groups["kvgov"]["rules"]
                             if r.get("health") == "err"]
                if unhealthy:
                    raise TestFailure(f"rules failing to evaluate: {unhealthy}")
                print(f"Prometheus on :{port} scraped kvgov on :{kvgov.port} "
                      f"{time.monotonic() - started:.1f} s after starting; "
                      f"{len(groups['kvgov']['rules'])} alert rules loaded")
            except TestFailure:
                print(f"Prometheus log:\n{prometheus.read_log()}", file=sys.stderr)
                raise
            finally:
                prometheus.stop()
    return 0


if __name__ == "__main__":
    run_main(main)
