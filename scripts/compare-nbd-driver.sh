#!/usr/bin/env bash
# The nbd: driver against fio's nbd engine (libnbd), the same client job
# on the same export: QD32 4k random reads of a local `nbdkit memory 1G`
# over a Unix socket, laid out by a 1 MiB write pass first, 10 s per run,
# one connection each. mqblk bench and fio alternate, ROUNDS rounds
# (default 4); at the end the median and spread (min-max) of each side's
# IOPS and of mqblk / fio per round. The raw reports are printed as they
# come, each after its command and the load average.
# Needs fio and nbdkit. Usage: scripts/compare-nbd-driver.sh [rounds]
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-4}
for t in fio nbdkit; do command -v $t >/dev/null || { echo "$t is not installed" >&2; exit 2; }; done
cargo build --release -q -p mqblk-cli
mqblk=target/release/mqblk
dir=$(mktemp -d)
nbdkit -U "$dir/sock" -f --exit-with-parent memory 1G &
kit=$!
trap 'kill $kit 2>/dev/null; wait $kit 2>/dev/null; rm -rf "$dir"' EXIT
while [ ! -S "$dir/sock" ]; do sleep 0.05; done
uri="nbd+unix:///?socket=$dir/sock"
$mqblk bench --device "nbd:uri=$uri" --rw=write --bs=1m --iodepth=4 --name=layout >/dev/null
echo "commit $(git rev-parse --short HEAD); $(nbdkit --version | head -1); $(fio --version); $(nproc) CPUs; kernel $(uname -r)"
job=(--rw=randread --bs=4k --iodepth=32 --runtime=10 --time_based --name=x)
iops() { sed -n 's/.*read: IOPS=\([0-9.]*\)\(k\?\).*/\1 \2/p' | awk '{print ($2=="k") ? $1*1000 : $1}'; }
m=() f=()
for r in $(seq "$rounds"); do
  echo "== round $r: mqblk (load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo "\$ $mqblk bench --device nbd:uri=$uri,connections=1 ${job[*]}"
  out=$($mqblk bench --device "nbd:uri=$uri,connections=1" "${job[@]}")
  echo "$out"
  m+=("$(echo "$out" | iops)")
  echo "== round $r: fio (load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo "\$ fio --ioengine=nbd --uri=$uri ${job[*]}"
  out=$(fio --ioengine=nbd --uri="$uri" "${job[@]}")
  echo "$out"
  f+=("$(echo "$out" | iops)")
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
summary() { sort -g | awk '{v[NR]=$1} END {med = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "median %.4g (%.4g-%.4g)\n", med, v[1], v[NR]}'; }
echo "mqblk IOPS: $(printf '%s\n' "${m[@]}" | summary)"
echo "fio IOPS:   $(printf '%s\n' "${f[@]}" | summary)"
echo "mqblk/fio:  $(for i in "${!m[@]}"; do echo "${m[$i]} ${f[$i]}" | awk '{print $1/$2}'; done | summary)"
