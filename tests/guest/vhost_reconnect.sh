#!/usr/bin/env bash
# A vhost-user-blk server killed with SIGKILL mid-I/O and started again:
# the Linux 6.12 guest's writes in flight are run by the new server, and
# nothing the guest wrote is lost.
#
#   cargo build --release -p mqblk-cli && tests/guest/vhost_reconnect.sh
#
# On the host (as root, MQBLK_GUEST unset): a 256 MiB file behind
#   mqblk vhost add --device file:path=F --socket S --queues 2
# and the guest through tests/guest/run.sh with
#   -chardev socket,id=vh0,path=S,reconnect=1
#   -device vhost-user-blk-pci,chardev=vh0,num-queues=2
# When the guest prints KILL-NOW the host kills the server (SIGKILL),
# waits 2 s, and starts a new server on the same file and socket; QEMU
# connects to it again (reconnect=1, every second). At the end SIGTERM
# stops the second server, which must exit 0 having served one
# connection with no failed request.
#
# Why it works: mqblk answers in avail order (crates/mqblk-vhost's
# in_order.rs), so the guest's used index is a prefix of its avail ring.
# QEMU, unable to read the rings' state from the dead server, restarts
# the rings at that used index, and the new server takes the guest's used
# index as its next used position: the chains from there on are exactly
# the requests in flight at the kill, and they run again. Without
# reconnect=1 QEMU never completes them and the guest waits forever
# (docs/results/vhost-sigkill-qemu-7.2.txt).
#
# In the guest, each check on its own line ("ok: ..." or "FAIL: ..."):
#   1. fio writes 64 MiB of 4 KiB blocks at random (io_uring, QD32,
#      verify=crc32c headers, do_verify=0); after 3,000 I/Os, at a moment
#      /sys/block/vda/inflight shows writes in flight, it prints KILL-NOW.
#      fio must end with status 0, and the kernel must log no I/O error on
#      vda;
#   2. fio --verify_only reads every block back and checks its crc32c:
#      each write acknowledged before, across or after the kill is there;
#   3. a new 4 KiB read returns (the disk is served again).
# Every wait is bounded (fio by `timeout`, the guest by
# MQBLK_GUEST_TIMEOUT, the host's waits for the servers by counts).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)

# ---------------------------------------------------------------------------
# The guest half.
if [ "${MQBLK_GUEST:-}" = 1 ]; then
  fio=${MQBLK_GUEST_FIO:-fio}
  failures=0
  pass() { echo "ok: $*"; }
  fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
  insmod "$MQBLK_GUEST_MODULES/virtio_blk.ko" || { echo "FAIL: insmod virtio_blk" >&2; exit 1; }
  for _ in $(seq 300); do [ -b /dev/vda ] && break; sleep 0.1; done
  [ -b /dev/vda ] || { echo "FAIL: no /dev/vda" >&2; exit 1; }
  echo none > /sys/block/vda/queue/scheduler 2>/dev/null || true
  job=(--name=reconnect --filename=/dev/vda --direct=1 --ioengine=io_uring --rw=randwrite --bs=4k --iodepth=32
    --size=64m --verify=crc32c --verify_state_save=0 --output-format=terse --terse-version=3)
  # ---- 1. writes across the kill ----
  timeout -k 10 600 "$fio" "${job[@]}" --do_verify=0 --output=/tmp/write.txt > /dev/null 2> /tmp/write.err &
  fpid=$!
  # Past 3,000 I/Os, at a moment the disk has writes in flight (a single
  # sample can fall between fio's batches and read 0).
  ios=0 in_w=0
  for _ in $(seq 1200); do
    ios=$(awk '{ print $1 + $5 }' /sys/block/vda/stat)
    read -r _ in_w < /sys/block/vda/inflight
    [ "$ios" -gt 3000 ] && [ "$in_w" -gt 0 ] && break
    sleep 0.05
  done
  echo "KILL-NOW at $ios I/Os, $in_w writes in flight"
  wait $fpid
  status=$?
  errors=$(dmesg | grep -c 'I/O error.*vda')
  written=$(cut -d';' -f47 /tmp/write.txt 2>/dev/null)
  if [ "$status" = 0 ] && [ "$errors" = 0 ] && [ "$in_w" -gt 0 ]; then
    pass "fio randwrite 64 MiB across the kill: status 0, $written KiB written, no I/O error in the kernel log ($in_w writes in flight at the kill)"
  else
    fail "fio randwrite across the kill: status $status, $errors I/O errors logged, $in_w writes in flight at the kill; $(tail -n 3 /tmp/write.err)"
  fi
  # ---- 2. every block back ----
  if timeout -k 10 600 "$fio" "${job[@]}" --verify_only --verify_fatal=1 --output=/tmp/verify.txt > /dev/null 2> /tmp/verify.err; then
    pass "fio --verify_only: every 4 KiB block's crc32c matches ($(cut -d';' -f6 /tmp/verify.txt) KiB read)"
  else
    fail "fio --verify_only: $(tail -n 5 /tmp/verify.err) $(tail -n 3 /tmp/verify.txt)"
  fi
  # ---- 3. served again ----
  if timeout 60 dd if=/dev/vda of=/dev/null bs=4k count=1 skip=100 iflag=direct status=none; then
    pass "a new 4 KiB read returns"
  else
    fail "a new 4 KiB read did not return within 60 s"
  fi
  exit $((failures > 0))
fi

# ---------------------------------------------------------------------------
# The host half.
mqblk=${MQBLK_BIN:-$root/target/release/mqblk}
[ -x "$mqblk" ] || { echo "vhost_reconnect.sh: no $mqblk (cargo build --release -p mqblk-cli)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "vhost_reconnect.sh: needs root (tests/guest/run.sh does)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mqblk-vhost-reconnect.XXXXXX")
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  for f in "$work"/pid*; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
truncate -s 256M "$work/disk.img"
sock=$work/vhost.sock
# start_server N: server N on the file and socket, its pid in $work/pidN;
# waits (10 s) for it to say it serves.
start_server() {
  local n=$1
  "$mqblk" vhost add --device "file:path=$work/disk.img,direct=1" --socket "$sock" --queues 2 \
    > "$work/server$n.out" 2> "$work/server$n.err" &
  echo $! > "$work/pid$n"
  for _ in $(seq 100); do
    grep -q serving "$work/server$n.out" && return 0
    kill -0 "$(cat "$work/pid$n")" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: host: server $n did not start: $(cat "$work/server$n.out" "$work/server$n.err")" >&2
  return 1
}
start_server 1 || exit 1
echo "ok: host: $(cat "$work/server1.out")"
failures=0
guest_status=0
# The guest's lines as they come: KILL-NOW kills server 1 and starts server 2.
"$root/tests/guest/run.sh" "$0" --shared-mem \
  --qemu -chardev --qemu "socket,id=vh0,path=$sock,reconnect=1" \
  --qemu -device --qemu vhost-user-blk-pci,chardev=vh0,num-queues=2 |
  while IFS= read -r line; do
    echo "$line"
    case "$line" in
      KILL-NOW*)
        kill -KILL "$(cat "$work/pid1")"
        echo "host: killed server 1 (SIGKILL); server 2 in 2 s"
        sleep 2
        start_server 2 && echo "ok: host: server 2: $(cat "$work/server2.out")"
        ;;
    esac
  done
guest_status=${PIPESTATUS[0]}
if ! [ -f "$work/pid2" ]; then
  echo "FAIL: host: the guest never asked for the kill" >&2
  exit 1
fi
kill -TERM "$(cat "$work/pid2")"
status=timeout
for _ in $(seq 300); do
  kill -0 "$(cat "$work/pid2")" 2>/dev/null || { status=exited; break; }
  sleep 0.1
done
summary=$(tail -n 1 "$work/server2.out")
# (Server 2 is not this shell's child: its exit status is not ours to read;
# its summary line is printed only on a clean exit.)
if [ "$status" = exited ] && grep -Eq "\(1 connections, [1-9][0-9]* requests, 0 failed\)" <<< "$summary"; then
  echo "ok: host: SIGTERM: server 2 exited: $summary"
else
  echo "FAIL: host: SIGTERM: server 2 $status: $summary; stderr: $(tail -n 5 "$work/server2.err")" >&2
  failures=$((failures + 1))
fi
if [ "$guest_status" = 0 ] && [ "$failures" = 0 ]; then
  echo "vhost_reconnect: all checks passed"
  exit 0
fi
echo "vhost_reconnect: guest status $guest_status, $failures server checks failed" >&2
exit 1
