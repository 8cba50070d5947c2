#!/usr/bin/env python3
"""The fault matrix (tests/faults/matrix.tsv): run it, or check it.

Usage:
  run_matrix.py --build DIR --run --doc docs/reliability.md   (make faults)
  run_matrix.py --build DIR --check                          (ctest faults_matrix)

--run runs each row's tests with ctest (real processes: kvgov, engines'
stand-ins, Redis) and rewrites the table between the markers of the
document: fault, what is expected, the tests, what happened, and the
acknowledged writes lost (0 where the row's tests count them and passed).
A row with no tests says so. Exits 1 when a row's tests fail.

--check fails when a row's regex names no registered test, or a row is
malformed: the matrix cannot point at tests that were renamed away.

Python 3 standard library only.
"""

import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BEGIN = "<!-- faults:begin (make faults writes this table) -->"
END = "<!-- faults:end -->"


def read_matrix(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 5 or fields[3] not in ("yes", "no"):
                raise SystemExit(f"{path}:{number}: want 5 tab-separated fields (group, fault, "
                                 f"expected, asserts_no_loss yes|no, regex), got {fields}")
            group, fault, expected, no_loss, regex = fields
            rows.append({"group": group, "fault": fault, "expected": expected,
                         "no_loss": no_loss == "yes", "regex": regex, "line": number})
    return rows


def listed_tests(build, regex):
    listing = subprocess.run(["ctest", "--test-dir", build, "-N", "-R", regex],
                             capture_output=True, text=True, check=True).stdout
    return re.findall(r"Test\s+#\d+: (\S+)", listing)


def check(build, rows, matrix):
    problems = []
    for row in rows:
        if row["regex"] and not listed_tests(build, row["regex"]):
            problems.append(f"{matrix}:{row['line']}: '{row['regex']}' names no test "
                            f"({row['fault']})")
    for problem in problems:
        print(problem, file=sys.stderr)
    tested = sum(1 for row in rows if row["regex"])
    if not problems:
        print(f"faults_matrix: {len(rows)} rows, {tested} with tests, each regex names a test")
    return 1 if problems else 0


def run(build, rows):
    for row in rows:
        if not row["regex"]:
            row["result"], row["lost"], row["tests"] = "not yet tested", "—", []
            continue
        row["tests"] = listed_tests(build, row["regex"])
        started = time.monotonic()
        done = subprocess.run(["ctest", "--test-dir", build, "-R", row["regex"],
                               "--output-on-failure"], capture_output=True, text=True)
        seconds = time.monotonic() - started
        passed = done.returncode == 0 and row["tests"]
        row["result"] = (f"passed ({len(row['tests'])} test{'s' if len(row['tests']) > 1 else ''}, "
                         f"{seconds:.0f} s)" if passed else "**FAILED**")
        row["lost"] = ("0" if row["no_loss"] else "not counted") if passed else "?"
        if not passed:
            print(done.stdout[-4000:], file=sys.stderr)
        print(f"{'ok    ' if passed else 'FAILED'} {row['group']}: {row['fault']}")
    return rows


def table(rows):
    lines = ["| group | fault | expected | tests | what happened | acknowledged writes lost |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        tests = "<br>".join(f"`{name}`" for name in row["tests"]) or "none yet"
        lines.append(f"| {row['group']} | {row['fault']} | {row['expected']} | {tests} | "
                     f"{row['result']} | {row['lost']} |")
    return "\n".join(lines)


def write_doc(doc, rows):
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{doc}: no '{BEGIN}' ... '{END}' markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    with open(doc, "w", encoding="utf-8") as f:
        f.write(f"{head}{BEGIN}\n_Written by `make faults` on {stamp}._\n\n{table(rows)}\n"
                f"{END}{tail}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--matrix", default=os.path.join(HERE, "matrix.tsv"))
    parser.add_argument("--doc")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--run", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args()
    rows = read_matrix(args.matrix)
    if args.check:
        return check(args.build, rows, args.matrix)
    run(args.build, rows)
    if args.doc:
        write_doc(args.doc, rows)
    failed = [row for row in rows if row["result"] == "**FAILED**"]
    untested = [row for row in rows if not row["regex"]]
    print(f"faults: {len(rows) - len(untested) - len(failed)} rows passed, {len(failed)} failed, "
          f"{len(untested)} not yet tested")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
