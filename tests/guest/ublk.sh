#!/usr/bin/env bash
# `mqblk ublk` in a Linux guest (6.12, or 7.x): run it with tests/guest/run.sh.
#
#   cargo build --release -p mqblk-cli && tests/guest/run.sh tests/guest/ublk.sh
#   MQBLK_GUEST_SERIES=7 tests/guest/run.sh tests/guest/ublk.sh
#
# Uses the host's target/release/mqblk (MQBLK_BIN overrides it). Checks,
# inside the guest, each on its own line ("ok: ..." or "FAIL: ..."), over
# two devices in turn: null:gb=1,memory_backed=1 and a file device
# (file:path=/tmp/ublk.img,create=1,size=512m,reap=client: write cache,
# FUA, discard and write zeroes; each queue thread reaps the file's ring
# itself), then the stop paths over the null device:
#   1. `mqblk ublk add --device SPEC --queues 2 --depth 64` in the
#      background brings up /dev/ublkb0 (bounded wait), and `mqblk ublk
#      list` shows it LIVE; the file device also zeroes a range
#      (blkdiscard -z) and discards one;
#   2. fio with verify=crc32c on /dev/ublkb0: engines libaio and io_uring,
#      QD 1 and 32 (the file device QD 32 only), 4k random writes and 1M
#      sequential writes, each read back and verified (output under /tmp);
#   3. ext4, on the null device, and on Linux 7.x on the file device too,
#      whose reads and writes there are zero copy (ext4 costs 90 s a device
#      under TCG; on 6.12 the kernel's side is the same for both): mkfs, mount,
#      a 24 MiB file and a directory tree of small files, sync, umount,
#      `fsck.ext4 -fn` clean, remount, every file's SHA-256 the same;
#   4. SIGTERM stops the server: exit status 0, /dev/ublkb0 and /dev/ublkc0
#      gone (after each device's checks 1-3); the file device's data path
#      is zero copy on 7.x (every read and write with the request's own
#      pages, all registered by the kernel in the queue's ring, none
#      copied) and the kernel's copy on 6.12, as the server's first and
#      last lines say; on 7.x, a buffer table of one entry makes the
#      kernel's registration fail for every other tag, and fio's verified
#      1 MiB writes pass through the fallback (the file driver registers
#      the pages);
#   5. `mqblk ublk del 0` from another process ends a running server;
#   6. a server killed with SIGKILL during fio: fio ends with errors (no
#      hang), /dev/ublkb0 goes away, and `mqblk ublk del 0` removes the
#      device;
#   7. a power cut through the control socket (`ublk add --control`) of a
#      device with a volatile write cache: the queue shows "write back";
#      2 MiB written with O_DIRECT and no fsync are lost by the cut (the
#      device reads zeros), the same written with conv=fsync (a FLUSH)
#      survive it byte for byte; a refused control request changes
#      nothing;
#   8. recovery: a file device added with --recovery=reissue under fio's
#      verified 4k random writes at QD32 (libaio, direct, 32 MiB: 8,192
#      writes, 128 MiB took 80 s beside the suite); the server is killed
#      with SIGKILL after 2,000 of them, with writes in flight; /dev/ublkb0 stays, and
#      `mqblk ublk recover 0 --device SPEC` serves it again: fio ends with
#      status 0, its verify pass reads every block back, dmesg shows no
#      I/O error on ublkb0; SIGTERM then stops and deletes it;
#   9. without root (UBLK_F_UNPRIVILEGED_DEV), as uid and gid 65534
#      (setpriv, no supplementary groups): `ublk add --unprivileged` is
#      refused while /dev/ublk-control is root's, with a message naming it;
#      root then gives /dev/ublk-control to group 65534 (mode 0660) and a
#      loop stands in for the udev rule (scripts/ublk-chown.sh on each new
#      /dev/ublkc*, /dev/ublkb*); `ublk add` without --unprivileged is
#      refused, naming the option; beside a root-owned device 0, `ublk add
#      --unprivileged` serves device 1, whose nodes the rule gave to
#      65534:65534 (`ublk info 1`: owner 65534:65534); as that user, fio's
#      verified 4k random writes on /dev/ublkb1 pass, `ublk list` shows
#      device 1 LIVE with its owner and device 0 as privileged, `ublk del 0`
#      is refused (EPERM, only root) and device 0 stays, `ublk del 1` by
#      uid 65533 (in group 65534) is refused (EACCES on /dev/ublkc1) and
#      device 1 stays, and `ublk del 1` by its owner ends its server with
#      status 0 and removes the nodes.
# Exits 0 only when all pass.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -uo pipefail

[ "${MQBLK_GUEST:-}" = 1 ] || { echo "ublk.sh: run me with tests/guest/run.sh" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
mqblk=${MQBLK_BIN:-$root/target/release/mqblk}
[ -x "$mqblk" ] || { echo "ublk.sh: no $mqblk (cargo build --release -p mqblk-cli)" >&2; exit 2; }
# The lean fio tests/guest/run.sh passes (Debian's loads 64 libraries over 9p).
fio=${MQBLK_GUEST_FIO:-fio}

failures=0
pass() { echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

spec=""
server_pid=""
server_args=()

# Starts a server in the background; waits (at most 60 s) for /dev/ublkb0.
start_server() {
  "$mqblk" ublk add --device "$spec" --queues 2 --depth 64 --id 0 "${server_args[@]}" \
    > /tmp/ublk-server.out 2> /tmp/ublk-server.err &
  server_pid=$!
  local t0; t0=$(now)
  for _ in $(seq 600); do
    [ -b /dev/ublkb0 ] && grep -q 'serving' /tmp/ublk-server.out && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -b /dev/ublkb0 ]; then
    pass "server up: $(cat /tmp/ublk-server.out) ($(since "$t0"))"
    check_pinned
    return 0
  fi
  fail "no /dev/ublkb0 after $(since "$t0"); server said: $(cat /tmp/ublk-server.out /tmp/ublk-server.err)"
  return 1
}

# The queue threads run where the start line says, and that is where
# --cpu-affinity single puts them: each on the last CPU the kernel maps to
# its queue (the kernel's own map: /sys/block/ublkb0/mq/N/cpu_list). With
# two queues on two vCPUs, each queue has a CPU of its own.
check_pinned() {
  local line q cpu want t allowed pinned=0 threads
  line=$(head -n 1 /tmp/ublk-server.out)
  threads=$(grep -l '^ublk-q' /proc/"$server_pid"/task/*/comm | wc -l)
  if grep -q 'queue threads unpinned)' <<< "$line"; then
    # --cpu-affinity off: where the server itself may run.
    want=$(awk '$1 == "Cpus_allowed_list:" { print $2 }' /proc/"$server_pid"/status)
    for t in /proc/"$server_pid"/task/*; do
      grep -q '^ublk-q' "$t/comm" && [ "$(awk '$1 == "Cpus_allowed_list:" { print $2 }' "$t/status")" = "$want" ] &&
        pinned=$((pinned + 1))
    done
    if [ "$pinned" = "$threads" ]; then
      pass "the $threads queue threads are unpinned (CPUs $want), as the start line says"
    else
      fail "$((threads - pinned)) of $threads queue threads pinned, with --cpu-affinity off: $line"
    fi
    return
  fi
  while read -r q cpu; do
    [ -n "$q" ] || continue
    want=$(grep -o '[0-9]*' "/sys/block/ublkb0/mq/$q/cpu_list" | tail -n 1)
    allowed=""
    for t in /proc/"$server_pid"/task/*; do
      [ "$(cat "$t/comm")" = "ublk-q$q" ] && allowed=$(awk '$1 == "Cpus_allowed_list:" { print $2 }' "$t/status")
    done
    if [ "$cpu" = "$want" ] && [ "$allowed" = "$cpu" ]; then
      pinned=$((pinned + 1))
    else
      fail "queue $q: start line says CPU $cpu, the kernel maps CPUs $(cat "/sys/block/ublkb0/mq/$q/cpu_list") to it, its thread may run on $allowed"
    fi
  done <<< "$(grep -o 'queue [0-9]* on CPU [0-9]*' <<< "$line" | awk '{ print $2, $5 }')"
  if [ "$pinned" -gt 0 ] && [ "$pinned" = "$threads" ]; then
    pass "the $threads queue threads are pinned as the start line says"
  else
    fail "$pinned of $threads queue threads pinned: $line"
  fi
}

# Waits (at most $2 tenths of a second) for our child $1 to end; sets
# exit_status to its status, or "timeout".
exit_status=""
wait_exit() {
  local pid=$1 tenths=$2
  for _ in $(seq "$tenths"); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    exit_status=timeout
    return
  fi
  wait "$pid"
  exit_status=$?
}

gone() { [ ! -e /dev/ublkb0 ] && [ ! -e /sys/block/ublkb0 ]; }

# Waits (at most 60 s) until fio ($fio_pid) has completed 2000 I/Os on
# ublkb0, counted by the awk expression $1 over /sys/block/ublkb0/stat
# (fields 1 and 5: completed reads and writes), or has ended; sets ios.
ios=0
wait_for_ios() {
  ios=0
  for _ in $(seq 600); do
    ios=$(awk "{ print $1 }" /sys/block/ublkb0/stat 2>/dev/null || echo 0)
    [ "$ios" -gt 2000 ] && break
    kill -0 "$fio_pid" 2>/dev/null || break
    sleep 0.1
  done
}

# Checks 1-4 over device SPEC ($1), named LABEL ($2) in the output; fio
# sizes SMALL ($3, 4k jobs) and LARGE ($4, 1M jobs).
check_device() {
  spec=$1
  local label=$2 small=$3 large=$4 fs=$5 depths=$6 rw bs qd size out t0 job engine ext4_ok status
  # ---- 1. up, listed --------------------------------------------------------------------
  start_server || return 1
  echo none > /sys/block/ublkb0/queue/scheduler 2>/dev/null || true
  echo "queue limits: logical $(cat /sys/block/ublkb0/queue/logical_block_size) max_sectors_kb $(cat /sys/block/ublkb0/queue/max_sectors_kb) nr_requests $(cat /sys/block/ublkb0/queue/nr_requests) write_cache '$(cat /sys/block/ublkb0/queue/write_cache)' fua $(cat /sys/block/ublkb0/queue/fua) discard_max_bytes $(cat /sys/block/ublkb0/queue/discard_max_bytes) rotational $(cat /sys/block/ublkb0/queue/rotational) size $(blockdev --getsize64 /dev/ublkb0)"
  if "$mqblk" ublk list > /tmp/ublk-list.txt 2>&1 && grep -Eq '^0 +LIVE +2 +64 ' /tmp/ublk-list.txt; then
    pass "$label: ublk list shows device 0 LIVE with 2 queues of 64"
  else
    fail "$label: ublk list: $(cat /tmp/ublk-list.txt)"
  fi

  if [ "$label" = file ]; then
    # Write zeroes and discard reach the file driver (punched holes).
    if head -c 1M /dev/urandom | dd of=/dev/ublkb0 bs=1M oflag=direct status=none &&
        blkdiscard -z -o 0 -l 1M /dev/ublkb0 &&
        cmp -n 1048576 /dev/ublkb0 /dev/zero && blkdiscard -o 1M -l 1M /dev/ublkb0; then
      pass "$label: blkdiscard -z zeroes 1 MiB (WRITE_ZEROES), blkdiscard discards 1 MiB (DISCARD)"
    else
      fail "$label: write zeroes or discard"
    fi
  fi

  # ---- 2. fio with verify ----------------------------------------------------------------
  for engine in libaio io_uring; do
    for job in "randwrite 4k $small" "write 1m $large"; do
      for qd in $depths; do
        read -r rw bs size <<< "$job"
        out=/tmp/fio-$engine-$rw-$bs-$qd.txt
        t0=$(now)
        if "$fio" --name=ublk --filename=/dev/ublkb0 --direct=1 --ioengine="$engine" \
            --rw="$rw" --bs="$bs" --iodepth="$qd" --size="$size" \
            --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
            --output-format=terse --terse-version=3 --output="$out" > /dev/null 2>&1; then
          # Terse v3: field 6 read KiB, 7 read bandwidth KiB/s, 8 read IOPS.
          pass "$label: fio $engine $rw bs=$bs iodepth=$qd size=$size verify=crc32c: $(cut -d';' -f6 "$out") KiB verified at $(cut -d';' -f8 "$out") IOPS ($(since "$t0"))"
        else
          fail "$label: fio $engine $rw bs=$bs iodepth=$qd: $(tail -n 5 "$out" 2>/dev/null)"
        fi
      done
    done
  done

  # ---- 3. ext4 ------------------------------------------------------------------------------
  if [ "$fs" = ext4 ]; then
    mnt=/tmp/mnt
    mkdir -p $mnt
    t0=$(now)
    ext4_ok=1
    {
      mkfs.ext4 -q -F /dev/ublkb0 &&
      mount -t ext4 /dev/ublkb0 $mnt &&
      head -c 24M /dev/urandom > $mnt/big &&
      mkdir -p $mnt/tree/a/b/c $mnt/tree/d &&
      for i in $(seq 1 60); do head -c $((i * 397)) /dev/urandom > "$mnt/tree/$((i % 3 == 0 ? 1 : 0))-$i"; done &&
      for i in $(seq 1 20); do head -c $((i * 911)) /dev/urandom > "$mnt/tree/a/b/c/f$i"; echo "$i" > "$mnt/tree/d/n$i"; done &&
      sync && (cd $mnt && find . -type f -print0 | sort -z | xargs -0 sha256sum) > /tmp/sums.txt &&
      umount $mnt
    } > /tmp/ext4.log 2>&1 || ext4_ok=0
    if [ $ext4_ok = 1 ]; then
      pass "$label: ext4: mkfs, mount, $(wc -l < /tmp/sums.txt) files written, sync, umount ($(since "$t0"))"
    else
      fail "$label: ext4 setup: $(tail -n 5 /tmp/ext4.log)"
      umount $mnt 2>/dev/null
    fi
    if [ $ext4_ok = 1 ]; then
      if fsck.ext4 -fn /dev/ublkb0 > /tmp/fsck.log 2>&1; then
        pass "$label: fsck.ext4 -fn clean: $(tail -n 1 /tmp/fsck.log)"
      else
        fail "$label: fsck.ext4 -fn: $(tail -n 5 /tmp/fsck.log)"
      fi
      if mount -t ext4 /dev/ublkb0 $mnt && (cd $mnt && sha256sum --quiet -c /tmp/sums.txt) > /tmp/sumcheck.log 2>&1; then
        pass "$label: remount: all $(wc -l < /tmp/sums.txt) files byte-exact (SHA-256)"
      else
        fail "$label: remount and compare: $(tail -n 5 /tmp/sumcheck.log)"
      fi
      umount $mnt 2>/dev/null
    fi
  fi

  # ---- 4. SIGTERM -----------------------------------------------------------------------------
  t0=$(now)
  kill -TERM "$server_pid"
  wait_exit "$server_pid" 300; status=$exit_status
  for _ in $(seq 50); do gone && [ ! -e /dev/ublkc0 ] && break; sleep 0.1; done
  if [ "$status" = 0 ] && gone && [ ! -e /dev/ublkc0 ]; then
    pass "$label: SIGTERM: server exited 0, /dev/ublkb0 and /dev/ublkc0 gone ($(since "$t0")): $(tail -n 1 /tmp/ublk-server.out)"
  else
    fail "$label: SIGTERM: status $status, ublkb0 $([ -e /dev/ublkb0 ] && echo present || echo gone), ublkc0 $([ -e /dev/ublkc0 ] && echo present || echo gone); stderr: $(tail -n 3 /tmp/ublk-server.err)"
  fi

}

check_device null:gb=1,memory_backed=1 null 4m 16m ext4 "1 32" || { echo "ublk: cannot go on without the device" >&2; exit 1; }
# The file device's data path: zero copy with the kernel's auto
# registration where the kernel offers it (7.x: SUPPORT_ZERO_COPY,
# BUF_REG_OFF_DAEMON and AUTO_BUF_REG), where ext4 runs on it too; the
# kernel's copy through the server's buffers on 6.12.
case "$(uname -r)" in
  6.*) file_fs=none want_path="copied by the kernel" ;;
  *) file_fs=ext4 want_path="zero copy, auto-registered" ;;
esac
# reap=client: the queue thread reaps the file's ring (no completion
# thread); the recovery device below keeps the completion thread.
check_device file:path=/tmp/ublk.img,create=1,size=512m,reap=client file 2m 8m "$file_fs" 32
if grep -q "KiB, $want_path, queue" /tmp/ublk-server.out; then
  pass "file: data path '$want_path' on Linux $(uname -r): $(head -n 1 /tmp/ublk-server.out)"
else
  fail "file: want data path '$want_path' on Linux $(uname -r): $(head -n 1 /tmp/ublk-server.out)"
fi
summary=$(tail -n 1 /tmp/ublk-server.out)
# zero_copy_counts SUMMARY: the server's last line's zero-copy counts
# into zc ("" if it has none), zc_ios, zc_copied, zc_auto, zc_explicit.
zero_copy_counts() {
  zc=$(sed -n 's/.*, \([0-9]*\) zero copy, \([0-9]*\) copied.*, \([0-9]*\) registered by the kernel, \([0-9]*\) by the server.*/\1 \2 \3 \4/p' <<< "$1")
  read -r zc_ios zc_copied zc_auto zc_explicit <<< "$zc"
}
if [ "$want_path" != "copied by the kernel" ]; then
  # Every read and write went through the request's own pages, which the
  # kernel registered itself.
  zero_copy_counts "$summary"
  if [ -n "$zc" ] && [ "$zc_ios" -gt 1000 ] && [ "$zc_copied" = 0 ] && [ "$zc_auto" = "$zc_ios" ] && [ "$zc_explicit" = 0 ]; then
    pass "file: $zc_ios reads and writes with zero copy, all registered by the kernel: $summary"
  else
    fail "file: zero copy counts: $summary"
  fi
  # The fallback, for real: a buffer table of one entry
  # (MQBLK_UBLK_TEST_AUTO_TABLE_ENTRIES) leaves the kernel no room for the
  # pages of any tag but 0, so their requests come marked NEED_REG_BUF
  # and the file driver registers them in its own ring; fio verifies.
  spec=file:path=/tmp/ublk.img,size=512m,reap=client
  export MQBLK_UBLK_TEST_AUTO_TABLE_ENTRIES=1
  start_server
  unset MQBLK_UBLK_TEST_AUTO_TABLE_ENTRIES
  "$fio" --name=fallback --filename=/dev/ublkb0 --direct=1 --ioengine=io_uring --rw=randwrite --bs=1m --size=64m \
    --iodepth=8 --verify=crc32c --do_verify=1 > /tmp/fallback-fio.log 2>&1
  fio_status=$?
  kill -TERM "$server_pid"
  wait_exit "$server_pid" 300
  summary=$(tail -n 1 /tmp/ublk-server.out)
  zero_copy_counts "$summary"
  if [ "$fio_status" = 0 ] && [ "$exit_status" = 0 ] && [ -n "$zc" ] && [ "$zc_explicit" -gt 64 ] &&
    [ "$zc_copied" = 0 ] && [ $((zc_auto + zc_explicit)) = "$zc_ios" ]; then
    pass "file: auto registration's fallback: fio verify of 64 MiB passed; $zc_explicit requests registered by the server, $zc_auto by the kernel: $summary"
  else
    fail "file: auto registration's fallback: fio status $fio_status, server $exit_status: $summary; fio: $(tail -n 3 /tmp/fallback-fio.log)"
  fi
fi
rm -f /tmp/ublk.img
spec=null:gb=1,memory_backed=1

# ---- 5. del from another process ---------------------------------------------------------------
if start_server; then
  t0=$(now)
  "$mqblk" ublk del 0 > /tmp/ublk-del.txt 2>&1 &
  del_pid=$!
  wait_exit "$server_pid" 300; status=$exit_status
  wait_exit "$del_pid" 100; del_status=$exit_status
  if [ "$status" = 0 ] && [ "$del_status" = 0 ] && gone && [ ! -e /dev/ublkc0 ]; then
    pass "ublk del 0: server exited 0, device gone ($(since "$t0"))"
  else
    fail "ublk del 0: server status $status, del status $del_status ($(cat /tmp/ublk-del.txt)); server: $(tail -n 3 /tmp/ublk-server.err)"
  fi
fi

# ---- 6. SIGKILL mid-I/O ------------------------------------------------------------------------
if start_server; then
  # allow_file_create=0: should the device be gone before fio opens it,
  # fio must fail rather than fill a regular file at /dev/ublkb0.
  "$fio" --name=crash --filename=/dev/ublkb0 --direct=1 --ioengine=io_uring --rw=randrw --bs=4k \
    --iodepth=32 --size=1g --time_based --runtime=120 --allow_file_create=0 \
    --output=/tmp/fio-crash.txt > /dev/null 2>&1 &
  fio_pid=$!
  # Kill only once fio's I/O is flowing (fio starts slowly under TCG):
  # /sys/block/ublkb0/stat fields 1 and 5 count completed reads and writes.
  wait_for_ios '$1 + $5'
  echo "crash test: SIGKILL to the server after $ios completed I/Os"
  t0=$(now)
  kill -KILL "$server_pid"
  wait_exit "$fio_pid" 600; fio_status=$exit_status
  for _ in $(seq 100); do gone && break; sleep 0.1; done
  if [ "$fio_status" != timeout ] && [ "$fio_status" != 0 ] && gone; then
    pass "SIGKILL mid-I/O: fio failed with status $fio_status ($(grep -o 'err= *[0-9]*[^)]*' /tmp/fio-crash.txt | head -n 1)) after $(since "$t0"); /dev/ublkb0 gone"
  else
    # Once the server is dead only the kernel can end its requests: say
    # where fio waits (a request never ended leaves it in D state).
    fail "SIGKILL mid-I/O: fio status $fio_status, ublkb0 $([ -e /dev/ublkb0 ] && echo present || echo gone); fio's threads: $(for t in /proc/"$fio_pid"/task/*; do echo "[$(cut -d' ' -f3 "$t/stat" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)] $(head -n 3 "$t/stack" 2>/dev/null | tr '\n' ' ')"; done)"
    [ "$fio_status" = timeout ] && kill -KILL "$fio_pid" 2>/dev/null
  fi
  # DEL_DEV waits, interruptibly, until every opener of /dev/ublkb0 has
  # closed it: bounded, so that a fio that never ends fails this check
  # instead of hanging the guest.
  if timeout 60 "$mqblk" ublk del 0 > /tmp/ublk-del.txt 2>&1 && [ ! -e /dev/ublkc0 ]; then
    pass "after the crash, ublk del 0 removes the device"
  else
    fail "after the crash, ublk del 0 (bounded at 60 s): $(cat /tmp/ublk-del.txt); ublkc0 $([ -e /dev/ublkc0 ] && echo present || echo gone)"
  fi
fi

# ---- 7. a power cut through the control socket ---------------------------------------------------
spec=null:size=64,memory_backed=1,cache_size=8
server_args=(--control /run/ublk-ctl --cpu-affinity off)
if start_server; then
  wc=$(cat /sys/block/ublkb0/queue/write_cache)
  [ "$wc" = "write back" ] && pass "cached device: write_cache '$wc'" || fail "cached device: write_cache '$wc'"
  head -c 2M /dev/urandom > /tmp/pattern
  head -c 2M /dev/zero > /tmp/zeros
  readback() { dd if=/dev/ublkb0 bs=1M count=2 iflag=direct status=none > /tmp/back; }
  dd if=/tmp/pattern of=/dev/ublkb0 bs=1M count=2 oflag=direct status=none
  cut=$("$mqblk" control /run/ublk-ctl power_cut 2>&1)
  readback
  if [ "$cut" = "ok lost_pages=512" ] && cmp -s /tmp/back /tmp/zeros; then
    pass "power cut: 2 MiB written without a flush were lost ($cut), the device reads zeros"
  else
    fail "power cut without a flush: control said '$cut'; read back $(cmp /tmp/back /tmp/zeros 2>&1 | head -n 1)"
  fi
  dd if=/tmp/pattern of=/dev/ublkb0 bs=1M count=2 oflag=direct conv=fsync status=none
  cut=$("$mqblk" control /run/ublk-ctl power_cut 2>&1)
  readback
  if [ "$cut" = "ok lost_pages=0" ] && cmp -s /tmp/back /tmp/pattern; then
    pass "power cut after fsync: nothing lost ($cut), 2 MiB byte for byte"
  else
    fail "power cut after fsync: control said '$cut'; read back $(cmp /tmp/back /tmp/pattern 2>&1 | head -n 1)"
  fi
  bad=$("$mqblk" control /run/ublk-ctl set badblocks +9-1 2>&1); bad_status=$?
  readback
  if [ "$bad_status" = 1 ] && cmp -s /tmp/back /tmp/pattern && [ "$("$mqblk" control /run/ublk-ctl get badblocks)" = "ok " ]; then
    pass "a refused control request changes nothing ($bad)"
  else
    fail "refused control request: status $bad_status, '$bad'"
  fi
  kill -TERM "$server_pid"
  wait_exit "$server_pid" 300
  [ "$exit_status" = 0 ] && [ ! -e /run/ublk-ctl ] && pass "cached device: SIGTERM, control socket removed" ||
    fail "cached device: SIGTERM status $exit_status, control socket $([ -e /run/ublk-ctl ] && echo left || echo removed)"
fi
server_args=()

# ---- 8. recovery: a new server takes over from a killed one ---------------------------------------
spec=file:path=/tmp/ublk-rec.img,create=1,size=256m
server_args=(--recovery=reissue)
if start_server; then
  dmesg_before=$(dmesg | wc -l)
  "$fio" --name=recover --filename=/dev/ublkb0 --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
    --iodepth=32 --size=32m --verify=crc32c --do_verify=1 --verify_fatal=1 --allow_file_create=0 \
    --output=/tmp/fio-recover.txt > /dev/null 2>&1 &
  fio_pid=$!
  wait_for_ios '$5'
  inflight=$(cat /sys/block/ublkb0/inflight 2>/dev/null | awk '{ print $1 + $2 }')
  t0=$(now)
  kill -KILL "$server_pid"
  wait "$server_pid" 2>/dev/null
  echo "recovery test: SIGKILL to the server after $ios completed writes, $inflight in flight"
  kill -0 "$fio_pid" 2>/dev/null || fail "recovery: fio ended before the kill: the job is too short to test anything"
  state=$("$mqblk" ublk list | awk '$1 == 0 { print $2 }')
  "$mqblk" ublk recover 0 --device "$spec" > /tmp/ublk-server.out 2> /tmp/ublk-server.err &
  server_pid=$!
  wait_exit "$fio_pid" 3000; fio_status=$exit_status
  io_errors=$(dmesg | tail -n +"$((dmesg_before + 1))" | grep -c -i -E 'ublkb0.*(I/O error|error)|(I/O error|critical).*ublkb0' || true)
  if [ -b /dev/ublkb0 ] && [ "$fio_status" = 0 ] && grep -q 'err= 0' /tmp/fio-recover.txt &&
    grep -q 'serving' /tmp/ublk-server.out && [ "$io_errors" = 0 ]; then
    pass "recovery: /dev/ublkb0 kept ($state) after SIGKILL, 'ublk recover 0' served it again: fio's verified writes ended with status 0 after $(since "$t0"), no I/O error in dmesg"
  else
    fail "recovery: fio status $fio_status ($(grep -o 'err= *[0-9]*[^)]*' /tmp/fio-recover.txt | head -n 1); $(grep -i -m 2 'verify' /tmp/fio-recover.txt | tr '\n' ' ')), state after the kill '$state', ublkb0 $([ -b /dev/ublkb0 ] && echo present || echo gone), $io_errors I/O errors in dmesg; recover said: $(cat /tmp/ublk-server.out /tmp/ublk-server.err | tail -n 5)"
    [ "$fio_status" = timeout ] && kill -KILL "$fio_pid" 2>/dev/null
  fi
  kill -TERM "$server_pid"
  wait_exit "$server_pid" 300
  for _ in $(seq 100); do gone && break; sleep 0.1; done
  [ "$exit_status" = 0 ] && gone && pass "recovered server: SIGTERM stops and deletes the device" ||
    fail "recovered server: SIGTERM status $exit_status, ublkb0 $(gone && echo gone || echo present)"
fi
server_args=()

# ---- 9. without root: an unprivileged device -------------------------------------------------------
nobody=65534
as_nobody() { setpriv --reuid=$nobody --regid=$nobody --clear-groups "$@"; }
# The lean fio may sit under root's home (mode 0700): the user runs a copy.
cp "$(command -v "$fio")" /tmp/fio-nobody && chmod 755 /tmp/fio-nobody

out=$(as_nobody "$mqblk" ublk add --unprivileged --device null:gb=1,memory_backed=1 2>&1); status=$?
if [ "$status" != 0 ] && echo "$out" | grep -q 'cannot open /dev/ublk-control' && echo "$out" | grep -q 'ublk without root'; then
  pass "unprivileged: a user without access to /dev/ublk-control is told so (status $status): $out"
else
  fail "unprivileged: add without access to /dev/ublk-control: status $status: $out"
fi

# What the administrator does once: /dev/ublk-control to a group of the
# user's, and the udev rule (here a loop running the rule's helper on each
# new node, once per node).
chgrp $nobody /dev/ublk-control && chmod 0660 /dev/ublk-control
udev_rule_loop() {
  local seen=" " node name key
  while :; do
    for node in /dev/ublkc[0-9]* /dev/ublkb[0-9]*; do
      [ -e "$node" ] || continue
      name=${node#/dev/}
      key="$name:$(stat -c %i "$node" 2>/dev/null)"
      case "$seen" in *" $key "*) continue ;; esac
      MQBLK="$mqblk" sh "$root/scripts/ublk-chown.sh" "$name" add >> /tmp/udev-rule.log 2>&1 && seen="$seen$key "
    done
    sleep 0.1
  done
}
udev_rule_loop &
udev_pid=$!

out=$(as_nobody "$mqblk" ublk add --device null:gb=1,memory_backed=1 2>&1); status=$?
if [ "$status" != 0 ] && echo "$out" | grep -q -- '--unprivileged'; then
  pass "unprivileged: add without --unprivileged as a user is refused, naming the option (status $status): $out"
else
  fail "unprivileged: add without --unprivileged as a user: status $status: $out"
fi

spec=null:gb=1,memory_backed=1
if start_server; then
  as_nobody "$mqblk" ublk add --unprivileged --device null:gb=1,memory_backed=1 --id 1 \
    > /tmp/ublk-unpriv.out 2> /tmp/ublk-unpriv.err &
  unpriv_pid=$!
  t0=$(now)
  for _ in $(seq 600); do
    grep -q 'serving' /tmp/ublk-unpriv.out && break
    kill -0 "$unpriv_pid" 2>/dev/null || break
    sleep 0.1
  done
  owners="$(stat -c %u:%g /dev/ublkc1 2>/dev/null) $(stat -c %u:%g /dev/ublkb1 2>/dev/null)"
  if [ -b /dev/ublkb1 ] && grep -q 'unprivileged, queue 0 on CPU' /tmp/ublk-unpriv.out && [ "$owners" = "$nobody:$nobody $nobody:$nobody" ]; then
    pass "unprivileged: uid $nobody serves device 1 ($(since "$t0")): $(cat /tmp/ublk-unpriv.out); /dev/ublkc1 and /dev/ublkb1 given to $owners"
    "$mqblk" ublk info 1 > /tmp/ublk-info.txt 2>&1
    if grep -qx 'unprivileged yes' /tmp/ublk-info.txt && grep -qx "owner $nobody:$nobody" /tmp/ublk-info.txt; then
      pass "unprivileged: ublk info 1: $(grep -E '^(unprivileged|owner|flags) ' /tmp/ublk-info.txt | tr '\n' ' ')"
    else
      fail "unprivileged: ublk info 1: $(cat /tmp/ublk-info.txt)"
    fi
    t0=$(now)
    if as_nobody /tmp/fio-nobody --name=unpriv --filename=/dev/ublkb1 --direct=1 --ioengine=libaio \
        --rw=randwrite --bs=4k --iodepth=32 --size=16m --allow_file_create=0 \
        --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
        --output-format=terse --terse-version=3 --output=/tmp/fio-unpriv.txt > /dev/null 2>&1; then
      pass "unprivileged: fio as uid $nobody, randwrite 4k iodepth=32 size=16m verify=crc32c: $(cut -d';' -f6 /tmp/fio-unpriv.txt) KiB verified ($(since "$t0"))"
    else
      fail "unprivileged: fio as uid $nobody: $(tail -n 5 /tmp/fio-unpriv.txt 2>/dev/null)"
    fi
    as_nobody "$mqblk" ublk list > /tmp/ublk-list.txt 2>&1
    if grep -Eq "^1 +LIVE .*/dev/ublkb1 +$nobody:$nobody\$" /tmp/ublk-list.txt && grep -Eq '^0 +\? .* privileged$' /tmp/ublk-list.txt; then
      pass "unprivileged: ublk list as uid $nobody shows device 1 LIVE, owned by $nobody:$nobody, and device 0 as privileged"
    else
      fail "unprivileged: ublk list as uid $nobody: $(cat /tmp/ublk-list.txt)"
    fi
    # Another user, let into /dev/ublk-control by the same group: the
    # kernel checks its access to /dev/ublkc1 (mode 0600, 65534's).
    out=$(setpriv --reuid=65533 --regid=$nobody --clear-groups "$mqblk" ublk del 1 2>&1); status=$?
    if [ "$status" != 0 ] && echo "$out" | grep -q 'EACCES' && echo "$out" | grep -q 'another user' && [ -b /dev/ublkb1 ]; then
      pass "unprivileged: uid 65533 cannot delete uid $nobody's device 1 (status $status, device 1 stays): $out"
    else
      fail "unprivileged: ublk del 1 as uid 65533: status $status: $out; ublkb1 $([ -b /dev/ublkb1 ] && echo present || echo gone)"
    fi
    out=$(as_nobody "$mqblk" ublk del 0 2>&1); status=$?
    if [ "$status" != 0 ] && echo "$out" | grep -q 'EPERM' && echo "$out" | grep -q 'only root' && [ -b /dev/ublkb0 ]; then
      pass "unprivileged: uid $nobody cannot delete root's device 0 (status $status, device 0 stays): $out"
    else
      fail "unprivileged: ublk del 0 as uid $nobody: status $status: $out; ublkb0 $([ -b /dev/ublkb0 ] && echo present || echo gone)"
    fi
    t0=$(now)
    out=$(as_nobody "$mqblk" ublk del 1 2>&1); status=$?
    wait_exit "$unpriv_pid" 300
    for _ in $(seq 50); do [ ! -e /dev/ublkb1 ] && [ ! -e /dev/ublkc1 ] && break; sleep 0.1; done
    if [ "$status" = 0 ] && [ "$exit_status" = 0 ] && [ ! -e /dev/ublkb1 ] && [ ! -e /dev/ublkc1 ]; then
      pass "unprivileged: uid $nobody deletes device 1: its server exited 0, nodes gone ($(since "$t0")): $(tail -n 1 /tmp/ublk-unpriv.out)"
    else
      fail "unprivileged: ublk del 1 as uid $nobody: status $status ($out), server status $exit_status; server: $(tail -n 3 /tmp/ublk-unpriv.err)"
    fi
  else
    fail "unprivileged: no device 1 after $(since "$t0") (nodes $owners); server said: $(cat /tmp/ublk-unpriv.out /tmp/ublk-unpriv.err); rule: $(tail -n 5 /tmp/udev-rule.log 2>/dev/null)"
    kill -TERM "$unpriv_pid" 2>/dev/null
    wait_exit "$unpriv_pid" 300
  fi
  kill -TERM "$server_pid"
  wait_exit "$server_pid" 300
  [ "$exit_status" = 0 ] || fail "unprivileged: root's device 0: SIGTERM status $exit_status"
fi
kill "$udev_pid" 2>/dev/null
wait "$udev_pid" 2>/dev/null
chmod 0600 /dev/ublk-control && chgrp 0 /dev/ublk-control

if [ "$failures" -ne 0 ]; then
  echo "ublk: $failures check(s) failed" >&2
  exit 1
fi
echo "ublk: all checks passed"
