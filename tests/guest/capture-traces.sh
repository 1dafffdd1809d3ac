#!/usr/bin/env bash
# Captures the blktrace traces in tests/data/traces/ from Linux 6.12's own
# block layer: blktrace on the guest's null_blk while ext4 on it does real
# work. Not part of the test command; this is how the data was made, and
# running it again makes new traces (timestamps and placement differ).
#
#   tests/guest/capture-traces.sh [OUTDIR]    (default tests/data/traces)
#
# Needs what tests/guest/run.sh needs (root, qemu), and on the host
# blktrace's blkparse and xz; about 6 minutes under TCG.
#
# On the host it boots the guest (tests/guest/run.sh) with this same script,
# which then runs the workloads below inside the guest, and writes each trace
# as OUTDIR/NAME.bin.xz: one binary file of `struct blk_io_trace` records,
# the guest's per-CPU files (NAME.blktrace.0 and .1) merged in time order by
# `blkparse -d`, as btt and fio's read_iolog want them. Read it with
# `blkparse -i - < NAME.bin` (given as `-i NAME`, blkparse would take the
# file for CPU 0's and skip CPU 1's events), `btt -i NAME.bin` and
# `fio --ioengine=null --read_iolog=NAME.bin --replay_no_stall=1 --size=512m`.
#
# The device: null_blk through configfs, memory_backed=1, 512 MiB, 4 KiB
# blocks, a 32 MiB write cache (cache_size, so flushes and FUA reach it),
# irqmode=0, one submit queue, mq-deadline. The traces:
#   ext4-untar     mkfs.ext4, mount, untar a generated package tree (about
#                  900 files, 20 MiB), sync, remount, read the tree back
#                  (tar -cf - | wc -c after drop_caches), umount
#   ext4-fsync     on that file system: fio, 4 KiB random writes with
#                  fsync=1 (psync, 1,000 writes in a 16 MiB file), sync
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail

if [ "${MQBLK_GUEST:-}" != 1 ]; then
  # ---- host: boot the guest, decode what it prints ----------------------------
  here=$(cd "$(dirname "$0")" && pwd)
  out=${1:-$here/../data/traces}
  mkdir -p "$out"
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  MQBLK_GUEST_TIMEOUT=${MQBLK_GUEST_TIMEOUT:-1800} "$here/run.sh" "$here/capture-traces.sh" > "$log"
  names=$(sed -n 's/^MQBLK-TRACE-BEGIN \([a-z0-9-]*\)$/\1/p' "$log")
  [ -n "$names" ] || { echo "capture-traces: the guest printed no trace" >&2; exit 1; }
  for name in $names; do
    sed -n "/^MQBLK-TRACE-BEGIN $name\$/,/^MQBLK-TRACE-END $name\$/p" "$log" | sed '1d;$d' |
      base64 -d > "$out/$name.bin.xz"
    events=$(xz -dc "$out/$name.bin.xz" | blkparse -q -i - | grep -c '^ *[0-9]*,[0-9]')
    echo "$out/$name.bin.xz: $(wc -c < "$out/$name.bin.xz") bytes, $events events (blkparse)"
  done
  grep -v '^MQBLK-TRACE\|^[A-Za-z0-9+/=]*$' "$log" || true
  exit 0
fi

# ---- guest --------------------------------------------------------------------
step() { echo "capture: $*" >&2; }
mods=$MQBLK_GUEST_MODULES
# The lean fio tests/guest/run.sh passes (Debian's loads 64 libraries over 9p).
fio=${MQBLK_GUEST_FIO:-fio}
insmod "$mods/null_blk.ko" nr_devices=0
mount -t configfs none /sys/kernel/config 2>/dev/null || true
mount -t debugfs none /sys/kernel/debug
nb=/sys/kernel/config/nullb/nullb0
mkdir "$nb"
echo 512 > "$nb/size"
echo 4096 > "$nb/blocksize"
echo 1 > "$nb/memory_backed"
# A volatile write cache: without one the kernel strips ext4's flushes and
# FUA before the device, and the traces would have none.
echo 32 > "$nb/cache_size"
echo 0 > "$nb/irqmode"
echo 1 > "$nb/submit_queues"
echo 1 > "$nb/power"
dev=/dev/nullb$(cat "$nb/index")
for _ in $(seq 50); do [ -b "$dev" ] && break; sleep 0.1; done
[ -b "$dev" ] || { echo "capture: no $dev" >&2; exit 1; }
echo mq-deadline > "/sys/block/${dev#/dev/}/queue/scheduler"
sysq=/sys/block/${dev#/dev/}/queue
step "$dev: $(cat "$sysq/../size") sectors, scheduler $(cat "$sysq/scheduler"), write cache $(cat "$sysq/write_cache"), fua $(cat "$sysq/fua")"

# A package tree: directories of binaries, libraries, headers and docs,
# sizes drawn from a fixed seed (mostly small files, a few large ones).
step "generating the package tree"
python3 - /tmp/tree.tar <<'PY'
import io, random, sys, tarfile
rng = random.Random(20261127)
kinds = [("usr/bin", 0.10, 48 << 10), ("usr/lib/x86_64-linux-gnu", 0.15, 96 << 10),
         ("usr/include/pkg", 0.25, 6 << 10), ("usr/share/doc/pkg", 0.30, 3 << 10),
         ("usr/share/locale/xx/LC_MESSAGES", 0.20, 10 << 10)]
total, n = 0, 0
with tarfile.open(sys.argv[1], "w") as tar:
    while total < (20 << 20):
        r, acc = rng.random(), 0.0
        for d, p, mean in kinds:
            acc += p
            if r < acc:
                break
        sub = f"{d}/{rng.randrange(12):02d}"
        size = min(int(rng.expovariate(1 / mean)), 2 << 20)
        info = tarfile.TarInfo(f"pkg/{sub}/f{n:05d}")
        info.size, info.mtime, info.mode = size, 1764201600, 0o644
        tar.addfile(info, io.BytesIO(rng.randbytes(size)))
        total += size
        n += 1
print(f"capture: tree of {n} files, {total} bytes", file=sys.stderr)
PY

mkdir -p /tmp/tr /tmp/out /tmp/mnt
start_trace() {
  blktrace -d "$dev" -D /tmp/tr -o "$1" > "/tmp/tr/$1.log" 2>&1 &
  trace_pid=$!
  # blktrace sets up its relay buffers before events flow.
  for _ in $(seq 100); do [ -e "/tmp/tr/$1.blktrace.0" ] && break; sleep 0.1; done
  sleep 1
}
stop_trace() {
  kill -INT "$trace_pid"
  wait "$trace_pid" || true
  step "blktrace $1: $(tr '\n' ' ' < "/tmp/tr/$1.log")"
  blkparse -q -i "$1" -D /tmp/tr -d "/tmp/out/$1.bin" -O
  step "$1: $(blkparse -q -i - < "/tmp/out/$1.bin" | grep -c '^ *[0-9]*,[0-9]') events after merging"
}

step "trace ext4-untar"
start_trace ext4-untar
mkfs.ext4 -q -F -E nodiscard "$dev"
mount -t ext4 "$dev" /tmp/mnt
tar -xf /tmp/tree.tar -C /tmp/mnt
sync
umount /tmp/mnt
mount -t ext4 "$dev" /tmp/mnt
echo 3 > /proc/sys/vm/drop_caches
tar -cf - -C /tmp/mnt pkg | wc -c > /dev/null
umount /tmp/mnt
stop_trace ext4-untar

step "trace ext4-fsync"
mount -t ext4 "$dev" /tmp/mnt
start_trace ext4-fsync
"$fio" --name=fsync --directory=/tmp/mnt --rw=randwrite --bs=4k --size=16m --ioengine=psync \
  --fsync=1 --number_ios=1000 --randseed=20261127 --eta=never --output=/tmp/out/fio.txt
sync
stop_trace ext4-fsync
umount /tmp/mnt

for name in ext4-untar ext4-fsync; do
  echo "MQBLK-TRACE-BEGIN $name"
  xz -9e -c "/tmp/out/$name.bin" | base64 -w 76
  echo "MQBLK-TRACE-END $name"
done
