#!/usr/bin/env bash
# Smoke test of the guest harness: run it with tests/guest/run.sh.
#
#   [MQBLK_GUEST_SERIES=6.12|7] tests/guest/run.sh tests/guest/smoke.sh
#
# Checks, inside the guest: a kernel of the series run.sh was asked for
# (MQBLK_GUEST_SERIES: 6.12 or 7), /dev/ublk-control and /dev/nbd0,
# that null_blk loads from $MQBLK_GUEST_MODULES with the script's own
# parameters, and that fio (MQBLK_GUEST_FIO) writes 16 MiB of random 4k
# I/O on /dev/nullb0 (memory-backed) and verifies (crc32c) all of it, then
# that ext4 mounts on it. Exits 0 only when all pass; prints one line per
# check.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail

failures=0
pass() { echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

[ "${MQBLK_GUEST:-}" = 1 ] || { echo "smoke: run me with tests/guest/run.sh" >&2; exit 2; }
# The lean fio tests/guest/run.sh passes (Debian's loads 64 libraries over 9p).
fio=${MQBLK_GUEST_FIO:-fio}

kernel=$(uname -r)
series=${MQBLK_GUEST_SERIES:-}
case "$kernel" in
  "$series".*) pass "kernel $kernel (series $series)" ;;
  *) fail "kernel $kernel is not of the series '$series' (MQBLK_GUEST_SERIES)" ;;
esac

for dev in /dev/ublk-control /dev/nbd0; do
  if [ -c "$dev" ] || [ -b "$dev" ]; then pass "$dev exists"; else fail "$dev missing"; fi
done

for dir in /tmp /run; do
  if touch "$dir/.smoke" && rm "$dir/.smoke"; then pass "$dir writable"; else fail "$dir not writable"; fi
done

if insmod "$MQBLK_GUEST_MODULES/null_blk.ko" nr_devices=1 memory_backed=1 gb=1; then
  pass "insmod null_blk"
else
  fail "insmod null_blk"
fi
# devtmpfs creates the node asynchronously.
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -b /dev/nullb0 ] && break; sleep 0.2; done

if [ -b /dev/nullb0 ]; then
  echo none > /sys/block/nullb0/queue/scheduler
  if "$fio" --name=smoke --filename=/dev/nullb0 --direct=1 --ioengine=io_uring \
      --rw=randwrite --bs=4k --iodepth=8 --size=16m \
      --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 --output-format=terse \
      --terse-version=3 > /tmp/fio.txt &&
      # Terse v3: field 6 is read KiB (the verify reads), field 47 write
      # KiB. Every block written is read back (no --runtime to cut it short).
      [ "$(cut -d';' -f6 /tmp/fio.txt)" = 16384 ]; then
    pass "fio randwrite+verify crc32c on /dev/nullb0 ($(cut -d';' -f6 /tmp/fio.txt) KiB verified)"
  else
    fail "fio on /dev/nullb0: $(cut -d';' -f6 /tmp/fio.txt 2>/dev/null) KiB verified of 16384"
    cat /tmp/fio.txt >&2 || true
  fi
  # The ext4 stack run.sh loads (crc32c, jbd2, mbcache, ext4) mounts.
  mkdir -p /tmp/mnt
  if mkfs.ext4 -q -F /dev/nullb0 && mount -t ext4 /dev/nullb0 /tmp/mnt &&
      echo smoke > /tmp/mnt/file && umount /tmp/mnt &&
      mount -t ext4 -o ro /dev/nullb0 /tmp/mnt && [ "$(cat /tmp/mnt/file)" = smoke ] && umount /tmp/mnt; then
    pass "ext4 mkfs, mount, write, remount on /dev/nullb0"
  else
    fail "ext4 on /dev/nullb0"
  fi
else
  fail "/dev/nullb0 missing after insmod"
fi

if [ "$failures" -ne 0 ]; then
  echo "smoke: $failures check(s) failed" >&2
  exit 1
fi
echo "smoke: all checks passed"
