#!/usr/bin/env bash
# Zero-copy read replies (mqblk-nbd's splice.rs) against copied ones, side by
# side: two `mqblk serve --device null:gb=1,memory_backed=1,submit_queues=2`
# on Unix sockets, one of them with --no-splice, both laid out by a 1 MiB
# write pass, driven by fio's nbd engine. Per round, for each server in
# rotating order:
#   read 1m QD4, one client and two (numjobs=2): the cells zero copy is for
#   randread 4k QD32: reads under 64 KiB are not lent (a check)
#   lent-randwrite 4k QD32: right after a 1 MiB read pass over the whole
#     device (which lends every page to the socket), so nearly every write
#     replaces a lent page, whose frame the store hands back to the kernel
#     before reusing the address (mem/lent.rs): what lending costs writes
#   lent-write 1m QD4: the same with sequential 1 MiB overwrites
# At the end, per cell, the median (min-max) IOPS of each server and the
# median (min-max) of splice / no-splice per round.
# Needs fio. Usage: scripts/compare-nbd-splice.sh [rounds] [seconds]  (5, 3)
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5} secs=${2:-3}
command -v fio >/dev/null || { echo "fio is not installed" >&2; exit 2; }
cargo build --release -q -p mqblk-cli
mqblk=target/release/mqblk
dir=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
spec=null:gb=1,memory_backed=1,submit_queues=2
$mqblk serve --device $spec --unix $dir/splice.sock >/dev/null 2>&1 & pids+=($!)
$mqblk serve --device $spec --unix $dir/copy.sock --no-splice >/dev/null 2>&1 & pids+=($!)
sleep 1
uri() { echo "nbd+unix:///?socket=$dir/$1.sock"; }
for s in splice copy; do
  fio --name=w --ioengine=nbd --uri="$(uri $s)" --rw=write --bs=1m --iodepth=4 --size=1g >/dev/null 2>&1
done
summary() { python3 -c 'import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):])["jobs"][0]; d=j["read"] if j["read"]["iops"] > 0 else j["write"]; print("%.0f IOPS p99=%.0fus fio_cpu=%.0f%%" % (d["iops"], d["clat_ns"]["percentile"]["99.000000"]/1000, j["usr_cpu"]+j["sys_cpu"]))'; }
run() { # server rw bs qd numjobs
  fio --name=x --ioengine=nbd --uri="$(uri $1)" --rw=$2 --bs=$3 --iodepth=$4 --numjobs=$5 --group_reporting \
    --size=1g --runtime=$secs --time_based --output-format=json 2>/dev/null | summary
}
read_pass() { fio --name=p --ioengine=nbd --uri="$(uri $1)" --rw=read --bs=1m --iodepth=4 --size=1g >/dev/null 2>&1; }
out=$dir/runs.txt
servers=(splice copy)
for round in $(seq 1 "$rounds"); do
  k=$(((round - 1) % 2))
  order=("${servers[@]:k}" "${servers[@]:0:k}")
  for s in "${order[@]}"; do
    echo "round=$round $s read-1m-qd4-1client | $(run $s read 1m 4 1)" | tee -a "$out"
    echo "round=$round $s read-1m-qd4-2clients | $(run $s read 1m 4 2)" | tee -a "$out"
    echo "round=$round $s randread-4k-qd32 | $(run $s randread 4k 32 1)" | tee -a "$out"
    read_pass $s
    echo "round=$round $s lent-randwrite-4k-qd32 | $(run $s randwrite 4k 32 1)" | tee -a "$out"
    read_pass $s
    echo "round=$round $s lent-write-1m-qd4 | $(run $s write 1m 4 1)" | tee -a "$out"
  done
done
echo
echo "median (min-max) IOPS over $rounds rounds; splice/copy per round:"
python3 - "$out" << 'EOF'
import collections, re, statistics, sys
cells = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    m = re.match(r"round=(\d+) (\S+) (\S+) \| (\d+) IOPS", line)
    if m:
        rnd, server, job, iops = m.groups()
        cells[job].setdefault(server, {})[int(rnd)] = int(iops)
for job, servers in cells.items():
    print(f"{job}:")
    for server, runs in servers.items():
        v = list(runs.values())
        print(f"  {server:7} {statistics.median(v):>9,.0f} ({min(v):,}-{max(v):,})")
    a, b = servers.get("splice", {}), servers.get("copy", {})
    r = [a[k] / b[k] for k in a if k in b and b[k]]
    if r:
        print(f"  splice/copy {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})")
EOF
