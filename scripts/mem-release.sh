#!/usr/bin/env bash
# Whether the null device's memory store gives memory back: the peak
# resident size (`/usr/bin/time -v`, "Maximum resident set size") of one
# mqblk process that fills a 1 GiB memory-backed device and frees it,
# cycle after cycle. The store should hold what the data needs, so the
# peak stays near 1 GiB however many cycles run.
#
#   1. zoned: `mqblk zone script` on null:gb=1,zoned=1,zone_size=64,
#      memory_backed=1 (16 zones), each cycle 128 writes of 8 MiB (every
#      zone filled) and `reset all`; 1, 3 and CYCLES cycles.
#   2. plain: `mqblk bench` on null:gb=1,memory_backed=1,discard=1, one
#      job file of 2 x CYCLES jobs run one after the other (stonewall):
#      rw=write bs=8m over the whole 1 GiB, then rw=trim bs=8m over it,
#      and again; with --stats, whose null/ lines show the store's pages
#      and chunks at the end.
#
#   scripts/mem-release.sh [--cycles N]     default 10; prints a report
#   (docs/results/mem-store-release-*.txt are its outputs)
#   Environment: MQBLK_BIN, another mqblk binary to measure (an older
#   build, for a before and after); unset, target/release/mqblk is built.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "mem-release: $*" >&2; exit 2; }

cycles=10
while [ $# -gt 0 ]; do
  case "$1" in
    --cycles) cycles=$2; shift 2 ;;
    *) die "usage: scripts/mem-release.sh [--cycles N]" ;;
  esac
done
[ -x /usr/bin/time ] || die "needs GNU time at /usr/bin/time (apt-get install time)"
mqblk=${MQBLK_BIN:-}
if [ -z "$mqblk" ]; then
  cargo build --release -q -p mqblk-cli
  mqblk=target/release/mqblk
fi
[ -x "$mqblk" ] || die "no mqblk binary at $mqblk"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "# mem-release: peak resident size of filling and freeing a 1 GiB memory-backed null device"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(uname -r)"
if [ -n "${MQBLK_BIN:-}" ]; then
  echo "# binary: MQBLK_BIN=$mqblk"
else
  echo "# binary: $mqblk built at commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (with local changes)')"
fi
echo

# peak LABEL CMD...: runs CMD under /usr/bin/time -v (its stdout kept in
# $work/out.txt) and prints the peak resident size.
peak() {
  local label=$1 kib
  shift
  echo "\$ /usr/bin/time -v $*"
  /usr/bin/time -v "$@" > "$work/out.txt" 2> "$work/time.txt" ||
    { tail -n 30 "$work/time.txt" >&2; die "$label failed"; }
  kib=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$work/time.txt")
  awk -v l="$label" -v k="$kib" 'BEGIN { printf "%-34s peak RSS %7.1f MiB (%d KiB)\n\n", l, k / 1024, k }'
}

# ---- 1. zoned: 128 writes of 8 MiB and reset all, per cycle -----------------------
zoned_spec=null:gb=1,zoned=1,zone_size=64,memory_backed=1
# zone_script N: N cycles of every zone written with eight 8 MiB writes
# (16,384 sectors each), then `reset all`.
zone_script() {
  local n=$1 cycle z w
  for cycle in $(seq "$n"); do
    echo "# cycle $cycle"
    for z in $(seq 0 15); do
      for w in $(seq 0 7); do echo "noreport write $z $((w * 16384)) 16384"; done
    done
    echo "noreport reset all"
  done
  echo "report"
}
echo "== zoned: $zoned_spec, per cycle 128 writes of 8 MiB (16 zones of 64 MiB filled) and reset all"
for n in $(printf '%s\n' 1 3 "$cycles" | sort -nu); do
  zone_script "$n" > "$work/zone-$n.txt"
  echo "# $work/zone-$n.txt: $(grep -c '^noreport write' "$work/zone-$n.txt") writes, $(grep -c 'reset all' "$work/zone-$n.txt") resets"
  peak "zoned, $n cycle(s)" "$mqblk" zone script --device "$zoned_spec" "$work/zone-$n.txt"
  bad=$(grep -vc '"status":"ok"' "$work/out.txt" || true)
  [ "$bad" = 0 ] || die "$bad ops of the zone script failed: $(grep -v '"status":"ok"' "$work/out.txt" | head -n 2)"
done

# ---- 2. plain: write, trim, rewrite ---------------------------------------------
plain_spec=null:gb=1,memory_backed=1,discard=1
job=$work/write-trim.fio
{
  printf '[global]\nbs=8m\nsize=1g\niodepth=4\nstonewall\n'
  for i in $(seq "$cycles"); do
    printf '\n[write%d]\nrw=write\n\n[trim%d]\nrw=trim\n' "$i" "$i"
  done
} > "$job"
echo "== plain: $plain_spec, $cycles x (rw=write then rw=trim, bs=8m over the whole 1 GiB)"
echo "# $job:"
sed 's/^/#   /' "$job" | head -n 14
echo "#   ... ($((2 * cycles)) jobs)"
peak "plain, $cycles write+trim cycles" "$mqblk" bench --device "$plain_spec" --stats --output-format=terse "$job"
echo "# the device's stats at the end (--stats):"
grep '^null/' "$work/out.txt" | sed 's/^/#   /'
