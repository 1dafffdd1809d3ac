#!/usr/bin/env bash
# The reference libblkio: Debian's libblkio1 and libblkio-dev (upstream
# libblkio, with its io_uring, nvme-io_uring and virtio-blk drivers), fetched
# and unpacked into a cache, never installed. Prints the directory holding
# libblkio.so.1; blkio.pc, relocated to the cache, is in its pkgconfig/
# subdirectory (the same layout as target/release/ for crates/mqblk-blkio):
#
#   libdir=$(scripts/libblkio-reference.sh)
#   PKG_CONFIG_PATH=$libdir/pkgconfig LD_LIBRARY_PATH=$libdir ...
#
# The packages come from the newest of trixie and bookworm-backports that
# serves them (libblkio 1.5 runs on bookworm's glibc), through a private
# sources list, lists, cache and an empty dpkg status: `apt-get download`,
# then `dpkg-deb -x`. Nothing on the host is installed or reconfigured.
#
# Cache (outside the checkout): ${MQBLK_CACHE:-$HOME/.cache/mqblk}/
#   apt-blkio/                 private apt state, shared with
#                              scripts/fio-libblkio.sh; lists refreshed when
#                              older than a day
#   libblkio-<pkg version>/    the unpacked packages, renamed into place only
#                              when complete
# MQBLK_LIBBLKIO_VERSION=<pkg version> pins a version already cached (no apt).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "libblkio-reference: $*" >&2; exit 2; }
cache=${MQBLK_CACHE:-$HOME/.cache/mqblk}
# shellcheck source=scripts/debian-apt.sh
. scripts/debian-apt.sh
fetch_tmp=""
trap 'rm -rf "$fetch_tmp"' EXIT

if [ -n "${MQBLK_LIBBLKIO_VERSION:-}" ]; then
  dir=$cache/libblkio-$MQBLK_LIBBLKIO_VERSION
  [ -d "$dir" ] || die "MQBLK_LIBBLKIO_VERSION=$MQBLK_LIBBLKIO_VERSION is not cached in $cache"
else
  debian_apt_update || die "apt-get update of the private lists failed (see above)"
  ver=$(apt-cache "${apt_opts[@]}" show libblkio1 2>/dev/null | sed -n 's/^Version: //p' |
    sort_debian_versions | head -n 1)
  [ -n "$ver" ] || die "no libblkio1 package served by $(debian_apt_suites)"
  dir=$cache/libblkio-$ver
  if [ ! -d "$dir" ]; then
    echo "libblkio-reference: fetching libblkio1 and libblkio-dev $ver into $dir" >&2
    fetch_tmp=$(mktemp -d "$cache/.libblkio-$ver.XXXXXX")
    chmod 755 "$fetch_tmp"
    (cd "$fetch_tmp" && apt-get -qq "${apt_opts[@]}" download "libblkio1=$ver" "libblkio-dev=$ver" >&2) ||
      die "apt-get download libblkio1=$ver libblkio-dev=$ver failed"
    mkdir "$fetch_tmp/root"
    for deb in "$fetch_tmp"/*.deb; do dpkg-deb -x "$deb" "$fetch_tmp/root" || die "dpkg-deb -x $deb failed"; done
    rm -f "$fetch_tmp"/*.deb
    # The package's blkio.pc says prefix=/usr; the copy points at the cache.
    # Libs gets -L${libdir}: the library is not in a system path.
    pc=$(find "$fetch_tmp/root" -name blkio.pc | head -n 1)
    [ -n "$pc" ] || die "no blkio.pc in libblkio-dev $ver"
    final_root=$dir/root
    # shellcheck disable=SC2016 # ${libdir} is pkg-config's, not ours
    sed -i -e "s|^prefix=.*|prefix=$final_root/usr|" \
      -e 's|^Libs:.*-lblkio.*|Libs: -L${libdir} -lblkio|' "$pc"
    mv -T "$fetch_tmp" "$dir" 2>/dev/null || rm -rf "$fetch_tmp"
    fetch_tmp=""
  fi
fi

so=$(find "$dir/root" -name libblkio.so.1 | head -n 1)
[ -n "$so" ] || die "no libblkio.so.1 in $dir"
libdir=$(dirname "$so")
[ -f "$libdir/pkgconfig/blkio.pc" ] || die "no blkio.pc in $libdir/pkgconfig"
echo "$libdir"
