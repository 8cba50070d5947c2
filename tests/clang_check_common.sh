# Sourced by the checks that run a clang tool over the build's own commands
# (thread_safety_check.sh, tidy_check.sh): their arguments and what they
# need before they start.
# Sets: check (the caller's name), root and build (absolute: the build's
# compile_commands.json names files by absolute path).
# Usage: clang_check_start NAME TOOL "$@"
clang_check_start() {
  check=$1
  local tool=$2
  shift 2
  root=${1:?usage: $check.sh SOURCE_DIR BUILD_DIR}
  build=${2:?usage: $check.sh SOURCE_DIR BUILD_DIR}
  root=$(cd "$root" && pwd)
  build=$(cd "$build" && pwd)
  if ! command -v "$tool" > /dev/null; then
    echo "$check: $tool is not installed (scripts/install-deps.sh installs it)" >&2
    exit 1
  fi
  if [ ! -f "$build/compile_commands.json" ]; then
    echo "$check: $build/compile_commands.json is missing (configure the build first)" >&2
    exit 1
  fi
}
