#!/usr/bin/env bash
# Connections that leave nothing behind: runs `mqblk serve` (NBD) and
# `mqblk vhost add` (vhost-user-blk) for MINUTES, each on a memory-backed
# null device, and drives both with clients we did not write that connect,
# do verified I/O and disconnect, over and over:
#   - fio's nbd engine (libnbd) on the NBD server's Unix socket;
#   - fio's libblkio engine with libblkio's virtio-blk-vhost-user driver
#     (Debian's libblkio, scripts/libblkio-reference.sh) on the vhost one:
#     its own guest memory (memfds) and virtqueues, set up and torn down by
#     every run.
# Each client run writes its 16 MiB region with verify=crc32c and reads
# every block back (fio fails the run on a mismatch); the clients take
# four regions in turn, so the devices' data stops growing once every
# region has been written (the first samples wait for that).
#
# Every SAMPLE seconds (60, or 10 for runs of under 5 minutes), between
# client runs (no client connected), it prints each server's resident
# memory (VmRSS), open fds and threads, and the client runs and bytes
# verified so far. At the end it checks that everything is flat after the
# first sample: fds and threads equal to the first sample's, resident
# memory at most SOAK_RSS_SLACK_KB (4096) above it. Exits 1 if a client
# run failed, a server died, or something grew; 2 if it cannot run.
#
#   scripts/soak.sh [MINUTES]     (default 1)
#
# fio with the libblkio engine comes from scripts/fio-libblkio.sh (built
# once and cached outside the checkout); Debian's fio (the nbd engine) and
# libblkio from apt/the cache.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "soak: $*" >&2; exit 2; }

minutes=${1:-1}
[[ "$minutes" =~ ^[1-9][0-9]*$ ]] || die "usage: scripts/soak.sh [MINUTES]"
sample_s=60
[ "$minutes" -ge 5 ] || sample_s=10
slack_kb=${SOAK_RSS_SLACK_KB:-4096}
command -v fio > /dev/null || die "needs Debian's fio (apt-get install fio)"
fio --enghelp=nbd > /dev/null 2>&1 || die "Debian's fio has no nbd engine"
cargo build --release -q -p mqblk-cli || die "build failed"
mqblk=$(realpath target/release/mqblk)
libdir=$(scripts/libblkio-reference.sh) || die "could not fetch Debian's libblkio"
blkio_fio=$(scripts/fio-libblkio.sh "$libdir/pkgconfig") || die "no fio with the libblkio engine"

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$mqblk" serve --device null:gb=1,memory_backed=1 --unix "$work/nbd.sock" > "$work/serve.log" 2>&1 &
pids+=($!)
nbd_pid=$!
"$mqblk" vhost add --device null:gb=1,memory_backed=1 --queues 2 --socket "$work/vhost.sock" > "$work/vhost.log" 2>&1 &
pids+=($!)
vhost_pid=$!
for _ in $(seq 100); do
  [ -S "$work/nbd.sock" ] && [ -S "$work/vhost.sock" ] && break
  sleep 0.1
done
[ -S "$work/nbd.sock" ] && [ -S "$work/vhost.sock" ] || die "the servers did not start: $(cat "$work"/*.log)"

regions=4
region_mb=16
job=(--rw=randwrite --bs=4k --iodepth=16 --size=${region_mb}m --verify=crc32c --do_verify=1
  --verify_fatal=1 --norandommap=0 --output-format=terse --terse-version=3)

# One client run of NAME on REGION, the fio command line after them: fails
# with fio's output's tail when fio does (a verify mismatch among them).
client() {
  local name=$1 region=$2
  shift 2
  local out=$work/$name.out
  if ! timeout 120 "$@" --name="$name" "${job[@]}" --offset=$((region * region_mb))m > "$out" 2>&1; then
    echo "soak: $name run on region $region failed:" >&2
    tail -20 "$out" >&2
    return 1
  fi
}

status() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l; }

runs=0
verified_mb=0
declare -A first=()
samples=0
grew=0
printf '%6s %-6s %10s %5s %8s %6s %12s\n' "t(s)" server "rss(KiB)" fds threads runs "verified MiB"
sample() {
  local t=$1 name pid rss f th
  for name in nbd vhost; do
    pid=$nbd_pid
    [ $name = vhost ] && pid=$vhost_pid
    kill -0 "$pid" 2> /dev/null || { echo "soak: the $name server died: $(tail -5 "$work/$name.log" "$work/serve.log" 2> /dev/null)" >&2; exit 1; }
    rss=$(status "$pid" VmRSS)
    f=$(fds "$pid")
    th=$(status "$pid" Threads)
    printf '%6d %-6s %10d %5d %8d %6d %12d\n' "$t" $name "$rss" "$f" "$th" $runs $verified_mb
    if [ -z "${first[$name]:-}" ]; then
      first[$name]="$rss $f $th"
    else
      read -r rss0 f0 th0 <<< "${first[$name]}"
      if [ "$f" != "$f0" ] || [ "$th" != "$th0" ] || [ $((rss - rss0)) -gt "$slack_kb" ]; then
        echo "soak: the $name server grew since t=$sample_s s: rss $rss0 -> $rss KiB, fds $f0 -> $f, threads $th0 -> $th" >&2
        grew=1
      fi
    fi
  done
  samples=$((samples + 1))
}

start=$SECONDS
next=$sample_s
end=$((minutes * 60))
region=0
while [ $((SECONDS - start)) -lt $end ]; do
  client nbd $region fio --ioengine=nbd --uri="nbd+unix:///?socket=$work/nbd.sock" || exit 1
  client vhost $region env LD_LIBRARY_PATH="$libdir" "$blkio_fio" --ioengine=libblkio \
    --libblkio_driver=virtio-blk-vhost-user --libblkio_path="$work/vhost.sock" --direct=1 || exit 1
  runs=$((runs + 2))
  verified_mb=$((verified_mb + 2 * region_mb))
  region=$(((region + 1) % regions))
  if [ $((SECONDS - start)) -ge $next ] && [ $runs -ge $((2 * regions)) ]; then
    sample $((SECONDS - start))
    next=$((next + sample_s))
  fi
done
[ $samples -ge 2 ] || sample $((SECONDS - start))
[ $samples -ge 2 ] || die "too short to compare two samples"
[ $grew = 0 ] || exit 1
echo "soak: flat after the first sample: $runs client runs, $verified_mb MiB written and verified, in $((SECONDS - start)) s"
