#!/usr/bin/env bash
# What a Linux 6.12 guest sees when its vhost-user-blk server dies by
# SIGKILL mid-I/O (QEMU's vhost-user-blk-pci, no reconnect): its requests
# stay pending. With reconnect=1 and a new server, nothing is lost:
# tests/guest/vhost_reconnect.sh.
#
#   cargo build --release -p mqblk-cli && scripts/vhost-sigkill.sh
#
# On the host: `mqblk vhost add --device null:gb=1,memory_backed=1 --queues
# 2`, then the guest through tests/guest/run.sh (qemu's own messages go to
# qemu.txt in run.sh's temporary directory while the guest runs).
# In the guest: fio 4k randrw QD32 on /dev/vda; once 3,000 I/Os completed
# the guest prints KILL-NOW and the host kills the server; the guest then
# waits 90 s (guest time) for fio, prints /sys/block/vda/inflight and
# fio's threads' kernel stacks if it is still running, and tries one new
# 4 KiB read.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${MQBLK_GUEST:-}" = 1 ]; then
  insmod "$MQBLK_GUEST_MODULES/virtio_blk.ko"
  for _ in $(seq 300); do [ -b /dev/vda ] && break; sleep 0.1; done
  fio --name=k --filename=/dev/vda --direct=1 --ioengine=io_uring --rw=randrw --bs=4k --iodepth=32 --size=512m \
    --time_based --runtime=100 --output=/tmp/f.txt > /dev/null 2>&1 &
  fpid=$!
  for _ in $(seq 600); do ios=$(awk '{ print $1 + $5 }' /sys/block/vda/stat); [ "$ios" -gt 3000 ] && break; sleep 0.05; done
  echo "KILL-NOW at $ios ios"
  t0=$(date +%s)
  for _ in $(seq 900); do kill -0 $fpid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $fpid 2>/dev/null; then
    echo "fio still running after $(( $(date +%s) - t0 )) s; /sys/block/vda/inflight (reads, writes): $(cat /sys/block/vda/inflight)"
    for t in /proc/$fpid/task/*; do echo " [$(cut -d' ' -f3 $t/stat) $(cat $t/wchan)]"; head -3 $t/stack; done
  else
    wait $fpid; echo "fio ended with status $? after $(( $(date +%s) - t0 )) s: $(grep -m1 -o 'err=[^)]*' /tmp/f.txt)"
  fi
  dd if=/dev/vda of=/dev/null bs=4k count=1 iflag=direct 2>&1 | tail -1 &
  ddp=$!; sleep 10; kill -0 $ddp 2>/dev/null && echo "a new read does not return within 10 s" || echo "a new read returned"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$root/target/release/mqblk" vhost add --device null:gb=1,memory_backed=1 --socket "$work/s.sock" --queues 2 > "$work/srv.out" 2>&1 &
spid=$!
for _ in $(seq 100); do [ -S "$work/s.sock" ] && break; sleep 0.1; done
MQBLK_GUEST_TIMEOUT=400 "$root/tests/guest/run.sh" "$0" --shared-mem --qemu -chardev --qemu "socket,id=c0,path=$work/s.sock" \
  --qemu -device --qemu vhost-user-blk-pci,chardev=c0,num-queues=2 2>&1 | while IFS= read -r line; do
    echo "$line"
    case "$line" in KILL-NOW*) kill -KILL $spid; echo "host: killed the server (SIGKILL)";; esac
  done
