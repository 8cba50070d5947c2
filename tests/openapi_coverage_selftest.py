#!/usr/bin/env python3
"""Shows that tests/openapi_coverage.py fails when it should.

Usage: openapi_coverage_selftest.py SOURCE_DIR

Copies src/server/*.cc and docs/api/openapi.yaml into a temporary directory,
breaks the copies one way at a time, and expects openapi_coverage.py to exit
1 naming the problem: an undocumented route, a documented route the server
lacks, a method missing from a documented path, a changed id regex, a
changed or undocumented role, an open route documented as needing a token,
and a templated route whose group has no parameter name. The unbroken
copies must pass. Python 3 standard library only.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "openapi_coverage.py")


def run(source_dir, spec, server_dir):
    result = subprocess.run(
        [sys.executable, CHECK, source_dir, "--spec", spec, "--server-dir", server_dir],
        capture_output=True, text=True, check=False)
    return result.returncode, result.stdout + result.stderr


def main():
    source_dir = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory(prefix="kvgov-openapi-selftest-") as tmp:
        def fresh():
            server = os.path.join(tmp, "server")
            shutil.rmtree(server, ignore_errors=True)
            shutil.copytree(os.path.join(source_dir, "src", "server"), server)
            # The front door's routes are registered in src/gateway.
            gateway = os.path.join(source_dir, "src", "gateway")
            # Prefixed, so no gateway file lands on a server file of its name.
            for name in os.listdir(gateway):
                if name.endswith(".cc"):
                    shutil.copyfile(os.path.join(gateway, name),
                                    os.path.join(server, "gateway_" + name))
            spec = os.path.join(tmp, "openapi.yaml")
            shutil.copyfile(os.path.join(source_dir, "docs", "api", "openapi.yaml"), spec)
            return server, spec

        def edit(path, old, new, count=1):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if text.count(old) < 1:
                raise SystemExit(f"selftest: '{old}' not found in {path}; update the selftest")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.replace(old, new, count))

        def expect(case, want_code, want_text, server, spec):
            code, output = run(source_dir, spec, server)
            ok = code == want_code and (want_text is None or want_text in output)
            print(f"{'ok  ' if ok else 'FAIL'} {case}: exit {code}")
            if not ok:
                failures.append(f"{case}: want exit {want_code} with {want_text!r}, got exit "
                                f"{code}:\n{output}")

        server, spec = fresh()
        expect("the tree as it is passes", 0, None, server, spec)

        # A new route, registered but not documented (as a spool-dir hook or
        # any other handler would be): the check names it and where it is.
        server, spec = fresh()
        api = os.path.join(server, "operations_api.cc")
        edit(api, '  http.Get("/healthz",',
             '  http.Post(R"(/v1/spool/([a-z]+)/flush)", nullptr);\n'
             '  http.Get("/v1/undocumented", nullptr);\n  http.Get("/healthz",')
        expect("an undocumented route fails", 1,
               "missing from the spec: GET /v1/undocumented", server, spec)
        expect("a templated route needs a parameter name", 1,
               "no parameter name for the group after '/spool/'", server, spec)

        # A registration commented out does not count.
        server, spec = fresh()
        edit(os.path.join(server, "operations_api.cc"), '  http.Get("/healthz",',
             '  // http.Get("/v1/commented-out", nullptr);\n  http.Get("/healthz",')
        expect("a commented-out registration is ignored", 0, None, server, spec)

        # A documented path the server does not serve.
        server, spec = fresh()
        edit(spec, "\n  /v1/leases:\n", "\n  /v1/leases-old:\n    get:\n      responses: {}\n"
             "  /v1/leases:\n")
        expect("a documented but unregistered path fails", 1,
               "GET /v1/leases-old is in the spec but not registered", server, spec)

        # A route removed from the server but left in the spec.
        server, spec = fresh()
        gov = os.path.join(server, "governance_api.cc")
        with open(gov, encoding="utf-8") as f:
            text = f.read()
        text, n = re.subn(r'http\.Get\(\s*"/v1/quarantines",', 'RegisterNothing("/v1/quarantines",',
                          text)
        assert n == 1, "selftest: GET /v1/quarantines registration not found"
        with open(gov, "w", encoding="utf-8") as f:
            f.write(text)
        expect("a route the server dropped fails", 1,
               "GET /v1/quarantines is in the spec but not registered", server, spec)

        # One method of a path left undocumented.
        server, spec = fresh()
        edit(spec, "    delete:\n      tags: [route]\n      operationId: undrainWorker",
             "    x-delete:\n      tags: [route]\n      operationId: undrainWorker")
        expect("an undocumented method fails", 1,
               "missing from the spec: DELETE /v1/workers/{worker}/drain", server, spec)

        # The server's id regex changes; the spec's pattern must follow.
        server, spec = fresh()
        edit(os.path.join(server, "governance_api.cc"), "/v1/certificates/([0-9a-f]{8,64})",
             "/v1/certificates/([0-9a-f]{40})")
        expect("a changed id regex fails", 1,
               "parameter 'id' of /v1/certificates/{id}", server, spec)

        # The role a route requires changes; the spec's x-kvgov-role must follow.
        server, spec = fresh()
        gov = os.path.join(server, "governance_api.cc")
        with open(gov, encoding="utf-8") as f:
            text = f.read()
        text, n = re.subn(r'(http\.Get\("/v1/leases",\s*Guard\(routes\.access, )Role::kRead',
                          r"\1Role::kAdmin", text)
        assert n == 1, "selftest: the GET /v1/leases guard was not found"
        with open(gov, "w", encoding="utf-8") as f:
            f.write(text)
        expect("a changed role fails", 1,
               "GET /v1/leases: x-kvgov-role 'read', but the server requires role 'admin'",
               server, spec)

        # An authenticated operation must say which role it needs.
        server, spec = fresh()
        edit(spec, "      x-kvgov-role: admin\n      x-kvgov-tenant-bound: refused (403)\n"
             "      responses:\n        \"200\":\n          description: the configuration",
             "      x-kvgov-tenant-bound: refused (403)\n"
             "      responses:\n        \"200\":\n          description: the configuration")
        expect("an operation without its role fails", 1,
               "GET /v1/config needs a token: give its x-kvgov-role", server, spec)

        # A route the server answers without a token, documented as needing
        # one (GET /v1/issuer once did: the spec said read, the server 401).
        server, spec = fresh()
        edit(spec, "      operationId: getHealthz\n      summary: Liveness\n"
             "      description: Answers while the daemon serves. Never needs a token.\n"
             "      security: []\n",
             "      operationId: getHealthz\n      summary: Liveness\n"
             "      description: Answers while the daemon serves. Never needs a token.\n"
             "      x-kvgov-role: read\n")
        expect("an open route documented as needing a token fails", 1,
               "GET /healthz needs a token in the spec, but the server answers it without one",
               server, spec)

        # A path parameter the spec forgot to declare.
        server, spec = fresh()
        edit(spec, "      - name: decision_id\n", "      - name: decision\n")
        expect("an undeclared path parameter fails", 1,
               "/v1/route/{decision_id}/done does not declare path parameter 'decision_id'",
               server, spec)

    if failures:
        print("\n".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
