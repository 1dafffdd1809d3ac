#!/usr/bin/env bash
# NBD servers side by side, driven by fio's nbd engine over a Unix socket and
# loopback TCP: 4k randread iodepth 32 and 1 MiB sequential read iodepth 4.
#   mqblk-tmpfs: mqblk serve, a 1 GiB tmpfs file (a copy of the disk file's
#                random data), reap=client, 2 rings
#   mqblk-disk:  the same on a 1 GiB file on the root file system, read into
#                the page cache first
#   mqblk-mem:   mqblk serve, null:gb=1,memory_backed=1 (a RAM disk, set
#                against nbdkit's), laid out like nbdkit's
#   nbdkit:      nbdkit's memory plugin, 1 GiB (laid out by a 1 MiB write pass)
#   qemu-nbd:    qemu-nbd -t on a copy of the disk file, also cached
# Each job with one fio client (one connection) and with two (numjobs=2,
# two connections), since one fio process saturates a CPU at 4k. The
# servers' order rotates every round; at the end, per cell, the median and
# spread (min-max) of IOPS over the rounds, and of mqblk-mem / nbdkit per
# round.
# Needs fio, nbdkit and qemu-nbd. Usage: scripts/compare-nbd.sh [rounds]  (default 5)
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
for t in fio nbdkit qemu-nbd; do command -v $t >/dev/null || { echo "$t is not installed" >&2; exit 2; }; done
cargo build --release -q -p mqblk-cli
mqblk=target/release/mqblk
dir=$(mktemp -d)
tmpfs=/dev/shm/mqblk-nbd-compare.img disk=/var/tmp/mqblk-nbd-compare.img qdisk=/var/tmp/mqblk-nbd-compare-q.img
[ -e $disk ] || dd if=/dev/urandom of=$disk bs=1M count=1024 status=none
[ -e $qdisk ] || cp $disk $qdisk
# Data everywhere, as in nbdkit's laid-out memory: a sparse file would be
# read as holes (and sent as OFFSET_HOLE chunks).
cp $disk $tmpfs
cat $disk $qdisk >/dev/null
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir" $tmpfs; }
trap cleanup EXIT
spec="submit_queues=2,reap=client"
$mqblk serve --device file:path=$tmpfs,$spec --unix $dir/mt.sock >/dev/null 2>&1 & pids+=($!)
$mqblk serve --device file:path=$tmpfs,$spec --listen 127.0.0.1:10901 >/dev/null 2>&1 & pids+=($!)
$mqblk serve --device file:path=$disk,$spec --unix $dir/md.sock >/dev/null 2>&1 & pids+=($!)
$mqblk serve --device file:path=$disk,$spec --listen 127.0.0.1:10904 >/dev/null 2>&1 & pids+=($!)
$mqblk serve --device null:gb=1,memory_backed=1,submit_queues=2 --unix $dir/mm.sock >/dev/null 2>&1 & pids+=($!)
$mqblk serve --device null:gb=1,memory_backed=1,submit_queues=2 --listen 127.0.0.1:10905 >/dev/null 2>&1 & pids+=($!)
nbdkit -f -U $dir/k.sock memory 1G & pids+=($!)
nbdkit -f -p 10902 -i 127.0.0.1 memory 1G & pids+=($!)
qemu-nbd -t -f raw -k $dir/q.sock $qdisk & pids+=($!)
qemu-nbd -t -f raw -b 127.0.0.1 -p 10903 $qdisk & pids+=($!)
sleep 2
declare -A uri=(
  [mqblk-tmpfs-unix]="nbd+unix:///?socket=$dir/mt.sock" [mqblk-tmpfs-tcp]="nbd://127.0.0.1:10901/"
  [mqblk-disk-unix]="nbd+unix:///?socket=$dir/md.sock"  [mqblk-disk-tcp]="nbd://127.0.0.1:10904/"
  [mqblk-mem-unix]="nbd+unix:///?socket=$dir/mm.sock"   [mqblk-mem-tcp]="nbd://127.0.0.1:10905/"
  [nbdkit-unix]="nbd+unix:///?socket=$dir/k.sock"       [nbdkit-tcp]="nbd://127.0.0.1:10902/"
  [qemu-nbd-unix]="nbd+unix:///?socket=$dir/q.sock"     [qemu-nbd-tcp]="nbd://127.0.0.1:10903/"
)
for u in "${uri[nbdkit-unix]}" "${uri[nbdkit-tcp]}" "${uri[mqblk-mem-unix]}" "${uri[mqblk-mem-tcp]}"; do
  fio --name=w --ioengine=nbd --uri="$u" --rw=write --bs=1m --iodepth=4 --size=1g >/dev/null 2>&1
done
# fio's nbd engine prints "connected to NBD server" before its JSON.
summary() { python3 -c 'import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):])["jobs"][0]; r=j["read"]; print("%.0f IOPS %.0f MB/s p99=%.0fus fio_cpu=%.0f%%" % (r["iops"], r["bw_bytes"]/1e6, r["clat_ns"]["percentile"]["99.000000"]/1000, j["usr_cpu"]+j["sys_cpu"]))'; }
servers=(mqblk-tmpfs mqblk-disk mqblk-mem nbdkit qemu-nbd)
out=$dir/runs.txt
for round in $(seq 1 "$rounds"); do
  k=$(((round - 1) % ${#servers[@]}))
  order=("${servers[@]:k}" "${servers[@]:0:k}")
  for tr in unix tcp; do
    for nj in 1 2; do
      for s in "${order[@]}"; do
        for job in "randread 4k 32" "read 1m 4"; do
          set -- $job
          r=$(fio --name=x --ioengine=nbd --uri="${uri[$s-$tr]}" --rw=$1 --bs=$2 --iodepth=$3 --size=1g \
                --numjobs=$nj --group_reporting --runtime=3 --time_based --output-format=json 2>/dev/null | summary)
          echo "round=$round $tr clients=$nj $s $job | $r" | tee -a "$out"
        done
      done
    done
  done
done
echo
echo "median (min-max) IOPS over $rounds rounds; mqblk-mem/nbdkit per round:"
python3 - "$out" << 'EOF'
import collections, re, statistics, sys
cells = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    m = re.match(r"round=(\d+) (\S+) clients=(\d) (\S+) (\S+ \S+ \S+) \| (\d+) IOPS", line)
    if m:
        rnd, tr, nj, server, job, iops = m.groups()
        cells[(tr, nj, job)].setdefault(server, {})[int(rnd)] = int(iops)
for (tr, nj, job), servers in sorted(cells.items()):
    print(f"{tr} clients={nj} {job}:")
    for server, runs in servers.items():
        v = list(runs.values())
        print(f"  {server:12} {statistics.median(v):>9,.0f} ({min(v):,}-{max(v):,})")
    mem, kit = servers.get("mqblk-mem", {}), servers.get("nbdkit", {})
    r = [mem[k] / kit[k] for k in mem if k in kit and kit[k]]
    if r:
        print(f"  mqblk-mem/nbdkit {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})")
EOF
