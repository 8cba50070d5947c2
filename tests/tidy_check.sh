#!/usr/bin/env bash
# clang-tidy, as .clang-tidy at the root says, over every source file of
# src/ (tests and benchmarks aside), with the flags its build uses
# (compile_commands.json); any warning fails. First it makes sure the rules
# are on at all: a use after move must be found, or the check itself is
# broken. Run by `make tidy` and CI, not by `make test`: it takes about nine
# minutes of two cores (docs/adr/0043).
# Usage: tidy_check.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
tidy=${CLANG_TIDY:-clang-tidy}
# shellcheck source=tests/clang_check_common.sh
source "$(dirname "$0")/clang_check_common.sh"
clang_check_start tidy_check "$tidy" "$@"
tidied=(src)
# GCC's own warning flags in the build's commands are not clang's.
# Boost.Asio 1.74 detects C++20 coroutines for GCC only; told, clang sees
# the asio::awaitable the gateway is written in (as thread_safety_check.sh).
flags=(--quiet --warnings-as-errors='*' --extra-arg=-Wno-unknown-warning-option
  --extra-arg=-DBOOST_ASIO_HAS_CO_AWAIT=1 --extra-arg=-DBOOST_ASIO_HAS_STD_COROUTINE=1)

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cat > "$scratch/moved.cc" << 'EOF_SNIPPET'
#include <string>
#include <utility>
std::string Twice(std::string text) {
  std::string kept = std::move(text);
  return kept + text;
}
EOF_SNIPPET
if "$tidy" "${flags[@]}" --config-file="$root/.clang-tidy" "$scratch/moved.cc" -- -std=c++20 \
  > /dev/null 2>&1; then
  echo "tidy_check: clang-tidy accepted a use after move: the rules are off" >&2
  exit 1
fi

cd "$root"
mapfile -t files < <(git ls-files -- "${tidied[@]/%//*.cc}" 2> /dev/null ||
  find "${tidied[@]}" -name '*.cc')
mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -vE '_(test|bench)\.cc$')
if [ "${#files[@]}" -eq 0 ]; then
  echo "tidy_check: no source file in ${tidied[*]}" >&2
  exit 1
fi
status=0
# clang-tidy counts the warnings it suppressed in system headers on
# stderr; its findings go to stdout.
printf '%s\0' "${files[@]}" |
  xargs -0 -P "$(nproc)" -n 4 "$tidy" "${flags[@]}" -p "$build" 2> "$scratch/stderr" ||
  status=$?
grep -v ' warnings\? generated\.$' "$scratch/stderr" >&2 || true
if [ "$status" -ne 0 ]; then
  echo "tidy_check: clang-tidy found the warnings above (fix them, or argue the rule in .clang-tidy)" >&2
  exit 1
fi
echo "tidy_check: ${#files[@]} files of ${tidied[*]} tidy"
