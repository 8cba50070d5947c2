#!/usr/bin/env python3
"""The fault matrix's "an engine answers garbage over HTTP" row.

Usage: garbage_engine_test.py KVGOV_BINARY

One engine's HTTP server (its `control=` URL: health probes, load scraping,
`/tokenize` for the gateway, the gateway's upstream) is a server of the
test's own that answers every request in the current mode:

- close: reads the request and hangs up;
- not_http: random bytes;
- not_json: a 200 whose body is HTML;
- wrong_shape: a 200 whose body is JSON of another shape;
- huge: a 200 claiming 4 GiB and sending 512 MiB of it.

For each mode, once on `/tokenize` and once on the chat itself (with
`/tokenize` answering properly), through the gateway: a chat answers an
error (502, 503 or 504) in the OpenAI shape that names the engine (but a
JSON object of another shape as the chat's answer, which goes to the client
as sent: kvgov holds a 200 to be a JSON object, not to OpenAI's schema); GET
/v1/workers shows the probe's failure for the worker where /health did not
answer a status; kvgov's memory stays bounded (RSS grows by
less than 128 MiB even when the engine sends 512 MiB); and once the engine
answers properly again (mode `ok`: /health 200), the worker is healthy and
nothing of the failures is left in flight.
"""

import json
import os
import random
import socket
import socketserver
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from kvgov_ops import (Kvgov, fail, http, read_port_file, rss_budget, rss_bytes,  # noqa: E402
                       run_main, wait_for)

MODEL = "m"
# kvgov holds a tokenize answer and a non-streamed answer whole, each at
# most 32 MiB, and growing a string to that copies it once.
RSS_BUDGET_BYTES = 128 << 20
HUGE_SENT_BYTES = 512 << 20


class GarbageEngine(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), GarbageHandler)
        self.mode = "ok"
        self.tokenize_ok = False  # True: /tokenize answers properly, the rest in `mode`
        self.requests = []  # (mode, request line)
        self.lock = threading.Lock()


class GarbageHandler(socketserver.BaseRequestHandler):
    def handle(self):
        conn = self.request
        conn.settimeout(10)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
        except OSError:
            return
        head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        mode = self.server.mode
        with self.server.lock:
            self.server.requests.append((mode, head.split("\r\n", 1)[0]))
        try:
            self.answer(conn, mode, head)
        except OSError:
            pass  # kvgov hung up (on a huge answer, it should)

    def answer(self, conn, mode, head):
        def send(status, body, content_type="application/json"):
            conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                         + body)

        if head.startswith("POST /tokenize") and self.server.tokenize_ok:
            tokens = list(range(1, 61))
            send("200 OK", json.dumps({"count": len(tokens), "max_model_len": 4096,
                                       "tokens": tokens, "token_strs": None}).encode())
        elif mode == "ok":
            send("200 OK", b"{}" if head.startswith("GET /health") else b"")
        elif mode == "close":
            pass
        elif mode == "not_http":
            conn.sendall(bytes(random.getrandbits(8) for _ in range(4096)))
        elif mode == "not_json":
            send("200 OK", b"<html><body>502 Bad Gateway</body></html>", "text/html")
        elif mode == "wrong_shape":
            send("200 OK", json.dumps({"tokens": "not a list", "count": -1,
                                       "choices": {"0": None}}).encode())
        elif mode == "huge":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 4294967296\r\nConnection: close\r\n\r\n[")
            chunk = b"1," * (1 << 15)
            sent = 0
            while sent < HUGE_SENT_BYTES:
                conn.sendall(chunk)
                sent += len(chunk)
        conn.shutdown(socket.SHUT_RDWR)


def worker(url):
    status, body = http("GET", url + "/v1/workers")
    if status != 200:
        fail(f"GET /v1/workers: {status} {body}")
    return json.loads(body)["workers"][0]


def chat(gateway):
    return http("POST", gateway + "/v1/chat/completions",
                {"model": MODEL, "max_tokens": 2,
                 "messages": [{"role": "user", "content": "hello " * 50}]}, timeout_s=60)


def main():
    if len(sys.argv) != 2:
        fail("usage: garbage_engine_test.py KVGOV_BINARY")
    engine = GarbageEngine()
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    port = engine.server_address[1]
    try:
        with tempfile.TemporaryDirectory(prefix="kvgov-garbage-") as workdir:
            gateway_ready = os.path.join(workdir, "gateway-ready")
            spec = (f"id=w1,kind=vllm,events=tcp://127.0.0.1:9,control=http://127.0.0.1:{port},"
                    f"model={MODEL},block-size=16")
            with Kvgov(os.path.abspath(sys.argv[1]), workdir,
                       extra_args=["--engine", spec, "--probe-interval-ms", "200",
                                   "--gateway-listen", "127.0.0.1:0",
                                   "--gateway-ready-file", gateway_ready,
                                   "--gateway-first-byte-timeout-ms", "5000"]) as kvgov:
                gateway = "http://127.0.0.1:%d" % wait_for(
                    "the gateway", lambda: read_port_file(gateway_ready), 30)
                wait_for("w1 healthy", lambda: worker(kvgov.url)["health"]["healthy"], 15)
                rss_before = rss_bytes(kvgov.process.pid)
                peak = rss_before
                sampling = True

                def sample():
                    nonlocal peak
                    while sampling and kvgov.process.poll() is None:
                        peak = max(peak, rss_bytes(kvgov.process.pid))
                        time.sleep(0.01)

                sampler = threading.Thread(target=sample, daemon=True)
                sampler.start()
                cases = [(mode, leg) for leg in ("tokenize", "upstream")
                         for mode in ("close", "not_http", "not_json", "wrong_shape", "huge")]
                for mode, leg in cases:
                    engine.tokenize_ok = leg == "upstream"
                    engine.mode = mode
                    status, body = chat(gateway)
                    print(f"{mode} ({leg}): chat {status} {body.strip()[:300]}")
                    if mode == "wrong_shape" and leg == "upstream":
                        # A JSON object goes to the client as the engine sent it:
                        # kvgov holds answers to be objects, not to OpenAI's schema.
                        if status != 200 or json.loads(body).get("count") != -1:
                            fail(f"a JSON object the engine answered was not passed on: "
                                 f"{status} {body}")
                        continue
                    if status not in (502, 503, 504):
                        fail(f"{mode}: a chat to an engine answering garbage: want 502/503/504, "
                             f"got {status} {body}")
                    error = json.loads(body).get("error") or {}
                    if "w1" not in error.get("message", ""):
                        fail(f"{mode}: the error does not name the engine: {body}")
                    if mode in ("close", "not_http"):  # /health is read by its status only
                        wait_for(f"{mode}: the probe's failure on w1",
                                 lambda: worker(kvgov.url)["health"]["last_probe_error"], 15)
                    print(f"{mode} ({leg}): peak RSS so far {peak >> 20} MiB")
                    if kvgov.process.poll() is not None:
                        fail(f"{mode}: kvgov exited:\n{kvgov.read_log()}")
                    engine.mode = "ok"
                    wait_for(f"after {mode}: w1 healthy again",
                             lambda: worker(kvgov.url)["health"]["healthy"] and
                             not worker(kvgov.url)["health"]["last_probe_error"], 15)
                sampling = False
                sampler.join()
                grown = peak - rss_before
                print(f"RSS {rss_before >> 20} MiB before, peak {peak >> 20} MiB")
                if grown > rss_budget(RSS_BUDGET_BYTES):
                    fail(f"kvgov's RSS grew {grown >> 20} MiB on garbage answers "
                         f"(budget {rss_budget(RSS_BUDGET_BYTES) >> 20} MiB)")
                load = worker(kvgov.url)["load"]
                if load["in_flight_requests"] != 0:
                    fail(f"failed requests left in flight: {load}")
    finally:
        engine.shutdown()
    print("ok")
    return 0


if __name__ == "__main__":
    run_main(main)
