#!/usr/bin/env python3
"""The image `make image` builds, started from its own filesystem.

Usage: image_test.py OCI_ARCHIVE      (make image-test)

No container engine runs on the machines this suite is made for, so the
test does what one would do with the image: it unpacks the OCI archive's
layers in order, reads the image config, and runs the config's entrypoint
as the config's user and working directory, chrooted into the unpacked
filesystem in its own mount and PID namespaces (unshare), with /dev and
/proc mounted as a runtime would. Every kvgov command below is the image's
own binary with the image's own libraries.

It checks what the image is (a non-root user, no shell, no compiler, no
package manager, its labels, the package records scanners read), then
runs the image's default command with the flags a replica takes: tokens
imported into a real redis-server, kvgov serving /healthz and /readyz
without a token and refusing the API without one, a simulated vLLM engine
(the image's `kvgov engines`) followed, a route, two chats through the
gateway (the second reusing the first's KV as the engine reports it), and
a quarantine that lands in the governance log on Redis. Processes are
stopped by PID: SIGTERM to the entrypoint, as a runtime stops a container.
"""

import json
import os
import subprocess
import sys
import tarfile
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from kvgov_ops import (RedisServer, fail, http, read_port_file, run_main,  # noqa: E402
                       stop_process, wait_for)

RUN_IN_IMAGE = "--run-in-image"
MESSAGES = [
    {"role": "system", "content": "You are a careful assistant for the acme support desk. "
     "Answer in short plain sentences, cite the ticket number, and never guess a customer "
     "account detail you were not given."},
    {"role": "user", "content": "Ticket 4471: my invoice shows two charges for March."},
]


def blob(layout, digest):
    algorithm, hex_digest = digest.split(":", 1)
    return os.path.join(layout, "blobs", algorithm, hex_digest)


def unpack(archive, workdir):
    """(rootfs, image config) of the archive's one image."""
    layout = os.path.join(workdir, "layout")
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="fully_trusted")
    with open(os.path.join(layout, "index.json"), encoding="utf-8") as f:
        index = json.load(f)
    if len(index.get("manifests", [])) != 1:
        fail(f"the archive should hold one image, its index: {index}")
    with open(blob(layout, index["manifests"][0]["digest"]), encoding="utf-8") as f:
        manifest = json.load(f)
    with open(blob(layout, manifest["config"]["digest"]), encoding="utf-8") as f:
        config = json.load(f)
    rootfs = os.path.join(workdir, "rootfs")
    os.makedirs(rootfs)
    for layer in manifest["layers"]:
        if not layer["mediaType"].endswith("tar+gzip"):
            fail(f"a layer this test does not unpack: {layer['mediaType']}")
        subprocess.run(["tar", "--extract", "--gzip", "--numeric-owner", "--same-permissions",
                        "--file", blob(layout, layer["digest"]), "--directory", rootfs],
                       check=True)
    return rootfs, config


def check_contents(rootfs, config):
    settings = config["config"]
    user = settings.get("User", "")
    if not user or user.split(":")[0] in ("", "0", "root"):
        fail(f"the image runs as root (User {user!r})")
    if settings.get("Entrypoint") != ["/usr/bin/kvgov"]:
        fail(f"entrypoint {settings.get('Entrypoint')}, want /usr/bin/kvgov")
    if settings.get("Cmd") != ["serve", "--config", "/etc/kvgov/kvgov.toml"]:
        fail(f"default command {settings.get('Cmd')}")
    labels = settings.get("Labels") or {}
    for label in ("org.opencontainers.image.version", "org.opencontainers.image.revision"):
        if not labels.get(label):
            fail(f"no {label} label: {labels}")
    for path in ("bin/sh", "usr/bin/sh", "usr/bin/bash", "usr/bin/dash", "usr/bin/cc",
                 "usr/bin/gcc", "usr/bin/g++", "usr/bin/apt", "usr/bin/dpkg", "usr/bin/awk"):
        if os.path.lexists(os.path.join(rootfs, path)):
            fail(f"/{path} is in the image")
    data = os.stat(os.path.join(rootfs, "var/lib/kvgov"))
    if (data.st_uid, data.st_mode & 0o777) != (65532, 0o700):
        fail(f"/var/lib/kvgov is uid {data.st_uid} mode {oct(data.st_mode & 0o777)}")
    records = os.listdir(os.path.join(rootfs, "var/lib/dpkg/status.d"))
    if "libc6" not in records or "libzmq5" not in records:
        fail(f"scanners' package records are missing: {records}")
    print(f"image: user {user}, {len(records)} Debian packages, "
          f"version {labels['org.opencontainers.image.version']}")


class InImage:
    """One command of the image (argv after the entrypoint), chrooted into
    its filesystem as its user, in mount and PID namespaces of its own."""

    def __init__(self, rootfs, config, args, log_path, entrypoint=None):
        settings = config["config"]
        command = [*(entrypoint or settings["Entrypoint"]), *args]
        self.log = open(log_path, "wb")
        self.log_path = log_path
        self.process = subprocess.Popen(
            ["unshare", "--mount", "--pid", "--fork", "--kill-child", sys.executable,
             os.path.abspath(__file__), RUN_IN_IMAGE, rootfs, settings["User"],
             settings.get("WorkingDir") or "/", json.dumps(settings.get("Env") or []),
             *command],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait(self, timeout_s=60):
        try:
            self.process.wait(timeout=timeout_s)
        finally:
            self.stop()
        return self.process.returncode

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def entrypoint_pid(self):
        """The host PID of the entrypoint: unshare's one child (unshare
        itself ignores SIGTERM while it waits)."""
        try:
            with open(f"/proc/{self.process.pid}/task/{self.process.pid}/children",
                      encoding="ascii") as f:
                children = f.read().split()
        except FileNotFoundError:
            return None
        return int(children[0]) if children else None

    def stop(self):
        """SIGTERM to the entrypoint, as a runtime stops a container; SIGKILL
        to unshare after 20 s (--kill-child takes the rest)."""
        if self.process.poll() is None:
            stop_process(self.process, grace_s=20, pid=self.entrypoint_pid())
        self.log.close()


def run_in_image(rootfs, user, workdir, env_json, argv):
    """Inside unshare: what a runtime does before it starts the entrypoint."""
    for mount in (["--rbind", "/dev", os.path.join(rootfs, "dev")],
                  ["-t", "proc", "proc", os.path.join(rootfs, "proc")]):
        subprocess.run(["mount", *mount], check=True)
    os.chroot(rootfs)
    os.chdir(workdir)
    uid, _, gid = user.partition(":")
    os.setgroups([])
    os.setgid(int(gid or uid))
    os.setuid(int(uid))
    env = dict(entry.split("=", 1) for entry in json.loads(env_json))
    env.setdefault("PATH", "/usr/bin")
    os.execve(argv[0], argv, env)


def image_command(rootfs, config, workdir, name, *args):
    """Runs one short command in the image; its output."""
    command = InImage(rootfs, config, list(args), os.path.join(workdir, f"{name}.log"))
    if command.wait() != 0:
        fail(f"kvgov {' '.join(args)} in the image exited {command.process.returncode}:\n"
             f"{command.output()}")
    return command.output()


def check_serving(rootfs, config, workdir, redis):
    inside = lambda path: os.path.join(rootfs, path.lstrip("/"))  # noqa: E731
    secrets = {}
    for name, roles, tenant in (("ops", ["admin", "read"], None), ("router", ["route"], None),
                                ("app", ["infer"], "acme")):
        args = ["token", "add", name, "--data-dir", "/tmp/made"]
        for role in roles:
            args += ["--role", role]
        if tenant:
            args += ["--tenant", tenant]
        secrets[name] = image_command(rootfs, config, workdir, f"token-{name}",
                                      *args).strip().splitlines()[-1]
    imported = image_command(rootfs, config, workdir, "import", "token", "import",
                             "/tmp/made/tokens.json", "--redis", redis.url)
    if "3 added" not in imported:
        fail(f"token import into Redis: {imported}")
    image_command(rootfs, config, workdir, "keygen", "keygen", "--issuer-key",
                  "/tmp/issuer.key", "--tenant-secret-file", "/tmp/tenant-salt.key")

    engines = InImage(rootfs, config, ["engines", "--count", "1", "--specs-file",
                                       "/tmp/engines.txt"], os.path.join(workdir, "engines.log"))
    try:
        specs = wait_for("the image's simulated engine", lambda: (
            open(inside("/tmp/engines.txt"), encoding="utf-8").read().split()
            if os.path.exists(inside("/tmp/engines.txt")) else None), 30,
            process=engines.process)
        # The image's default command, and the flags a replica takes.
        serve_args = [*config["config"]["Cmd"], "--listen", "0.0.0.0:0", "--gateway-listen",
                      "0.0.0.0:0", "--ready-file", "/tmp/port", "--gateway-ready-file",
                      "/tmp/gateway-port", "--redis", redis.url, "--replica-id", "image-test",
                      "--issuer-key", "/tmp/issuer.key", "--tenant-secret-file",
                      "/tmp/tenant-salt.key"]
        for spec in specs:
            serve_args += ["--engine", spec]
        kvgov = InImage(rootfs, config, serve_args, os.path.join(workdir, "serve.log"))
        try:
            port = wait_for("kvgov's ready file", lambda: read_port_file(inside("/tmp/port")), 30,
                            process=kvgov.process)
            gateway_port = wait_for("the gateway's ready file",
                                    lambda: read_port_file(inside("/tmp/gateway-port")), 30,
                                    process=kvgov.process)
            check_api(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{gateway_port}",
                      secrets, redis, kvgov)
        except Exception:
            print(f"kvgov's log:\n{kvgov.output()}", file=sys.stderr)
            raise
        finally:
            kvgov.stop()
        if kvgov.process.returncode != 0:
            fail(f"kvgov did not stop cleanly on SIGTERM (exit {kvgov.process.returncode}):\n"
                 f"{kvgov.output()}")
    finally:
        engines.stop()


def check_api(url, gateway, secrets, redis, kvgov):
    bearer = lambda name: {"Authorization": f"Bearer {secrets[name]}"}  # noqa: E731
    if http("GET", url + "/healthz")[0] != 200:
        fail("/healthz without a token")
    wait_for("/readyz", lambda: http("GET", url + "/readyz")[0] == 200, 15,
             process=kvgov.process)
    status, _ = http("GET", url + "/v1/workers")
    if status != 401:
        fail(f"beyond loopback the API must need a token: /v1/workers answered {status}")
    wait_for("the engine followed", lambda: '"state":"idle"' in http(
        "GET", url + "/v1/workers", headers=bearer("ops"))[1], 15, process=kvgov.process)

    status, body = http("POST", url + "/v1/route", {"model": "sim-llama-3-8b", "tenant": "acme",
                                                     "token_ids": list(range(1, 65))},
                        headers=bearer("router"))
    if status != 200 or json.loads(body).get("worker") != "sim-0":
        fail(f"a route: {status} {body}")

    chat = {"model": "sim-llama-3-8b", "max_tokens": 4, "messages": MESSAGES}
    answers = []
    for _ in range(2):
        status, body = http("POST", gateway + "/v1/chat/completions", chat,
                            headers=bearer("app"))
        if status != 200:
            fail(f"a chat through the gateway: {status} {body}")
        answers.append(json.loads(body)["usage"])
    cached = (answers[1].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    if cached < 16:
        fail(f"the second chat did not reuse the first's KV: {answers}")

    status, body = http("POST", url + "/v1/quarantine",
                        {"model": "sim-llama-3-8b", "tenant": "acme", "reason": "image test",
                         "messages": MESSAGES}, headers=bearer("ops"))
    if status != 200:
        fail(f"a quarantine: {status} {body}")
    log = subprocess.run(["redis-cli", "-p", str(redis.port), "XREVRANGE", "kvgov:governance",
                          "+", "-", "COUNT", "1"], capture_output=True, text=True, check=True)
    if "quarantine" not in log.stdout:
        fail(f"the quarantine is not the newest entry of the log on Redis: {log.stdout}")
    print(f"serving from the image: route to sim-0, {cached} of {answers[1]['prompt_tokens']} "
          f"prompt tokens cached on the second chat, quarantine in Redis")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == RUN_IN_IMAGE:
        run_in_image(*sys.argv[2:6], sys.argv[6:])
        return 1  # execve returned: it failed
    if len(sys.argv) != 2:
        fail("usage: image_test.py OCI_ARCHIVE")
    if os.geteuid() != 0:
        fail("run as root: the image is unpacked with its owners and run under chroot")
    with tempfile.TemporaryDirectory(prefix="kvgov-image-test-") as workdir:
        rootfs, config = unpack(sys.argv[1], workdir)
        check_contents(rootfs, config)
        with RedisServer(workdir) as redis:
            check_serving(rootfs, config, workdir, redis)
    print("image test: ok")
    return 0


if __name__ == "__main__":
    run_main(main)
