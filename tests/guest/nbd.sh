#!/usr/bin/env bash
# `mqblk serve` under the kernel's nbd client in a Linux 6.12 guest: run it
# with tests/guest/run.sh.
#
#   cargo build --release -p mqblk-cli && tests/guest/run.sh tests/guest/nbd.sh
#
# Uses the host's target/release/mqblk (MQBLK_BIN overrides it) and the
# host's nbd-client (Debian package nbd-client). Checks, inside the guest,
# each on its own line ("ok: ..." or "FAIL: ..."), over two devices in
# turn: null:gb=1,memory_backed=1 and a file device on the guest's tmpfs
# (file:path=/tmp/nbd.img,create=1,size=512m), each served as
# `mqblk serve --device SPEC --unix /tmp/nbd.sock`:
#   1. `nbd-client -unix /tmp/nbd.sock /dev/nbd0 -b 4096` connects (two
#      connections for the null device, one for the file device: a
#      hardware queue each) and /dev/nbd0 has the export's size; the file
#      device also zeroes a range (blkdiscard -z) and discards one;
#   2. fio with verify=crc32c on /dev/nbd0 (libaio: 4k random writes at
#      QD 32, 1M sequential writes at QD 4), read back and verified;
#   3. ext4, on the null device only (the kernel's side is the same for
#      both devices, and ext4 costs 90 s a device under TCG): mkfs, mount,
#      a 24 MiB file and a directory tree of small files, fsync, umount,
#      `fsck.ext4 -fn` clean, remount, every file's SHA-256 the same;
#   4. `nbd-client -d /dev/nbd0` disconnects (size 0), then SIGTERM stops
#      the server: exit status 0, "devices flushed", socket removed;
# then faults over the null device, the server killed with SIGKILL while
# fio runs 4k random I/O at QD 32:
#   5. connected with `-timeout 5`: fio ends with EIO (within 120 s), a new
#      read fails with EIO, `nbd-client -d` still disconnects;
#   6. connected with no timeout: a new read fails with EIO, `nbd-client
#      -d` disconnects and fio's pending I/O then ends with EIO;
#   7. /dev/nbd0 then serves a new server (1 MiB written, read back).
# Every wait is bounded (a hang is a failure, not a stuck guest). Exits 0
# only when all pass.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -uo pipefail

[ "${MQBLK_GUEST:-}" = 1 ] || { echo "nbd.sh: run me with tests/guest/run.sh" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
mqblk=${MQBLK_BIN:-$root/target/release/mqblk}
[ -x "$mqblk" ] || { echo "nbd.sh: no $mqblk (cargo build --release -p mqblk-cli)" >&2; exit 2; }
# The lean fio tests/guest/run.sh passes (Debian's loads 64 libraries over 9p).
fio=${MQBLK_GUEST_FIO:-fio}
command -v nbd-client > /dev/null || { echo "nbd.sh: no nbd-client on the host (apt-get install nbd-client)" >&2; exit 2; }
[ -b /dev/nbd0 ] || { echo "nbd.sh: no /dev/nbd0 (is the nbd module loaded?)" >&2; exit 2; }

failures=0
pass() { echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

sock=/tmp/nbd.sock
dev=/dev/nbd0
spec=""
server_pid=""

# The size of /dev/nbd0 in bytes as the kernel sees it (0: not connected).
nbd_bytes() { echo $(($(cat /sys/block/nbd0/size 2>/dev/null || echo 0) * 512)); }

# Starts a server in the background; waits (at most 60 s) for it to say
# it is ready (it logs "ready" once listening).
start_server() {
  "$mqblk" serve --device "$spec" --unix "$sock" > /tmp/nbd-server.out 2> /tmp/nbd-server.err &
  server_pid=$!
  local t0; t0=$(now)
  for _ in $(seq 600); do
    [ -S "$sock" ] && grep -q 'ready' /tmp/nbd-server.err && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -S "$sock" ] && grep -q 'ready' /tmp/nbd-server.err; then
    pass "server up: $(tail -n 1 /tmp/nbd-server.err) ($(since "$t0"))"
    return 0
  fi
  fail "server not ready after $(since "$t0"): $(cat /tmp/nbd-server.out /tmp/nbd-server.err)"
  return 1
}

# Connects /dev/nbd0 to the server with extra nbd-client options "$@";
# true once the kernel shows the device at size $expect (bounded: 60 s for
# nbd-client, 10 more for the size).
connect() {
  local expect=$1 t0; shift
  t0=$(now)
  if ! timeout 60 nbd-client -unix "$sock" "$dev" -b 4096 "$@" > /tmp/nbd-client.log 2>&1; then
    fail "nbd-client -unix $sock $dev -b 4096 $*: $(cat /tmp/nbd-client.log)"
    return 1
  fi
  for _ in $(seq 100); do
    [ "$(nbd_bytes)" = "$expect" ] && break
    sleep 0.1
  done
  if [ "$(nbd_bytes)" = "$expect" ]; then
    pass "nbd-client $*: $dev connected, $expect bytes ($(since "$t0")): $(tr '\n' ' ' < /tmp/nbd-client.log)"
    return 0
  fi
  fail "nbd-client $*: $dev is $(nbd_bytes) bytes, not $expect"
  return 1
}

# `nbd-client -d /dev/nbd0` (bounded); true once the device's size is 0.
disconnect() {
  local t0; t0=$(now)
  if timeout 60 nbd-client -d "$dev" > /tmp/nbd-disconnect.log 2>&1; then
    for _ in $(seq 100); do
      [ "$(nbd_bytes)" = 0 ] && break
      sleep 0.1
    done
  else
    echo "nbd-client -d: status $? ($(cat /tmp/nbd-disconnect.log))" >> /tmp/nbd-disconnect.log
  fi
  if [ "$(nbd_bytes)" = 0 ]; then
    pass "$1: nbd-client -d: $dev disconnected, size 0 ($(since "$t0"))"
    return 0
  fi
  fail "$1: nbd-client -d: $(cat /tmp/nbd-disconnect.log); $dev is still $(nbd_bytes) bytes"
  return 1
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

# Checks 1-4 over device SPEC ($1) of SIZE bytes ($2), named LABEL ($3) in
# the output; fio sizes SMALL ($4, 4k job) and LARGE ($5, 1M job); CONNS
# ($6) connections to the server (`nbd-client -connections`).
check_device() {
  spec=$1
  local bytes=$2 label=$3 small=$4 large=$5 conns=$6 fs=$7 rw bs qd size out t0 job ext4_ok status hwq
  # ---- 1. up and connected ---------------------------------------------------------------
  start_server || return 1
  connect "$bytes" -connections "$conns" || { kill -TERM "$server_pid"; wait_exit "$server_pid" 300; return 1; }
  # The kernel gives each connection a hardware queue of its own (the
  # server offers NBD_FLAG_CAN_MULTI_CONN: one connection's flush covers
  # the writes completed on all).
  hwq=$(find /sys/block/nbd0/mq -mindepth 1 -maxdepth 1 -type d | wc -l)
  if [ "$hwq" = "$conns" ]; then
    pass "$label: $conns connection(s), $hwq hardware queue(s)"
  else
    fail "$label: $conns connection(s) asked for, $hwq hardware queue(s)"
  fi
  echo "queue limits: logical $(cat /sys/block/nbd0/queue/logical_block_size) max_sectors_kb $(cat /sys/block/nbd0/queue/max_sectors_kb) write_cache '$(cat /sys/block/nbd0/queue/write_cache)' fua $(cat /sys/block/nbd0/queue/fua) discard_max_bytes $(cat /sys/block/nbd0/queue/discard_max_bytes) write_zeroes_max_bytes $(cat /sys/block/nbd0/queue/write_zeroes_max_bytes) rotational $(cat /sys/block/nbd0/queue/rotational)"

  if [ "$label" = file ]; then
    # Write zeroes (or zeroes written, should the kernel not send
    # NBD_CMD_WRITE_ZEROES) and discard (NBD_CMD_TRIM) reach the server.
    if head -c 1M /dev/urandom | dd of="$dev" bs=1M oflag=direct status=none &&
        timeout 120 blkdiscard -z -o 0 -l 1M "$dev" &&
        cmp -n 1048576 "$dev" /dev/zero && timeout 120 blkdiscard -o 1M -l 1M "$dev"; then
      pass "$label: blkdiscard -z zeroes 1 MiB, blkdiscard discards 1 MiB"
    else
      fail "$label: write zeroes or discard"
    fi
  fi

  # ---- 2. fio with verify ----------------------------------------------------------------
  for job in "randwrite 4k 32 $small" "write 1m 4 $large"; do
    read -r rw bs qd size <<< "$job"
    out=/tmp/fio-$rw-$bs-$qd.txt
    t0=$(now)
    if timeout 600 "$fio" --name=nbd --filename="$dev" --direct=1 --ioengine=libaio \
        --rw="$rw" --bs="$bs" --iodepth="$qd" --size="$size" \
        --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 --allow_file_create=0 \
        --output-format=terse --terse-version=3 --output="$out" > /dev/null 2> /tmp/fio-stderr.txt; then
      # Terse v3: field 6 read KiB, 8 read IOPS.
      pass "$label: fio libaio $rw bs=$bs iodepth=$qd size=$size verify=crc32c: $(cut -d';' -f6 "$out") KiB verified at $(cut -d';' -f8 "$out") IOPS ($(since "$t0"))"
    else
      # Verify failures and I/O errors are on fio's stderr.
      fail "$label: fio libaio $rw bs=$bs iodepth=$qd: $(head -n 5 /tmp/fio-stderr.txt)"
    fi
  done

  # ---- 3. ext4 ------------------------------------------------------------------------------
  if [ "$fs" = ext4 ]; then
    mnt=/tmp/mnt
    mkdir -p $mnt
    t0=$(now)
    ext4_ok=1
    {
      mkfs.ext4 -q -F "$dev" &&
      mount -t ext4 "$dev" $mnt &&
      head -c 24M /dev/urandom > $mnt/big &&
      mkdir -p $mnt/tree/a/b/c $mnt/tree/d &&
      for i in $(seq 1 60); do head -c $((i * 397)) /dev/urandom > "$mnt/tree/$((i % 3 == 0 ? 1 : 0))-$i"; done &&
      for i in $(seq 1 20); do head -c $((i * 911)) /dev/urandom > "$mnt/tree/a/b/c/f$i"; echo "$i" > "$mnt/tree/d/n$i"; done &&
      # fsync every file and the file system (sync -f: syncfs) before the sums.
      find $mnt -type f -exec sync {} + && sync -f $mnt &&
      (cd $mnt && find . -type f -print0 | sort -z | xargs -0 sha256sum) > /tmp/sums.txt &&
      umount $mnt
    } > /tmp/ext4.log 2>&1 || ext4_ok=0
    if [ $ext4_ok = 1 ]; then
      pass "$label: ext4: mkfs, mount, $(wc -l < /tmp/sums.txt) files written, fsync, umount ($(since "$t0"))"
    else
      fail "$label: ext4 setup: $(tail -n 5 /tmp/ext4.log)"
      umount $mnt 2>/dev/null
    fi
    if [ $ext4_ok = 1 ]; then
      if fsck.ext4 -fn "$dev" > /tmp/fsck.log 2>&1; then
        pass "$label: fsck.ext4 -fn clean: $(tail -n 1 /tmp/fsck.log)"
      else
        fail "$label: fsck.ext4 -fn: $(tail -n 5 /tmp/fsck.log)"
      fi
      if mount -t ext4 "$dev" $mnt && (cd $mnt && sha256sum --quiet -c /tmp/sums.txt) > /tmp/sumcheck.log 2>&1; then
        pass "$label: remount: all $(wc -l < /tmp/sums.txt) files byte-exact (SHA-256)"
      else
        fail "$label: remount and compare: $(tail -n 5 /tmp/sumcheck.log)"
      fi
      umount $mnt 2>/dev/null
    fi
  fi

  # ---- 4. disconnect, then SIGTERM --------------------------------------------------------------
  disconnect "$label"
  t0=$(now)
  kill -TERM "$server_pid"
  wait_exit "$server_pid" 300; status=$exit_status
  if [ "$status" = 0 ] && grep -q 'devices flushed' /tmp/nbd-server.out && [ ! -e "$sock" ]; then
    pass "$label: SIGTERM: server exited 0 ($(since "$t0")): $(tail -n 1 /tmp/nbd-server.out); socket removed"
    # A request the server refused or a protocol error is logged as a
    # warning or an error: the kernel client must have caused none.
    if grep -E -q 'mqblk serve: (warn|error):' /tmp/nbd-server.err; then
      fail "$label: the server logged: $(grep -E 'mqblk serve: (warn|error):' /tmp/nbd-server.err | head -n 3)"
    fi
  else
    fail "$label: SIGTERM: status $status, socket $([ -e "$sock" ] && echo present || echo removed); out: $(cat /tmp/nbd-server.out); err: $(tail -n 3 /tmp/nbd-server.err)"
    [ "$status" = timeout ] && kill -KILL "$server_pid" 2>/dev/null
  fi
}

check_device null:gb=1,memory_backed=1 $((1 << 30)) null 4m 16m 2 ext4 || { echo "nbd: cannot go on without the device" >&2; exit 1; }
check_device file:path=/tmp/nbd.img,create=1,size=512m $((512 << 20)) file 4m 16m 1 none
rm -f /tmp/nbd.img
spec=null:gb=1,memory_backed=1

# ---- 5 and 6. SIGKILL mid-I/O -------------------------------------------------------------------
# What the 6.12 kernel does when the server dies (seen in this guest): its
# receive thread reads EOF and marks the connection dead ("Receive control
# failed"); requests sent after that find no live connection and fail at
# once with EIO ("Dead connection, failed to find a fallback"). Requests
# in flight stay pending until their timeout: with `-timeout N` they are
# requeued after N s and then fail the same way; with no timeout (the
# default) they wait for ever ("Possible stuck request" every 30 s) until
# `nbd-client -d` fails them with EIO. Every wait here is bounded.

# Completed reads and writes of /dev/nbd0 (/sys/block/nbd0/stat fields 1
# and 5; they count from the disk's creation, across connections).
completed() { awk '{ print $1 + $5 }' /sys/block/nbd0/stat 2>/dev/null || echo 0; }

# Starts fio (libaio, 4k random reads and writes at QD 32) on /dev/nbd0
# and returns once its I/O flows (2000 I/Os completed since it started,
# bounded): fio starts slowly under TCG. Sets fio_pid.
fio_pid=""
start_fio() {
  local base; base=$(completed)
  # allow_file_create=0: should the device be gone before fio opens it,
  # fio must fail rather than fill a regular file at /dev/nbd0.
  "$fio" --name=crash --filename="$dev" --direct=1 --ioengine=libaio --rw=randrw --bs=4k \
    --iodepth=32 --size=1g --time_based --runtime=600 --allow_file_create=0 \
    --output=/tmp/fio-crash.txt > /dev/null 2>&1 &
  fio_pid=$!
  local ios=0
  for _ in $(seq 600); do
    ios=$(($(completed) - base))
    [ "$ios" -gt 2000 ] && break
    kill -0 "$fio_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "crash test: SIGKILL to the server after $ios completed I/Os"
}

# Kills the server with SIGKILL and waits (at most 10 s) for the kernel to
# notice (its log says so), so that later requests meet a dead connection.
kill_server() {
  kill -KILL "$server_pid"
  wait "$server_pid" 2>/dev/null
  for _ in $(seq 100); do
    dmesg | tail -n 50 | grep -q 'nbd0: Receive control failed' && break
    sleep 0.1
  done
}

# fio ($fio_pid) must end (at most 120 s) with EIO; $1 names the check.
expect_fio_eio() {
  local t0; t0=$(now)
  wait_exit "$fio_pid" 1200
  if [ "$exit_status" != timeout ] && [ "$exit_status" != 0 ] && grep -q 'err= *5 ' /tmp/fio-crash.txt; then
    pass "$1: fio failed with EIO, status $exit_status ($(grep -o 'err= *[0-9]*[^)]*' /tmp/fio-crash.txt | head -n 1)), $(since "$t0")"
  else
    fail "$1: fio status $exit_status after $(since "$t0") (want EIO within 120 s): $(grep -i 'err' /tmp/fio-crash.txt | head -n 3)"
    [ "$exit_status" = timeout ] && kill -KILL "$fio_pid" 2>/dev/null
  fi
}

# The kernel's nbd0 messages since the last `dmesg -C`, each once (one
# "Possible stuck request" line stands for all of them).
kernel_said() {
  dmesg | grep 'nbd0' | grep -v -e 'I/O error' -e 'capacity change' |
    sed -e 's/^\[[ 0-9.]*\] //' -e 's/\(Possible stuck request\).*/\1 .../' | sort -u | tr '\n' ';'
}

# A read of /dev/nbd0 must fail with EIO (within 60 s); $1 names the check.
expect_read_eio() {
  local t0 status; t0=$(now)
  timeout 60 dd if="$dev" of=/dev/null bs=4k count=1 iflag=direct > /tmp/dd-after.log 2>&1
  status=$?
  if [ "$status" = 1 ] && grep -q 'Input/output error' /tmp/dd-after.log; then
    pass "$1: a new read fails with EIO ($(since "$t0"))"
  else
    fail "$1: a new read: status $status ($([ "$status" = 124 ] && echo 'hung for 60 s' || echo 'want EIO')): $(cat /tmp/dd-after.log)"
  fi
}

spec=null:gb=1,memory_backed=1
dmesg -C
# 5. With -timeout 5: the pending I/O fails by itself.
if start_server && connect $((1 << 30)) -timeout 5; then
  start_fio
  kill_server
  echo "-timeout 5: $(awk '{ print $1 + $2 }' /sys/block/nbd0/inflight) request(s) pending after the kill"
  expect_fio_eio "SIGKILL mid-I/O, -timeout 5"
  expect_read_eio "SIGKILL mid-I/O, -timeout 5"
  disconnect "SIGKILL mid-I/O, -timeout 5"
  echo "kernel said: $(kernel_said)"
fi
dmesg -C
# 6. With no timeout: new I/O fails, the pending I/O waits for `nbd-client -d`.
if start_server && connect $((1 << 30)); then
  start_fio
  kill_server
  # The requests fio had in flight when the server died stay pending
  # (they have no timeout): `nbd-client -d` below must fail them.
  pending=$(awk '{ print $1 + $2 }' /sys/block/nbd0/inflight)
  if [ "$pending" -gt 0 ] && kill -0 "$fio_pid" 2>/dev/null; then
    pass "SIGKILL mid-I/O, no timeout: $pending request(s) pending, fio waiting"
  else
    fail "SIGKILL mid-I/O, no timeout: $pending request(s) pending, fio $(kill -0 "$fio_pid" 2>/dev/null && echo waiting || echo ended) (fio's I/O was not under way?)"
  fi
  expect_read_eio "SIGKILL mid-I/O, no timeout"
  disconnect "SIGKILL mid-I/O, no timeout"
  expect_fio_eio "SIGKILL mid-I/O, no timeout, after nbd-client -d"
  echo "kernel said: $(kernel_said)"
fi

# 7. /dev/nbd0 serves a new server after the crashes: 1 MiB written and
# read back, disconnect, SIGTERM. No timeout: on a loaded machine a TCG
# guest may stall a request for seconds, which -timeout 5 would fail.
if start_server && connect $((1 << 30)); then
  head -c 1M /dev/urandom > /tmp/mib
  if timeout 120 dd if=/tmp/mib of="$dev" bs=1M oflag=direct status=none &&
      timeout 120 cmp -n 1048576 /tmp/mib "$dev"; then
    pass "after the crashes: a new server on $dev reads back 1 MiB written"
  else
    fail "after the crashes: write and read back 1 MiB through a new server"
  fi
  disconnect "after the crashes"
  kill -TERM "$server_pid"
  wait_exit "$server_pid" 300
  if [ "$exit_status" = 0 ]; then
    pass "after the crashes: SIGTERM: server exited 0"
  else
    fail "after the crashes: SIGTERM: status $exit_status"
  fi
fi

if [ "$failures" -ne 0 ]; then
  echo "nbd: $failures check(s) failed" >&2
  exit 1
fi
echo "nbd: all checks passed"
