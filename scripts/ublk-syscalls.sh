#!/usr/bin/env bash
# Exact syscall counts of `mqblk ublk` per I/O, for two builds side by side,
# in the Linux 6.12 guest (strace -c -f on the server while fio reads 4000
# 4k blocks at QD1 and QD32 from /dev/ublkb0; mqblk null irqmode=0, one
# queue of 64 tags, scheduler none).
#
#   scripts/ublk-syscalls.sh A_BINARY B_BINARY   (as root; host paths the guest sees)
#
# Prints, per build and queue depth, the server's calls per syscall and in
# total. Counts, not times: they do not depend on the machine's load.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
if [ "${MQBLK_GUEST:-}" != 1 ]; then
  a=$(realpath "${1:?usage: scripts/ublk-syscalls.sh A_BINARY B_BINARY}")
  b=$(realpath "${2:?usage: scripts/ublk-syscalls.sh A_BINARY B_BINARY}")
  cd "$(dirname "$0")/.."
  # The guest gets nothing from the host's environment: pass the binaries
  # as a generated script's arguments.
  job=$(mktemp -p "$PWD/target" ublk-syscalls.XXXXXX.sh)
  trap 'rm -f "$job"' EXIT
  printf '#!/bin/sh\nexec bash %s/scripts/ublk-syscalls.sh %s %s\n' "$PWD" "$a" "$b" > "$job"
  chmod +x "$job"
  exec tests/guest/run.sh "$job"
fi
for bin in "$1" "$2"; do
  for qd in 1 32; do
    "$bin" ublk add --device null:gb=1,irqmode=0 --queues 1 --depth 64 --id 0 > /tmp/s.out 2>&1 &
    pid=$!
    for _ in $(seq 300); do [ -b /dev/ublkb0 ] && grep -q serving /tmp/s.out && break; sleep 0.1; done
    echo none > /sys/block/ublkb0/queue/scheduler
    strace -c -f -q -p "$pid" -o /tmp/st.txt &
    spid=$!
    sleep 1
    fio --name=a --filename=/dev/ublkb0 --direct=1 --ioengine=io_uring --rw=randread --bs=4k \
      --iodepth="$qd" --number_ios=4000 --size=16m --output-format=terse --terse-version=3 > /tmp/f.txt 2>&1
    sleep 0.5
    kill -INT "$spid"; wait "$spid" || true
    echo "== $bin qd=$qd: fio read $(cut -d';' -f6 /tmp/f.txt) KiB (4000 I/Os); server syscalls:"
    awk '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ { printf "   %-16s %6d  %.2f per I/O\n", $NF, $4, $4 / 4000 }' /tmp/st.txt
    kill -TERM "$pid"; wait "$pid" || true
  done
done
