#!/usr/bin/env python3
"""The fault matrix's hostile-volume row: kvgov under many of everything.

Usage: volume_test.py KVGOV_BINARY [--scale N]

Against a real `kvgov serve` (one engine registered, nothing publishing),
each phase measured by kvgov's RSS (/proc) against a stated budget:

- tenants: N routes, each for a tenant of its own and so a salt of its own,
  half released by /done and half left to the decision ttl;
- leases: N/50 transport-reported leases created and completed, in batches
  of 500 events; with --lease-retain-ms 2000 they are forgotten from
  memory after it (kvgov_leases counts none), the journal keeps their rows;
- quarantines at rate: N/100, each answered 200;
- journal pages in a loop: 2000 pages of up to 1000 rows, after 1000 more
  to warm up; RSS stays flat.

N is --scale, or KVGOV_VOLUME_SCALE: 50 000 by default (the suite), and
1 000 000 under `make faults`.
"""

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
from http.client import HTTPConnection

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from kvgov_ops import (Kvgov, fail, http, rss_budget, rss_bytes, run_main,  # noqa: E402
                       wait_for)

ENGINE = ["--engine", "id=w1,kind=vllm,events=tcp://127.0.0.1:9,model=llama,block-size=16"]
THREADS = 4
# What each phase may add to kvgov's RSS, per item and in all. A route's
# decision is held until /done or its ttl; a tenant's salt and metric
# children are bounded (the registry folds past its cap).
BUDGET_PER_ROUTE_BYTES = 1024
BUDGET_FLOOR_BYTES = 64 << 20


def parallel(port, count, request):
    """Runs request(conn, i) for i in range(count) over THREADS keep-alive
    connections; fails on the first answer that is not 2xx."""
    errors = []

    def run(start):
        conn = HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            for i in range(start, count, THREADS):
                if errors:
                    return
                method, path, body = request(i)
                conn.request(method, path, body=json.dumps(body) if body is not None else None,
                             headers={"Content-Type": "application/json"})
                answer = conn.getresponse()
                data = answer.read()
                if not 200 <= answer.status < 300:
                    errors.append(f"{method} {path}: {answer.status} {data[:300]!r}")
                    return
                if path == "/v1/route" and i % 2 == 0:
                    decision = json.loads(data)["decision_id"]
                    conn.request("POST", f"/v1/route/{decision}/done", body="{}",
                                 headers={"Content-Type": "application/json"})
                    done = conn.getresponse()
                    done.read()
                    if done.status != 200:
                        errors.append(f"done: {done.status}")
                        return
        except Exception as error:  # noqa: BLE001 - reported by the caller's thread
            errors.append(f"{type(error).__name__}: {error}")
        finally:
            conn.close()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        fail(errors[0])


def leases_counted(url):
    status, body = http("GET", url + "/metrics")
    counts = dict(re.findall(r'^kvgov_leases\{state="(\w+)"\} (\S+)$', body, re.M))
    return {state: float(value) for state, value in counts.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--scale", type=int,
                        default=int(os.environ.get("KVGOV_VOLUME_SCALE", "50000")))
    args = parser.parse_args()
    n = args.scale
    report = []
    with tempfile.TemporaryDirectory(prefix="kvgov-volume-") as workdir:
        with Kvgov(os.path.abspath(args.binary), workdir,
                   extra_args=[*ENGINE, "--lease-retain-ms", "2000"]) as kvgov:
            pid = kvgov.process.pid

            def phase(name, items, stated_budget, run):
                budget = rss_budget(stated_budget)
                before = rss_bytes(pid)
                started = time.monotonic()
                run()
                seconds = time.monotonic() - started
                grown = rss_bytes(pid) - before
                report.append(f"{name}: {items} in {seconds:.1f} s "
                              f"({items / seconds:.0f}/s), RSS +{grown >> 20} MiB "
                              f"(budget {budget >> 20} MiB)")
                print(report[-1])
                if grown > budget:
                    fail(f"{name}: RSS grew {grown >> 20} MiB, over its budget of "
                         f"{budget >> 20} MiB")

            tokens = [7] * 64
            phase("routes, each for a tenant of its own", n,
                  max(BUDGET_FLOOR_BYTES, n * BUDGET_PER_ROUTE_BYTES),
                  lambda: parallel(kvgov.port, n, lambda i: (
                      "POST", "/v1/route",
                      {"model": "llama", "tenant": f"tenant-{i}", "token_ids": tokens})))

            # Each event is a synced journal row: a lease costs two fsyncs.
            leases = n // 50
            batch = 500

            def report_leases():
                def request(k):
                    first = k * batch
                    events = []
                    for i in range(first, min(first + batch, leases)):
                        lease = {"type": "nixl_lease", "lease_id": f"lease-{i}",
                                 "role": "prefill_pin", "remote_engine": "w1",
                                 "span_digest": f"s{i}"}
                        events.append(dict(lease, event="create", ttl_ms=600000))
                        events.append(dict(lease, event="transfer_complete"))
                    return "POST", "/v1/events", {"events": events}
                parallel(kvgov.port, (leases + batch - 1) // batch, request)
                wait_for("the ended leases forgotten after --lease-retain-ms",
                         lambda: leases_counted(kvgov.url).get("completed", -1) == 0, 30)

            phase("leases created and completed", leases, BUDGET_FLOOR_BYTES, report_leases)

            quarantines = max(100, n // 100)
            phase("quarantines", quarantines, BUDGET_FLOOR_BYTES,
                  lambda: parallel(kvgov.port, quarantines, lambda i: (
                      "POST", "/v1/quarantine",
                      {"model": "llama", "reason": f"volume-{i}",
                       "token_ids": [100000 + i] * 32})))

            def page(i):
                return "GET", f"/v1/journal?since={1 + (i * 997) % journal_rows}&limit=1000", None

            journal_rows = json.loads(http("GET", kvgov.url + "/v1/journal?limit=1")[1])["head_seq"]
            # The first pages size the allocator's arenas of the threads that
            # serve them; from there on, RSS is flat.
            parallel(kvgov.port, 1000, page)
            phase("journal pages of 1000 rows, after 1000 to warm up", 2000, 16 << 20,
                  lambda: parallel(kvgov.port, 2000, page))
            if kvgov.process.poll() is not None:
                fail(f"kvgov exited:\n{kvgov.read_log()}")
    print("ok:\n  " + "\n  ".join(report))
    return 0


if __name__ == "__main__":
    run_main(main)
