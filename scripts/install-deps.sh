#!/usr/bin/env bash
# Installs every build, test and run-time dependency of kvgov from Debian's
# packages. Idempotent: when every package is already installed it does
# nothing and returns in well under a second. Needs root (or sudo).
set -euo pipefail

packages=(
  # toolchain and build
  build-essential cmake ninja-build pkg-config ccache mold
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev python3
  # fuzzing (make fuzz): clang, and libFuzzer with the sanitizer runtimes
  clang libclang-rt-14-dev
  # the format and tidy checks (tests/format_check.sh, tests/tidy_check.sh)
  clang-format clang-tidy
  # libraries
  nlohmann-json3-dev libsimdjson-dev libcpp-httplib-dev libssl-dev libsodium-dev libcli11-dev
  libboost-dev
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev librocksdb-dev libxxhash-dev
  # test peers and tooling (prometheus brings promtool, which checks /metrics)
  python3-zmq python3-msgpack python3-yaml curl prometheus
  # the fault matrix's clock steps (tests/faults/clock_step_test.py)
  libfaketime
  # the test-only Node clients (tests/node, from the npm registry at test time),
  # and the browser the console's test drives (puppeteer-core, no download)
  nodejs chromium
  # replicas (--redis): the Redis client library, and redis-server for the tests
  libhiredis-dev redis-server
)

# make image (deploy/image/build.sh) only: Debian's tree builder and the
# OCI image tool.
if [ "${1:-}" = "--image" ]; then
  packages+=(mmdebstrap buildah)
fi
# make bench only: the gateway's load generator and the reverse proxy it is
# compared with (src/server/gateway_scale_bench.cc). nginx is run by the
# benchmark, never as a service: its package's start is refused below.
if [ "${1:-}" = "--bench" ]; then
  packages+=(wrk nginx-light)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

# libmsgpack-dev (the C package) hides msgpack-cxx's CMake target; refuse
# rather than build against the wrong config.
if dpkg-query -W -f='${Status}' libmsgpack-dev 2>/dev/null | grep -q 'install ok installed'; then
  echo "install-deps: libmsgpack-dev is installed and shadows libmsgpack-cxx-dev's CMake config;" >&2
  echo "install-deps: remove it with 'apt-get remove libmsgpack-dev' and run again." >&2
  exit 1
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# Packages' services (nginx's) are not started: a policy-rc.d that refuses,
# for the install only, when none is there already.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" > /dev/null
  $sudo chmod 755 "$policy"
  trap '$sudo rm -f "$policy"' EXIT
fi
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
