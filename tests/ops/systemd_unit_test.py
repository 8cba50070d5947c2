#!/usr/bin/env python3
"""deploy/systemd/kvgov.service is a valid, hardened unit whose command line
kvgov accepts.

Usage: systemd_unit_test.py KVGOV_BINARY SOURCE_DIR

  - the hardening this project promises is there (a non-root user, the state
    directory as the only writable path, no privileges);
  - the unit's ExecStart, with the shipped deploy/kvgov.toml in place of
    /etc/kvgov/kvgov.toml and --print-config appended, parses and keeps
    --data-dir equal to the StateDirectory;
  - `systemd-analyze verify` accepts the unit (ExecStart pointed at the
    built binary) and `systemd-analyze security --offline` rates its
    exposure at most 2.0 ("OK"). These two are left out where
    systemd-analyze is not installed.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvgov_ops import TestFailure, run_main  # noqa: E402

REQUIRED = {
    "User": "kvgov",
    "StateDirectory": "kvgov",
    "StateDirectoryMode": "0700",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "NoNewPrivileges": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "CapabilityBoundingSet": "",
    "RestrictSUIDSGID": "yes",
    "MemoryDenyWriteExecute": "yes",
    "UMask": "0077",
}
MAX_EXPOSURE = 2.0


def service_settings(path):
    settings = {}
    section = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line
                continue
            key, _, value = line.partition("=")
            if section == "[Service]":
                settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def main():
    binary, source_dir = sys.argv[1], sys.argv[2]
    unit = os.path.join(source_dir, "deploy", "systemd", "kvgov.service")
    settings = service_settings(unit)
    for key, want in REQUIRED.items():
        if settings.get(key, [None])[-1] != want:
            raise TestFailure(f"{unit}: want {key}={want}, got {settings.get(key)}")

    exec_start = shlex.split(settings["ExecStart"][-1])
    program, args = exec_start[0], exec_start[1:]
    if args[:1] != ["serve"] or "--config" not in args:
        raise TestFailure(f"{unit}: ExecStart must run `kvgov serve --config FILE`: {exec_start}")
    config = args[args.index("--config") + 1]
    args[args.index("--config") + 1] = os.path.join(source_dir, "deploy", "kvgov.toml")
    result = subprocess.run([binary, *args, "--print-config"], capture_output=True, text=True,
                            timeout=30, check=False)
    if result.returncode != 0:
        raise TestFailure(f"kvgov rejects the unit's command line {args}: {result.stderr}")
    state_dir = "/var/lib/" + settings["StateDirectory"][-1]
    if f'data-dir = "{state_dir}"' not in result.stdout.split("\n"):
        raise TestFailure(f"the unit's data dir is not its StateDirectory {state_dir}:\n"
                          f"{result.stdout}")
    if not config.startswith("/etc/" + settings["ConfigurationDirectory"][-1] + "/"):
        raise TestFailure(f"--config {config} is outside the ConfigurationDirectory")

    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        print("SKIP (partly): systemd-analyze is not installed; the unit's settings and "
              "command line were checked")
        return 0
    with tempfile.TemporaryDirectory(prefix="kvgov-systemd-test-") as tmp:
        with open(unit, encoding="utf-8") as f:
            text = f.read()
        copy = os.path.join(tmp, "kvgov.service")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(text.replace(program, os.path.abspath(binary)))
        verify = subprocess.run([analyze, "verify", copy], capture_output=True, text=True,
                                timeout=60, check=False)
        # verify prints nothing for a clean unit; it may warn about the
        # machine it runs on (no systemd as PID 1 in a container), never
        # about kvgov.service itself.
        complaints = [l for l in (verify.stdout + verify.stderr).splitlines()
                      if "kvgov.service" in l]
        if verify.returncode != 0 or complaints:
            raise TestFailure(f"systemd-analyze verify: exit {verify.returncode}\n"
                              f"{verify.stdout}{verify.stderr}")
        security = subprocess.run([analyze, "security", "--offline=true", "--no-pager", copy],
                                  capture_output=True, text=True, timeout=60, check=False)
        match = re.search(r"Overall exposure level for kvgov\.service: ([0-9.]+)",
                          security.stdout + security.stderr)
        if match is None:
            raise TestFailure(f"systemd-analyze security: no exposure level:\n"
                              f"{security.stdout}{security.stderr}")
        exposure = float(match.group(1))
        if exposure > MAX_EXPOSURE:
            raise TestFailure(f"exposure {exposure} is above {MAX_EXPOSURE}:\n{security.stdout}")
    print(f"kvgov.service: verified; exposure {exposure} (at most {MAX_EXPOSURE})")
    return 0


if __name__ == "__main__":
    run_main(main)
