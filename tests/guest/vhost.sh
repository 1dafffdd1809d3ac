#!/usr/bin/env bash
# `mqblk vhost add` as the vhost-user-blk disk of a Linux 6.12 guest.
#
#   cargo build --release -p mqblk-cli && tests/guest/vhost.sh
#
# Two halves in one file. On the host (as root, MQBLK_GUEST unset) it
# starts two servers of target/release/mqblk (MQBLK_BIN overrides it):
#   mqblk vhost add --device null:gb=1,memory_backed=1,discard=1,cache_size=16 \
#       --socket S0 --queues 2
#   mqblk vhost add --device null:gb=1,blktrace=DIR --socket S1 --read-only
# then boots the guest through tests/guest/run.sh with the guest's memory
# in a shared memfd and one `-chardev socket -device vhost-user-blk-pci`
# per socket (num-queues=2 and 1), which runs this same file inside the
# guest; afterwards it stops each server with SIGTERM and checks that it
# exits 0 having served the guest (one connection a boot) with no failed
# request, and that Debian's blkparse reads the read-only disk's blktrace
# of the guest's reads (queued reads, every dispatched request completed,
# no gap).
#
# In the guest, each check on its own line ("ok: ..." or "FAIL: ..."):
#   1. insmod virtio_blk: /dev/vda appears (bounded wait) with 1 GiB, 2
#      hardware queues, a write-back cache (VIRTIO_BLK_F_FLUSH) and the
#      serial "mqblk" (GET_ID);
#   2. fio with verify=crc32c on /dev/vda: engines libaio and io_uring, QD 1
#      and 32, 4k random writes and 1M sequential writes, each read back
#      and verified;
#   3. blkdiscard (DISCARD) of 1 MiB and blkdiscard -z (WRITE_ZEROES) of
#      1 MiB of random data, which then reads as zeros;
#   4. ext4: mkfs, mount, a 16 MiB file and small files, sync, umount,
#      `fsck.ext4 -fn` clean, remount, every file's SHA-256 the same;
#   5. /dev/vdb is read-only (VIRTIO_BLK_F_RO): reads work, a write with
#      O_DIRECT fails (the guest kernel refuses it, even after blockdev
#      --setrw, so no write reaches the server; the server's own refusal,
#      IOERR, is checked by mqblk-vhost's queue tests);
#   6. virtio_blk reloaded with poll_queues=1: /dev/vda has a hardware
#      context of type poll (io_poll 1), and fio io_uring with hipri=1 (4k
#      random writes, QD8, verified) completes its requests by polling:
#      fewer than one interrupt from the disk per ten requests.
# Exits 0 only when all pass; every wait is bounded (the guest as a whole by
# MQBLK_GUEST_TIMEOUT, fio by `timeout`).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
spec=null:gb=1,memory_backed=1,discard=1,cache_size=16

# ---------------------------------------------------------------------------
# The host half.
if [ "${MQBLK_GUEST:-}" != 1 ]; then
  mqblk=${MQBLK_BIN:-$root/target/release/mqblk}
  [ -x "$mqblk" ] || { echo "vhost.sh: no $mqblk (cargo build --release -p mqblk-cli)" >&2; exit 2; }
  [ "$(id -u)" = 0 ] || { echo "vhost.sh: needs root (tests/guest/run.sh does)" >&2; exit 2; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/mqblk-vhost.XXXXXX")
  pids=()
  # shellcheck disable=SC2317 # invoked by the EXIT trap
  cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$work"
  }
  trap cleanup EXIT
  # start_server N ARGS...: server N on $work/vhostN.sock, waited for (10 s).
  start_server() {
    local n=$1; shift
    "$mqblk" vhost add --socket "$work/vhost$n.sock" "$@" > "$work/server$n.out" 2> "$work/server$n.err" &
    pids[n]=$!
    for _ in $(seq 100); do
      [ -S "$work/vhost$n.sock" ] && grep -q serving "$work/server$n.out" && break
      kill -0 "${pids[n]}" 2>/dev/null || break
      sleep 0.1
    done
    if ! [ -S "$work/vhost$n.sock" ]; then
      echo "FAIL: host: no socket $n; server said: $(cat "$work/server$n.out" "$work/server$n.err")" >&2
      exit 1
    fi
    echo "ok: host: $(cat "$work/server$n.out")"
  }
  start_server 0 --device "$spec" --queues 2
  start_server 1 --device "null:gb=1,blktrace=$work/trace1" --read-only
  guest_status=0
  "$root/tests/guest/run.sh" "$0" --shared-mem \
    --qemu -chardev --qemu "socket,id=vh0,path=$work/vhost0.sock" \
    --qemu -device --qemu vhost-user-blk-pci,chardev=vh0,num-queues=2 \
    --qemu -chardev --qemu "socket,id=vh1,path=$work/vhost1.sock" \
    --qemu -device --qemu vhost-user-blk-pci,chardev=vh1,num-queues=1 || guest_status=$?
  failures=0
  # stop_server N FAILED: SIGTERM, exit 0 within 30 s, FAILED failed requests.
  # A connection per boot: run.sh boots the guest a second time when the
  # first stopped before /init (its firmware may have sent a request).
  stop_server() {
    local n=$1 want_failed=$2 status=timeout summary
    kill -TERM "${pids[n]}"
    for _ in $(seq 300); do
      kill -0 "${pids[n]}" 2>/dev/null || { wait "${pids[n]}"; status=$?; break; }
      sleep 0.1
    done
    summary=$(tail -n 1 "$work/server$n.out")
    if [ "$status" = 0 ] && grep -Eq "\([12] connections, [0-9]+ requests, $want_failed failed\)" <<< "$summary"; then
      echo "ok: host: SIGTERM: server $n exited 0: $summary"
    else
      echo "FAIL: host: SIGTERM: server $n status $status: $summary; stderr: $(tail -n 5 "$work/server$n.err")" >&2
      failures=$((failures + 1))
    fi
  }
  stop_server 0 0
  stop_server 1 0
  # The read-only disk's trace: ended at the stop (its summary line on
  # stderr), read by blkparse without a gap, the guest's reads queued and
  # every dispatched request completed.
  events=$(blkparse -D "$work/trace1" -i null -f '@@ %a %d\n' 2> "$work/blkparse.err")
  queued=$(grep -c '^@@ Q R' <<< "$events")
  dispatched=$(grep -c '^@@ D ' <<< "$events")
  completed=$(grep -c '^@@ C ' <<< "$events")
  if grep -q "blktrace: [0-9]* events, 0 dropped" "$work/server1.err" && grep -q 'Skips: 0 forward' <<< "$events" &&
      [ "$queued" -gt 0 ] && [ "$dispatched" = "$completed" ] && ! [ -s "$work/blkparse.err" ]; then
    echo "ok: host: blktrace of the read-only disk: $queued reads queued, $dispatched dispatched, $completed completed"
  else
    echo "FAIL: host: blktrace of the read-only disk: $queued reads queued, $dispatched dispatched, $completed completed; server: $(tail -n 2 "$work/server1.err"); blkparse: $(head -c 300 "$work/blkparse.err")" >&2
    failures=$((failures + 1))
  fi
  if [ "$guest_status" = 0 ] && [ "$failures" = 0 ]; then
    echo "vhost: all checks passed"
    exit 0
  fi
  echo "vhost: guest status $guest_status, $failures server checks failed" >&2
  exit 1
fi

# ---------------------------------------------------------------------------
# The guest half.
# The lean fio tests/guest/run.sh passes (Debian's loads 64 libraries over 9p).
fio=${MQBLK_GUEST_FIO:-fio}
failures=0
pass() { echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

# ---- 1. the disk ---------------------------------------------------------------------
t0=$(now)
insmod "$MQBLK_GUEST_MODULES/virtio_blk.ko" || { echo "FAIL: insmod virtio_blk" >&2; exit 1; }
for _ in $(seq 300); do [ -b /dev/vda ] && break; sleep 0.1; done
[ -b /dev/vda ] || { echo "FAIL: no /dev/vda after $(since "$t0")" >&2; exit 1; }
q=/sys/block/vda/queue
echo "queue limits: logical $(cat $q/logical_block_size) physical $(cat $q/physical_block_size) max_sectors_kb $(cat $q/max_sectors_kb) max_segments $(cat $q/max_segments) max_segment_size $(cat $q/max_segment_size) write_cache '$(cat $q/write_cache)' discard_max_bytes $(cat $q/discard_max_bytes) write_zeroes_max_bytes $(cat $q/write_zeroes_max_bytes) ro $(cat /sys/block/vda/ro)"
size=$(blockdev --getsize64 /dev/vda)
nr_hw=$(find /sys/block/vda/mq -mindepth 1 -maxdepth 1 -type d | wc -l)
serial=$(cat /sys/block/vda/serial 2>/dev/null)
cache=$(cat $q/write_cache)
if [ "$size" = 1073741824 ] && [ "$nr_hw" = 2 ] && [ "$serial" = mqblk ] && [ "$cache" = "write back" ]; then
  pass "/dev/vda: $size bytes, $nr_hw hardware queues, serial '$serial', '$cache' cache ($(since "$t0"))"
else
  fail "/dev/vda: size $size (want 1073741824), $nr_hw hardware queues (want 2), serial '$serial' (want mqblk), cache '$cache' (want write back)"
fi
echo none > $q/scheduler 2>/dev/null || true

# ---- 2. fio with verify ----------------------------------------------------------------
for engine in libaio io_uring; do
  for job in "randwrite 4k 1 2m" "randwrite 4k 32 4m" "write 1m 1 8m" "write 1m 32 16m"; do
    read -r rw bs qd size <<< "$job"
    out=/tmp/fio-$engine-$rw-$bs-$qd.txt
    t0=$(now)
    if timeout -k 10 600 "$fio" --name=vhost --filename=/dev/vda --direct=1 --ioengine="$engine" \
        --rw="$rw" --bs="$bs" --iodepth="$qd" --size="$size" \
        --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
        --output-format=terse --terse-version=3 --output="$out" > /dev/null 2>&1; then
      # Terse v3: field 6 read KiB, 8 read IOPS.
      pass "fio $engine $rw bs=$bs iodepth=$qd size=$size verify=crc32c: $(cut -d';' -f6 "$out") KiB verified at $(cut -d';' -f8 "$out") IOPS ($(since "$t0"))"
    else
      fail "fio $engine $rw bs=$bs iodepth=$qd: $(tail -n 5 "$out" 2>/dev/null)"
    fi
  done
done

# ---- 3. discard and write zeroes ---------------------------------------------------------
off=$((512 << 20))
# The MiB at $off, read back into /tmp/back.bin.
read_back() { dd if=/dev/vda of=/tmp/back.bin bs=1M skip=512 count=1 iflag=direct status=none; }
if head -c 1M /dev/urandom | dd of=/dev/vda bs=1M seek=512 oflag=direct status=none &&
    blkdiscard -o $off -l 1M /dev/vda &&
    head -c 1M /dev/urandom > /tmp/random.bin &&
    dd if=/tmp/random.bin of=/dev/vda bs=1M seek=512 oflag=direct status=none &&
    read_back && cmp -s /tmp/back.bin /tmp/random.bin &&
    blkdiscard -z -o $off -l 1M /dev/vda &&
    read_back && cmp -n 1048576 /tmp/back.bin /dev/zero; then
  pass "blkdiscard of 1 MiB (DISCARD); blkdiscard -z of 1 MiB of random data reads back as zeros (WRITE_ZEROES)"
else
  fail "discard or write zeroes at $off"
fi

# ---- 4. ext4 ------------------------------------------------------------------------------
mnt=/tmp/mnt
mkdir -p $mnt
t0=$(now)
ext4_ok=1
{
  mkfs.ext4 -q -F /dev/vda &&
  mount -t ext4 /dev/vda $mnt &&
  head -c 16M /dev/urandom > $mnt/big &&
  mkdir -p $mnt/tree/a/b $mnt/tree/d &&
  for i in $(seq 1 40); do head -c $((i * 397)) /dev/urandom > "$mnt/tree/f$i"; done &&
  for i in $(seq 1 20); do head -c $((i * 911)) /dev/urandom > "$mnt/tree/a/b/g$i"; echo "$i" > "$mnt/tree/d/n$i"; done &&
  sync && (cd $mnt && find . -type f -print0 | sort -z | xargs -0 sha256sum) > /tmp/sums.txt &&
  umount $mnt
} > /tmp/ext4.log 2>&1 || ext4_ok=0
if [ $ext4_ok = 1 ]; then
  pass "ext4: mkfs, mount, $(wc -l < /tmp/sums.txt) files written, sync, umount ($(since "$t0"))"
  if fsck.ext4 -fn /dev/vda > /tmp/fsck.log 2>&1; then
    pass "fsck.ext4 -fn clean: $(tail -n 1 /tmp/fsck.log)"
  else
    fail "fsck.ext4 -fn: $(tail -n 5 /tmp/fsck.log)"
  fi
  if mount -t ext4 /dev/vda $mnt && (cd $mnt && sha256sum --quiet -c /tmp/sums.txt) > /tmp/sumcheck.log 2>&1; then
    pass "remount: all $(wc -l < /tmp/sums.txt) files byte-exact (SHA-256)"
  else
    fail "remount and compare: $(tail -n 5 /tmp/sumcheck.log)"
  fi
  umount $mnt 2>/dev/null
else
  fail "ext4 setup: $(tail -n 5 /tmp/ext4.log)"
  umount $mnt 2>/dev/null
fi

# ---- 5. the read-only disk ---------------------------------------------------------------
for _ in $(seq 100); do [ -b /dev/vdb ] && break; sleep 0.1; done
ro=$(cat /sys/block/vdb/ro 2>/dev/null)
if [ "$ro" = 1 ] && dd if=/dev/vdb of=/dev/null bs=1M count=4 iflag=direct status=none &&
    ! head -c 4096 /dev/zero | dd of=/dev/vdb bs=4k oflag=direct status=none 2>/dev/null &&
    blockdev --setrw /dev/vdb &&
    ! head -c 4096 /dev/zero | dd of=/dev/vdb bs=4k oflag=direct status=none 2> /tmp/ro-write.txt; then
  pass "/dev/vdb read-only: reads work, writes fail, also after blockdev --setrw: $(tail -n 1 /tmp/ro-write.txt)"
else
  fail "/dev/vdb: ro '$ro' (want 1), or a read failed, or a write succeeded"
fi

# ---- 6. the guest's poll queues ---------------------------------------------------------
# virtio_blk.poll_queues=1 (the merged virtio-blk polling: a virtqueue of
# its own with no interrupt, reaped by the submitter) with HIPRI io_uring
# I/O: /dev/vda gets a hardware context of type "poll", and fio's I/Os
# complete with almost no interrupt from the disk (its request queues'
# lines in /proc/interrupts), where each would otherwise raise one.
t0=$(now)
mount -t debugfs none /sys/kernel/debug 2>/dev/null
# Interrupts of /dev/vda's request virtqueues, all CPUs.
vda_irqs() {
  local virtio; virtio=$(basename "$(readlink -f /sys/block/vda/device)")
  awk -v name="$virtio-req" 'NR == 1 { cpus = NF; next } $0 ~ name { for (i = 2; i <= cpus + 1; i++) s += $i } END { print s + 0 }' /proc/interrupts
}
vda_ios() { awk '{ print $1 + $5 }' /sys/block/vda/stat; }
if rmmod virtio_blk && insmod "$MQBLK_GUEST_MODULES/virtio_blk.ko" poll_queues=1; then
  for _ in $(seq 300); do [ -b /dev/vda ] && break; sleep 0.1; done
  echo none > $q/scheduler 2>/dev/null || true
  types=$(cat /sys/kernel/debug/block/vda/hctx*/type 2>/dev/null | paste -sd' ')
  io_poll=$(cat $q/io_poll 2>/dev/null)
  if grep -qw poll <<< "$types" && [ "$io_poll" = 1 ]; then
    ios0=$(vda_ios) irqs0=$(vda_irqs)
    out=/tmp/fio-hipri.txt
    if timeout -k 10 600 "$fio" --name=hipri --filename=/dev/vda --direct=1 --ioengine=io_uring --hipri=1 \
        --rw=randwrite --bs=4k --iodepth=8 --size=2m \
        --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
        --output-format=terse --terse-version=3 --output="$out" > /dev/null 2>&1; then
      ios=$(($(vda_ios) - ios0)) irqs=$(($(vda_irqs) - irqs0))
      # 2 MiB written and read back in 4 KiB: 1,024 requests.
      if [ "$ios" -ge 1024 ] && [ $((irqs * 10)) -lt "$ios" ]; then
        pass "poll_queues=1: hardware contexts '$types', io_poll $io_poll; fio io_uring hipri=1 randwrite 4k QD8 verify=crc32c: $(cut -d';' -f6 "$out") KiB verified, $ios requests completed with $irqs interrupts ($(since "$t0"))"
      else
        fail "poll_queues=1: $ios requests completed with $irqs interrupts (want at least 1024 requests and under one interrupt in ten)"
      fi
    else
      fail "poll_queues=1: fio hipri: $(tail -n 5 "$out" 2>/dev/null)"
    fi
  else
    fail "poll_queues=1: hardware contexts '$types' (want one of type poll), io_poll '$io_poll'"
  fi
else
  fail "reloading virtio_blk with poll_queues=1"
fi

if [ "$failures" = 0 ]; then
  echo "vhost guest: all checks passed"
  exit 0
fi
echo "vhost guest: $failures checks failed" >&2
exit 1
