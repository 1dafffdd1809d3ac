#!/usr/bin/env bash
# Side-by-side: fio's null ioengine vs `mqblk bench` on an inline null device
# (irqmode=0), same job options, alternating runs so machine noise hits both.
# Usage: scripts/compare-fio-null.sh [runtime_s] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-10}
rounds=${2:-2}
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
printf "%-28s %6s %14s %14s %7s\n" config round fio_null_iops mqblk_iops ratio
for cfg in "${configs[@]}"; do
  name=${cfg%%|*}; opts=${cfg#*|}
  for r in $(seq 1 "$rounds"); do
    f=$(fio --name=cmp --ioengine=null --size=1g $base $opts --output-format=json 2>/dev/null | iops)
    m=$($mqblk bench --device null:gb=1,irqmode=0,hw_queue_depth=128 --name=cmp $base $opts --output-format=json | iops)
    printf "%-28s %6s %14s %14s %7.2f\n" "$name" "$r" "$f" "$m" "$(python3 -c "print($m/$f)")"
  done
done
