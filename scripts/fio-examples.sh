#!/usr/bin/env bash
# Prints the path of fio's own examples/ directory (the job files fio
# ships), unmodified from Debian's upstream tarball of fio, fetched with
#   apt-get source --download-only --tar-only fio=<version>
# through the private apt state of scripts/debian-apt.sh (sid and trixie
# sources; the host's apt configuration is not touched). The newest served
# version is taken, or MQBLK_FIO_VERSION=<upstream version> (e.g. 3.41).
# Cached in ${MQBLK_CACHE:-~/.cache/mqblk}/fio-<version>-examples/ with
# source.txt saying which tarball it came from; a cached copy is used
# without the network.
#
# crates/mqblk-cli/tests/fio_examples.rs runs every job file there that
# targets a block engine through `mqblk bench`.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${MQBLK_CACHE:-$HOME/.cache/mqblk}
die() { echo "fio-examples: $*" >&2; exit 2; }

cached() {
  local d
  for d in $(find "$cache" -maxdepth 1 -name "fio-${MQBLK_FIO_VERSION:-*}-examples" 2>/dev/null | sort -rV); do
    if [ -f "$d/source.txt" ] && [ -d "$d/examples" ]; then
      echo "$d/examples"
      return 0
    fi
  done
  return 1
}
cached && exit 0
# One fetch at a time (tests run in parallel): the others wait, then find
# the cached copy.
mkdir -p "$cache"
exec 9>"$cache/.fio-examples.lock"
flock 9
cached && exit 0

# shellcheck source=scripts/debian-apt.sh
. scripts/debian-apt.sh
work=$(mktemp -d "$cache/.fio-examples.XXXXXX")
trap 'rm -rf "$work"' EXIT
debian_apt_update || die "apt-get update of the private lists failed (see above)"
versions=$(apt-cache "${apt_opts[@]}" showsrc fio 2>/dev/null | sed -n 's/^Version: //p' | sort_debian_versions)
[ -n "$versions" ] || die "no fio source package in $(debian_apt_suites)"
tried=()
for v in $versions; do
  upstream=${v#*:}
  upstream=${upstream%-*}
  if [ -n "${MQBLK_FIO_VERSION:-}" ] && [ "$upstream" != "$MQBLK_FIO_VERSION" ]; then
    tried+=("$v: not MQBLK_FIO_VERSION=$MQBLK_FIO_VERSION")
    continue
  fi
  rm -rf "$work/src" && mkdir "$work/src"
  if ! (cd "$work/src" && apt-get -qq "${apt_opts[@]}" source --download-only --tar-only "fio=$v" >"$work/apt.log" 2>&1); then
    tried+=("$v: $(tail -n 1 "$work/apt.log")")
    continue
  fi
  tarball=$(find "$work/src" -maxdepth 1 -name 'fio_*.orig.tar.*' | head -n 1)
  [ -n "$tarball" ] || { tried+=("$v: no orig tarball"); continue; }
  tar -xf "$tarball" -C "$work/src" --wildcards '*/examples/*'
  examples=$(find "$work/src" -mindepth 2 -maxdepth 2 -type d -name examples | head -n 1)
  [ -n "$examples" ] || { tried+=("$v: no examples/ in $(basename "$tarball")"); continue; }
  dest=$cache/fio-$upstream-examples
  rm -rf "$dest" && mkdir -p "$dest"
  mv "$examples" "$dest/examples"
  echo "fio $upstream examples/ from $(basename "$tarball") (Debian fio=$v)" > "$dest/source.txt"
  echo "fio-examples: $(cat "$dest/source.txt")" >&2
  echo "$dest/examples"
  exit 0
done
printf 'fio-examples: no fio source in %s; tried:\n' "$(debian_apt_suites)" >&2
printf '  %s\n' "${tried[@]:-none}" >&2
exit 2
