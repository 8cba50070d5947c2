#!/usr/bin/env python3
"""docs/operations.md, "First steps on one machine": the block the guide
marks with `<!-- first-steps: ... -->` runs as written.

Usage: first_steps_test.py KVGOV_BINARY SOURCE_DIR

The block is run by bash in a fresh directory, with the binary first on
PATH and the guide's two ports (8787, 8788) swapped for free ones, so a
newcomer's copy and paste is exactly what is tested. Its answers (one JSON
line each) are then checked: both simulated engines idle and reachable
(events, replay and control named), the second chat reusing the first's
KV as the engine reports it, the quarantine naming the conversation's
tokens, and the chat after it recomputed. Every process the block started
is killed with its process group, whatever happens.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvgov_ops import fail, free_port, run_main  # noqa: E402

MARKER = "<!-- first-steps: the suite runs the next block -->"


def guide_block(source_dir):
    text = open(os.path.join(source_dir, "docs", "operations.md"), encoding="utf-8").read()
    at = text.find(MARKER)
    if at < 0:
        fail(f"docs/operations.md has no '{MARKER}'")
    match = re.compile(r"\s*```sh\n(.*?)\n```", re.S).match(text, at + len(MARKER))
    if match is None:
        fail("the first-steps marker is not followed by a ```sh block")
    return match.group(1)


def cached_tokens(answer):
    usage = answer.get("usage") or fail(f"an answer without usage: {answer}")
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def check(answers):
    if len(answers) != 5:
        fail(f"want 5 answers (workers, 3 chats, quarantine), got {len(answers)}: {answers}")
    workers, chat1, chat2, quarantine, chat3 = answers
    rows = workers.get("workers", [])
    if len(rows) != 2:
        fail(f"want 2 workers, got {workers}")
    for row in rows:
        if row.get("state") != "idle":
            fail(f"a worker before any request should be idle: {row}")
        for field in ("events_endpoint", "replay_endpoint", "control_url"):
            if not row.get(field):
                fail(f"worker {row.get('id')} does not say its {field}: {row}")
    for answer in (chat1, chat2, chat3):
        if "usage" not in answer:
            fail(f"a chat answered without usage: {answer}")
    prompt_tokens = chat1["usage"]["prompt_tokens"]
    if prompt_tokens < 32:
        fail(f"the chat is {prompt_tokens} tokens: too short to fill a block")
    if cached_tokens(chat1) != 0:
        fail(f"the first chat was cached: {chat1['usage']}")
    if chat2["usage"]["prompt_tokens"] != prompt_tokens or cached_tokens(chat2) < 16:
        fail(f"the second chat did not reuse the first's KV: {chat2['usage']}")
    if quarantine.get("blocks", 0) < 1 or len(quarantine.get("token_ids", [])) != prompt_tokens:
        fail(f"the quarantine did not take the conversation's {prompt_tokens} tokens: {quarantine}")
    if chat3["usage"]["prompt_tokens"] != prompt_tokens or cached_tokens(chat3) != 0:
        fail(f"the chat after the quarantine reused the quarantined KV: {chat3['usage']}")
    print(f"first steps: {prompt_tokens}-token chat, {cached_tokens(chat2)} cached on turn 2, "
          f"{quarantine['blocks']} blocks quarantined, 0 cached after")


def main():
    binary, source_dir = os.path.abspath(sys.argv[1]), sys.argv[2]
    script = guide_block(source_dir)
    control, gateway = free_port(), free_port()
    script = script.replace("127.0.0.1:8787", f"127.0.0.1:{control}")
    script = script.replace("127.0.0.1:8788", f"127.0.0.1:{gateway}")
    env = dict(os.environ, PATH=os.path.dirname(binary) + os.pathsep + os.environ["PATH"])
    with tempfile.TemporaryDirectory(prefix="kvgov-first-steps-") as workdir:
        shell = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=workdir,
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True)
        try:
            stdout, stderr = shell.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(shell.pid, signal.SIGKILL)
            stdout, stderr = shell.communicate()
            fail(f"the block did not finish within 90 s\nstdout:\n{stdout}\nstderr:\n{stderr}")
        finally:
            try:  # whatever the block left running
                os.killpg(shell.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if shell.returncode != 0:
            fail(f"the block exited {shell.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}")
        answers = []
        # kvgov engines prints its specs on the same stdout, as text.
        for line in (l for l in stdout.splitlines() if l.startswith("{")):
            try:
                answers.append(json.loads(line))
            except json.JSONDecodeError:
                fail(f"an answer that is not one JSON line: {line!r}\nstderr:\n{stderr}")
        check(answers)
    return 0


if __name__ == "__main__":
    run_main(main)
