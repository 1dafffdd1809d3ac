#!/usr/bin/env bash
# Two mqblk binaries side by side on the memory-backed null device
# (null:gb=1,memory_backed=1), alternating, every round in the output:
#   fill      4k randwrite QD32 over the whole empty 1 GiB (every write
#             makes a page); fill_p99 its 99th percentile completion
#             latency in microseconds (lower is better)
#   randread  4k randread QD32 for 4 s over the filled 1 GiB
#   read1m    1 MiB sequential read QD4 for 4 s over the filled 1 GiB
#   overwrite 4k randwrite QD32 for 4 s over the filled 1 GiB (each write
#             replaces a page: the retire-and-reuse path)
#   nbd1m     the 1 MiB NBD cell of the RAM-disk comparison
#             (scripts/compare-nbd.sh): `mqblk serve` of the same device
#             on a Unix socket, laid out by a 1 MiB write pass, fio's nbd
#             engine reading 1 MiB QD4 for 3 s (one client), with
#             `nbdkit memory 1G` alongside as the reference
# At the end, per job, the median and spread of each binary and of
# B / A per round.
# Usage: scripts/compare-mem-store.sh A_BINARY B_BINARY [rounds]  (default 5)
# Needs fio and nbdkit for nbd1m.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
a=$1 b=$2 rounds=${3:-5}
for t in fio nbdkit; do command -v $t >/dev/null || { echo "$t is not installed" >&2; exit 2; }; done
dir=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
dev=null:gb=1,memory_backed=1
cat > $dir/fill.fio << 'JOB'
[fill]
rw=randwrite
bs=4k
iodepth=32
size=1g
io_size=1g
JOB
# The bench has no stonewall: the read job starts once the fill is done.
for rw in "randread 4k 32" "read 1m 4" "randwrite 4k 32"; do
  set -- $rw
  cat > $dir/$1.fio << JOB
[fill]
rw=write
bs=1m
iodepth=4
size=1g
[$1]
startdelay=3
rw=$1
bs=$2
iodepth=$3
size=1g
runtime=4
time_based
JOB
done
iops() { sed -n "s/.*$1: IOPS=\([0-9.]*\)\([kM]\?\).*/\1 \2/p" | tail -1 | awk '{m = $2 == "M" ? 1e6 : $2 == "k" ? 1e3 : 1; printf "%d", $1 * m}'; }
nbd_iops() { python3 -c 'import json,sys; t=sys.stdin.read(); print("%d" % json.loads(t[t.index("{"):])["jobs"][0]["read"]["iops"])'; }
$a serve --device $dev,submit_queues=2 --unix $dir/A.sock >/dev/null 2>&1 & pids+=($!)
$b serve --device $dev,submit_queues=2 --unix $dir/B.sock >/dev/null 2>&1 & pids+=($!)
nbdkit -f -U $dir/K.sock memory 1G & pids+=($!)
sleep 1
for s in A B K; do
  fio --name=w --ioengine=nbd --uri="nbd+unix:///?socket=$dir/$s.sock" --rw=write --bs=1m --iodepth=4 --size=1g >/dev/null 2>&1
done
out=$dir/runs.txt
for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for s in $order; do
    bin=$a; [ $s = B ] && bin=$b
    $bin bench --device $dev $dir/fill.fio > $dir/fill.out
    echo "round=$round fill $s $(iops write < $dir/fill.out)"
    echo "round=$round fill_p99 $s $(sed -n 's/.*99.00th=\[ *\([0-9]*\)\].*/\1/p' $dir/fill.out | head -1 | awk '{printf "%d", $1 / 1000}')"
    echo "round=$round randread $s $($bin bench --device $dev $dir/randread.fio | iops read)"
    echo "round=$round read1m $s $($bin bench --device $dev $dir/read.fio | iops read)"
    echo "round=$round overwrite $s $($bin bench --device $dev $dir/randwrite.fio | iops write)"
  done
  for s in $order K; do
    echo "round=$round nbd1m $s $(fio --name=x --ioengine=nbd --uri="nbd+unix:///?socket=$dir/$s.sock" --rw=read --bs=1m \
      --iodepth=4 --size=1g --runtime=3 --time_based --output-format=json 2>/dev/null | nbd_iops)"
  done
done | tee "$out"
echo
echo "median (min-max) IOPS (fill_p99: microseconds) over $rounds rounds; B/A and B/nbdkit per round:"
python3 - "$out" << 'PY'
import collections, statistics, sys
v = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    rnd, job, s, n = line.split()
    v[(job, s)][int(rnd.split("=")[1])] = int(n)
def show(name, xs, fmt):
    print(f"  {name:10} " + fmt.format(statistics.median(xs), min(xs), max(xs)))
for job in ("fill", "fill_p99", "randread", "read1m", "overwrite", "nbd1m"):
    print(f"{job}:")
    for s in "ABK":
        if (job, s) in v:
            show(s, list(v[(job, s)].values()), "{:>11,.0f} ({:,}-{:,})")
    A, B, K = v[(job, "A")], v[(job, "B")], v.get((job, "K"), {})
    show("B/A", [B[r] / A[r] for r in A], "{:.2f} ({:.2f}-{:.2f})")
    if K:
        show("A/nbdkit", [A[r] / K[r] for r in A], "{:.2f} ({:.2f}-{:.2f})")
        show("B/nbdkit", [B[r] / K[r] for r in A], "{:.2f} ({:.2f}-{:.2f})")
PY
