#!/usr/bin/env bash
# Makes the files deploy/k8s/base/kustomization.yaml turns into Secrets:
#
#   deploy/k8s/make-secrets.sh [--kvgov PATH] [DIR]
#
# DIR (default: base/secrets next to this script) gets, each mode 0600:
#   issuer.key, tenant-salt.key  the keys every kvgov pod shares (kvgov keygen)
#   redis-password               64 hex digits from /dev/urandom
#   tokens.json                  the tokens' hashes, no secrets: engines
#                                (ingest), app (infer), router (route), ops
#                                (admin, read), prometheus (read)
#   token-secrets.txt            those tokens' secrets, one "NAME SECRET" a
#                                line: hand each to its client, then delete it
#
# A file that exists is kept, never overwritten, and said so: run twice, the
# script changes nothing. To replace one, move it away first. --kvgov: the
# kvgov binary (default: kvgov on PATH, else build/apps/kvgov/kvgov of this
# checkout).
set -euo pipefail
umask 077

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kvgov=""
dir=""

usage() {
  echo "usage: $0 [--kvgov PATH] [DIR]" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
    --kvgov)
      [ $# -ge 2 ] || usage
      kvgov="$2"
      shift 2
      ;;
    --kvgov=*)
      kvgov="${1#--kvgov=}"
      shift
      ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      usage
      ;;
    *)
      [ -z "$dir" ] || usage
      dir="$1"
      shift
      ;;
  esac
done

if [ -z "$kvgov" ]; then
  if command -v kvgov >/dev/null 2>&1; then
    kvgov="$(command -v kvgov)"
  else
    kvgov="$here/../../build/apps/kvgov/kvgov"
  fi
fi
if [ ! -x "$kvgov" ]; then
  echo "make-secrets: no kvgov binary at '$kvgov' (make build, or give --kvgov PATH)" >&2
  exit 1
fi
dir="${dir:-$here/base/secrets}"
mkdir -p "$dir"
chmod 0700 "$dir"

kept() {
  echo "$1: kept: it existed, and was not overwritten"
}

# The shared keys: kvgov keygen keeps a file that exists, and says so.
# It makes them mode 0600.
"$kvgov" keygen --issuer-key "$dir/issuer.key" --tenant-secret-file "$dir/tenant-salt.key"

# Redis's password: 32 random bytes as hex, no newline: kvgov reads it from
# the file (--redis-password-file) without trailing whitespace, but Redis's
# --requirepass takes the Secret's bytes as they are.
if [ -e "$dir/redis-password" ]; then
  kept "$dir/redis-password"
else
  password="$(od -An -v -tx1 -N32 /dev/urandom | tr -d ' \n')"
  if [ ${#password} -ne 64 ]; then
    echo "make-secrets: could not read 32 bytes from /dev/urandom" >&2
    exit 1
  fi
  printf '%s' "$password" >"$dir/redis-password.tmp"
  mv -n "$dir/redis-password.tmp" "$dir/redis-password"
  chmod 0600 "$dir/redis-password"
  echo "$dir/redis-password: created"
fi

# The tokens: made in a scratch data dir, whose tokens.json (hashes only)
# becomes the Secret kvgov-tokens; the secrets go to token-secrets.txt.
if [ -e "$dir/tokens.json" ]; then
  kept "$dir/tokens.json"
  if [ -e "$dir/token-secrets.txt" ]; then
    echo "$dir/token-secrets.txt: still here: move its secrets to their clients and delete it"
  fi
  exit 0
fi
if [ -e "$dir/token-secrets.txt" ]; then
  echo "make-secrets: $dir/token-secrets.txt exists but $dir/tokens.json does not;" >&2
  echo "make-secrets: new tokens would not match it: move it away first" >&2
  exit 1
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
secrets=""
add_token() {
  local name="$1"
  shift
  local output secret
  output="$("$kvgov" token add "$name" "$@" --data-dir "$scratch/data")"
  secret="$(printf '%s\n' "$output" | tail -n 1)"
  case "$secret" in
    kvgov_*) ;;
    *)
      echo "make-secrets: kvgov token add $name printed no secret on its last line:" >&2
      printf '%s\n' "$output" >&2
      exit 1
      ;;
  esac
  secrets+="$name $secret"$'\n'
}
add_token engines --role ingest
add_token app --role infer
add_token router --role route
add_token ops --role admin --role read
add_token prometheus --role read

# The secrets first: tokens.json without them would leave tokens no one holds.
printf '%s' "$secrets" >"$scratch/token-secrets.txt"
chmod 0600 "$scratch/token-secrets.txt"
cp "$scratch/token-secrets.txt" "$dir/token-secrets.txt.tmp"
mv -n "$dir/token-secrets.txt.tmp" "$dir/token-secrets.txt"
cp "$scratch/data/tokens.json" "$dir/tokens.json.tmp"
chmod 0600 "$dir/tokens.json.tmp"
mv -n "$dir/tokens.json.tmp" "$dir/tokens.json"
echo "$dir/tokens.json: created (tokens engines, app, router, ops, prometheus)"
echo "$dir/token-secrets.txt: created; it holds each token's secret, shown nowhere else:"
echo "  engines -> the engines' KV transports (POST /v1/events), app -> the applications"
echo "  (the gateway), router -> your router (POST /v1/route), ops -> operators,"
echo "  prometheus -> Prometheus's bearer_token. Move each to its client, then delete the file."
