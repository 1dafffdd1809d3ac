#!/usr/bin/env bash
# Fetches Debian's kernel of a series once, unpacked, and prints its directory.
#
#   tests/guest/fetch-kernel.sh 6.12|6.1|7
#
# 6.12: linux-image-6.12.* from bookworm-backports (the guests of
#       tests/guest/run.sh and the 6.12 oracle);
# 6.1:  linux-image-6.1.* from bookworm, bookworm-updates and
#       bookworm-security (the zoned oracle's Linux 6.1, tests/oracle/run.sh);
# 7:    linux-image-7.* from trixie-backports (tests/guest/run.sh with
#       MQBLK_GUEST_SERIES=7; sid's 7.x is older than trixie-backports').
# The newest package that linux-image-amd64 depends on in those suites is
# fetched with `apt-get download` through a private sources list, lists,
# cache and an empty dpkg status, and unpacked with `dpkg-deb -x`: nothing
# on the host is installed or reconfigured (no /boot, no initramfs hooks).
# From 7.x that package is a small meta package: the kernel and its modules
# come in its dependencies linux-binary-<kver> and linux-modules-<kver>,
# and modules.builtin, the config and System.map in linux-base-<kver>; all
# of the image package's dependencies named linux-*-<kver> are fetched
# with it and unpacked into the same root.
#
# Prints DIR, the cached package directory, in one of two layouts:
#   6.x: DIR/root/boot/vmlinuz-<kver>, modules in DIR/root/lib/modules/<kver>/
#   7.x: DIR/root/usr/lib/modules/<kver>/vmlinuz, modules beside it
# (modules.builtin in the modules' folder, .ko.xz files under kernel/).
# Progress goes to stderr.
#
# Cache (outside the checkout): ${MQBLK_CACHE:-$HOME/.cache/mqblk}/
#   apt-<series>/            private apt state; lists refreshed when older
#                            than a day (stale lists are used when offline)
#   kernel-<pkg version>/    the unpacked package(s), renamed into place
#                            only when complete
# Runs that share the cache look up and fetch one at a time (a lock file):
# on a fresh machine a second `apt-get update` failed on the lists' lock.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail

die() { echo "fetch-kernel: $*" >&2; exit 2; }
series=${1:-}
case "$series" in
  6.12) suites=("bookworm-backports main") ;;
  6.1) suites=("bookworm main" "bookworm-updates main") security=1 ;;
  7) suites=("trixie-backports main") ;;
  *) die "usage: tests/guest/fetch-kernel.sh 6.12|6.1|7" ;;
esac
cache=${MQBLK_CACHE:-$HOME/.cache/mqblk}
apt_dir=$cache/apt-$series
apt_opts=(
  -o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=/nonexistent
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::State::status=$apt_dir/status"
  -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root
)
fetch_tmp=""
trap 'rm -rf "$fetch_tmp"' EXIT

mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
exec {lock}>"$cache/.kernel.lock"
flock "$lock"

# The package name and version of the series' newest kernel.
{
  for s in "${suites[@]}"; do echo "deb http://deb.debian.org/debian $s"; done
  [ -z "${security:-}" ] || echo "deb http://deb.debian.org/debian-security bookworm-security main"
} > "$apt_dir/sources.list"
[ -e "$apt_dir/status" ] || : > "$apt_dir/status"
if [ -z "$(find "$apt_dir/lists" -maxdepth 1 -name '*_Packages*' -mmin -1440 2>/dev/null)" ]; then
  apt-get -qq "${apt_opts[@]}" update >&2 || echo "fetch-kernel: apt-get update failed; trying the lists we have" >&2
fi
pkg=$(apt-cache "${apt_opts[@]}" depends linux-image-amd64 2>/dev/null |
  sed -n "s/^ *Depends: \(linux-image-${series//./\\.}\.[^ ]*\)\$/\1/p" | head -n 1)
[ -n "$pkg" ] || die "no linux-image-$series package in ${suites[*]} (apt lists in $apt_dir)"
ver=$(apt-cache "${apt_opts[@]}" show --no-all-versions "$pkg" 2>/dev/null | sed -n 's/^Version: //p' | head -n 1)
[ -n "$ver" ] || die "no version of $pkg (apt lists in $apt_dir)"
# The packages to unpack, as name=version: the image package, and from 7.x
# the packages of the same kernel release it depends on (base, binary,
# modules).
debs=("$pkg=$ver")
kname=${pkg#linux-image-}
for part in $(apt-cache "${apt_opts[@]}" depends "$pkg" 2>/dev/null |
    sed -n "s/^ *|\{0,1\}Depends: \(linux-[a-z]*-${kname//./\\.}\)\$/\1/p" | sort -u); do
  part_ver=$(apt-cache "${apt_opts[@]}" show --no-all-versions "$part" 2>/dev/null | sed -n 's/^Version: //p' | head -n 1)
  [ -n "$part_ver" ] || die "no version of $part, a dependency of $pkg (apt lists in $apt_dir)"
  debs+=("$part=$part_ver")
done

kdir=$cache/kernel-$ver
if [ ! -d "$kdir" ]; then
  echo "fetch-kernel: fetching ${debs[*]} into $kdir" >&2
  fetch_tmp=$(mktemp -d "$cache/.kernel-$ver.XXXXXX")
  chmod 755 "$fetch_tmp"
  (cd "$fetch_tmp" && apt-get -qq "${apt_opts[@]}" download "${debs[@]}" >&2) || die "apt-get download ${debs[*]} failed"
  mkdir "$fetch_tmp/root"
  for deb in "$fetch_tmp"/*.deb; do
    dpkg-deb -x "$deb" "$fetch_tmp/root" || die "dpkg-deb -x $deb failed"
  done
  rm -f "$fetch_tmp"/*.deb
  # Renamed into place only when complete; mv -T fails if a concurrent run won.
  mv -T "$fetch_tmp" "$kdir" 2>/dev/null || rm -rf "$fetch_tmp"
  fetch_tmp=""
fi
echo "$kdir"
