#!/usr/bin/env bash
# The kernel differential oracle for zoned null devices.
#
#   tests/oracle/run.sh [--kernel 6.1|6.12|7] SPEC SCRIPT [SPEC SCRIPT ...]
#
# Boots a Linux guest under qemu (TCG) once and, for each SPEC SCRIPT pair
# in turn, loads null_blk with SPEC's parameters, runs SCRIPT on
# /dev/nullb0 (`mqblk zone script --blkdev`) and unloads null_blk. Then
# runs each SCRIPT on mqblk's own null device (`mqblk zone script --device
# SPEC`) and compares the JSON lines. Prints one line per pair (and the
# first mismatch of a pair that differs); exits 0 when every pair agrees, 1
# on a mismatch, 2 when the guest run fails.
#
# Kernels:
#   6.1  (default) Debian 12's own kernel (linux-image-6.1.* from bookworm
#        and bookworm-security, fetched once and unpacked by
#        tests/guest/fetch-kernel.sh 6.1, never installed on the host) from
#        a busybox initramfs holding the host's target/release/mqblk and
#        the shared libraries it loads (ldd).
#        mqblk follows 6.12 by default, so its side of the comparison gets
#        `zoned_compat=6.1` added to SPEC unless SPEC names a zoned_compat
#        (null_blk has no such parameter: the guest never sees it; naming
#        `zoned_compat=6.12` checks that the oracle sees the difference).
#   6.12 Debian's 6.12 from bookworm-backports, through tests/guest/run.sh
#        (which fetches and caches it; needs root), running the host's
#        target/release/mqblk in the guest.
#   7    Debian's newest 7.x (MQBLK_GUEST_SERIES=7 of tests/guest/run.sh),
#        the same way; mqblk's side gets `zoned_compat=7` unless SPEC
#        names one.
# Every guest has one vCPU: there the kernels' zone write plugs issue a
# write's pieces across zones in the same order on every run (the zoned/
# module doc of crates/mqblk-null).
#
# SPEC is an mqblk null spec (`null:gb=1,zoned=1,zone_size=64,...`); keys
# that are not null_blk module parameters (zone_lock, zoned_compat) are kept
# out of the guest. Needs qemu-system-x86, busybox-static and, for 6.1, the
# network for the first fetch (see scripts/test-all.sh).
# Runs from anywhere; builds what it needs.
set -euo pipefail

usage="usage: tests/oracle/run.sh [--kernel 6.1|6.12|7] SPEC SCRIPT [SPEC SCRIPT ...]"
kernel_series=6.1
if [ "${1:-}" = --kernel ]; then
  kernel_series=${2:?$usage}
  shift 2
fi
case "$kernel_series" in 6.1|6.12|7) ;; *) echo "oracle: --kernel takes 6.1, 6.12 or 7; $usage" >&2; exit 2 ;; esac
if [ $# -lt 2 ] || [ $(($# % 2)) != 0 ]; then echo "$usage" >&2; exit 2; fi
specs=() scripts=()
while [ $# -gt 0 ]; do
  [ -f "$2" ] || { echo "oracle: no script at $2" >&2; exit 2; }
  specs+=("$1"); scripts+=("$2"); shift 2
done

root=$(cd "$(dirname "$0")/../.." && pwd)
# Under TCG a generated 300-op script (writes of up to 72 MiB) took 60-130
# s, the longer with a third guest on this machine's two cores: allow 4
# minutes each.
timeout_s=$((120 + 240 * ${#specs[@]}))
work=$(mktemp -d /tmp/mqblk-oracle.XXXXXX)
trap 'rm -rf "$work"' EXIT
host_bin=$root/target/release/mqblk
(cd "$root" && cargo build --quiet --release -p mqblk-cli)

# null_blk module parameters from a spec.
module_params() {
  local params="nr_devices=1" kv kvs
  IFS=',' read -ra kvs <<< "${1#null:}"
  for kv in "${kvs[@]}"; do
    case "${kv%%=*}" in
      zone_lock|zoned_compat|"") ;;
      *) params="$params $kv" ;;
    esac
  done
  echo "$params"
}

# Huge pages for the largest write of all scripts: the guest's mqblk writes
# from 2 MiB huge pages so that each write is one direct-I/O bio (see
# crates/mqblk-cli/src/zone/blkdev.rs); reserved first thing after boot,
# while the guest's memory is not yet fragmented. The guests have 2 GiB: a
# memory-backed null_blk of 1 GiB may fill, beside these huge pages and the
# script's own copy of its largest write.
max_write=$(cat "${scripts[@]}" | sed 's/#.*//' |
  awk '$1 == "noreport" { $1 = ""; $0 = $0 } $1 == "write" && $4 + 0 > m { m = $4 + 0 } END { print m + 0 }')
huge_pages=$(((max_write * 512 + (2 << 20) - 1) / (2 << 20)))

# The guest's part, the same shell for both kernels: reserve the huge pages
# (a shortfall is reported, and mqblk then refuses to start, naming it),
# then per pair load null_blk, run the script, unload; every output line is
# prefixed with the pair's number (the 6.1 console mixes in firmware
# escapes: the host matches lines by their content). $MQBLK and $MODULES
# come from the caller.
{
  # `zone script --blkdev` runs SCHED_FIFO (blkdev.rs): never throttled.
  echo "echo -1 > /proc/sys/kernel/sched_rt_runtime_us"
  echo "echo $huge_pages > /proc/sys/vm/nr_hugepages"
  echo "[ \"\$(cat /proc/sys/vm/nr_hugepages)\" = $huge_pages ] || echo \"ORACLE-HUGEPAGES: \$(cat /proc/sys/vm/nr_hugepages) of $huge_pages reserved\""
  cat <<'GUEST'
oracle_job() { # N PARAMS (the script on stdin)
  cat > /tmp/oracle-script
  if ! insmod "$MODULES/null_blk.ko" $2; then echo "ORACLE-$1-EXIT=insmod"; return; fi
  echo none > /sys/block/nullb0/queue/scheduler
  "$MQBLK" zone script --blkdev /dev/nullb0 /tmp/oracle-script > /tmp/oracle-out; rc=$?
  sed "s/^/ORACLE-$1: /" /tmp/oracle-out
  echo "ORACLE-$1-EXIT=$rc"
  rmmod null_blk || echo "ORACLE-$1-EXIT=rmmod"
}
GUEST
  for i in "${!specs[@]}"; do
    echo "oracle_job $i '$(module_params "${specs[$i]}")' <<'ORACLE_SCRIPT_END'"
    cat "${scripts[$i]}"
    echo "ORACLE_SCRIPT_END"
  done
  echo 'echo ORACLE-DONE'
} > "$work/jobs.sh"

if [ "$kernel_series" != 6.1 ]; then
  # The guest chroots into the host's /, so it runs the host's mqblk; its
  # /tmp is its own tmpfs (the harness ships a script under /tmp itself).
  {
    echo "MQBLK='$host_bin' MODULES=\"\$MQBLK_GUEST_MODULES\""
    cat "$work/jobs.sh"
  } > "$work/guest.sh"
  status=0
  MQBLK_GUEST_SERIES=$kernel_series MQBLK_GUEST_TIMEOUT=$timeout_s "$root/tests/guest/run.sh" "$work/guest.sh" \
    --mem 2048 --cpus 1 > "$work/console.txt" || status=$?
  kver="$kernel_series guest"
  if [ "$status" != 0 ] || ! grep -q ORACLE-DONE "$work/console.txt"; then
    echo "oracle: the $kernel_series guest run failed (status $status); its output:" >&2
    tail -n 30 "$work/console.txt" >&2
    exit 2
  fi
else
  kdir=$("$root/tests/guest/fetch-kernel.sh" 6.1) || { echo "oracle: no 6.1 kernel (tests/guest/fetch-kernel.sh 6.1)" >&2; exit 2; }
  kernel=$(find "$kdir/root/boot" -maxdepth 1 -name 'vmlinuz-*' | head -n 1)
  [ -r "$kernel" ] || { echo "oracle: no boot/vmlinuz-* in $kdir/root" >&2; exit 2; }
  kver=${kernel##*/vmlinuz-}
  moddir=$kdir/root/lib/modules/$kver
  command -v qemu-system-x86_64 >/dev/null || { echo "oracle: qemu-system-x86_64 missing" >&2; exit 2; }
  busybox=$(command -v busybox) || { echo "oracle: busybox missing (busybox-static)" >&2; exit 2; }
  # The initramfs: busybox, configfs + null_blk, mqblk, /init.
  rd=$work/rd
  mkdir -p "$rd"/{bin,dev,proc,sys,mod,tmp}
  cp "$busybox" "$rd/bin/busybox"
  for tool in sh mount insmod rmmod cat echo sed poweroff; do ln -s busybox "$rd/bin/$tool"; done
  cp "$moddir/kernel/fs/configfs/configfs.ko" "$rd/mod/"
  cp "$moddir/kernel/drivers/block/null_blk/null_blk.ko" "$rd/mod/"
  # The release build the 6.12 guests run, with its loader and libraries
  # at their own paths (one build for every guest, no static one).
  cp "$host_bin" "$rd/bin/mqblk"
  for lib in $(ldd "$host_bin" | grep -o '/[^ ]*'); do
    mkdir -p "$rd$(dirname "$lib")"
    cp -L "$lib" "$rd$lib"
  done
  {
    echo '#!/bin/sh'
    echo 'mount -t proc proc /proc'
    echo 'mount -t sysfs sys /sys'
    echo 'mount -t devtmpfs dev /dev'
    echo 'insmod /mod/configfs.ko'
    echo 'MQBLK=/bin/mqblk MODULES=/mod'
    cat "$work/jobs.sh"
    echo 'poweroff -f'
  } > "$rd/init"
  chmod +x "$rd/init"
  (cd "$rd" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initrd.gz"
  timeout "$timeout_s" qemu-system-x86_64 -accel tcg -cpu max -m 2048 -smp 1 -nographic -no-reboot -nic none \
    -kernel "$kernel" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1" < /dev/null > "$work/console.raw" 2>&1 || true
  tr -d '\r' < "$work/console.raw" > "$work/console.txt"
  if ! grep -q 'ORACLE-DONE' "$work/console.txt"; then
    echo "oracle: the guest run failed; console:" >&2
    tail -n 30 "$work/console.txt" >&2
    exit 2
  fi
fi

# Compare each pair.
failed=0
grep -o 'ORACLE-HUGEPAGES: .*' "$work/console.txt" >&2 || true
for i in "${!specs[@]}"; do
  spec=${specs[$i]}
  mqblk_spec=$spec
  if [ "$kernel_series" != 6.12 ]; then
    case ",${spec#null:}," in *,zoned_compat=*) ;; *) mqblk_spec="$spec,zoned_compat=$kernel_series" ;; esac
  fi
  grep -o "ORACLE-$i: {\"op\".*" "$work/console.txt" | sed "s/^ORACLE-$i: //" > "$work/kernel-$i.jsonl" || true
  if ! grep -q "ORACLE-$i-EXIT=0" "$work/console.txt"; then
    echo "oracle: $spec: the guest's run failed ($(grep -o "ORACLE-$i-EXIT=.*" "$work/console.txt" | head -n 1))"
    failed=2
    continue
  fi
  "$host_bin" zone script --device "$mqblk_spec" "${scripts[$i]}" > "$work/mqblk-$i.jsonl"
  n_kernel=$(wc -l < "$work/kernel-$i.jsonl")
  n_mqblk=$(wc -l < "$work/mqblk-$i.jsonl")
  if cmp -s "$work/kernel-$i.jsonl" "$work/mqblk-$i.jsonl"; then
    echo "oracle: $mqblk_spec: $n_mqblk ops, no mismatch (kernel $kver)"
    continue
  fi
  line=$( (cmp "$work/kernel-$i.jsonl" "$work/mqblk-$i.jsonl" 2>/dev/null || true) | sed -n 's/.* line \([0-9]*\).*/\1/p')
  line=${line:-$(( (n_kernel < n_mqblk ? n_kernel : n_mqblk) + 1 ))}
  echo "oracle: $mqblk_spec: first mismatch at op $line (kernel $kver: $n_kernel lines, mqblk: $n_mqblk lines)"
  echo "kernel: $(sed -n "${line}p" "$work/kernel-$i.jsonl")"
  echo "mqblk:  $(sed -n "${line}p" "$work/mqblk-$i.jsonl")"
  [ "$failed" = 2 ] || failed=1
done
exit $failed
