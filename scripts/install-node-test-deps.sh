#!/usr/bin/env bash
# Installs the test-only Node clients (tests/node: the official OpenAI and
# Anthropic SDKs, and puppeteer-core for the console's browser test) from
# the npm registry, exactly as the lockfile pins them (npm ci). Run by
# `make test` and `make test-asan` before ctest; the daemon never needs them.
# Where npm is missing or the registry cannot be reached, this says so and
# succeeds: the tests that need the clients then skip, saying why.
set -uo pipefail
dir="$(cd "$(dirname "$0")/../tests/node" && pwd)"
# Installed, and what the lockfile pins: each direct dependency's entry.
pinned() {
  for package in openai @anthropic-ai/sdk puppeteer-core; do
    cmp -s <(sed -n "\#\"node_modules/$package\"#,/}/p" "$dir/package-lock.json") \
           <(sed -n "\#\"node_modules/$package\"#,/}/p" "$dir/node_modules/.package-lock.json") ||
      return 1
  done
}
if [ -f "$dir/node_modules/.package-lock.json" ] && pinned; then
  exit 0
fi
if ! command -v npm > /dev/null; then
  echo "install-node-test-deps: npm not found; the OpenAI SDK and console tests will skip" >&2
  exit 0
fi
if ! (cd "$dir" && timeout 300 npm ci --no-audit --no-fund --loglevel=error > /dev/null); then
  echo "install-node-test-deps: npm ci failed (is the npm registry reachable?);" \
       "the OpenAI SDK and console tests will skip" >&2
fi
exit 0
