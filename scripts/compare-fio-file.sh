#!/usr/bin/env bash
# Side by side: fio's io_uring engine vs `mqblk bench --filename` (the file:
# driver, reap=client) on a 1 GiB tmpfs file and a loop device over it
# (losetup --direct-io=on), direct=1, alternating runs so that machine noise
# hits both. Needs root (losetup) and fio. Prints one line per cell:
#   cells:  4k randread QD1 and QD32, 128k read QD8; unpinned and with
#           cpus_allowed=1 for both programs; IOPS and p99 (us)
#   qd1:    the loop-device QD1 cell alone, N 2 s rounds, medians
#   merge:  4k sequential reads in batches of 16 at iodepth 16/32/64, with
#           mqblk's device line: requests (ios), merges and bios
# Usage: scripts/compare-fio-file.sh [rounds] [qd1_rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
qd1_rounds=${2:-10}
command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 2; }
cargo build --release -q -p mqblk-cli
mqblk=target/release/mqblk
file=/dev/shm/mqblk-compare
[ -e $file ] || fio --name=lay --filename=$file --size=1g --rw=write --bs=1m >/dev/null
loop=$(losetup --direct-io=on -f --show $file)
trap 'losetup -d $loop; rm -f $file' EXIT
read_json() { python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print("%.0f %.1f" % (j["iops"], j["clat_ns"]["percentile"]["99.000000"]/1000))'; }
cell() { # target rw bs qd extra runtime -> "fio_iops fio_p99 mqblk_iops mqblk_p99"
  local a="--name=x --filename=$1 --direct=1 --rw=$2 --bs=$3 --iodepth=$4 --runtime=$6 --time_based $5 --output-format=json"
  echo "$(fio $a --ioengine=io_uring 2>/dev/null | read_json) $($mqblk bench $a 2>/dev/null | read_json)"
}
for round in $(seq 1 "$rounds"); do
  for pin in "" "--cpus_allowed=1"; do
    for tgt in $file $loop; do
      for c in "randread 4k 1" "randread 4k 32" "read 128k 8"; do
        set -- $c
        echo "cells round=$round pin=${pin:-none} $tgt $c | fio/mqblk: $(cell $tgt $1 $2 $3 "$pin" 3)"
      done
    done
  done
done
for pin in "" "--cpus_allowed=1"; do
  rows=""
  for r in $(seq 1 "$qd1_rounds"); do rows+="$(cell $loop randread 4k 1 "$pin" 2);"; done
  python3 - "${pin:-none}" "$rows" <<'PY'
import statistics as st, sys
rows = [list(map(float, r.split())) for r in sys.argv[2].split(";") if r.strip()]
ratio = sorted(r[2] / r[0] for r in rows)
print("qd1 pin=%s rounds=%d fio median %.0f IOPS p99 %.1f us | mqblk median %.0f IOPS p99 %.1f us | ratio median %.2f (%.2f-%.2f)" % (
    sys.argv[1], len(rows), st.median(r[0] for r in rows), st.median(r[1] for r in rows),
    st.median(r[2] for r in rows), st.median(r[3] for r in rows), st.median(ratio), ratio[0], ratio[-1]))
PY
done
for round in 1 2; do
  for tgt in $file $loop; do
    for qd in 16 32 64; do
      a="--name=x --filename=$tgt --direct=1 --rw=read --bs=4k --iodepth=$qd --iodepth_batch=16 --iodepth_batch_complete_min=16 --runtime=3 --time_based"
      f=$(fio $a --ioengine=io_uring 2>&1 | grep -o "IOPS=[^,]*")
      m=$($mqblk bench $a 2>&1 | grep -oE "IOPS=[^,]*|[a-z]+: ios=[0-9]+|merge=[0-9]+|bios=[0-9]+" | tr '\n' ' ')
      echo "merge round=$round $tgt QD=$qd | fio $f | mqblk $m"
    done
  done
done
