#!/usr/bin/env bash
# One stock fio (scripts/fio-libblkio.sh), two engines that do no I/O of
# their own: fio's `ioengine=null` and fio's libblkio engine on our
# libblkio.so.1 with an mqblk null device completing inline
# (`null:gb=1,irqmode=0`). What is left is each path's cost per I/O:
# fio's engine calls plus, for libblkio, the C layer and mqblk's block layer.
#
# Two jobs, both 4k randread, --thread (one process, so callgrind sees it
# all): QD1, and QD128 with batches of 32 and gtod_reduce (the performance
# gate's batched job, scripts/perf-gate.sh).
#   - Instructions per I/O: callgrind with --separate-threads, the job
#     thread's count (the thread with the most instructions), from a run of
#     SHORT and one of LONG I/Os: (long - short) / (LONG - SHORT), so
#     start-up cancels.
#   - IOPS: ROUNDS rounds of RUNTIME s per engine, engines alternating, the
#     first one rotating every round; median (min-max).
#
#   scripts/compare-blkio-null.sh [--rounds N] [--runtime S] [--libdir DIR]
#     defaults: 3 rounds, 5 s, DIR target/release (built when missing)
#   Environment: BLKIO_NULL_SHORT (100000), BLKIO_NULL_LONG (300000).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "compare-blkio-null: $*" >&2; exit 2; }

rounds=3 runtime=5 libdir=target/release
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    --libdir) libdir=$2; shift 2 ;;
    -h | --help) sed -n '2,/^# SPDX/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
{ [[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -ge 1 ]; } || die "--rounds wants a count"
[[ $runtime =~ ^[0-9]+$ ]] || die "--runtime wants seconds"
short=${BLKIO_NULL_SHORT:-100000} long=${BLKIO_NULL_LONG:-300000}
[ "$long" -gt "$short" ] || die "BLKIO_NULL_LONG must exceed BLKIO_NULL_SHORT"
command -v valgrind > /dev/null || die "needs valgrind (apt-get install valgrind)"
if [ "$libdir" = target/release ] && [ ! -e target/release/libblkio.so.1 ]; then
  cargo build --release -q -p mqblk-blkio
fi
libdir=$(realpath "$libdir")
[ -e "$libdir/libblkio.so.1" ] || die "no libblkio.so.1 in $libdir"
fio=$(scripts/fio-libblkio.sh "$libdir/pkgconfig") || die "no fio with the libblkio engine"
export LD_LIBRARY_PATH=$libdir
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# io_size lets a run loop over the 1 GiB region (262,144 blocks): without it
# fio stops there whatever number_ios says (figures before this check were
# 1.23x low: 162,144 I/Os counted as 200,000).
common=(--thread --name=x --rw=randread --bs=4k --size=1g --io_size=1t --norandommap --randrepeat=0)
declare -A engine=(
  [null]="--ioengine=null"
  [libblkio]="--ioengine=libblkio --libblkio_driver=mqblk --libblkio_path=null:gb=1,irqmode=0,hw_queue_depth=128"
)
declare -A job=(
  [qd1]="--iodepth=1"
  [qd128]="--iodepth=128 --iodepth_batch_submit=32 --iodepth_batch_complete_min=1 --iodepth_batch_complete_max=32 --gtod_reduce=1"
)

# job_thread_ir ENGINE JOB N: the job thread's instructions for N I/Os.
job_thread_ir() {
  rm -f "$work"/cg.*
  # shellcheck disable=SC2086 # the option lists split on purpose
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.%p" \
    "$fio" "${common[@]}" ${engine[$1]} ${job[$2]} --number_ios="$3" --output-format=json > "$work/out" 2> "$work/err" ||
    { cat "$work/err" "$work/out" >&2; die "fio under callgrind failed ($1 $2)"; }
  local done_ios
  done_ios=$(grep -o '"total_ios" *: *[0-9]*' "$work/out" | head -n 1 | grep -o '[0-9]*$')
  [ "$done_ios" = "$3" ] || die "fio ($1 $2) did ${done_ios:-no} I/Os, not $3"
  awk '/^(summary|totals):/ { if ($2 > m) m = $2 } END { printf "%.0f\n", m }' "$work"/cg.*
}

# iops ENGINE JOB: one timed run.
iops() {
  # shellcheck disable=SC2086
  "$fio" "${common[@]}" ${engine[$1]} ${job[$2]} --time_based --runtime="$runtime" --ramp_time=1 \
    --output-format=json 2> /dev/null | python3 -c 'import json, sys; print(int(json.load(sys.stdin)["jobs"][0]["read"]["iops"]))'
}

echo "fio: $fio ($("$fio" --version)); libblkio.so.1 from $libdir; commit $(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty)"
echo "common: ${common[*]}"
for j in qd1 qd128; do echo "job $j: ${job[$j]}"; done
for e in null libblkio; do echo "engine $e: ${engine[$e]}"; done
echo
echo "instructions per I/O (callgrind, job thread, ($long - $short I/Os)):"
declare -A per=()
for j in qd1 qd128; do
  for e in null libblkio; do
    a=$(job_thread_ir "$e" "$j" "$short")
    b=$(job_thread_ir "$e" "$j" "$long")
    per[$e.$j]=$(awk -v a="$a" -v b="$b" -v n=$((long - short)) 'BEGIN { printf "%.1f", (b - a) / n }')
    printf '  %-6s %-9s %8s   (%s after %d, %s after %d)\n' "$j" "$e" "${per[$e.$j]}" "$a" "$short" "$b" "$long"
  done
  awk -v n="${per[null.$j]}" -v l="${per[libblkio.$j]}" -v j="$j" 'BEGIN { printf "  %-6s libblkio/null %.2f\n", j, l / n }'
done
echo
echo "IOPS, $rounds rounds x $runtime s, engines alternating (median (min-max)):"
for j in qd1 qd128; do
  declare -a rn=() rl=()
  for r in $(seq "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then order="null libblkio"; else order="libblkio null"; fi
    for e in $order; do
      v=$(iops "$e" "$j")
      if [ "$e" = null ]; then rn+=("$v"); else rl+=("$v"); fi
    done
  done
  python3 - "$j" "${rn[*]}" "${rl[*]}" << 'EOF'
import statistics, sys
job, n, l = sys.argv[1], [int(x) for x in sys.argv[2].split()], [int(x) for x in sys.argv[3].split()]
fmt = lambda v: f"{statistics.median(v)/1e3:,.0f}k ({min(v)/1e3:,.0f}-{max(v)/1e3:,.0f})"
ratios = [b / a for a, b in zip(n, l)]
print(f"  {job:6} null {fmt(n)}   libblkio {fmt(l)}   libblkio/null per round {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
EOF
done
