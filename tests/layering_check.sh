#!/usr/bin/env bash
# The layering contract, by include: public headers carry no third-party
# types, and kvgov_core does no I/O and reads no clock or entropy. Tests
# and benchmarks beside the code may use their frameworks.
# Usage: layering_check.sh REPO_ROOT
set -euo pipefail
root=${1:?usage: layering_check.sh REPO_ROOT}
status=0

check() {  # check DESCRIPTION PATTERN PATH...
  local what=$1 pattern=$2
  shift 2
  local hits
  hits=$(grep -rnE --exclude="*_test.cc" --exclude="*_bench.cc" "$pattern" "$@" 2>/dev/null || true)
  if [ -n "$hits" ]; then
    echo "layering: $what"
    echo "$hits"
    status=1
  fi
}

third_party='#include *[<"](nlohmann|httplib|zmq|zmq_addon|msgpack|rocksdb|sodium|openssl|CLI|hiredis|benchmark|gtest|gmock)'
check "public headers must not include third-party headers" "$third_party" "$root/include"
check "kvgov_core must not include third-party headers" "$third_party" "$root/src/core"
check "kvgov_client (installed, linked by transports) must not include third-party headers" \
  "$third_party" "$root/src/client"
check "kvgov_core must do no I/O and read no clock or entropy" \
  '#include *<(fstream|iostream|cstdio|stdio\.h|chrono|ctime|random|thread|filesystem|sys/|unistd\.h|arpa/|netinet/)' \
  "$root/src/core" "$root/include/kvgov/core"

if [ "$status" -eq 0 ]; then
  echo "layering: ok"
fi
exit "$status"
