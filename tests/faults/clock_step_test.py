#!/usr/bin/env python3
"""The fault matrix's time row: the wall clock steps forward and back.

Usage: clock_step_test.py KVGOV_BINARY

kvgov runs under libfaketime (Debian's libfaketime, preloaded; the monotonic
clock left alone), whose offset the test rewrites to step the process's
wall clock a day forward and then a day back, as `date -s` or a restored VM
would. Expected (ADR 0033):

- a lease granted with a 4 s ttl is still active after the step forward and
  expires about 4 s after its grant all the same, by the monotonic clock;
- journal rows written before, between and after the steps keep their
  order by time;
- kvgov_clock_wall_skew_seconds reports the step, and kvgov's log lines
  (stamped by the wall clock) show it really happened in the process.

Skips (exit 77) when libfaketime is not installed.
"""

import json
import os
import re
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from kvgov_ops import SKIP, Kvgov, fail, http, run_main, wait_for  # noqa: E402

FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
ENGINE = ["--engine", "id=w1,kind=vllm,events=tcp://127.0.0.1:9,model=llama,block-size=16"]
DAY_S = 86400
TTL_MS = 4000


def lease_state(url, lease_id):
    status, body = http("GET", url + "/v1/leases")
    if status != 200:
        fail(f"GET /v1/leases: {status} {body}")
    for lease in json.loads(body)["leases"]:
        if lease["lease_id"] == lease_id:
            return lease["state"]
    fail(f"lease {lease_id} is not listed: {body}")


def quarantine(url, n):
    status, body = http("POST", url + "/v1/quarantine",
                        {"model": "llama", "reason": f"clock-{n}", "token_ids": [3000 + n] * 32})
    if status != 200:
        fail(f"quarantine {n}: {status} {body}")


def skew_seconds(url):
    status, body = http("GET", url + "/metrics")
    match = re.search(r"^kvgov_clock_wall_skew_seconds (\S+)$", body, re.M)
    if status != 200 or match is None:
        fail(f"/metrics has no kvgov_clock_wall_skew_seconds: {status}")
    return float(match.group(1))


def main():
    if len(sys.argv) != 2:
        fail("usage: clock_step_test.py KVGOV_BINARY")
    if not os.path.exists(FAKETIME):
        print(f"SKIP: {FAKETIME} is not installed (Debian's libfaketime)")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="kvgov-clock-") as workdir:
        offset_file = os.path.join(workdir, "faketime")

        def step(offset):
            with open(offset_file + ".tmp", "w", encoding="utf-8") as f:
                f.write(offset + "\n")
            os.replace(offset_file + ".tmp", offset_file)

        step("+0")
        asan = os.environ.get("ASAN_OPTIONS", "")
        env = dict(os.environ, LD_PRELOAD=FAKETIME, FAKETIME_TIMESTAMP_FILE=offset_file,
                   FAKETIME_NO_CACHE="1", FAKETIME_DONT_FAKE_MONOTONIC="1",
                   ASAN_OPTIONS=(asan + ":" if asan else "") + "verify_asan_link_order=0")
        with Kvgov(os.path.abspath(sys.argv[1]), workdir, env=env, extra_args=ENGINE) as kvgov:
            quarantine(kvgov.url, 0)
            granted_at = time.monotonic()
            status, body = http("POST", kvgov.url + "/v1/events", {"events": [
                {"type": "nixl_lease", "lease_id": "l1", "event": "create", "role": "prefill_pin",
                 "remote_engine": "w1", "span_digest": "s1", "ttl_ms": TTL_MS}]})
            if status != 200 or json.loads(body)["accepted"] != 1:
                fail(f"the lease: {status} {body}")

            step("+1d")
            quarantine(kvgov.url, 1)
            tomorrow = time.strftime("%Y-%m-%d", time.gmtime(time.time() + DAY_S))
            if f"ts={tomorrow}" not in kvgov.read_log():
                fail(f"libfaketime did not step kvgov's wall clock (no log line of {tomorrow}):\n"
                     f"{kvgov.read_log()}")
            if not DAY_S - 60 < skew_seconds(kvgov.url) < DAY_S + 60:
                fail(f"after a step of a day forward the skew is {skew_seconds(kvgov.url)} s")
            if lease_state(kvgov.url, "l1") != "active":
                fail("a wall clock a day ahead expired a lease granted with a 4 s ttl")

            step("-1d")
            quarantine(kvgov.url, 2)
            if not -DAY_S - 60 < skew_seconds(kvgov.url) < -DAY_S + 60:
                fail(f"after a step of a day back the skew is {skew_seconds(kvgov.url)} s")

            state = lease_state(kvgov.url, "l1")
            if time.monotonic() - granted_at < TTL_MS / 1000 * 0.75 and state != "active":
                fail(f"the lease is {state} before its ttl ran out")
            wait_for("the lease to expire by its ttl, with the wall clock a day behind",
                     lambda: lease_state(kvgov.url, "l1") == "expired", TTL_MS / 1000 + 5)
            expired_after = time.monotonic() - granted_at
            if expired_after < TTL_MS / 1000 * 0.75:
                fail(f"the lease expired after {expired_after:.1f} s, before its {TTL_MS} ms ttl")

            status, body = http("GET", kvgov.url + "/v1/journal?since=1&limit=1000")
            if status != 200:
                fail(f"GET /v1/journal: {status} {body}")
            rows = json.loads(body)["rows"]
            times = [row["time_ms"] for row in rows]
            if times != sorted(times):
                fail(f"journal times out of order after the steps: "
                     f"{[(row['seq'], row['kind'], row['time_ms']) for row in rows]}")
            if len(rows) < 4:
                fail(f"want the start, three quarantines and the lease, got {len(rows)} rows")
            print(f"ok: the lease expired {expired_after:.1f} s after its grant (ttl "
                  f"{TTL_MS / 1000} s) across a day's step each way; {len(rows)} journal rows "
                  f"in time order")
    return 0


if __name__ == "__main__":
    run_main(main)
