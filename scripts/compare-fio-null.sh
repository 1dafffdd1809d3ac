#!/usr/bin/env bash
# Side by side: fio's null ioengine vs `mqblk bench` on an inline null device
# (irqmode=0), the same job options, alternating (the first of the pair
# changes every round) so machine noise hits both; then, per config, the
# median and spread (min-max) of each and of the per-round ratio.
# Usage: scripts/compare-fio-null.sh [runtime_s] [rounds]   (default 10 s, 5 rounds)
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-10}
rounds=${2:-5}
command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 2; }
cargo build --release -q -p mqblk-cli
mqblk=target/release/mqblk
iops() { python3 -c 'import json,sys; d=json.load(sys.stdin); j=d["jobs"][0]; print("%.0f" % (j["read"]["iops"]))'; }
base="--rw=randread --bs=4k --runtime=$runtime --time_based"
configs=(
  "qd128-batch32-gtod_reduce|--iodepth=128 --iodepth_batch=32 --gtod_reduce=1"
  "qd128-batch32-full-latency|--iodepth=128 --iodepth_batch=32"
  "defaults-qd1-full-latency|"
)
# shellcheck disable=SC2086 # the option lists split on purpose
run_fio() { fio --name=cmp --ioengine=null --size=1g $base $1 --output-format=json 2>/dev/null | iops; }
# shellcheck disable=SC2086
run_mqblk() { $mqblk bench --device null:gb=1,irqmode=0,hw_queue_depth=128 --name=cmp $base $1 --output-format=json | iops; }

echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty); $rounds rounds x $runtime s; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-28s %6s %14s %14s %7s\n" config round fio_null_iops mqblk_iops ratio
summary=()
for cfg in "${configs[@]}"; do
  name=${cfg%%|*}; opts=${cfg#*|}
  fs=() ms=()
  for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then
      f=$(run_fio "$opts"); m=$(run_mqblk "$opts")
    else
      m=$(run_mqblk "$opts"); f=$(run_fio "$opts")
    fi
    fs+=("$f"); ms+=("$m")
    printf "%-28s %6s %14s %14s %7.2f\n" "$name" "$r" "$f" "$m" "$(python3 -c "print($m/$f)")"
  done
  summary+=("$(python3 - "$name" "${fs[*]}" "${ms[*]}" << 'EOF'
import statistics, sys
name, f, m = sys.argv[1], [int(x) for x in sys.argv[2].split()], [int(x) for x in sys.argv[3].split()]
span = lambda v, s=1e3: f"{statistics.median(v)/s:,.0f}k ({min(v)/s:,.0f}-{max(v)/s:,.0f})"
r = [b / a for a, b in zip(f, m)]
print(f"{name:28} fio null {span(f)}  mqblk {span(m)}  mqblk/fio {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})")
EOF
)")
done
echo
echo "median (min-max) over the rounds:"
printf '%s\n' "${summary[@]}"
