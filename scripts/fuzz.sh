#!/usr/bin/env bash
# Runs kvgov's libFuzzer targets (fuzz/README.md), one after another, each for
# a bounded time, and fails if any of them finds anything. `make fuzz` and
# `make fuzz-smoke` build the tree and call this.
#
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS [FUZZER...]
#   BUILD_DIR  a tree configured with -DKVGOV_BUILD_FUZZERS=ON and built
#              (target kvgov_fuzzers)
#   SECONDS    how long each fuzzer runs
#   FUZZER     the fuzzers to run (default: every one with a seed corpus)
# Environment:
#   FUZZ_MAX_LEN    the largest input tried, in bytes (default 4096)
#   FUZZ_ARTIFACTS  where logs and crash inputs go (default
#                   BUILD_DIR/fuzz-artifacts; emptied at the start)
#
# Each fuzzer starts from a temporary copy of fuzz/corpus/<fuzzer>: what it
# discovers is thrown away, never written into the repository. A crash,
# leak, timeout or invariant failure leaves its input in
# FUZZ_ARTIFACTS/<fuzzer>/ and the run's log in FUZZ_ARTIFACTS/<fuzzer>.log.
set -euo pipefail

usage="usage: scripts/fuzz.sh BUILD_DIR SECONDS [FUZZER...]"
build=${1:?$usage}
seconds=${2:?$usage}
shift 2
case "$seconds" in
  '' | *[!0-9]* | 0)
    echo "fuzz: SECONDS must be a positive integer, got '$seconds'" >&2
    exit 2
    ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
max_len=${FUZZ_MAX_LEN:-4096}
artifacts=${FUZZ_ARTIFACTS:-$build/fuzz-artifacts}

if [ $# -gt 0 ]; then
  fuzzers=("$@")
else
  fuzzers=()
  for dir in "$root"/fuzz/corpus/*/; do
    fuzzers+=("$(basename "$dir")")
  done
fi

# Every fuzzer that was built has a seed corpus, and every corpus a fuzzer:
# a target nobody runs, or a corpus nothing reads, is a mistake.
for bin in "$build"/fuzz/*_fuzzer; do
  [ -x "$bin" ] || continue
  if [ ! -d "$root/fuzz/corpus/$(basename "$bin")" ]; then
    echo "fuzz: $(basename "$bin") has no seed corpus under fuzz/corpus/" >&2
    exit 2
  fi
done
for name in "${fuzzers[@]}"; do
  if [ ! -x "$build/fuzz/$name" ]; then
    echo "fuzz: $build/fuzz/$name is not built (cmake --build $build --target kvgov_fuzzers)" >&2
    exit 2
  fi
  if [ ! -d "$root/fuzz/corpus/$name" ]; then
    echo "fuzz: no seed corpus fuzz/corpus/$name" >&2
    exit 2
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/kvgov-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
rm -rf "$artifacts"
mkdir -p "$artifacts"
artifacts=$(cd "$artifacts" && pwd)

# UBSan is built not to recover (every report is a crash); the stack says where.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# One of libFuzzer's closing `stat::NAME: value` lines from a run's log.
final_stat() { sed -n "s/^stat::$2:[[:space:]]*//p" "$1" | tail -n 1; }

echo "fuzz: ${#fuzzers[@]} fuzzer(s), ${seconds}s each, inputs up to $max_len bytes"
failed=()
for name in "${fuzzers[@]}"; do
  corpus="$work/$name"
  cp -R "$root/fuzz/corpus/$name" "$corpus"
  mkdir -p "$artifacts/$name"
  log="$artifacts/$name.log"
  flags=(
    -max_total_time="$seconds"
    -max_len="$max_len"
    -rss_limit_mb=2048
    # One input that takes this long is a finding (a quadratic path), not
    # a slow machine: every decoder handles a few KiB in microseconds.
    -timeout=25
    -artifact_prefix="$artifacts/$name/"
    -print_final_stats=1
  )
  if [ -f "$root/fuzz/dict/$name.dict" ]; then
    flags+=(-dict="$root/fuzz/dict/$name.dict")
  fi

  status=0
  "$build/fuzz/$name" "${flags[@]}" "$corpus" >"$log" 2>&1 || status=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)
  if [ "$status" -eq 0 ]; then
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
    printf 'fuzz: %-26s ok   %9s runs  %6s exec/s  cov %5s  ft %6s  corpus %s\n' "$name" \
      "$(final_stat "$log" number_of_executed_units)" "$(final_stat "$log" average_exec_per_sec)" "$cov" "$ft" \
      "$(find "$corpus" -type f | wc -l)"
    rmdir "$artifacts/$name" 2>/dev/null || true
  else
    printf 'fuzz: %-26s FAILED (exit %d)\n' "$name" "$status"
    tail -n 40 "$log" | sed 's/^/    /'
    failed+=("$name")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}"
  echo "fuzz: crash inputs and logs in $artifacts (fuzz/README.md: from a crash to a regression test)"
  exit 1
fi
echo "fuzz: all passed; logs in $artifacts"
