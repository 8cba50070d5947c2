#!/usr/bin/env bash
# Clang's thread-safety analysis over the modules annotated so far
# (include/kvgov/core/mutex.h, docs/adr/0041): every source file of them,
# with the flags its build uses (compile_commands.json), compiled by clang
# with -fsyntax-only and -Werror=thread-safety. First it makes sure the
# analysis is on at all: a read of a guarded member without its lock must
# be refused, or the check itself is broken.
# Usage: thread_safety_check.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
clang=${CLANG:-clang++}
# shellcheck source=tests/clang_check_common.sh
source "$(dirname "$0")/clang_check_common.sh"
clang_check_start thread_safety_check "$clang" "$@"
# The modules whose locks are annotated. Grows as modules are annotated.
annotated=(src/auth src/client src/connectors src/gateway src/governance src/ingest src/journal
  src/metrics src/prompts src/replication src/router src/server src/services src/simfleet src/store
  src/transport)
# Clang 14 has C++20 coroutines, but Boost.Asio (1.74) detects them for GCC
# only: told, it declares asio::awaitable, which src/server's gateway files
# include.
analysis=(-fsyntax-only -Wthread-safety -Werror=thread-safety -Wno-unknown-warning-option
  -DBOOST_ASIO_HAS_CO_AWAIT=1 -DBOOST_ASIO_HAS_STD_COROUTINE=1)

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cat > "$scratch/unguarded.cc" << 'EOF'
#include "kvgov/core/mutex.h"
struct Counter {
  kvgov::Mutex mu;
  int value KVGOV_GUARDED_BY(mu) = 0;
  int Read() { return value; }
};
int main() { return Counter().Read(); }
EOF
if "$clang" -std=c++20 -I"$root/include" "${analysis[@]}" "$scratch/unguarded.cc" 2> /dev/null; then
  echo "thread_safety_check: clang accepted an unguarded read: the analysis is off" >&2
  exit 1
fi

# One line per file: the build's command with clang and the analysis in
# place of the compiler and its output.
python3 - "$root" "$build/compile_commands.json" "${annotated[@]}" > "$scratch/commands" << 'EOF'
import json, shlex, sys
root, database, modules = sys.argv[1], sys.argv[2], sys.argv[3:]
prefixes = tuple(f"{root.rstrip('/')}/{m}/" for m in modules)
for entry in json.load(open(database)):
    path = entry["file"]
    if not path.startswith(prefixes) or path.endswith(("_test.cc", "_bench.cc")):
        continue
    words = shlex.split(entry["command"])[1:]
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif word not in ("-c", "-MD", "-MMD") and not word.startswith("-Wno-restrict"):
            kept.append(word)
    print(entry["directory"] + "\t" + shlex.join(kept))
EOF
count=$(wc -l < "$scratch/commands")
if [ "$count" -eq 0 ]; then
  echo "thread_safety_check: no source file of ${annotated[*]} in $build/compile_commands.json" >&2
  exit 1
fi
export clang
export analysis_flags="${analysis[*]}"
status=0
# shellcheck disable=SC2016  # expanded by the inner shell
tr '\n' '\0' < "$scratch/commands" | xargs -0 -P "$(nproc)" -I{} bash -c '
  IFS=$'"'"'\t'"'"' read -r dir args <<< "$1"
  cd "$dir" && eval "\"$clang\" $args $analysis_flags"' _ {} || status=$?
if [ "$status" -ne 0 ]; then
  echo "thread_safety_check: the analysis refused the files above (fix the locking or its annotation)" >&2
  exit 1
fi
echo "thread_safety_check: $count files of ${annotated[*]} pass"
