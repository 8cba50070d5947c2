#!/usr/bin/env bash
# make image: an OCI image of kvgov from Debian's packages alone.
#
#   deploy/image/build.sh [--binary PATH] [--out DIR] [--tag TAG]
#
#   binary (a Release build) ──► readelf/ldd ──► the Debian packages of its
#   libraries ──► mmdebstrap --variant=extract (no Essential set: no shell,
#   no dpkg, no apt) ──► trimmed rootfs + /usr/bin/kvgov + a non-root user
#   ──► buildah (from scratch, one layer, labels) ──► OUT/kvgov.oci.tar
#
# The image runs `kvgov serve --config /etc/kvgov/kvgov.toml` as uid 65532;
# any other kvgov command line is given as the container's arguments. Its
# size and what is in it: docs/operations.md "The image". Needs root (or
# what mmdebstrap and buildah need) and Debian's archive; the build host
# must be the Debian release the binary was built on, since the image's
# libraries are that release's.
set -euo pipefail

source_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
binary="$source_dir/build/apps/kvgov/kvgov"
out="$source_dir/build-image"
tag=""

while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "image: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

say() { echo "image: $*"; }
die() { echo "image: $*" >&2; exit 1; }

[ -x "$binary" ] || die "no kvgov binary at $binary: run make build first, or give --binary"
for tool in mmdebstrap buildah readelf strip dpkg-deb; do
  command -v "$tool" > /dev/null || die "$tool is missing: scripts/install-deps.sh --image installs it"
done

version="$("$binary" --version | awk '{print $NF}')"
revision="$(git -C "$source_dir" rev-parse HEAD 2> /dev/null || echo unknown)"
if [ "$revision" != unknown ] && [ -n "$(git -C "$source_dir" status --porcelain --untracked-files=no)" ]; then
  revision="$revision-dirty"
fi
tag="${tag:-$version}"
# Reproducible timestamps: the commit's time, not the build's.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$source_dir" log -1 --format=%ct 2> /dev/null || date +%s)}"
created="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
suite="$(. /etc/os-release && echo "${VERSION_CODENAME:?}")"
arch="$(dpkg --print-architecture)"

# The packages that ship the binary's shared libraries, as this host
# resolves them (Debian's /lib is /usr/lib, so both spellings are asked).
packages=(base-files)
while read -r library; do
  owner="$(dpkg -S "$library" 2> /dev/null || dpkg -S "/usr$library" 2> /dev/null)" \
    || die "no Debian package ships $library, which kvgov links"
  packages+=("${owner%%:*}")
done < <(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
say "kvgov $version ($revision), Debian $suite/$arch: ${packages[*]}"

work="$(mktemp -d "${TMPDIR:-/tmp}/kvgov-image.XXXXXX")"
buildah_flags=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)
container=""
cleanup() {
  [ -n "$container" ] && buildah "${buildah_flags[@]}" rm "$container" > /dev/null 2>&1 || true
  # vfs layers hold files of other owners; rm as root clears them.
  rm -rf "$work"
}
trap cleanup EXIT

rootfs="$work/rootfs"
# extract: the packages and their dependencies unpacked, no maintainer
# scripts run, nothing Essential added. The .debs stay (skip cleanup/apt)
# so each package's control fields can be recorded below.
mmdebstrap --variant=extract --include="$(IFS=,; echo "${packages[*]}")" \
  --setup-hook=/usr/share/mmdebstrap/hooks/merged-usr/setup00.sh --skip=cleanup/apt \
  "$suite" "$rootfs" > "$work/mmdebstrap.log" 2>&1 \
  || { cat "$work/mmdebstrap.log" >&2; die "mmdebstrap failed"; }

# base-files (for /etc/os-release, which scanners read) pulls in mawk, and
# libc6 its iconv modules: a serving kvgov runs neither.
dropped=(mawk)
rm -rf "$rootfs"/usr/bin/mawk "$rootfs"/usr/bin/awk "$rootfs"/usr/share/doc/mawk \
  "$rootfs"/usr/lib/x86_64-linux-gnu/gconv
# Each package's control fields, as distroless records them, so scanners
# (Trivy, Syft, Grype) see what the image holds.
install -d -m 0755 "$rootfs"/var/lib/dpkg/status.d
for deb in "$rootfs"/var/cache/apt/archives/*.deb; do
  name="$(dpkg-deb -f "$deb" Package)"
  [[ " ${dropped[*]} " == *" $name "* ]] && continue
  dpkg-deb -f "$deb" > "$rootfs/var/lib/dpkg/status.d/$name"
done
[ -e "$rootfs/var/lib/dpkg/status.d/libc6" ] || die "no package records: mmdebstrap kept no .debs"

# What a serving kvgov never reads: package tooling, documentation (each
# package's copyright stays), locales, and base-files' login furniture.
rm -rf "$rootfs"/etc/apt "$rootfs"/etc/dpkg "$rootfs"/var/cache "$rootfs"/var/lib/apt \
  "$rootfs"/var/log "$rootfs"/usr/share/man "$rootfs"/usr/share/info "$rootfs"/usr/share/locale \
  "$rootfs"/usr/share/lintian "$rootfs"/usr/share/bug "$rootfs"/usr/share/gcc \
  "$rootfs"/usr/share/gdb "$rootfs"/etc/fstab "$rootfs"/etc/hostname "$rootfs"/etc/resolv.conf \
  "$rootfs"/etc/update-motd.d "$rootfs"/etc/motd "$rootfs"/etc/issue "$rootfs"/etc/issue.net \
  "$rootfs"/etc/profile.d "$rootfs"/etc/skel "$rootfs"/usr/share/base-files
find "$rootfs"/var/lib/dpkg -mindepth 1 -maxdepth 1 ! -name status.d -exec rm -rf {} +
find "$rootfs"/usr/share/doc -type f ! -name copyright -delete
find "$rootfs"/usr/share/doc -type l -delete
find "$rootfs"/usr/share/doc -mindepth 1 -type d -empty -delete

install -d -m 0755 "$rootfs"/usr/bin "$rootfs"/etc/kvgov
install -m 0755 "$binary" "$rootfs"/usr/bin/kvgov
strip --strip-unneeded "$rootfs"/usr/bin/kvgov
install -m 0644 "$source_dir"/deploy/image/kvgov.toml "$rootfs"/etc/kvgov/kvgov.toml
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nkvgov:x:65532:65532:kvgov:/var/lib/kvgov:/usr/sbin/nologin\n' \
  > "$rootfs"/etc/passwd
printf 'root:x:0:\nkvgov:x:65532:\n' > "$rootfs"/etc/group
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$rootfs"/etc/nsswitch.conf
chmod 0644 "$rootfs"/etc/passwd "$rootfs"/etc/group "$rootfs"/etc/nsswitch.conf
# The data dir is the only place kvgov writes (a volume in production);
# /tmp for the few libraries that want one; mount points a runtime fills.
install -d -m 0700 -o 65532 -g 65532 "$rootfs"/var/lib/kvgov
install -d -m 1777 "$rootfs"/tmp
install -d -m 0755 "$rootfs"/proc "$rootfs"/sys "$rootfs"/dev

for unwanted in sh bash dash cc gcc c++ g++ apt dpkg; do
  if [ -e "$rootfs/usr/bin/$unwanted" ] || [ -e "$rootfs/usr/sbin/$unwanted" ]; then
    die "$unwanted found in the image: a package pulled it in (${packages[*]})"
  fi
done

# One layer, its files in a stable order, owners by number.
tar --create --file "$work/rootfs.tar" --directory "$rootfs" --numeric-owner \
  --sort=name --mtime="@$SOURCE_DATE_EPOCH" --xattrs .
rootfs_bytes="$(du -sb "$rootfs" | cut -f1)"

container="$(buildah "${buildah_flags[@]}" from scratch)"
buildah "${buildah_flags[@]}" add "$container" "$work/rootfs.tar" / > /dev/null
buildah "${buildah_flags[@]}" config \
  --os linux --arch "$arch" \
  --entrypoint '["/usr/bin/kvgov"]' \
  --cmd 'serve --config /etc/kvgov/kvgov.toml' \
  --user 65532:65532 --workingdir /var/lib/kvgov \
  --port 8787/tcp --port 8788/tcp --volume /var/lib/kvgov \
  --stop-signal SIGTERM \
  --label org.opencontainers.image.title=kvgov \
  --label "org.opencontainers.image.description=kvgov, the governance plane for KV caches in LLM serving" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.created=$created" \
  --label "io.kvgov.debian=$suite" \
  --label "io.kvgov.debian.packages=${packages[*]}" \
  "$container"
buildah "${buildah_flags[@]}" commit --quiet --format oci --timestamp "$SOURCE_DATE_EPOCH" \
  --rm "$container" "localhost/kvgov:$tag" > /dev/null
container=""
mkdir -p "$out"
rm -f "$out/kvgov.oci.tar"
buildah "${buildah_flags[@]}" push --quiet "localhost/kvgov:$tag" \
  "oci-archive:$out/kvgov.oci.tar:kvgov:$tag"

archive_bytes="$(stat -c %s "$out/kvgov.oci.tar")"
cat > "$out/image.json" << JSON
{"archive": "$out/kvgov.oci.tar", "reference": "kvgov:$tag", "version": "$version",
 "revision": "$revision", "created": "$created", "debian": "$suite/$arch",
 "archive_bytes": $archive_bytes, "rootfs_bytes": $rootfs_bytes}
JSON
say "$out/kvgov.oci.tar: kvgov:$tag, $((archive_bytes / 1024 / 1024)) MiB compressed, $((rootfs_bytes / 1024 / 1024)) MiB unpacked"
say "load it with: podman load -i $out/kvgov.oci.tar   (or skopeo copy oci-archive:$out/kvgov.oci.tar docker://REGISTRY/kvgov:$tag)"
