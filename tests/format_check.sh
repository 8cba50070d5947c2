#!/usr/bin/env bash
# Every C++ file of the tree is as .clang-format says
# (Google's style at 100 columns, includes left in the order written: some
# must come first, see src/gateway/front_door.h). Fix with clang-format -i.
set -euo pipefail
root=${1:?usage: format_check.sh SOURCE_DIR}
cd "$root"
if ! command -v clang-format > /dev/null; then
  echo "format_check: clang-format is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
# Every C++ file of the tree (src, include, tests, fuzz, apps, examples) but
# the public headers below, not yet formatted: the tree is formatted a part
# at a time, since a file reformatted is a compiler-cache miss everywhere it
# is built, and the whole tree cold does not fit CI's 90 minutes
# (docs/adr/0036). These are included by a fifth to nine tenths of the
# tree's translation units each; the list only shrinks, and a new file is
# checked from its first commit.
not_yet=(
  include/kvgov/core/engine_events.h
  include/kvgov/core/mutex.h
  include/kvgov/core/nixl_lease.h
  include/kvgov/core/provider_cache.h
  include/kvgov/core/status.h
  include/kvgov/core/tool_result.h
  include/kvgov/core/vocabulary.h
  include/kvgov/index/residency_index.h
  include/kvgov/router/worker_status.h
)
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  mapfile -t all < <(git ls-files -- '*.cc' '*.h')
else
  mapfile -t all < <(find src include tests fuzz apps examples -name '*.cc' -o -name '*.h' 2> /dev/null)
fi
files=()
for file in "${all[@]}"; do
  skip=0
  for pending in "${not_yet[@]}"; do [[ $file == "$pending" ]] && skip=1 && break; done
  ((skip)) || files+=("$file")
done
# One run over every file: it names each line it would change.
status=0
output=$(clang-format --style=file --dry-run --Werror "${files[@]}" 2>&1) || status=$?
mapfile -t unformatted < <(printf '%s\n' "$output" |
  sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if ((status != 0 && ${#unformatted[@]} == 0)); then
  echo "format_check: clang-format failed (exit $status):" >&2
  printf '%s\n' "$output" | head -20 >&2
  exit 1
fi
if ((${#unformatted[@]} > 0)); then
  echo "format_check: ${#unformatted[@]} file(s) not formatted as .clang-format says:" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  echo "fix: clang-format -i on them" >&2
  exit 1
fi
echo "format_check: ${#files[@]} files formatted"
