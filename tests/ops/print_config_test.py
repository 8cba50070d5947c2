#!/usr/bin/env python3
"""`kvgov serve --print-config` and the example config deploy/kvgov.toml.

Usage: print_config_test.py KVGOV_BINARY SOURCE_DIR

Checks that:
  - deploy/kvgov.toml loads (`serve --config FILE --print-config` exits 0)
    and names every setting of `kvgov serve` (set, or commented out as
    `# key = ...` when it has no default), each under a comment, and none
    that `serve` lacks;
  - --print-config prints every setting, exits 0 and starts nothing (no
    data dir, no listening socket, no ready file);
  - flags override the file, which overrides the defaults;
  - every key of an --engine spec (the parser's unknown-key error lists
    them) is described in serve --help and in deploy/kvgov.toml;
  - the output, written to a file and loaded with --config, prints the same
    output again (round trip), for the defaults, for deploy/kvgov.toml and
    for a configuration that sets every kind of value;
  - invalid settings still fail under --print-config (exit 2), and config
    files CLI11 would misread are refused naming the line.
"""

import os
import re
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvgov_ops import TestFailure, run_main  # noqa: E402

# A setting: `key = value`, or commented out as `# key = value` (spaces
# around '=' then, so prose such as "# id=w1" is not taken for one).
KEY_LINE = re.compile(r"^(?:(#\s*)([a-z][a-z0-9-]*)\s+=\s|()([a-z][a-z0-9-]*)\s*=)")


def run(binary, *args, cwd=None):
    result = subprocess.run([binary, "serve", *args], capture_output=True, text=True,
                            cwd=cwd, timeout=30, check=False)
    return result.returncode, result.stdout, result.stderr


def print_config(binary, *args, cwd=None):
    code, out, err = run(binary, *args, "--print-config", cwd=cwd)
    if code != 0:
        raise TestFailure(f"serve {' '.join(args)} --print-config: exit {code}\n{err}")
    return out


def keys(text, path):
    """{key: set: bool} for the [serve] keys of a config text; commented-out
    `# key = value` lines count as present but unset."""
    found = {}
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        match = KEY_LINE.match(line)
        if not match:
            continue
        commented = match.group(1) is not None
        key = match.group(2) if commented else match.group(4)
        if key in found and not commented:
            raise TestFailure(f"{path}:{number}: '{key}' given twice")
        found.setdefault(key, not commented)
        if not commented:
            found[key] = True
    return found


def check_example(binary, source_dir, reference):
    path = os.path.join(source_dir, "deploy", "kvgov.toml")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    example = keys(text, path)
    missing = sorted(set(reference) - set(example))
    extra = sorted(set(example) - set(reference))
    if missing or extra:
        raise TestFailure(f"{path}: missing settings {missing}, unknown settings {extra}")
    # Each setting sits under a comment that describes it.
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if KEY_LINE.match(line) and (number < 2 or not lines[number - 2].startswith("#")):
            raise TestFailure(f"{path}:{number}: '{line}' has no comment above it")
    out = print_config(binary, "--config", path)
    printed = keys(out, "--print-config")
    for key, is_set in example.items():
        if is_set != printed[key]:
            raise TestFailure(f"{path}: '{key}' is {'set' if is_set else 'unset'} in the file "
                              f"but {'set' if printed[key] else 'unset'} in --print-config")
    return out


def check_engine_keys(binary, help_text, example_text):
    """Every key the engine spec parser accepts (its unknown-key error lists
    them) is described in serve --help's --engine and in deploy/kvgov.toml's
    engine comment."""
    code, _, err = run(binary, "--engine", "id=w1,no-such-key=1", "--print-config")
    match = re.search(r"unknown key 'no-such-key' \(want ([a-z0-9, -]+)\)", err)
    if code != 2 or not match:
        raise TestFailure(f"an unknown engine key: want exit 2 listing the keys, got {code}: {err}")
    spec_keys = [key.strip() for key in match.group(1).split(",")]
    if len(spec_keys) < 10:
        raise TestFailure(f"the engine spec's key list looks cut short: {spec_keys}")
    start = help_text.find("--engine ")
    end = help_text.find("\n  --", start + 1)
    engine_help = help_text[start:end if end != -1 else len(help_text)]
    missing = [key for key in spec_keys
               if not re.search(r"(?<![a-z-])" + re.escape(key) + "=", engine_help)]
    if start == -1 or missing:
        raise TestFailure(f"serve --help's --engine does not describe {missing}:\n{engine_help}")
    start = example_text.find("# ---- Engines")
    end = example_text.find("\n# ----", start + 1)
    engine_comment = example_text[start:end]
    missing = [key for key in spec_keys
               if not re.search(r"(?<![a-z-])" + re.escape(key) + r"(?![a-z-])", engine_comment)]
    if start == -1 or missing:
        raise TestFailure(f"deploy/kvgov.toml's engine comment does not describe {missing}")
    return spec_keys


def round_trip(binary, tmp, name, out):
    path = os.path.join(tmp, name + ".toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(out)
    again = print_config(binary, "--config", path)
    if again != out:
        raise TestFailure(f"{name}: --print-config output loaded with --config prints "
                          f"differently:\n--- first\n{out}\n--- second\n{again}")


def expect_refused(binary, tmp, name, text, want):
    path = os.path.join(tmp, name + ".toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    code, _, err = run(binary, "--config", path, "--print-config")
    if code != 2 or want not in err:
        raise TestFailure(f"{name}: want exit 2 naming {want!r}, got {code}: {err}")


def main():
    binary, source_dir = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="kvgov-print-config-test-") as tmp:
        # Defaults, from a scratch cwd: nothing may be created there.
        defaults = print_config(binary, cwd=tmp)
        if os.listdir(tmp):
            raise TestFailure(f"--print-config created {os.listdir(tmp)}: it must not start")
        reference = keys(defaults, "--print-config")
        _, help_out, help_err = run(binary, "--help")
        flags = set(re.findall(r"^  (?:-\w,)?--([a-z][a-z0-9-]*)", help_out + help_err, re.M))
        flags -= {"help", "print-config"}
        if set(reference) != flags:
            raise TestFailure(f"--print-config keys {sorted(reference)} differ from serve "
                              f"--help flags {sorted(flags)}")
        if not defaults.startswith("#") or "\n[serve]\n" not in defaults:
            raise TestFailure(f"--print-config output is not a [serve] section:\n{defaults}")
        for line in ('listen = "127.0.0.1:8787"', "max-body-bytes = 8388608",
                     "route-dram-credit = 0.75", '# engine = []', '# tls-cert = ""'):
            if line not in defaults.split("\n"):
                raise TestFailure(f"--print-config defaults lack '{line}':\n{defaults}")
        round_trip(binary, tmp, "defaults", defaults)

        example = check_example(binary, source_dir, reference)
        with open(os.path.join(source_dir, "deploy", "kvgov.toml"), encoding="utf-8") as f:
            engine_keys = check_engine_keys(binary, help_out + help_err, f.read())
        round_trip(binary, tmp, "example", example)

        # Every kind of value, and flags over the file over the defaults.
        ready = os.path.join(tmp, "never-written")
        data = os.path.join(tmp, "never-created")
        everything = print_config(
            binary, "--listen", "127.0.0.1:0", "--data-dir", data, "--ready-file", ready,
            "--engine", "id=w1,kind=vllm,events=tcp://127.0.0.1:5557,model=m",
            "--engine", "id=w2,kind=sglang,events=tcp://127.0.0.1:5560,model=m,dp-ranks=2",
            "--admit", "nixl=fleet", "--admit", "lmcache", "--route-temperature", "1e-3",
            "--route-seed", "18446744073709551615", "--route-dram-credit", "0.6",
            "--tenant-secret-file", os.path.join(tmp, "salt.key"), "--tls-cert", "",
            cwd=tmp)
        for line in (f'data-dir = "{data}"', 'route-temperature = "1e-3"',
                     'route-seed = 18446744073709551615', 'admit = ["nixl=fleet", "lmcache"]',
                     'tls-cert = ""'):
            if line not in everything.split("\n"):
                raise TestFailure(f"--print-config lacks '{line}':\n{everything}")
        round_trip(binary, tmp, "everything", everything)
        file_path = os.path.join(tmp, "everything.toml")
        overridden = print_config(binary, "--config", file_path, "--listen", "127.0.0.1:9",
                                  "--engine", "id=w3,events=tcp://127.0.0.1:1,model=m")
        over = overridden.split("\n")
        if 'listen = "127.0.0.1:9"' not in over or \
                'engine = ["id=w3,events=tcp://127.0.0.1:1,model=m"]' not in over or \
                'route-dram-credit = 0.6' not in over:
            raise TestFailure(f"flags must override the file, which overrides defaults:\n"
                              f"{overridden}")
        if os.path.exists(ready) or os.path.exists(data):
            raise TestFailure("--print-config wrote the ready file or created the data dir")

        # Bad settings still fail, before anything starts.
        code, _, err = run(binary, "--engine", "bogus", "--print-config")
        if code != 2 or "--engine 'bogus'" not in err:
            raise TestFailure(f"a bad --engine under --print-config: exit {code}: {err}")
        code, _, err = run(binary, "--probe-interval-ms", "1", "--print-config")
        if code != 2:
            raise TestFailure(f"an out-of-range value under --print-config: exit {code}: {err}")
        code, _, err = run(binary, "--tls-cert", "a#b", "--print-config")
        if code != 2 or "'#'" not in err:
            raise TestFailure(f"a value the file cannot hold: exit {code}: {err}")
        # What serve refuses, --print-config refuses too: one id twice.
        twice = "id=w1,kind=vllm,events=tcp://127.0.0.1:5557,model=m"
        code, _, err = run(binary, "--engine", twice, "--engine", twice, "--print-config")
        if code != 2 or "engine id 'w1' is given twice" not in err:
            raise TestFailure(f"a repeated engine id under --print-config: exit {code}: {err}")

        # ... and so are an engine spec whose replay is its events port, and
        # vLLM's bind-only endpoint copied as is (kvgov connects).
        code, _, err = run(binary, "--engine",
                           "id=w1,events=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5557,model=m",
                           "--print-config")
        if code != 2 or "overlap" not in err:
            raise TestFailure(f"replay on the events port under --print-config: exit {code}: {err}")
        code, _, err = run(binary, "--engine", "id=w1,events=tcp://*:5557,model=m",
                           "--print-config")
        if code != 2 or "is an address the engine binds" not in err:
            raise TestFailure(f"a bind-only events address under --print-config: exit {code}: {err}")

        # Files CLI11 would misread are refused, naming the line.
        expect_refused(binary, tmp, "hash", '[serve]\ntls-cert = "/etc/a#b.pem"\n',
                       "hash.toml:2: key 'tls-cert': a '#' inside a value")
        expect_refused(binary, tmp, "bare-bracket",
                       '[serve]\nadmit = [\n  "a",\n  "b"]\n',
                       "bare-bracket.toml:2: key 'admit': put the array's first element")
        expect_refused(binary, tmp, "comment-in-array",
                       '[serve]\nadmit = ["a",\n  # why\n  "b"]\n',
                       "comment-in-array.toml:3: key 'admit': no comments inside an array")
        multi = os.path.join(tmp, "multi.toml")
        with open(multi, "w", encoding="utf-8") as f:
            f.write('[serve]\nadmit = ["a",  # trailing comments on the key line are fine\n'
                    '         "b",\n]\n')
        if 'admit = ["a", "b"]' not in print_config(binary, "--config", multi).split("\n"):
            raise TestFailure("a multi-line array with a trailing comma did not load")
    print(f"--print-config: {len(reference)} settings, all in deploy/kvgov.toml; "
          f"{len(engine_keys)} engine keys, all in --help and the file; round trips hold")
    return 0


if __name__ == "__main__":
    run_main(main)
