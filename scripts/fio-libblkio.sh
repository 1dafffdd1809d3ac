#!/usr/bin/env bash
# Prints the path of a stock fio built with its libblkio engine, building it
# once when it is not cached; with --guest, the path of a lean fio from the
# same source for the qemu guests instead (see below). fio is not modified:
# its source is Debian's upstream tarball, fetched with
#   apt-get source --download-only --tar-only fio=<version>
# through a private sources list with deb-src entries for sid and trixie
# (apt -o options only; nothing on the host is reconfigured). The newest
# served version >= 3.35 whose tarball downloads (archive versions move: a
# version the lists name may answer 404) and that has engines/libblkio.c is
# built; the script fails with a clear message if none is.
#
# Usage: scripts/fio-libblkio.sh [PCDIR]
#        scripts/fio-libblkio.sh --guest
#   PCDIR   directory holding a blkio.pc (crates/mqblk-blkio writes one to
#           target/release/pkgconfig; scripts/libblkio-reference.sh prints a
#           directory whose pkgconfig/ has Debian's); default: whatever
#           PKG_CONFIG_PATH finds. Only needed when fio must be built.
#
# The engine links libblkio.so.1 (it dlopens nothing), and the build carries
# no run-time path (any -Wl,-rpath in blkio.pc's Libs is dropped), so the one
# cached binary runs against whichever libblkio.so.1 LD_LIBRARY_PATH names:
#   LD_LIBRARY_PATH=target/release $(scripts/fio-libblkio.sh) --enghelp=libblkio
#
# --guest: the fio that tests/guest/run.sh hands its guests (as
# MQBLK_GUEST_FIO). Debian's /usr/bin/fio links 64 shared libraries (84 MB:
# librbd, librados, gfapi, ...); loaded over the guest's 9p share under TCG
# they cost 11-17 s per fio start. This build has no libblkio engine (no
# run-time dependency on libblkio.so.1) and none of the cluster or network
# engines, and has libaio and io_uring: a handful of libraries (checked with
# readelf, listed in build.txt). Installs libaio-dev when missing.
#
# Cache (outside the checkout): ${MQBLK_CACHE:-$HOME/.cache/mqblk}/
#   apt-blkio/                   private apt state (scripts/debian-apt.sh)
#   fio-<fio version>-libblkio/  fio, build.txt (what was built, from what,
#                                how long), configure.log; renamed into place
#                                only when complete
#   fio-<fio version>-guest/     the same for --guest
# With a cached build present no apt runs (the newest cached version is
# used); MQBLK_FIO_VERSION=<upstream version, e.g. 3.41> asks for one
# version, building it if needed. MQBLK_FIO_JOBS sets make's -j (default:
# the number of CPUs).
#
# Installs with apt when missing (needs root then): gcc, make, pkg-config,
# libc6-dev, zlib1g-dev.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "fio-libblkio: $*" >&2; exit 2; }
say() { echo "fio-libblkio: $*" >&2; }
min_version=3.35 # fio's libblkio engine came with 3.34; 3.35 is the first we accept

cache=${MQBLK_CACHE:-$HOME/.cache/mqblk}
# shellcheck source=scripts/debian-apt.sh
. scripts/debian-apt.sh
usage="usage: scripts/fio-libblkio.sh [PCDIR] | scripts/fio-libblkio.sh --guest"
variant=libblkio # or guest: names the cache directory fio-<version>-<variant>
if [ "${1:-}" = --guest ]; then
  variant=guest
  shift
  [ $# -eq 0 ] || die "$usage"
fi
[ $# -le 1 ] || die "$usage"
pcdir=${1:-}

# ---- a cached build ---------------------------------------------------------
cached_fio() { # [version] -> path of a complete cached fio, newest first
  local d version=${1:-*}
  # $version may be the pattern *
  for d in $(find "$cache" -maxdepth 1 -name "fio-$version-$variant" 2>/dev/null | sort -rV); do
    [ -x "$d/fio" ] && [ -f "$d/build.txt" ] && { echo "$d/fio"; return 0; }
  done
  return 1
}
if found=$(cached_fio "${MQBLK_FIO_VERSION:-}"); then
  echo "$found"
  exit 0
fi

# ---- what the build needs ---------------------------------------------------
work=""
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache"
work=$(mktemp -d "$cache/.fio-build.XXXXXX")

if [ "$variant" = libblkio ]; then
  if [ -n "$pcdir" ]; then
    [ -f "$pcdir/blkio.pc" ] || die "no blkio.pc in $pcdir"
    pcfile=$pcdir/blkio.pc
  else
    pcfile=$(pkg-config --variable=pcfiledir blkio 2>/dev/null)/blkio.pc ||
      die "no blkio.pc: give its directory as PCDIR or in PKG_CONFIG_PATH (e.g. \$(scripts/libblkio-reference.sh)/pkgconfig, or target/release/pkgconfig after building crates/mqblk-blkio)"
    [ -f "$pcfile" ] || die "no blkio.pc found through PKG_CONFIG_PATH=${PKG_CONFIG_PATH:-}"
  fi
  # The copy fio is built against: Libs without a run-time path, so that the
  # binary finds libblkio.so.1 only where LD_LIBRARY_PATH says.
  mkdir "$work/pc"
  sed -E -e '/^Libs/ s/ ?-Wl,(-rpath|-R|--rpath)[=,][^ ]*//g' "$pcfile" > "$work/pc/blkio.pc"
fi

need=()
build_deps=(gcc make pkg-config libc6-dev zlib1g-dev)
[ "$variant" = libblkio ] || build_deps+=(libaio-dev)
for pkg in "${build_deps[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "fio's build needs ${need[*]}: install them, or run as root"
  say "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2 ||
    { apt-get update -qq >&2 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2; } ||
    die "apt-get install ${need[*]} failed"
fi

# ---- fio's source: the newest served version that has the engine ------------
debian_apt_update || die "apt-get update of the private lists failed (see above)"
versions=$(apt-cache "${apt_opts[@]}" showsrc fio 2>/dev/null | sed -n 's/^Version: //p' | sort_debian_versions)
[ -n "$versions" ] || die "no fio source package in $(debian_apt_suites)"
tried=() src="" pkg_version="" fio_version=""
for v in $versions; do
  upstream=${v#*:}
  upstream=${upstream%-*}
  if dpkg --compare-versions "$upstream" lt "$min_version"; then
    tried+=("$v: older than $min_version")
    continue
  fi
  if [ -n "${MQBLK_FIO_VERSION:-}" ] && [ "$upstream" != "$MQBLK_FIO_VERSION" ]; then
    tried+=("$v: not MQBLK_FIO_VERSION=$MQBLK_FIO_VERSION")
    continue
  fi
  rm -rf "$work/src"
  mkdir "$work/src"
  if ! (cd "$work/src" && apt-get -qq "${apt_opts[@]}" source --download-only --tar-only "fio=$v" >"$work/apt.log" 2>&1); then
    tried+=("$v: $(grep -m1 -oE '[0-9]{3} +[A-Za-z ]+' "$work/apt.log" || tail -n 1 "$work/apt.log")")
    continue
  fi
  tarball=$(find "$work/src" -maxdepth 1 -name 'fio_*.orig.tar.*' | head -n 1)
  [ -n "$tarball" ] || { tried+=("$v: no orig tarball downloaded"); continue; }
  tar -xf "$tarball" -C "$work/src"
  src=$(find "$work/src" -mindepth 1 -maxdepth 1 -type d | head -n 1)
  if [ -z "$src" ] || [ ! -f "$src/engines/libblkio.c" ]; then
    tried+=("$v: no engines/libblkio.c")
    continue
  fi
  pkg_version=$v fio_version=$upstream
  say "fio $fio_version: source $(basename "$tarball") (Debian fio=$v)"
  break
done
if [ -z "$fio_version" ]; then
  printf 'fio-libblkio: no usable fio source%s in %s; tried:\n' \
    "${MQBLK_FIO_VERSION:+ for version $MQBLK_FIO_VERSION}" "$(debian_apt_suites)" >&2
  printf '  %s\n' "${tried[@]:-none}" >&2
  exit 2
fi

# ---- build -----------------------------------------------------------------
start=$(date +%s)
if [ "$variant" = libblkio ]; then
  say "building fio $fio_version with the libblkio engine against $pcfile"
  (cd "$src" && PKG_CONFIG_PATH=$work/pc ./configure --disable-native >"$work/configure.log" 2>&1) ||
    { tail -n 20 "$work/configure.log" >&2; die "fio's ./configure failed"; }
  grep -qE '^libblkio engine +yes$' "$work/configure.log" || {
    grep -E 'libblkio' "$work/configure.log" >&2 || true
    die "fio's ./configure did not report \"libblkio engine yes\" with blkio.pc from $pcfile ($(PKG_CONFIG_PATH=$work/pc pkg-config --modversion blkio 2>&1))"
  }
else
  # Whatever -dev packages the host has: none of the engines that pull in
  # large libraries.
  configure_args=(--disable-native --disable-libblkio --disable-rados --disable-rbd --disable-gfapi
    --disable-http --disable-rdma --disable-pmem --disable-libnfs --disable-xnvme --disable-dfs)
  say "building a lean fio $fio_version for the guests (libaio, io_uring; no libblkio)"
  (cd "$src" && ./configure "${configure_args[@]}" >"$work/configure.log" 2>&1) ||
    { tail -n 20 "$work/configure.log" >&2; die "fio's ./configure ${configure_args[*]} failed"; }
  grep -qE '^Linux AIO support +yes$' "$work/configure.log" || {
    grep -E 'AIO' "$work/configure.log" >&2 || true
    die "fio's ./configure did not report \"Linux AIO support yes\" (libaio-dev installed?)"
  }
fi
(cd "$src" && make -j"${MQBLK_FIO_JOBS:-$(nproc)}" fio >"$work/make.log" 2>&1) ||
  { tail -n 30 "$work/make.log" >&2; die "fio's make failed"; }
seconds=$(($(date +%s) - start))
needed=$(readelf -d "$src/fio" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p')
if [ "$variant" = libblkio ]; then
  grep -qx 'libblkio\.so\.1' <<< "$needed" || die "the fio binary does not link libblkio.so.1"
else
  ! grep -q '^libblkio' <<< "$needed" || die "the guest fio links libblkio"
  grep -qx 'libaio\.so\.1' <<< "$needed" || die "the guest fio does not link libaio.so.1"
  [ "$(wc -l <<< "$needed")" -le 8 ] || die "the guest fio links more than 8 libraries: ${needed//$'\n'/ }"
  engines=$("$src/fio" --enghelp) || die "the guest fio does not run ($src/fio --enghelp failed)"
  for engine in libaio io_uring; do
    grep -qx "[[:space:]]*$engine" <<< "$engines" || die "the guest fio has no $engine engine (fio --enghelp)"
  done
fi
! readelf -d "$src/fio" | grep -qE 'RPATH|RUNPATH' || die "the fio binary carries a run-time path"

out=$work/out
mkdir "$out"
cp "$src/fio" "$out/fio"
cp "$work/configure.log" "$out/configure.log"
if [ "$variant" = libblkio ]; then
  configured="PKG_CONFIG_PATH=<copy of $pcfile without rpath> ./configure --disable-native
blkio.pc: $(PKG_CONFIG_PATH=$work/pc pkg-config --modversion blkio) from $pcfile"
else
  configured="./configure ${configure_args[*]}
libraries: ${needed//$'\n'/ }"
fi
cat > "$out/build.txt" <<EOF
fio $fio_version, stock: Debian source package fio=$pkg_version, $(basename "$tarball")
fetched: apt-get source --download-only --tar-only fio=$pkg_version (private lists: $(debian_apt_suites))
configured: $configured
built: make -j${MQBLK_FIO_JOBS:-$(nproc)} fio, ${seconds} s (configure and make), $(date -u +%Y-%m-%dT%H:%MZ), $(gcc --version | head -n 1)
EOF
dir=$cache/fio-$fio_version-$variant
mv -T "$out" "$dir" 2>/dev/null || say "another run cached $dir first; using it"
say "built in ${seconds} s; cached in $dir"
echo "$dir/fio"
