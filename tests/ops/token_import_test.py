#!/usr/bin/env python3
"""`kvgov token import`: a fleet's tokens declared from a file, as a
Kubernetes init container does it (deploy/k8s), into a single node's data
dir and into the replicas' governance log on a real redis-server with a
password (given by --redis-password-file); a fresh replica then starts
beyond loopback on the log's tokens alone, and is ready (/readyz) once it
has applied the log.

Usage: token_import_test.py KVGOV_BINARY SOURCE_DIR
"""

import json
import os
import subprocess
import sys
import tempfile

from kvgov_ops import Kvgov, RedisServer, fail, http, run_main, wait_for


def run(binary, *args, expect=0):
    done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)
    if done.returncode != expect:
        fail(f"kvgov {' '.join(args)}: exit {done.returncode}, wanted {expect}\n"
             f"stdout: {done.stdout}\nstderr: {done.stderr}")
    return done.stdout + done.stderr


def listed_names(listing):
    return sorted(line.split()[0] for line in listing.splitlines()[1:] if line.strip())


def check_single_node(binary, workdir, declared):
    data_dir = os.path.join(workdir, "single")
    first = run(binary, "token", "import", declared, "--data-dir", data_dir)
    for line in ("added ops", "added app", "2 added, 0 replaced, 0 unchanged"):
        if line not in first:
            fail(f"first import: no '{line}' in:\n{first}")
    if listed_names(run(binary, "token", "list", "--data-dir", data_dir)) != ["app", "ops"]:
        fail("the imported tokens are not in the data dir's token file")
    again = run(binary, "token", "import", declared, "--data-dir", data_dir)
    if "0 added, 0 replaced, 2 unchanged" not in again:
        fail(f"a second import of the same file changed something:\n{again}")

    # A record that grants something else under the same name replaces it.
    with open(declared, encoding="utf-8") as f:
        tokens = json.load(f)
    for record in tokens["tokens"]:
        if record["name"] == "app":
            record["roles"] = ["infer", "route"]
    changed = os.path.join(workdir, "changed.json")
    with open(changed, "w", encoding="utf-8") as f:
        json.dump(tokens, f)
    replaced = run(binary, "token", "import", changed, "--data-dir", data_dir)
    if "replaced app" not in replaced or "unchanged ops" not in replaced:
        fail(f"a changed record was not replaced alone:\n{replaced}")

    # Bad input names what is wrong, and changes nothing.
    missing = run(binary, "token", "import", os.path.join(workdir, "nope.json"),
                  "--data-dir", data_dir, expect=1)
    if "no token file" not in missing:
        fail(f"a missing file: {missing}")
    broken = os.path.join(workdir, "broken.json")
    with open(broken, "w", encoding="utf-8") as f:
        f.write('{"version": 1, "tokens": [{"name": "x", "roles": ["fly"], "tenant": "", '
                '"sha256": "' + "0" * 64 + '", "created_ms": 1}]}')
    refused = run(binary, "token", "import", broken, "--data-dir", data_dir, expect=2)
    if "broken.json" not in refused or "roles" not in refused:
        fail(f"a malformed file is refused without naming the file and field: {refused}")
    empty = os.path.join(workdir, "empty.json")
    with open(empty, "w", encoding="utf-8") as f:
        f.write('{"version": 1, "tokens": []}')
    if "holds no token" not in run(binary, "token", "import", empty, "--data-dir", data_dir,
                                   expect=2):
        fail("an empty file is not refused")
    if listed_names(run(binary, "token", "list", "--data-dir", data_dir)) != ["app", "ops"]:
        fail("a refused import changed the token file")


def check_password_file(binary, redis, password_file):
    """--redis-password-file: the password stays out of the URL, once."""
    with_password = redis.url.replace("redis://", "redis://:inline@")
    both = run(binary, "token", "list", "--redis", with_password, "--redis-password-file",
               password_file, expect=2)
    if "keep it in one place" not in both:
        fail(f"a password in the URL and in a file: {both}")
    os.chmod(password_file, 0o644)
    loose = run(binary, "token", "list", "--redis", redis.url, "--redis-password-file",
                password_file, expect=1)
    os.chmod(password_file, 0o600)
    if "has mode 0644" not in loose:
        fail(f"a password file others can read: {loose}")
    without = run(binary, "token", "list", "--redis", redis.url, expect=1)
    if "NOAUTH" not in without and "auth" not in without.lower():
        fail(f"Redis without its password should refuse: {without}")


def check_replicas(binary, workdir, declared, ops_secret):
    password = "p@ss/w:rd"  # characters a URL would have to escape
    with RedisServer(workdir, password=password) as redis:
        password_file = os.path.join(workdir, "redis-password")
        with open(password_file, "w", encoding="utf-8") as f:
            f.write(password + "\n")
        os.chmod(password_file, 0o600)
        check_password_file(binary, redis, password_file)
        keys = os.path.join(workdir, "keys")
        os.makedirs(keys)
        issuer, salt = os.path.join(keys, "issuer.key"), os.path.join(keys, "tenant-salt.key")
        run(binary, "keygen", "--issuer-key", issuer, "--tenant-secret-file", salt)
        redis_args = ("--redis", redis.url, "--redis-password-file", password_file)
        replica_args = (*redis_args, "--issuer-key", issuer, "--tenant-secret-file", salt)

        # Beyond loopback a replica needs a token, and its tokens are the
        # log's: with none there it refuses to start, and says where to add one.
        refused = run(binary, "serve", "--listen", "0.0.0.0:0", "--data-dir",
                      os.path.join(workdir, "tokenless"), "--replica-id", "r0", *replica_args,
                      expect=1)
        if "the governance log on Redis holds none" not in refused or "--redis URL" not in refused:
            fail(f"a replica without tokens beyond loopback: {refused}")

        # Two init containers starting together import the same file at once.
        importers = [subprocess.Popen([binary, "token", "import", declared, *redis_args],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                     for _ in range(2)]
        for importer in importers:
            out, _ = importer.communicate(timeout=60)
            if importer.returncode != 0:
                fail(f"a concurrent import failed: {out}")
        if listed_names(run(binary, "token", "list", *redis_args)) != ["app", "ops"]:
            fail("the log does not hold exactly the imported tokens")

        # Its fresh data dir holds no token file: the imported tokens reach it
        # through the log before it listens beyond loopback.
        replica_dir = os.path.join(workdir, "replica")
        os.makedirs(replica_dir)
        with Kvgov(binary, replica_dir, (*replica_args, "--replica-id", "r1"),
                   listen="0.0.0.0:0") as kvgov:
            wait_for("the replica's /readyz", lambda: http("GET", kvgov.url + "/readyz")[0] == 200,
                     10, process=kvgov.process)
            status, body = http("GET", kvgov.url + "/v1/journal?limit=100",
                                headers={"Authorization": f"Bearer {ops_secret}"})
            if status != 200:
                fail(f"the imported ops token does not read the journal: {status} {body}")
            adds = [row["subject"] for row in json.loads(body)["rows"]
                    if row["kind"] == "token.add"]
            if sorted(adds) != ["app", "ops"]:
                fail(f"each imported token should be one token.add row, got {adds}")
        print(f"replicas: 2 concurrent imports, token.add rows {sorted(adds)}")


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="kvgov-token-import-") as workdir:
        made = os.path.join(workdir, "made")
        ops_secret = run(binary, "token", "add", "ops", "--role", "admin", "--role", "read",
                         "--data-dir", made).strip().splitlines()[-1]
        run(binary, "token", "add", "app", "--role", "infer", "--tenant", "acme",
            "--data-dir", made)
        declared = os.path.join(made, "tokens.json")
        check_single_node(binary, workdir, declared)
        check_replicas(binary, workdir, declared, ops_secret)
    print("token import: single node and replicas ok")
    return 0


if __name__ == "__main__":
    run_main(main)
