#!/usr/bin/env python3
"""The fault matrix's disk rows: kvgov's data directory fills up.

Usage: disk_full_test.py KVGOV_BINARY

The data directory is a small tmpfs mounted in a mount namespace of the
test's own (`unshare --mount`; as root, or as a user where user namespaces
are allowed; otherwise the test skips, saying so), so nothing outside the
test sees it. Against a real `kvgov serve` following a simulated engine
(`kvgov engines`), with chats through the gateway feeding the engine's
KV-event stream into the store:

- a filler file takes the disk's last byte; quarantines are written until
  one is refused: it answers 503 naming the full disk, and every earlier one
  answered 200;
- while the disk is full, routes and chats are served and the engine's
  events are applied from memory;
- the filler goes; kvgov takes writes again by itself, without a restart;
- kvgov is stopped and started on the same directory: every acknowledged
  quarantine is there, the journal verifies, and the worker's residency is
  what it was before the stop (nothing the engine reported is lost, even
  the batches that could not be logged while the disk was full).
"""

import errno
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from kvgov_ops import (SKIP, Kvgov, fail, http, listed_quarantines, read_port_file,  # noqa: E402
                       run_main, stop_process, wait_for)

INSIDE = "KVGOV_DISK_FULL_TEST_IN_NAMESPACE"
# RocksDB clears a full-disk error only once a memtable's worth (8 MiB) is
# free again: the disk holds the store, the WAL's preallocation and that.
DISK_BYTES = 32 << 20
MODEL = "sim-llama-3-8b"


def reexec_in_mount_namespace():
    """Runs this script again in a private mount namespace: its exit code,
    or SKIP when this machine allows no such namespace."""
    base = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        base.insert(1, "--map-root-user")
    probe = subprocess.run([*base, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: no private mount namespace here ({' '.join(base)}: "
              f"{probe.stderr.strip()}); the disk-full test needs one for its tmpfs")
        return SKIP
    env = dict(os.environ, **{INSIDE: "1"})
    return subprocess.run([*base, sys.executable, *sys.argv], env=env).returncode


def fill(path):
    """Writes `path` until the disk refuses a byte more; returns its size."""
    written = 0
    chunk = b"\0" * (64 << 10)
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return written
                chunk = chunk[: len(chunk) // 2]


def quarantine(url, n):
    return http("POST", url + "/v1/quarantine",
                {"model": MODEL, "tenant": "acme", "reason": f"disk-full-{n}",
                 "token_ids": [1000 + n] * 32})


def chat(gateway, n):
    status, body = http("POST", gateway + "/v1/chat/completions",
                        {"model": MODEL, "max_tokens": 2,
                         "messages": [{"role": "user",
                                       "content": f"conversation {n}: " + "lorem ipsum " * 40}]},
                        headers={"X-Kvgov-Tenant": "acme"})
    if status != 200:
        fail(f"chat {n}: {status} {body}")


def worker_blocks(url):
    status, body = http("GET", url + "/v1/workers")
    if status != 200:
        fail(f"GET /v1/workers: {status} {body}")
    workers = json.loads(body)["workers"]
    return sum(workers[0].get("blocks", {}).values()) if workers else 0


def serve(binary, workdir, data_dir, engine_args):
    gateway_ready = os.path.join(workdir, "gateway-ready")
    if os.path.exists(gateway_ready):
        os.unlink(gateway_ready)
    kvgov = Kvgov(binary, workdir, data_dir=data_dir,
                  extra_args=["--gateway-listen", "127.0.0.1:0", "--gateway-ready-file",
                              gateway_ready, *engine_args])
    port = wait_for("the gateway's ready file", lambda: read_port_file(gateway_ready), 30,
                    process=kvgov.process)
    return kvgov, f"http://127.0.0.1:{port}"


def run(binary, workdir):
    disk = os.path.join(workdir, "disk")
    os.mkdir(disk)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0700", "tmpfs", disk],
                   check=True)
    data_dir = os.path.join(disk, "data")
    specs_file = os.path.join(workdir, "engines.txt")
    engines = subprocess.Popen([binary, "engines", "--count", "1", "--specs-file", specs_file],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               stdin=subprocess.DEVNULL)
    kvgov = None
    try:
        wait_for("the engine's specs file",
                 lambda: os.path.exists(specs_file) and os.path.getsize(specs_file) > 0, 30,
                 process=engines)
        engine_args = []
        for spec in open(specs_file, encoding="utf-8").read().split():
            engine_args += ["--engine", spec]
        kvgov, gateway = serve(binary, workdir, data_dir, engine_args)

        acked = set()
        for n in range(3):
            status, body = quarantine(kvgov.url, n)
            if status != 200:
                fail(f"quarantine {n} before the disk filled: {status} {body}")
            acked.add(json.loads(body)["id"])
        for n in range(3):
            chat(gateway, n)

        filler = os.path.join(disk, "filler")
        fill(filler)
        refused = None
        for n in range(3, 20000):
            status, body = quarantine(kvgov.url, n)
            if status == 200:
                acked.add(json.loads(body)["id"])
                continue
            refused = (status, body)
            break
        if refused is None:
            fail("the disk filled but 20000 quarantines later none was refused")
        status, body = refused
        if status != 503 or "no space" not in body.lower():
            fail(f"a write on a full disk: want 503 naming the full disk, got {status} {body}")
        print(f"refused after {len(acked)} acknowledged quarantines: {body.strip()}")

        # A transport's report that would change governance state is refused
        # the same way, naming the disk.
        lease = {"events": [{"type": "nixl_lease", "lease_id": "on-a-full-disk", "event": "create",
                             "role": "prefill_pin", "span_digest": "s1", "ttl_ms": 60000}]}
        status, body = http("POST", kvgov.url + "/v1/events", lease)
        print(f"a lease reported on a full disk: {status} {body.strip()}")
        if status == 200 and json.loads(body).get("accepted") != 0:
            fail(f"a lease reported on a full disk was accepted: {body}")
        if "no space" not in body.lower():
            fail(f"a lease reported on a full disk: the refusal does not name the disk: "
                 f"{status} {body}")

        # Serving goes on from memory, the engine's events included.
        before = worker_blocks(kvgov.url)
        for n in range(3, 8):
            chat(gateway, n)
        wait_for("the chats' blocks applied while the disk is full",
                 lambda: worker_blocks(kvgov.url) > before, 10)
        status, body = http("POST", kvgov.url + "/v1/route",
                            {"model": MODEL, "tenant": "acme", "token_ids": list(range(64))})
        if status != 200:
            fail(f"a route while the disk is full: {status} {body}")
        if kvgov.process.poll() is not None:
            fail(f"kvgov exited on a full disk:\n{kvgov.read_log()}")
        if "event=store.batch_not_logged" not in kvgov.read_log():
            fail("the engine's batches while the disk was full were not refused by the store")

        # Space returns: writes are taken again, without a restart.
        os.unlink(filler)
        attempts = []

        def write_taken():
            status, body = quarantine(kvgov.url, 20000 + len(attempts))
            attempts.append(status)
            if status == 200:
                acked.add(json.loads(body)["id"])
            return status == 200

        wait_for("a write once space returned", write_taken, 30, interval_s=0.25)
        chat(gateway, 8)
        missing = acked - set(listed_quarantines(kvgov.url))
        if missing:
            fail(f"acknowledged quarantines not listed: {sorted(missing)}")

        wait_for("the engine's events settled", lambda: worker_blocks(kvgov.url) > 0, 10)
        blocks_before_stop = worker_blocks(kvgov.url)
        kvgov.stop()
        kvgov, gateway = serve(binary, workdir, data_dir, engine_args)
        lost = acked - set(listed_quarantines(kvgov.url))
        if lost:
            fail(f"{len(lost)} acknowledged quarantines lost over the restart: {sorted(lost)}")
        status, body = http("GET", kvgov.url + "/v1/journal/verify")
        if status != 200 or not json.loads(body)["ok"]:
            fail(f"the journal does not verify after the disk filled: {status} {body}")
        wait_for(f"the worker's {blocks_before_stop} blocks after the restart (has "
                 f"{worker_blocks(kvgov.url)})",
                 lambda: worker_blocks(kvgov.url) == blocks_before_stop, 15)
        print(f"ok: {len(acked)} acknowledged quarantines, 0 lost; "
              f"{blocks_before_stop} blocks before and after the restart")
        return 0
    except Exception:
        if kvgov is not None:
            print(f"kvgov's log:\n{kvgov.read_log()[-20000:]}", file=sys.stderr)
        raise
    finally:
        if kvgov is not None:
            kvgov.stop()
        stop_process(engines)
        subprocess.run(["umount", "-l", disk], check=False)


def main():
    if len(sys.argv) != 2:
        fail("usage: disk_full_test.py KVGOV_BINARY")
    if os.environ.get(INSIDE) != "1":
        return reexec_in_mount_namespace()
    with tempfile.TemporaryDirectory(prefix="kvgov-disk-full-") as workdir:
        return run(os.path.abspath(sys.argv[1]), workdir)


if __name__ == "__main__":
    run_main(main)
