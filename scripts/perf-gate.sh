#!/usr/bin/env bash
# The performance gate: instructions per I/O of `mqblk bench` on an inline
# null device for the reference jobs, counted by callgrind (exact on a
# noisy machine: no wall clock), with fio's null engine on the same job
# beside them, checked against the counts recorded in BENCHMARKS.md
# ("perf-gate JOB COUNT" lines). Fails when a job costs more than 2% over
# its record; says so when one is more than 2% under (then record the new
# count). The same for the C library: 4 KiB reads at QD1
# through libblkio's API (crates/mqblk-blkio/bench/qd1.c) against the same
# loop on a Rust `Client` (examples/qd1_native.rs), which must cost at most
# 10% more; and a blkioq_readv of eight scattered 4 KiB iovecs (one bio of
# eight segments) against its record, printed beside a blkioq_read of one
# 32 KiB buffer, the same bytes. The test command (scripts/test-all.sh)
# runs it.
#
#   scripts/perf-gate.sh [--record]     --record prints the lines to paste
#
# Each count is the whole process (the bench loop included), from a run of
# SHORT and one of LONG I/Os: (long - short) / (LONG - SHORT), so start-up
# and shutdown cancel. Environment: PERF_GATE_SHORT (100000),
# PERF_GATE_LONG (500000), PERF_GATE_TOLERANCE_PCT (2).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "perf-gate: $*" >&2; exit 2; }

record=0
case "${1:-}" in
  --record) record=1 ;;
  "") ;;
  *) die "usage: scripts/perf-gate.sh [--record]" ;;
esac
short=${PERF_GATE_SHORT:-100000} long=${PERF_GATE_LONG:-500000}
tolerance=${PERF_GATE_TOLERANCE_PCT:-2}
[ "$long" -gt "$short" ] || die "PERF_GATE_LONG must exceed PERF_GATE_SHORT"
command -v valgrind > /dev/null || die "needs valgrind (apt-get install valgrind)"
command -v cc > /dev/null || die "needs a C compiler (apt-get install gcc)"
command -v fio > /dev/null || die "needs fio (apt-get install fio)"
cargo build --release -q -p mqblk-cli
cargo build --release -q -p mqblk-blkio --lib --example qd1_native
mqblk=target/release/mqblk
device=null:gb=1,irqmode=0,hw_queue_depth=128
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The reference jobs: the batched job, the same with full latency
# accounting, and QD1.
jobs=(qd128-batch32-gtod_reduce qd128-batch32-full-latency qd1-full-latency)
declare -A opts=(
  [qd128-batch32-gtod_reduce]="--iodepth=128 --iodepth_batch=32 --gtod_reduce=1"
  [qd128-batch32-full-latency]="--iodepth=128 --iodepth_batch=32"
  [qd1-full-latency]="--iodepth=1"
)
# Both programs draw offsets without fio's random map (norandommap): the
# gate watches the I/O path, and the map is the job's choice of offsets
# (bench's costs about 50 instructions per I/O: BENCHMARKS.md).
base=(--name=gate --rw=randread --bs=4k --norandommap)

# A 1 GiB region holds 262,144 4k blocks: without io_size both programs stop
# there, whatever number_ios says (the records before this check divided
# 162,144 I/Os' instructions by 400,000). io_size lets them loop over the
# region; number_ios ends the run, and ir checks that it did.
base+=(--size=1g --io_size=1t --output-format=json)

# ir N CMD...: the instructions of every thread of CMD (callgrind's total),
# after checking that CMD did exactly N I/Os.
ir() {
  local n=$1 done_ios
  shift
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$@" > "$work/run.log" 2> "$work/run.err" ||
    { cat "$work/run.err" "$work/run.log" >&2; die "failed under callgrind: $*"; }
  done_ios=$(grep -o '"total_ios" *: *[0-9]*' "$work/run.log" | head -n 1 | grep -o '[0-9]*$')
  [ "$done_ios" = "$n" ] || die "$1 did ${done_ios:-no} I/Os, not $n: the count per I/O would be wrong"
  awk '/^(summary|totals):/ { print $2; exit }' "$work/cg.out"
}

# per_io KIND JOB: instructions per I/O of mqblk bench or fio's null engine.
per_io() {
  local kind=$1 job=$2 a b
  for n in "$short" "$long"; do
    # shellcheck disable=SC2086 # the job's options split on purpose
    case $kind in
      mqblk) v=$(ir "$n" "$mqblk" bench --device "$device" "${base[@]}" ${opts[$job]} --number_ios="$n") ;;
      fio) v=$(ir "$n" fio --thread --ioengine=null "${base[@]}" ${opts[$job]} --number_ios="$n") ;;
    esac
    if [ "$n" = "$short" ]; then a=$v; else b=$v; fi
  done
  awk -v a="$a" -v b="$b" -v n=$((long - short)) 'BEGIN { printf "%.1f\n", (b - a) / n }'
}

# check JOB COUNT: the verdict against JOB's record (status 1 if it regressed
# or has none).
check() {
  local rec verdict="no record"
  rec=$(awk -v j="$1" '$1 == "perf-gate" && $2 == j { print $3 }' BENCHMARKS.md | tail -1)
  if [ -n "$rec" ]; then
    verdict=$(awk -v m="$2" -v r="$rec" -v t="$tolerance" 'BEGIN {
      d = (m - r) / r * 100
      if (d > t) printf "REGRESSED %+.1f%%", d
      else if (d < -t) printf "improved %+.1f%%: record it", d
      else printf "ok %+.1f%%", d }')
  fi
  echo "${rec:--}|$verdict"
}

echo "perf-gate: $(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty), device $device, ($long - $short) I/Os, tolerance ${tolerance}%"
printf '%-28s %10s %10s %10s %8s  %s\n' job mqblk recorded "fio null" "fio/mq" verdict
status=0
lines=()
for job in "${jobs[@]}"; do
  m=$(per_io mqblk "$job")
  f=$(per_io fio "$job")
  IFS='|' read -r rec verdict <<< "$(check "$job" "$m")"
  case $verdict in REGRESSED* | "no record") status=1 ;; esac
  printf '%-28s %10s %10s %10s %8s  %s\n' "$job" "$m" "$rec" "$f" "$(awk -v f="$f" -v m="$m" 'BEGIN { printf "%.2f", f / m }')" "$verdict"
  lines+=("perf-gate $job $m")
done

# The C layer: (60,000 - 20,000) reads at QD1 of each program (both check
# every completion and exit non-zero on a failure, which fails the gate).
# qd1_per_io CMD...: instructions per I/O, @N@ in CMD standing for the count.
qd1_per_io() {
  local n a b
  for n in 20000 60000; do
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "${@//@N@/$n}" > /dev/null 2> "$work/run.err" ||
      { cat "$work/run.err" >&2; die "failed under callgrind: ${*//@N@/$n}"; }
    if [ "$n" = 20000 ]; then a=$(awk '/^(summary|totals):/ { print $2; exit }' "$work/cg.out");
    else b=$(awk '/^(summary|totals):/ { print $2; exit }' "$work/cg.out"); fi
  done
  awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f\n", (b - a) / 40000 }'
}
cc -O2 crates/mqblk-blkio/bench/qd1.c -o "$work/qd1" -I"$PWD/crates/mqblk-blkio/include" \
  -L"$PWD/target/release" -lblkio -Wl,-rpath,"$PWD/target/release"
rust=$(qd1_per_io target/release/examples/qd1_native null:gb=1,irqmode=0 @N@)
capi=$(qd1_per_io "$work/qd1" null:gb=1,irqmode=0 @N@ buf)
for row in "c-api-qd1 $capi" "rust-client-qd1 $rust"; do
  read -r job m <<< "$row"
  IFS='|' read -r rec verdict <<< "$(check "$job" "$m")"
  case $verdict in REGRESSED* | "no record") status=1 ;; esac
  printf '%-28s %10s %10s %10s %8s  %s\n' "$job" "$m" "$rec" - - "$verdict"
  lines+=("perf-gate $job $m")
done
ratio=$(awk -v c="$capi" -v r="$rust" 'BEGIN { printf "%.3f", c / r }')
if awk -v x="$ratio" 'BEGIN { exit !(x <= 1.10) }'; then
  echo "C layer: $capi / $rust = $ratio of the Rust client's instructions (bound 1.10): ok"
else
  echo "C layer: $capi / $rust = $ratio of the Rust client's instructions: OVER the 1.10 bound" >&2
  status=1
fi
# Vectored reads: qd1.c's readv8 (blkioq_readv, eight scattered 4 KiB
# iovecs: one bio over the caller's iovec array) against read32k
# (blkioq_read of 32 KiB: the same bytes in one buffer), (60,000 - 20,000)
# reads each. readv8 is checked against its record like the jobs above;
# the ratio is printed beside it (BENCHMARKS.md, "The C library", says
# where the rest of its instructions go).
readv8=$(qd1_per_io "$work/qd1" null:gb=1,irqmode=0 @N@ readv8)
read32k=$(qd1_per_io "$work/qd1" null:gb=1,irqmode=0 @N@ read32k)
IFS='|' read -r rec verdict <<< "$(check c-api-readv8 "$readv8")"
case $verdict in REGRESSED* | "no record") status=1 ;; esac
printf '%-28s %10s %10s %10s %8s  %s\n' c-api-readv8 "$readv8" "$rec" - - "$verdict"
lines+=("perf-gate c-api-readv8 $readv8")
vratio=$(awk -v v="$readv8" -v r="$read32k" 'BEGIN { printf "%.3f", v / r }')
echo "Vectored reads: readv8 $readv8 / read32k $read32k = $vratio of one buffer's instructions"
if [ "$record" = 1 ]; then
  echo "lines for BENCHMARKS.md:"
  printf '%s\n' "${lines[@]}"
  exit 0
fi
[ "$status" = 0 ] || echo "perf-gate: FAILED (a job regressed by more than ${tolerance}%, has no record in BENCHMARKS.md, or the C layer is over its bound)" >&2
exit "$status"
