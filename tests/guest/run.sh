#!/usr/bin/env bash
# Runs a shell script as root inside a Linux guest: Debian's 6.12 or 7.x.
#
#   [MQBLK_GUEST_SERIES=6.12|7] tests/guest/run.sh SCRIPT [--mem MiB] [--cpus N] [--shared-mem] [--qemu ARG]...
#
# Boots Debian's kernel of the series MQBLK_GUEST_SERIES names: 6.12 (the
# default; bookworm-backports) or 7 (the newest 7.x, from trixie-backports)
# under qemu with TCG (`-accel tcg -cpu max`: KVM hangs on this machine). The
# guest mounts the host's / read-only over 9p and chroots into it, so SCRIPT
# and every host program (nbd-client, mkfs.ext4, target/release/mqblk) run
# as they would on the host, on the guest's kernel (fio: the scripts run the
# lean build MQBLK_GUEST_FIO names, below). Defaults: --mem 2048, --cpus 2.
# --shared-mem backs the guest's memory with a shared memfd (what a
# vhost-user backend needs); each --qemu ARG is appended to qemu's command
# line (tests/guest/vhost.sh adds its vhost-user-blk disk this way).
#
# What the script sees (inside the chroot, as root, stdin /dev/null):
#   - /proc, /sys, /dev (devtmpfs, with /dev/pts and a tmpfs /dev/shm);
#     tmpfs on /tmp and /run (the host's are shared read-only, and tools that
#     keep state in /run fail silently without a writable one); lo is up.
#   - loaded: netfs, 9pnet, 9pnet_virtio, 9p, nbd (/dev/nbd0..15), ublk_drv
#     (/dev/ublk-control), configfs, crc16, crc32c_generic, mbcache, jbd2,
#     ext4 (each with its dependencies; modules the kernel has built in are
#     skipped, and a module neither shipped nor built in fails the run);
#     on 7.x no crc32c_generic: its ext4 calls the crc32c library, built in.
#     null_blk is NOT loaded: the script picks its parameters:
#       insmod "$MQBLK_GUEST_MODULES/null_blk.ko" nr_devices=1 gb=1
#     Also shipped, not loaded: xor, raid6_pq, libcrc32c, btrfs (insmod in
#     that order for a zoned btrfs; on 7.x xor, raid6_pq, libblake2b,
#     btrfs), virtio_blk (for a --qemu disk).
#   - environment (nothing else is passed from the host):
#       PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
#       HOME=/root TERM=dumb LANG=C.UTF-8 MQBLK_GUEST=1
#       MQBLK_GUEST_MODULES=/run/mqblk-guest/modules  (decompressed .ko files)
#       MQBLK_GUEST_KERNEL=<uname -r of the guest>
#       MQBLK_GUEST_SERIES=<the series asked for: 6.12 or 7>
#       MQBLK_GUEST_SCRIPT=<SCRIPT's absolute host path>
#       MQBLK_GUEST_FIO=<path of the fio to run>: the stock fio that
#         `scripts/fio-libblkio.sh --guest` builds once and caches (libaio
#         and io_uring, a handful of libraries; Debian's /usr/bin/fio loads
#         64 over 9p, 11-17 s per start under TCG). Scripts run
#         "${MQBLK_GUEST_FIO:-fio}". MQBLK_GUEST_FIO set on the host names
#         another fio to pass instead (e.g. /usr/bin/fio), with no build.
#   - 36 huge pages of 2 MiB reserved (/proc/sys/vm/nr_hugepages), for
#     `mqblk zone script --blkdev`'s writes; write that file to change it.
#   - the working directory is the caller's (when the guest can see it).
#     SCRIPT runs from its own host path, so "$(dirname "$0")" works; a
#     SCRIPT under /tmp or /run (hidden by the guest's tmpfs) runs from a copy.
#     Run as `sh SCRIPT` unless it is executable (then its #! line counts).
#
# Output: SCRIPT's stdout and stderr reach this command's stdout and stderr
# (each on its own serial port, so no kernel noise; \r stripped), as they
# are written. The kernel console (ttyS0) is kept apart and shown on failure.
#
# Exit status: SCRIPT's own. 2 when the harness fails (a message starting
# with "guest:" names what failed: fetch, fio, boot, crash, timeout). On any
# failure (non-zero status, no exit marker) the guest's dmesg tail (or the
# console's tail when the guest died before it could run dmesg) goes to
# stderr. A script still running a minute before MQBLK_GUEST_TIMEOUT seconds
# (900) is hung: the guest reports every task's state, wait channel and
# kernel stack, the tails of /tmp/*.err and /tmp/*.out, and the blocked
# tasks' dmesg, then ends with status 124; qemu is killed at the timeout.
#
# Needs root (apt, and qemu reads all of / for the share). Installs with apt
# when missing: qemu-system-x86, busybox-static (and what
# scripts/fio-libblkio.sh --guest needs to build fio). Nothing else on the
# host is installed or reconfigured: tests/guest/fetch-kernel.sh SERIES
# fetches the kernel package with `apt-get download` through a private apt
# state and unpacks it with `dpkg-deb -x`.
#
# Cache (outside the checkout): ${MQBLK_CACHE:-$HOME/.cache/mqblk}/
#   apt-<series>/, kernel-<pkg version>/   the kernels
#                            (tests/guest/fetch-kernel.sh)
#   kernel-<pkg version>/initrd-<hash>.cpio.gz  busybox + modules + /init,
#                            one folder per kernel package, keyed by a hash
#                            of /init, the kernel release, the module list
#                            and busybox
#   fio-<version>-guest/     MQBLK_GUEST_FIO (scripts/fio-libblkio.sh)
# MQBLK_GUEST_KERNEL_VERSION=<pkg version> pins a version already cached
# (no apt at all); its kernel must be of the series asked for.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail

usage="usage: tests/guest/run.sh SCRIPT [--mem MiB] [--cpus N] [--shared-mem] [--qemu ARG]..."
die() { echo "guest: $*" >&2; exit 2; }

# ---- arguments --------------------------------------------------------------
script="" mem_mib=2048 cpus=2 shared_mem=0
qemu_extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --mem) [ $# -ge 2 ] || die "$usage"; mem_mib=$2; shift 2 ;;
    --shared-mem) shared_mem=1; shift ;;
    --qemu) [ $# -ge 2 ] || die "$usage"; qemu_extra+=("$2"); shift 2 ;;
    --cpus) [ $# -ge 2 ] || die "$usage"; cpus=$2; shift 2 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    -*) die "unknown option $1; $usage" ;;
    *) [ -z "$script" ] || die "one SCRIPT only; $usage"; script=$1; shift ;;
  esac
done
[ -n "$script" ] || die "$usage"
[ -f "$script" ] || die "no script at $script"
[[ $mem_mib =~ ^[0-9]+$ ]] || die "--mem wants MiB, got $mem_mib"
[[ $cpus =~ ^[0-9]+$ ]] || die "--cpus wants a count, got $cpus"
script=$(realpath "$script")
timeout_s=${MQBLK_GUEST_TIMEOUT:-900}
[[ $timeout_s =~ ^[0-9]+$ ]] || die "MQBLK_GUEST_TIMEOUT wants seconds, got $timeout_s"
cache=${MQBLK_CACHE:-$HOME/.cache/mqblk}
series=${MQBLK_GUEST_SERIES:-6.12}
case "$series" in
  6.12|7) ;;
  *) die "MQBLK_GUEST_SERIES wants 6.12 or 7, got $series" ;;
esac
[ "$(id -u)" = 0 ] || die "needs root (apt, and qemu reads all of / for the 9p share)"

# Temporary files and processes of this run, removed and stopped on exit
# (an interrupted fetch leaves no directory that looks like a cache).
work="" initrd_tmp="" qemu_pid=""
tail_pids=()
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  [ -z "$qemu_pid" ] || kill "$qemu_pid" 2>/dev/null || true
  for p in "${tail_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work" "$initrd_tmp" "${initrd_tmp:+$initrd_tmp.cpio.gz}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- host tools ---------------------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
# The initramfs needs a static busybox: the Debian "busybox" package is dynamic.
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || need+=(busybox-static)
# modinfo orders the modules' dependencies; cpio packs the initramfs.
command -v modinfo >/dev/null || need+=(kmod)
command -v cpio >/dev/null || need+=(cpio)
if [ ${#need[@]} -gt 0 ]; then
  echo "guest: installing ${need[*]}" >&2
  apt-get install -y -qq --no-install-recommends "${need[@]}" >&2 ||
    { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends "${need[@]}" >&2; } ||
    die "apt-get install ${need[*]} failed"
fi
busybox=$(dpkg -L busybox-static | grep '/bin/busybox$' | head -n 1)
[ -x "$busybox" ] || die "no static busybox in the busybox-static package"

# ---- the kernel package ---------------------------------------------------------
mkdir -p "$cache"
if [ -n "${MQBLK_GUEST_KERNEL_VERSION:-}" ]; then
  kdir=$cache/kernel-$MQBLK_GUEST_KERNEL_VERSION
  [ -d "$kdir" ] || die "MQBLK_GUEST_KERNEL_VERSION=$MQBLK_GUEST_KERNEL_VERSION is not cached in $cache"
else
  kdir=$(MQBLK_CACHE=$cache "$(dirname "${BASH_SOURCE[0]}")/fetch-kernel.sh" "$series") ||
    die "fetch: no $series kernel (tests/guest/fetch-kernel.sh $series)"
fi
root_dir=$kdir/root
# Two layouts (tests/guest/fetch-kernel.sh): 6.x boot/vmlinuz-K with
# lib/modules/K/; 7.x usr/lib/modules/K/vmlinuz with its modules beside it.
if kernel=$(find "$root_dir/boot" -maxdepth 1 -name 'vmlinuz-*' 2>/dev/null | head -n 1) && [ -n "$kernel" ]; then
  kver=${kernel##*/vmlinuz-}
  moddir=$root_dir/lib/modules/$kver
elif kernel=$(find "$root_dir/usr/lib/modules" -mindepth 2 -maxdepth 2 -name vmlinuz 2>/dev/null | head -n 1) && [ -n "$kernel" ]; then
  moddir=${kernel%/vmlinuz}
  kver=${moddir##*/}
else
  die "no kernel in $root_dir (neither boot/vmlinuz-* nor usr/lib/modules/*/vmlinuz)"
fi
[ -d "$moddir/kernel" ] || die "no modules at $moddir/kernel"
case "$kver" in
  "$series".*) ;;
  *) die "the kernel in $kdir is $kver, not of the series $series (MQBLK_GUEST_SERIES)" ;;
esac

# ---- fio for the scripts -------------------------------------------------------
# Built once (one run at a time, as for the kernel) and cached; a cached
# build needs no apt and no network.
if [ -n "${MQBLK_GUEST_FIO:-}" ]; then
  guest_fio=$(command -v "$MQBLK_GUEST_FIO") || die "fio: MQBLK_GUEST_FIO=$MQBLK_GUEST_FIO is not a program"
else
  exec {fio_lock}>"$cache/.fio-guest.lock"
  flock "$fio_lock"
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  guest_fio=$("$repo/scripts/fio-libblkio.sh" --guest) ||
    die "fio: could not build the guests' fio (scripts/fio-libblkio.sh --guest, its messages above)"
  flock -u "$fio_lock"
  exec {fio_lock}>&-
fi
[ -x "$guest_fio" ] || die "fio: $guest_fio is not an executable"
guest_fio=$(realpath "$guest_fio")

# ---- modules: decompressed, in dependency order ---------------------------------
# Loaded by /init in this order (with their dependencies first).
# Shipped for the script to insmod itself, in this order (null_blk's
# dependency, configfs, is loaded by /init; btrfs's come before it).
case "$series" in
  6.12)
    # ext4 refuses to mount without the crypto API's crc32c ("Cannot load
    # crc32c driver"), which modinfo does not list among its dependencies.
    load_modules=(netfs 9pnet 9pnet_virtio 9p nbd ublk_drv configfs crc16 crc32c_generic mbcache jbd2 ext4)
    extra_modules=(null_blk xor raid6_pq libcrc32c btrfs virtio_blk) ;;
  7)
    # ext4 and btrfs call the crc32c library (built in, CONFIG_CRC32=y):
    # no crc32c_generic (now crc32c-cryptoapi) and no libcrc32c (gone);
    # btrfs needs libblake2b.
    load_modules=(netfs 9pnet 9pnet_virtio 9p nbd ublk_drv configfs crc16 mbcache jbd2 ext4)
    extra_modules=(null_blk xor raid6_pq libblake2b btrfs virtio_blk) ;;
esac

# Prints the path of module $1's .ko.xz (file names may spell _ as -).
module_file() {
  local f
  f=$(find "$moddir/kernel" -name "$1.ko.xz" -o -name "${1//_/-}.ko.xz" | head -n 1)
  [ -n "$f" ] && echo "$f"
}
module_builtin() {
  grep -qE "/(${1}|${1//_/-})\.ko\$" "$moddir/modules.builtin" 2>/dev/null
}
declare -A seen=()
order=()
# Depth-first: dependencies before the module. Builtin modules are skipped.
visit() {
  local name=$1 file dep
  [ -z "${seen[$name]:-}" ] || return 0
  seen[$name]=1
  if ! file=$(module_file "$name"); then
    module_builtin "$name" || die "module $name: neither in $moddir/kernel nor built in"
    return 0
  fi
  local deps
  deps=$(modinfo -F depends "$file") || die "modinfo -F depends $file failed"
  for dep in ${deps//,/ }; do visit "$dep"; done
  order+=("$name")
}
for m in "${load_modules[@]}"; do visit "$m"; done
load_order=("${order[@]}")
for m in "${extra_modules[@]}"; do visit "$m"; done

# ---- the initramfs (cached) -------------------------------------------------------
# Channels: ttyS0 the kernel console (quiet), ttyS1 the script's stdout,
# ttyS2 its stderr, ttyS3 the harness: dmesg after the script, then the
# exit marker. /job (a second cpio appended per run) holds the script's path,
# the caller's working directory, a copy of the script, the series asked
# for and fio's path (and a copy of fio, fio.bin, when its path is under
# /tmp or /run).
init_text=$(cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
# Huge pages for `mqblk zone script --blkdev`, which writes from them (its
# largest generated write, 72 MiB), reserved before memory fragments.
echo 36 > /proc/sys/vm/nr_hugepages
ctl=/dev/ttyS3
echo "MQBLK-GUEST-INIT" > $ctl
fail() { echo "mqblk-guest: $*" > /dev/console; echo "MQBLK-GUEST-FAIL: $*" > $ctl; poweroff -f; }
for m in $(cat /modules/load); do
  insmod "/modules/$m.ko" || fail "insmod $m"
done
mkdir -p /host
# cache=loose: the guest keeps what it read of the host's files (programs,
# libraries) in its page cache instead of asking the host again on every
# exec and read; a guest test ran in 0.4x the CPU time of cache=none (the
# power-cut test: 83 against 208 user-s). Safe here: the share is
# read-only, and the host changes none of its files while a guest runs.
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose host /host || fail "9p mount of the host's /"
mount -t proc proc /host/proc || fail "mount /proc"
mount -t sysfs sys /host/sys || fail "mount /sys"
mount -t devtmpfs dev /host/dev || fail "mount /dev"
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /host/dev/shm
mount -t tmpfs -o mode=1777 tmpfs /host/tmp || fail "tmpfs on /tmp"
mount -t tmpfs -o mode=755 tmpfs /host/run || fail "tmpfs on /run"
mkdir -p /host/run/mqblk-guest/modules
cp /modules/*.ko /host/run/mqblk-guest/modules/
cp /job/script.sh /host/run/mqblk-guest/script.sh
[ -f /job/fio.bin ] && cp /job/fio.bin /host/run/mqblk-guest/fio
ifconfig lo 127.0.0.1 up
stty -F /dev/ttyS1 raw -echo 2>/dev/null
stty -F /dev/ttyS2 raw -echo 2>/dev/null
script=$(cat /job/script)
cwd=$(cat /job/cwd)
chroot /host /bin/sh -c '[ -f "$1" ]' sh "$script" || script=/run/mqblk-guest/script.sh
fio=$(cat /job/fio)
[ -f /job/fio.bin ] && fio=/run/mqblk-guest/fio
chroot /host /bin/sh -c 'cd "$1"' sh "$cwd" 2>/dev/null || cwd=/
chroot /host /usr/bin/env -i \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root TERM=dumb LANG=C.UTF-8 MQBLK_GUEST=1 \
  MQBLK_GUEST_MODULES=/run/mqblk-guest/modules \
  MQBLK_GUEST_KERNEL="$(uname -r)" MQBLK_GUEST_SERIES="$(cat /job/series)" \
  MQBLK_GUEST_SCRIPT="$(cat /job/script)" \
  MQBLK_GUEST_FIO="$fio" \
  /bin/sh -c 'cd "$1" && if [ -x "$2" ]; then exec "$2"; else exec /bin/sh "$2"; fi' \
  sh "$cwd" "$script" < /dev/null > /dev/ttyS1 2> /dev/ttyS2 &
script_pid=$!
# The watchdog: a script still running at the deadline (a minute before the
# host kills qemu) is hung. Say where every process sleeps, kernel and
# user-space state both, then end the guest: the host prints it all.
(
  sleep "$(cat /job/deadline)"
  kill -0 $script_pid 2>/dev/null || exit 0
  {
    echo "MQBLK-GUEST-HUNG after $(cat /job/deadline) s"
    ps -o pid,ppid,stat,comm,args
    for task in /proc/[0-9]*/task/[0-9]*; do
      comm=$(cat $task/comm 2>/dev/null) || continue
      case "$comm" in kworker*|ksoftirq*|rcu*|migration*|cpuhp*|idle_inject*|kthreadd|watchdog*) continue ;; esac
      echo "-- $task ($comm) state $(cut -d' ' -f3 $task/stat 2>/dev/null) wchan $(cat $task/wchan 2>/dev/null)"
      cat $task/stack 2>/dev/null
    done
    for f in /host/tmp/*.err /host/tmp/*.out; do
      [ -s "$f" ] && { echo "-- tail of $f"; tail -n 20 "$f"; }
    done
    echo w > /proc/sysrq-trigger
    echo "MQBLK-GUEST-DMESG-BEGIN"; dmesg | tail -n 120; echo "MQBLK-GUEST-DMESG-END"
  } > $ctl 2>&1
  sync
  sleep 1
  echo "MQBLK-GUEST-EXIT=124" > $ctl
  poweroff -f
) &
wait $script_pid
status=$?
{ echo "MQBLK-GUEST-DMESG-BEGIN"; dmesg | tail -n 60; echo "MQBLK-GUEST-DMESG-END"; } > $ctl
sync
# Let the UARTs drain what the script's last writes left in their buffers.
sleep 1
echo "MQBLK-GUEST-EXIT=$status" > $ctl
poweroff -f
INIT
)
busybox_hash=$(sha256sum < "$busybox" | cut -c1-16)
key=$(printf '%s\n%s\n%s\n%s\n%s\n' "$init_text" "$kver" "${load_order[*]}" "${order[*]}" "$busybox_hash" | sha256sum | cut -c1-16)
initrd=$kdir/initrd-$key.cpio.gz
if [ ! -f "$initrd" ]; then
  initrd_tmp=$(mktemp -d "$cache/.initrd.XXXXXX")
  rd=$initrd_tmp
  mkdir -p "$rd"/{bin,dev,proc,sys,modules,job}
  cp "$busybox" "$rd/bin/busybox"
  for m in "${order[@]}"; do xz -dc "$(module_file "$m")" > "$rd/modules/$m.ko"; done
  printf '%s\n' "${load_order[@]}" > "$rd/modules/load"
  printf '%s\n' "$init_text" > "$rd/init"
  chmod +x "$rd/init"
  (cd "$rd" && find . | cpio -o -H newc --quiet | gzip -1) > "$rd.cpio.gz" || die "initramfs: cpio failed"
  rm -rf "$rd"
  mv -f "$rd.cpio.gz" "$initrd"
  initrd_tmp=""
fi

# ---- one run -----------------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/mqblk-guest.XXXXXX")

# The per-run part of the initramfs: concatenated cpio archives are merged by the kernel.
mkdir -p "$work/job/job"
printf '%s' "$script" > "$work/job/job/script"
printf '%s' "$series" > "$work/job/job/series"
printf '%s' "$PWD" > "$work/job/job/cwd"
printf '%s' "$(( timeout_s > 120 ? timeout_s - 60 : timeout_s / 2 ))" > "$work/job/job/deadline"
cp "$script" "$work/job/job/script.sh"
printf '%s' "$guest_fio" > "$work/job/job/fio"
# The guest's tmpfs /tmp and /run hide the host's.
case $guest_fio in /tmp/*|/run/*) cp "$guest_fio" "$work/job/job/fio.bin" ;; esac
(cd "$work/job" && find job | cpio -o -H newc --quiet | gzip -1) > "$work/job.cpio.gz"
cat "$initrd" "$work/job.cpio.gz" > "$work/initrd.gz"

# The guest's memory: private, or a shared memfd for a vhost-user backend.
mem_args=(-m "$mem_mib")
if [ "$shared_mem" = 1 ]; then
  mem_args+=(-object "memory-backend-memfd,id=mem,size=${mem_mib}M,share=on" -numa node,memdev=mem)
fi

# boot: one run of the guest; sets qemu_status.
boot() {
  : > "$work/console.txt"; : > "$work/stdout.txt"; : > "$work/stderr.txt"; : > "$work/ctl.txt"
  timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 \
    -accel tcg -cpu max "${mem_args[@]}" -smp "$cpus" \
    -display none -monitor none -no-reboot -nic none \
    -kernel "$kernel" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1" \
    -serial "file:$work/console.txt" -serial "file:$work/stdout.txt" \
    -serial "file:$work/stderr.txt" -serial "file:$work/ctl.txt" \
    -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
    "${qemu_extra[@]}" \
    < /dev/null > "$work/qemu.txt" 2>&1 &
  qemu_pid=$!
  # Stream the script's output as the guest writes it.
  tail -q -f -n +1 --pid="$qemu_pid" "$work/stdout.txt" | sed -u 's/\r//g' &
  tail_pids+=($!)
  tail -q -f -n +1 --pid="$qemu_pid" "$work/stderr.txt" | sed -u 's/\r//g' >&2 &
  tail_pids+=($!)
  qemu_status=0
  wait "$qemu_pid" || qemu_status=$?
  qemu_pid=""
  wait "${tail_pids[@]}" 2>/dev/null || true
  tail_pids=()
}
# A guest that stops before /init has written its first line (qemu exits 0,
# the console is empty: seen once in CI-like runs with two TCG guests
# booting side by side) never ran the script: boot it once more, and say so.
# A guest that reached /init is never retried.
for attempt in 1 2; do
  boot
  if [ "$qemu_status" != 0 ] || grep -q 'MQBLK-GUEST-INIT' "$work/ctl.txt"; then
    break
  fi
  echo "guest: the guest stopped before /init started (attempt $attempt, console: $(wc -c < "$work/console.txt") bytes); the console's last 40 lines:" >&2
  tr -d '\r' < "$work/console.txt" | tail -n 40 >&2
  [ "$attempt" = 2 ] || echo "guest: booting once more" >&2
done

ctl=$(tr -d '\r' < "$work/ctl.txt")
marker=$(grep -o 'MQBLK-GUEST-EXIT=[0-9]*' <<< "$ctl" | tail -n 1 || true)
status=${marker#MQBLK-GUEST-EXIT=}
if [ -n "$marker" ] && [ "$status" = 0 ]; then
  exit 0
fi
if grep -q 'MQBLK-GUEST-HUNG' <<< "$ctl"; then
  echo "guest: the script was still running at the deadline; where each task slept:" >&2
  sed -n '/MQBLK-GUEST-HUNG/,/MQBLK-GUEST-DMESG-BEGIN/p' <<< "$ctl" | sed '$d' >&2
fi
if grep -q 'MQBLK-GUEST-DMESG-BEGIN' <<< "$ctl"; then
  echo "guest: dmesg tail (kernel $kver):" >&2
  sed -n '/MQBLK-GUEST-DMESG-BEGIN/,/MQBLK-GUEST-DMESG-END/p' <<< "$ctl" | sed '1d;$d' >&2
else
  echo "guest: no dmesg from the guest; the console's tail (kernel $kver, booted quiet):" >&2
  tr -d '\r' < "$work/console.txt" | tail -n 40 >&2
  [ -s "$work/console.txt" ] || echo "(empty: nothing logged at warning level or above)" >&2
fi
[ -s "$work/qemu.txt" ] && { echo "guest: qemu said:" >&2; tail -n 10 "$work/qemu.txt" >&2; }
if [ -n "$marker" ]; then
  exit "$status"
fi
failed=$(grep -o 'MQBLK-GUEST-FAIL: .*' <<< "$ctl" | head -n 1 || true)
if [ -n "$failed" ]; then
  die "boot: ${failed#MQBLK-GUEST-FAIL: }"
elif [ "$qemu_status" = 124 ] || [ "$qemu_status" = 137 ]; then
  die "timeout: killed the guest after ${timeout_s} s (MQBLK_GUEST_TIMEOUT)"
else
  die "crash: the guest stopped without an exit marker (qemu status $qemu_status)"
fi
