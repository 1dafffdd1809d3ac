#!/usr/bin/env bash
# A zoned mqblk device through ublk, against the guest kernel's own zoned
# null_blk: run it with tests/guest/run.sh (Linux 6.12).
#
#   cargo build --release -p mqblk-cli && tests/guest/run.sh tests/guest/ublk_zoned.sh
#
# Uses the host's target/release/mqblk (MQBLK_BIN overrides it). For each
# zoned configuration below, null_blk is loaded with those parameters
# (/dev/nullb0) and `mqblk ublk add` serves an mqblk null device with the
# same keys (/dev/ublkb0, UBLK_F_ZONED over user copy). Checks, each on its
# own line ("ok: ..." or "FAIL: ..."):
#   1. the block layer sees the same zoned queue on both: zoned model,
#      chunk_sectors, nr_zones, max_open_zones, max_active_zones,
#      logical_block_size, size, and max_sectors_kb and max_hw_sectors_kb
#      (so a large write splits into the same pieces on both);
#   2. `blkzone report` prints the same zones on both (REPORT_ZONES);
#   3. generated zone scripts (`mqblk zone gen`, SEEDS of them, OPS ops
#      each) give identical JSON lines through `mqblk zone script
#      --blkdev` on /dev/nullb0 and on /dev/ublkb0 (writes, reads, zone
#      open/close/finish/reset, reports: errors included); `blkzone reset`
#      of the whole device (REQ_OP_ZONE_RESET_ALL) after each script, on
#      both: three write-and-reset cycles in one server, each compared
#      with the kernel (not with an earlier cycle: null_blk's round-robin
#      choice of the implicitly open zone to close when a write needs one
#      more open zone, dev->imp_close_zone_no, survives a reset, so the
#      same script answers differently after a different history), and
#      the server's resident memory after each reset stays within the
#      conventional zones' data of the first cycle's;
#   4. fio zonemode=zbd, random writes with verify=crc32c, on /dev/ublkb0;
#   5. SIGTERM stops the server: exit 0, /dev/ublkb0 gone.
# Then, on a zoned device without open/active limits:
#   6. a zoned btrfs (mkfs.btrfs detects the host-managed device): mount,
#      files written and synced, umount, `btrfs check --readonly` clean,
#      remount, every file byte-exact. btrfs writes data with zone append,
#      so this is zone append from a real kernel client: the server's exit
#      line must count zone appends, and the data read back proves each
#      returned sector.
# Exits 0 only when all pass.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -uo pipefail

[ "${MQBLK_GUEST:-}" = 1 ] || { echo "ublk_zoned.sh: run me with tests/guest/run.sh" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
mqblk=${MQBLK_BIN:-$root/target/release/mqblk}
[ -x "$mqblk" ] || { echo "ublk_zoned.sh: no $mqblk (cargo build --release -p mqblk-cli)" >&2; exit 2; }
# The lean fio tests/guest/run.sh passes (Debian's loads 64 libraries over 9p).
fio=${MQBLK_GUEST_FIO:-fio}
seeds=${MQBLK_ZONED_SEEDS:-3}
ops=${MQBLK_ZONED_OPS:-150}
mods=$MQBLK_GUEST_MODULES

failures=0
pass() { echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

server_pid=""

# Starts `mqblk ublk add --device $1` in the background; waits (at most
# 60 s) for /dev/ublkb0.
start_server() {
  "$mqblk" ublk add --device "$1" --queues 2 --depth 64 --id 0 \
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
    return 0
  fi
  fail "no /dev/ublkb0 after $(since "$t0"); server said: $(cat /tmp/ublk-server.out /tmp/ublk-server.err)"
  return 1
}

# SIGTERM to the server; passes when it exits 0 and /dev/ublkb0 goes.
stop_server() {
  local label=$1 status=timeout
  kill -TERM "$server_pid"
  for _ in $(seq 300); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  if ! kill -0 "$server_pid" 2>/dev/null; then
    wait "$server_pid"; status=$?
  fi
  for _ in $(seq 50); do [ ! -e /dev/ublkb0 ] && break; sleep 0.1; done
  if [ "$status" = 0 ] && [ ! -e /dev/ublkb0 ]; then
    pass "$label: SIGTERM: server exited 0, /dev/ublkb0 gone: $(tail -n 1 /tmp/ublk-server.out)"
  else
    fail "$label: SIGTERM: status $status; stderr: $(tail -n 3 /tmp/ublk-server.err)"
    kill -KILL "$server_pid" 2>/dev/null
  fi
}

# The queue attributes a zoned block device is judged by.
queue_attrs() {
  local q=/sys/block/$1/queue
  echo "zoned=$(cat $q/zoned) chunk_sectors=$(cat $q/chunk_sectors) nr_zones=$(cat $q/nr_zones)" \
    "max_open_zones=$(cat $q/max_open_zones) max_active_zones=$(cat $q/max_active_zones)" \
    "logical_block_size=$(cat $q/logical_block_size) size=$(blockdev --getsize64 /dev/"$1")" \
    "max_sectors_kb=$(cat $q/max_sectors_kb) max_hw_sectors_kb=$(cat $q/max_hw_sectors_kb)"
}

# The server's VmRSS (KiB) after each cycle's reset, in resident_kib:
# passes when none exceeds the first by more than the conventional zones
# can hold ($1: the null_blk parameters, for zone_nr_conv and zone_size)
# plus 32 MiB of slack for the allocator.
check_resident_after_cycles() {
  local nr_conv zone_mib first max r
  nr_conv=$(echo "$1" | grep -o 'zone_nr_conv=[0-9]*' | cut -d= -f2)
  zone_mib=$(echo "$1" | grep -o 'zone_size=[0-9]*' | cut -d= -f2)
  zone_mib=${zone_mib:-256}
  first=${resident_kib[0]:-0}
  max=$((first + (${nr_conv:-0} * zone_mib + 32) * 1024))
  for r in "${resident_kib[@]}"; do
    if [ "$r" -gt "$max" ]; then
      fail "server resident after each cycle's reset: ${resident_kib[*]} KiB; over $max KiB"
      return
    fi
  done
  pass "server resident after each of ${#resident_kib[@]} cycles' reset: ${resident_kib[*]} KiB (bound $max KiB)"
}

# Checks 1-5 for one configuration: $1 the null_blk module parameters
# (also the mqblk spec's keys), $2 the `mqblk zone gen` shape.
check_config() {
  local params=$1 shape=$2 spec seed t0 n
  resident_kib=()
  spec="null:${params// /,},memory_backed=1"
  echo "== configuration: $spec"
  # shellcheck disable=SC2086
  if ! insmod "$mods/null_blk.ko" nr_devices=1 memory_backed=1 $params; then
    fail "insmod null_blk $params"
    return 1
  fi
  start_server "$spec" || { rmmod null_blk; return 1; }

  # ---- 1. the same zoned queue ------------------------------------------------------
  if [ "$(queue_attrs nullb0)" = "$(queue_attrs ublkb0)" ]; then
    pass "queue attributes equal: $(queue_attrs ublkb0)"
  else
    fail "queue attributes: null_blk: $(queue_attrs nullb0); ublk: $(queue_attrs ublkb0)"
  fi

  # ---- 2. the same zone report ------------------------------------------------------
  blkzone report /dev/nullb0 > /tmp/report-null.txt 2>&1
  blkzone report /dev/ublkb0 > /tmp/report-ublk.txt 2>&1
  if [ -s /tmp/report-ublk.txt ] && cmp -s /tmp/report-null.txt /tmp/report-ublk.txt; then
    pass "blkzone report: the same $(wc -l < /tmp/report-ublk.txt) zones"
  else
    fail "blkzone report differs: $(diff /tmp/report-null.txt /tmp/report-ublk.txt | head -n 6)"
  fi

  # ---- 3. generated scripts: identical results --------------------------------------
  for seed in $(seq 1 "$seeds"); do
    t0=$(now)
    # shellcheck disable=SC2086
    "$mqblk" zone gen --seed "$seed" --ops "$ops" --device "$spec" $shape > /tmp/script.txt
    "$mqblk" zone script --blkdev /dev/nullb0 /tmp/script.txt > /tmp/null.jsonl 2> /tmp/null.err
    "$mqblk" zone script --blkdev /dev/ublkb0 /tmp/script.txt > /tmp/ublk.jsonl 2> /tmp/ublk.err
    n=$(wc -l < /tmp/null.jsonl)
    if [ "$n" -ge "$ops" ] && cmp -s /tmp/null.jsonl /tmp/ublk.jsonl; then
      pass "seed $seed: $ops ops, $n identical JSON lines on nullb0 and ublkb0 ($(since "$t0"))"
    else
      fail "seed $seed: $n lines from nullb0 ($(head -c 200 /tmp/null.err)); first difference: $(diff /tmp/null.jsonl /tmp/ublk.jsonl | head -n 4)"
    fi
    if ! blkzone reset /dev/nullb0 || ! blkzone reset /dev/ublkb0; then
      fail "seed $seed: blkzone reset"
    fi
    resident_kib+=("$(awk '/^VmRSS:/ { print $2 }' "/proc/$server_pid/status")")
  done
  # The memory store frees a reset zone's pages: after each cycle's reset
  # the server holds the conventional zones' data (at most nr_conv x
  # zone_size) and its own buffers, not the cycles' sequential writes (a
  # store that kept them grew by about 1 GB a cycle and ran this 2 GiB
  # guest out of memory on the third).
  check_resident_after_cycles "$params"

  # ---- 4. fio zonemode=zbd with verify ----------------------------------------------
  t0=$(now)
  if "$fio" --name=zbd --filename=/dev/ublkb0 --direct=1 --ioengine=io_uring --iodepth=8 \
      --zonemode=zbd --rw=randwrite --bs=16k --io_size=16m --verify=crc32c --do_verify=1 \
      --verify_fatal=1 --verify_state_save=0 --output=/tmp/fio-zbd.txt > /dev/null 2>&1; then
    pass "fio zonemode=zbd randwrite bs=16k iodepth=8 verify=crc32c: $(grep -o 'WRITE: bw=[^,]*' /tmp/fio-zbd.txt) ($(since "$t0"))"
  else
    fail "fio zonemode=zbd: $(tail -n 6 /tmp/fio-zbd.txt)"
  fi

  # ---- 5. stop -----------------------------------------------------------------------
  stop_server "$spec"
  rmmod null_blk || fail "rmmod null_blk"
}

check_config "gb=1 zoned=1 zone_size=64 zone_capacity=48 zone_nr_conv=2 zone_max_open=3 zone_max_active=5" \
  "--zones 16 --nr-conv 2 --zone-sectors 131072 --capacity-sectors 98304"
check_config "gb=1 bs=4096 zoned=1 zone_size=32 zone_max_open=4" \
  "--zones 32 --zone-sectors 65536 --block-sectors 8"

# ---- 6. a zoned btrfs: zone append from a kernel client ------------------------------------
spec=null:gb=1,zoned=1,zone_size=16,memory_backed=1
# btrfs's modules as tests/guest/run.sh ships them for each series.
case "${MQBLK_GUEST_SERIES:-6.12}" in
  6.12) btrfs_modules="xor raid6_pq libcrc32c btrfs" ;;
  *) btrfs_modules="xor raid6_pq libblake2b btrfs" ;;
esac
for m in $btrfs_modules; do insmod "$mods/$m.ko" || fail "insmod $m"; done
if start_server "$spec"; then
  mnt=/tmp/mnt
  mkdir -p $mnt
  t0=$(now)
  ok=1
  {
    mkfs.btrfs -f /dev/ublkb0 &&
    mount -t btrfs /dev/ublkb0 $mnt &&
    head -c 24M /dev/urandom > $mnt/big &&
    mkdir -p $mnt/tree/a/b &&
    for i in $(seq 1 40); do head -c $((i * 1531)) /dev/urandom > "$mnt/tree/a/b/f$i"; done &&
    sync && (cd $mnt && find . -type f -print0 | sort -z | xargs -0 sha256sum) > /tmp/sums.txt &&
    umount $mnt
  } > /tmp/btrfs.log 2>&1 || ok=0
  if [ $ok = 1 ] && grep -qi 'zoned' /tmp/btrfs.log; then
    pass "btrfs: mkfs (zoned mode), mount, $(wc -l < /tmp/sums.txt) files written, sync, umount ($(since "$t0"))"
  else
    fail "btrfs setup (zoned mode expected): $(tail -n 8 /tmp/btrfs.log)"
    umount $mnt 2>/dev/null
    ok=0
  fi
  if [ $ok = 1 ]; then
    if btrfs check --readonly /dev/ublkb0 > /tmp/btrfs-check.log 2>&1; then
      pass "btrfs check --readonly clean"
    else
      fail "btrfs check: $(tail -n 6 /tmp/btrfs-check.log)"
    fi
    if mount -t btrfs /dev/ublkb0 $mnt && (cd $mnt && sha256sum --quiet -c /tmp/sums.txt) > /tmp/sumcheck.log 2>&1; then
      pass "btrfs remount: all $(wc -l < /tmp/sums.txt) files byte-exact (SHA-256)"
    else
      fail "btrfs remount and compare: $(tail -n 5 /tmp/sumcheck.log)"
    fi
    umount $mnt 2>/dev/null
  fi
  stop_server "btrfs"
  appends=$(grep -o '[0-9]* zone appends' /tmp/ublk-server.out | cut -d' ' -f1)
  if [ "${appends:-0}" -gt 0 ]; then
    pass "btrfs wrote through zone append: $appends zone appends, each committed with its sector"
  else
    fail "no zone appends counted: $(tail -n 1 /tmp/ublk-server.out)"
  fi
fi

if [ "$failures" -ne 0 ]; then
  echo "ublk zoned: $failures check(s) failed" >&2
  exit 1
fi
echo "ublk zoned: all checks passed"
