"""Starts a real ``kvgov serve`` for the end-to-end tests, and stops it by PID.

The binary is ``$KVGOV_BINARY`` (CMake passes ``$<TARGET_FILE:kvgov>``), or
``build/apps/kvgov/kvgov`` in the repository for a manual run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from kvgov_client import Client, metric_value

T = TypeVar("T")
_REPO = Path(__file__).resolve().parents[3]
READY_TIMEOUT_S = 20.0
POLL_S = 0.01


def kvgov_binary() -> str:
    """The kvgov under test; skips the test when there is none to find."""
    binary = os.environ.get("KVGOV_BINARY")
    if binary:
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"KVGOV_BINARY={binary} is not an executable")
        return binary
    fallback = _REPO / "build" / "apps" / "kvgov" / "kvgov"
    if not os.access(fallback, os.X_OK):
        raise unittest.SkipTest("no kvgov binary: set KVGOV_BINARY")
    return str(fallback)


def unused_port() -> int:
    """A loopback port nothing listens on (for engine event endpoints kvgov
    subscribes to but no engine publishes on)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def engine(worker: str, model: str = "m", **extra: str) -> list[str]:
    """``--engine`` for a registered worker whose stream stays silent."""
    spec = f"id={worker},events=tcp://127.0.0.1:{unused_port()},model={model}"
    spec += "".join(f",{key}={value}" for key, value in extra.items())
    return ["--engine", spec]


def wait_until(predicate: Callable[[], T], timeout: float = 5.0, what: str = "condition") -> T:
    """Polls ``predicate`` until it returns a truthy value, which it returns."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL_S)


class KvgovDaemon:
    """One ``kvgov serve --listen 127.0.0.1:0``, in a fresh data dir unless given one."""

    def __init__(self, args: Sequence[str] = (), data_dir: str | Path | None = None) -> None:
        self.binary = kvgov_binary()
        self.args = list(args)
        self.root = Path(tempfile.mkdtemp(prefix="kvgov-py-"))
        self.data_dir = Path(data_dir) if data_dir is not None else self.root / "data"
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> KvgovDaemon:
        ready = self.root / "ready"
        self._log = open(self.root / "output.log", "wb")
        self.process = subprocess.Popen(
            [self.binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", str(self.data_dir),
             "--ready-file", str(ready), *self.args],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_TIMEOUT_S
        # kvgov writes the port to a temporary file and renames it: once the
        # file exists it is whole.
        while not ready.exists():
            if self.process.poll() is not None:
                raise RuntimeError(f"kvgov serve exited {self.process.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"kvgov serve not ready in {READY_TIMEOUT_S} s:\n{self.output()}")
            time.sleep(POLL_S)
        self.url = f"http://127.0.0.1:{int(ready.read_text().strip())}"
        return self

    def client(self, token: str | None = None) -> Client:
        return Client(self.url, token=token, timeout=10.0)

    def add_token(self, name: str, *roles: str, tenant: str | None = None) -> str:
        """``kvgov token add``; returns the secret (its output's last line)."""
        args = [self.binary, "token", "add", name, "--data-dir", str(self.data_dir)]
        for role in roles:
            args += ["--role", role]
        if tenant is not None:
            args += ["--tenant", tenant]
        done = subprocess.run(args, capture_output=True, text=True, check=True, timeout=30)
        return done.stdout.strip().splitlines()[-1]

    def output(self) -> str:
        path = self.root / "output.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, 15)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, 9)
                self.process.wait()
        if hasattr(self, "_log"):
            self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)


class DaemonTestCase(unittest.TestCase):
    """Starts one daemon for the module's test class (``DAEMON_ARGS``)."""

    DAEMON_ARGS: Sequence[str] = ()
    daemon: KvgovDaemon
    client: Client

    @classmethod
    def setUpClass(cls) -> None:
        cls.daemon = KvgovDaemon(cls.DAEMON_ARGS)
        cls.addClassCleanup(cls.daemon.stop)
        cls.daemon.start()
        cls.client = cls.daemon.client()

    def metric(self, name: str, **labels: str) -> float:
        return metric_value(self.client.metrics_text(), name, **labels)


def prompt(length: int, seed: int = 0) -> list[int]:
    """``length`` distinct token ids; different seeds share no prefix."""
    return [seed * 1_000_000 + i + 1 for i in range(length)]
