#!/usr/bin/env bash
# The layering contract, by include: public headers carry no third-party
# types; kvgov_core does no I/O and reads no clock or entropy; governance
# decides without HTTP, JSON, the store, a clock or a thread; ingest follows
# streams without the store (kvgov_stream_store, its own library, is the
# exception) and spool reads files without the index or threads;
# connectors (clients of engines' HTTP APIs) know no index; only the daemon,
# the gateway (src/gateway, which knows no daemon) and the
# simulated engines of src/simfleet serve HTTP. Tests and benchmarks beside the code may use
# their frameworks.
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

third_party='#include *[<"](nlohmann|simdjson|httplib|zmq|zmq_addon|msgpack|rocksdb|sodium|openssl|CLI|hiredis|benchmark|gtest|gmock)'
check "public headers must not include third-party headers" "$third_party" "$root/include"
check "kvgov_core must not include third-party headers" "$third_party" "$root/src/core"
check "kvgov_client (installed, linked by transports) must not include third-party headers" \
  "$third_party" "$root/src/client"
check "kvgov_core must do no I/O and read no clock or entropy" \
  '#include *<(fstream|iostream|cstdio|stdio\.h|chrono|ctime|random|thread|filesystem|sys/|unistd\.h|arpa/|netinet/)' \
  "$root/src/core" "$root/include/kvgov/core"

check "prompts (cache breakers) must do no I/O, read no clock or entropy and use no third party" \
  '#include *(<(fstream|iostream|cstdio|chrono|ctime|random|thread|filesystem)>|"kvgov/(log|store|codec)/)' \
  "$root/src/prompts" "$root/include/kvgov/prompts"
check "kvgov_prompts must not include third-party headers" "$third_party" "$root/src/prompts"

check "the clock reads the standard library's clocks only: no kvgov module, no third party" \
  '#include *("kvgov/[^c]|<(fstream|iostream|cstdio|thread|random)>)' \
  "$root/src/clock/clock.cc" "$root/include/kvgov/clock"

check "governance must not use HTTP, a JSON library or the store" \
  '#include *[<"](httplib|nlohmann|rocksdb|kvgov/store/|kvgov/codec/)' \
  "$root/src/governance" "$root/include/kvgov/governance"
check "governance decides by the time it is given: no clock, no thread" \
  '#include *<(chrono|ctime|thread|condition_variable|random)>' \
  "$root/src/governance" "$root/include/kvgov/governance"
ingest_sources=$(find "$root/src/ingest" "$root/include/kvgov/ingest" -name '*.cc' -o -name '*.h' |
  grep -v '/stream_store\.' || true)
if [ -n "$ingest_sources" ]; then
  # shellcheck disable=SC2086
  check "ingest (but kvgov_stream_store) must not use the store" \
    '#include *"kvgov/store/' $ingest_sources
fi
check "the pure modules (core, index, router, governance) never log: their callers do (ADR 0017)" \
  '#include *"kvgov/log/' "$root/src/core" "$root/src/index" "$root/src/router" \
  "$root/src/governance" "$root/include/kvgov/core" "$root/include/kvgov/index" \
  "$root/include/kvgov/router" "$root/include/kvgov/governance"
check "spool must not use the index or threads (the daemon scans it)" \
  '#include *("kvgov/index/|<thread>)' "$root/src/spool" "$root/include/kvgov/spool"
check "connectors must not use the residency index or the store" \
  '#include *"kvgov/(index|store)/' "$root/src/connectors" "$root/include/kvgov/connectors"
# The gateway (src/gateway) knows no daemon: its request path reaches
# kvgov's state through a Plane that src/server implements, and its I/O
# (the listener, the engine connections, the routes) knows no routing.
check "the gateway must not use the daemon, the store, the index or the journal" \
  '#include *"(server/|kvgov/(store|index|governance|journal)/)' "$root/src/gateway" \
  "$root/include/kvgov/gateway"
check "the gateway's I/O must not route" '#include *"(gateway/(plane|request_path)\.h|kvgov/router/)' \
  "$root/src/gateway/front_door.h" "$root/src/gateway/front_door.cc" \
  "$root/src/gateway/upstream_pool.h" "$root/src/gateway/upstream_pool.cc" \
  "$root/src/gateway/routes.h" "$root/src/gateway/routes.cc"
check "the handoff's rules are pure: no I/O, no clock, no entropy, no third party" \
  '#include *(<(boost/|fstream|iostream|cstdio|chrono|ctime|random|thread|filesystem)|"kvgov/(log|clock|connectors|codec)/)' \
  "$root/src/gateway/handoff_rules.cc" "$root/include/kvgov/gateway"
check "the handoff's rules must not include third-party headers" "$third_party" \
  "$root/src/gateway/handoff_rules.cc"
# The services (docs/adr/0042) take their collaborators in their
# constructors: no daemon, no HTTP server, no listener's types. The
# gateway's public headers (include/kvgov/gateway: the handoff's rules and
# the types its Plane passes) are pure, checked above; its I/O is not.
check "services must not use the daemon, HTTP or the listeners" \
  '#include *("(server|gateway)/|<(httplib\.h|boost/)|"kvgov/(server|transport)/)' \
  "$root/src/services" "$root/include/kvgov/services"
# src/server's routes, plane and tables take what they use in their
# constructors or registration structs (docs/adr/0042): only the root
# (daemon.{h,cc}, which builds everything, and server.cc, which hands each
# route file its part) knows the daemon.
route_files=$(find "$root/src/server" -name '*.cc' -o -name '*.h' |
  grep -vE '/(daemon\.(h|cc)|server\.cc)$|_(test|bench)\.cc$' || true)
if [ -n "$route_files" ]; then
  # shellcheck disable=SC2086
  check "src/server's routes must not reach the root (server/daemon.h)" \
    '(#include *"server/daemon\.h"|\bDaemon&)' $route_files
fi
# Test and benchmark support (src/testing) is never linked into kvgov.
not_test_support=$(find "$root/src" "$root/apps" "$root/include" -name '*.cc' -o -name '*.h' |
  grep -v "^$root/src/testing/" || true)
# shellcheck disable=SC2086
check "kvgov's own code must not use test support (src/testing)" '#include *"testing/' \
  $not_test_support
# The simulator and the simulated engines run for `kvgov demo`, `simulate`
# and `loadgen` (src/cli), never on the daemon's serving path.
check "the daemon must not use the simulator or the simulated engines" \
  '#include *"(kvgov/(sim|simfleet)/|sim/|simfleet/)' "$root/src/server" "$root/src/services" \
  "$root/src/gateway" "$root/include/kvgov/server" "$root/include/kvgov/services"
# Beast and Asio serve HTTP only in src/gateway (and what runs on it: the
# simulated instant engine).
beast_users=$(grep -rlE --exclude="*_test.cc" --exclude="*_bench.cc" '#include *<boost/(beast|asio)' \
  "$root/src" "$root/apps" "$root/include" 2>/dev/null |
  grep -vE "^$root/src/(gateway|server|simfleet)/" || true)
if [ -n "$beast_users" ]; then
  echo "layering: Boost.Beast and Asio belong to src/gateway (and its users in src/server and src/simfleet)"
  echo "$beast_users"
  status=1
fi
# The server side of cpp-httplib: only the daemon listens (and the
# simulated engines, which stand in for vLLM's own server).
server_side=$(grep -rlE --exclude="*_test.cc" --exclude="*_bench.cc" 'httplib::(SSL)?Server' \
  "$root/src" "$root/apps" 2>/dev/null | grep -vE "^$root/src/(server|simfleet)/" || true)
if [ -n "$server_side" ]; then
  echo "layering: only src/server (and src/simfleet's simulated engines) may serve HTTP"
  echo "$server_side"
  status=1
fi

if [ "$status" -eq 0 ]; then
  echo "layering: ok"
fi
exit "$status"
