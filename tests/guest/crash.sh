#!/usr/bin/env bash
# Crash consistency of ext4 on an mqblk device that loses power, in the
# Linux 6.12 guest: run it with tests/guest/run.sh.
#
#   cargo build --release -p mqblk-cli && tests/guest/run.sh tests/guest/crash.sh
#
# For each seeded cut: `mqblk ublk add --control` serves
# null:size=256,memory_backed=1,cache_size=16 (a volatile write cache: the
# kernel sees "write back" and sends FLUSH and FUA) as /dev/ublkb0; ext4
# (mkfs defaults, data=ordered) is mounted on it; a workload writes files
# of 1-64 KiB, each with `dd conv=fsync`, and records the SHA-256 of each
# file whose fsync returned; then it writes more files and pushes them to
# the device with sync_file_range, no fsync (their data sits in the
# device's cache), and
# `mqblk control power_off` cuts the power at that point (what no FLUSH or
# FUA made durable is lost, and every later write is dropped, so the
# unmount cannot write past the cut). The device powers on again, ext4 is
# mounted (journal replay) and unmounted, `fsck.ext4 -fn` must find it
# clean, and after a remount every file whose fsync returned must be intact,
# byte for byte. One cut tears the cache into the medium block by block
# (powercut_tear=1) on a 4 KiB-block device (bs=4096): a tear never splits
# a logical block, and at bs=512 it may split ext4's 1,024-byte superblock,
# which ext4 then refuses to mount ("invalid superblock checksum", until
# fsck restores it from a backup): a real 512-byte disk may do that too,
# so it is no test of ext4's journal. A last cut does the same to sqlite3 (WAL,
# synchronous=FULL): `PRAGMA integrity_check` ok and every committed row
# there. Prints "crash: all N cuts survived" when all pass.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -uo pipefail

[ "${MQBLK_GUEST:-}" = 1 ] || { echo "crash.sh: run me with tests/guest/run.sh" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
mqblk=${MQBLK_BIN:-$root/target/release/mqblk}
[ -x "$mqblk" ] || { echo "crash.sh: no $mqblk (cargo build --release -p mqblk-cli)" >&2; exit 2; }

failures=0
pass() { echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
ctl=/run/crash-ctl
mnt=/tmp/crash-mnt
mkdir -p "$mnt"

# Writes the FILEs' dirty pages to the device without a FLUSH:
# sync_file_range(SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER = 7).
# Python's os has no sync_file_range: libc's, through ctypes (one python3
# for all the files: each start costs seconds under TCG).
push_to_device() {
  python3 -c 'import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    if libc.sync_file_range(fd, ctypes.c_longlong(0), ctypes.c_longlong(0), 7) != 0:
        sys.exit(path + ": sync_file_range: " + os.strerror(ctypes.get_errno()))
    os.close(fd)' "$@"
}

# Starts the server over SPEC ($1); waits (at most 60 s) for /dev/ublkb0.
server_pid=""
start_server() {
  "$mqblk" ublk add --device "$1" --queues 1 --depth 32 --id 0 --control "$ctl" \
    > /tmp/crash-server.out 2> /tmp/crash-server.err &
  server_pid=$!
  for _ in $(seq 600); do
    [ -b /dev/ublkb0 ] && grep -q serving /tmp/crash-server.out && [ -S "$ctl" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  fail "no /dev/ublkb0: $(cat /tmp/crash-server.out /tmp/crash-server.err)"
  return 1
}

stop_server() {
  kill -TERM "$server_pid" 2>/dev/null
  for _ in $(seq 300); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  wait "$server_pid" 2>/dev/null
}

# One cut: SEED ($1), extra spec keys ($2), label ($3).
one_cut() {
  local seed=$1 extra=$2 label=$3 synced unsynced i size sum bad=0 lost out
  RANDOM=$seed
  synced=$((5 + RANDOM % 20))
  unsynced=$((1 + RANDOM % 8))
  start_server "null:size=256,memory_backed=1,cache_size=16$extra" || return 1
  wc=$(cat /sys/block/ublkb0/queue/write_cache)
  mkfs.ext4 -q -F /dev/ublkb0 > /tmp/crash-mkfs.txt 2>&1 || { fail "$label: mkfs: $(cat /tmp/crash-mkfs.txt)"; stop_server; return 1; }
  mount /dev/ublkb0 "$mnt" || { fail "$label: mount"; stop_server; return 1; }
  mkdir -p "$mnt/d"
  : > /tmp/crash-synced.txt
  for i in $(seq "$synced"); do
    size=$((1024 * (1 + RANDOM % 64)))
    head -c "$size" /dev/urandom > /tmp/crash-src
    dd if=/tmp/crash-src of="$mnt/d/s$i" bs=64k conv=fsync status=none || fail "$label: dd s$i"
    # Recorded only once the fsync returned.
    echo "$(sha256sum < /tmp/crash-src | cut -c1-64)  $mnt/d/s$i" >> /tmp/crash-synced.txt
  done
  # Unsynced: written, then pushed to the device by sync_file_range
  # (SYNC_FILE_RANGE_WRITE, no FLUSH), so their data sits in the device's
  # cache while their allocation waits in the journal. (Direct writes
  # would not do: ext4 makes an extending direct write durable, FLUSH
  # included.)
  for i in $(seq "$unsynced"); do
    head -c $((1024 * (1 + RANDOM % 64))) /dev/urandom > "$mnt/d/u$i"
  done
  push_to_device "$mnt"/d/u* || fail "$label: sync_file_range"
  lost=$("$mqblk" control "$ctl" power_off 2>&1)
  umount "$mnt" 2> /tmp/crash-umount.txt || umount -l "$mnt"
  out=$("$mqblk" control "$ctl" power_on 2>&1)
  if ! mount /dev/ublkb0 "$mnt" 2> /tmp/crash-mount.txt; then
    fail "$label: mount after the cut: $(cat /tmp/crash-mount.txt)"
    stop_server
    return 1
  fi
  umount "$mnt"
  if fsck.ext4 -fn /dev/ublkb0 > /tmp/crash-fsck.txt 2>&1; then
    mount /dev/ublkb0 "$mnt"
    sha256sum -c --quiet /tmp/crash-synced.txt > /tmp/crash-check.txt 2>&1 || bad=1
    umount "$mnt"
    if [ "$bad" = 0 ]; then
      pass "$label: cut after $synced fsynced and $unsynced unsynced files (write_cache '$wc'; power_off: $lost; power_on: $out): fsck clean, all $synced fsynced files intact"
    else
      fail "$label: fsynced files lost or changed: $(head -n 5 /tmp/crash-check.txt)"
    fi
  else
    fail "$label: fsck.ext4 -fn after the cut: $(tail -n 8 /tmp/crash-fsck.txt)"
  fi
  stop_server
}

# Two plain cuts by default; more seeds explore more cut points:
#   MQBLK_CRASH_SEEDS="11 22 33" tests/guest/run.sh tests/guest/crash.sh
cuts=0
for seed in ${MQBLK_CRASH_SEEDS:-11 22}; do
  one_cut "$seed" "" "seed $seed"
  cuts=$((cuts + 1))
done
one_cut 44 ",bs=4096,powercut_tear=1" "seed 44, torn at 4 KiB blocks"
cuts=$((cuts + 1))

# sqlite3 on the same ext4: transactions with synchronous=FULL (each
# COMMIT fsyncs), the count of those that returned recorded, then more
# rows pushed out without a commit, and the cut. After journal replay
# `PRAGMA integrity_check` must say ok and every committed row be there.
sqlite_cut() {
  local label="sqlite, seed 55" committed=0 i lost out check rows
  RANDOM=55
  start_server "null:size=256,memory_backed=1,cache_size=16" || return 1
  mkfs.ext4 -q -F /dev/ublkb0 > /dev/null 2>&1 && mount /dev/ublkb0 "$mnt" || { fail "$label: mkfs or mount"; stop_server; return 1; }
  sqlite3 "$mnt/db" 'PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);' > /dev/null ||
    fail "$label: create"
  for i in $(seq $((10 + RANDOM % 20))); do
    sqlite3 "$mnt/db" "PRAGMA synchronous=FULL; INSERT INTO t(v) SELECT randomblob(2000) FROM generate_series(1, 50);" 2> /dev/null ||
      sqlite3 "$mnt/db" "PRAGMA synchronous=FULL; WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 50) INSERT INTO t(v) SELECT randomblob(2000) FROM n;" ||
      { fail "$label: insert $i"; break; }
    committed=$((committed + 50))
  done
  # An open transaction's pages reach the file (and the device) but never
  # commit: sqlite3 is killed before COMMIT.
  sqlite3 "$mnt/db" "PRAGMA cache_size=1; BEGIN; WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 500) INSERT INTO t(v) SELECT randomblob(4000) FROM n; SELECT 1;" > /dev/null &
  sleep 1
  kill -KILL $! 2> /dev/null
  wait $! 2> /dev/null
  push_to_device "$mnt"/db* || fail "$label: sync_file_range"
  lost=$("$mqblk" control "$ctl" power_off 2>&1)
  umount "$mnt" 2> /dev/null || umount -l "$mnt"
  out=$("$mqblk" control "$ctl" power_on 2>&1)
  mount /dev/ublkb0 "$mnt" || { fail "$label: mount after the cut"; stop_server; return 1; }
  check=$(sqlite3 "$mnt/db" 'PRAGMA integrity_check;' 2>&1)
  rows=$(sqlite3 "$mnt/db" 'SELECT count(*) FROM t;' 2>&1)
  umount "$mnt"
  if [ "$check" = ok ] && [ "$rows" = "$committed" ]; then
    pass "$label: cut after $committed committed rows (power_off: $lost; power_on: $out): integrity_check ok, all $rows rows there"
  else
    fail "$label: integrity_check '$check', $rows rows of $committed committed"
  fi
  stop_server
}
sqlite_cut
cuts=$((cuts + 1))

if [ "$failures" -ne 0 ]; then
  echo "crash: $failures of $cuts cuts failed" >&2
  exit 1
fi
echo "crash: all $cuts cuts survived"
