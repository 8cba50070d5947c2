#!/usr/bin/env python3
"""The fault matrix's fsync row: the disk fails an fsync under kvgov.

Usage: fsync_error_test.py KVGOV_BINARY FAIL_FSYNC_PRELOAD_SO

kvgov runs with tests/faults/fail_fsync_preload.cc preloaded: while a
trigger file exists, fsync and fdatasync fail with EIO in the real process.
Quarantines are written and acknowledged; then the trigger is created and
the next quarantine's synced write fails. That write is not acknowledged
(503 naming the failed sync, or no answer), and kvgov stops and exits 1,
since after a failed fsync the disk's state is unknown (docs/adr/0032).
Started again on the same data directory, every acknowledged quarantine is
there and the journal verifies. The refused write may or may not have
reached the disk (its outcome is unknown, as with any database's failed
commit); the test reports which.
"""

import json
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from kvgov_ops import Kvgov, fail, http, listed_quarantines, run_main, wait_for  # noqa: E402


# A worker that serves the model (the quarantine names its blocks); nothing
# publishes on its endpoint.
ENGINE = ["--engine", "id=w1,kind=vllm,events=tcp://127.0.0.1:9,model=llama,block-size=16"]


def quarantine(url, n):
    return http("POST", url + "/v1/quarantine",
                {"model": "llama", "reason": f"fsync-{n}", "token_ids": [2000 + n] * 32})


def main():
    if len(sys.argv) != 3:
        fail("usage: fsync_error_test.py KVGOV_BINARY FAIL_FSYNC_PRELOAD_SO")
    binary, preload = (os.path.abspath(arg) for arg in sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="kvgov-fsync-") as workdir:
        trigger = os.path.join(workdir, "fail-fsync")
        asan = os.environ.get("ASAN_OPTIONS", "")
        env = dict(os.environ, LD_PRELOAD=preload, KVGOV_FAIL_FSYNC_WHEN=trigger,
                   # An ASan build wants its runtime first; the shim is not instrumented.
                   ASAN_OPTIONS=(asan + ":" if asan else "") + "verify_asan_link_order=0")
        kvgov = Kvgov(binary, workdir, env=env, extra_args=ENGINE)
        try:
            acked = set()
            for n in range(3):
                status, body = quarantine(kvgov.url, n)
                if status != 200:
                    fail(f"quarantine {n} before the fault: {status} {body}")
                acked.add(json.loads(body)["id"])

            open(trigger, "w").close()
            try:
                status, body = quarantine(kvgov.url, 3)
            except OSError as error:  # kvgov stopped before answering: not acknowledged either
                status, body = None, str(error)
            if status == 200:
                fail(f"a quarantine whose fsync failed was acknowledged: {body}")
            if status is not None and (status != 503 or "restart kvgov" not in body):
                fail(f"want 503 saying to restart kvgov, got {status} {body}")
            print(f"the write whose fsync failed: {status} {body.strip()}")
            wait_for("kvgov to stop after the failed fsync",
                     lambda: kvgov.process.poll() is not None, 30)
            if kvgov.process.returncode != 1:
                fail(f"kvgov exited {kvgov.process.returncode} after a failed fsync, want 1:\n"
                     f"{kvgov.read_log()}")
            if "store takes no more writes" not in kvgov.read_log():
                fail(f"kvgov's log does not say why it stopped:\n{kvgov.read_log()}")
        finally:
            kvgov.stop()

        os.unlink(trigger)
        with Kvgov(binary, workdir, env=env, extra_args=ENGINE) as again:
            listed = listed_quarantines(again.url)
            lost = acked - set(listed)
            if lost:
                fail(f"{len(lost)} acknowledged quarantines lost: {sorted(lost)}")
            status, body = http("GET", again.url + "/v1/journal/verify")
            if status != 200 or not json.loads(body)["ok"]:
                fail(f"the journal does not verify after the failed fsync: {status} {body}")
            refused_there = any(q.get("reason") == "fsync-3" for q in listed.values())
            print(f"ok: {len(acked)} acknowledged, 0 lost; the refused write "
                  f"{'reached' if refused_there else 'did not reach'} the disk")
            status, body = quarantine(again.url, 4)
            if status != 200:
                fail(f"a write after the restart: {status} {body}")
    return 0


if __name__ == "__main__":
    run_main(main)
