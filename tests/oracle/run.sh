#!/usr/bin/env bash
# The kernel differential oracle for zoned null devices (issue 7).
#
#   tests/oracle/run.sh SPEC SCRIPT
#
# Boots the Debian kernel under qemu (TCG) with null_blk loaded with SPEC's
# parameters, runs SCRIPT on /dev/nullb0 with a static mqblk
# (`mqblk zone script --blkdev`), runs the same SCRIPT on mqblk's own null
# device (`mqblk zone script --device SPEC`), and compares the JSON lines.
# Prints the first mismatch and exits 1; exits 0 when they agree.
#
# SPEC is an mqblk null spec (`null:gb=1,zoned=1,zone_size=64,...`); keys
# that are not null_blk module parameters (zone_lock) are kept out of the
# guest. Needs: qemu-system-x86, linux-image-amd64, busybox-static (see
# scripts/test-all.sh), and runs from the repository root.
set -euo pipefail

spec=${1:?usage: tests/oracle/run.sh SPEC SCRIPT}
script=${2:?usage: tests/oracle/run.sh SPEC SCRIPT}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/mqblk-oracle.XXXXXX)
trap 'rm -rf "$work"' EXIT

kver=$(ls /lib/modules | sort -V | tail -n 1)
kernel=/boot/vmlinuz-$kver
[ -r "$kernel" ] || { echo "oracle: no kernel at $kernel (apt-get install linux-image-amd64)" >&2; exit 2; }
command -v qemu-system-x86_64 >/dev/null || { echo "oracle: qemu-system-x86_64 missing" >&2; exit 2; }
busybox=$(command -v busybox) || { echo "oracle: busybox missing (busybox-static)" >&2; exit 2; }

# A static mqblk for the guest (built once, cached in target/static).
static_bin=$root/target/static/x86_64-unknown-linux-gnu/release/mqblk
(cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR=target/static \
  cargo build --quiet --release -p mqblk-cli --target x86_64-unknown-linux-gnu)
host_bin=$root/target/release/mqblk
(cd "$root" && cargo build --quiet --release -p mqblk-cli)

# null_blk module parameters from the spec.
params="nr_devices=1"
IFS=',' read -ra kvs <<< "${spec#null:}"
for kv in "${kvs[@]}"; do
  case "${kv%%=*}" in
    zone_lock|"") ;;
    *) params="$params $kv" ;;
  esac
done

# The initramfs: busybox, configfs + null_blk, mqblk, the script, /init.
rd=$work/rd
mkdir -p "$rd"/{bin,dev,proc,sys,mod}
cp "$busybox" "$rd/bin/busybox"
for tool in sh mount insmod cat echo poweroff; do ln -s busybox "$rd/bin/$tool"; done
cp "/lib/modules/$kver/kernel/fs/configfs/configfs.ko" "$rd/mod/"
cp "/lib/modules/$kver/kernel/drivers/block/null_blk/null_blk.ko" "$rd/mod/"
cp "$static_bin" "$rd/bin/mqblk"
cp "$script" "$rd/script"
cat > "$rd/init" <<INIT
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
insmod /mod/configfs.ko
insmod /mod/null_blk.ko $params
echo none > /sys/block/nullb0/queue/scheduler
/bin/mqblk zone script --blkdev /dev/nullb0 /script
echo "ORACLE-EXIT=\$?"
poweroff -f
INIT
chmod +x "$rd/init"
(cd "$rd" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initrd.gz"

timeout 600 qemu-system-x86_64 -accel tcg -cpu max -m 1024 -smp 1 -nographic -no-reboot -nic none \
  -kernel "$kernel" -initrd "$work/initrd.gz" \
  -append "console=ttyS0 quiet panic=-1" < /dev/null > "$work/console.txt" 2>&1 || true
tr -d '\r' < "$work/console.txt" | grep -o '{"op".*' > "$work/kernel.jsonl" || true
if ! tr -d '\r' < "$work/console.txt" | grep -q 'ORACLE-EXIT=0'; then
  echo "oracle: the guest run failed; console:" >&2
  tail -n 30 "$work/console.txt" >&2
  exit 2
fi
"$host_bin" zone script --device "$spec" "$script" > "$work/mqblk.jsonl"

n_kernel=$(wc -l < "$work/kernel.jsonl")
n_mqblk=$(wc -l < "$work/mqblk.jsonl")
if cmp -s "$work/kernel.jsonl" "$work/mqblk.jsonl"; then
  echo "oracle: $spec: $n_mqblk ops, no mismatch (kernel $kver)"
  exit 0
fi
line=$( (cmp "$work/kernel.jsonl" "$work/mqblk.jsonl" 2>/dev/null || true) | sed -n 's/.* line \([0-9]*\).*/\1/p')
line=${line:-$(( (n_kernel < n_mqblk ? n_kernel : n_mqblk) + 1 ))}
echo "oracle: $spec: first mismatch at op $line (kernel $kver: $n_kernel lines, mqblk: $n_mqblk lines)"
echo "kernel: $(sed -n "${line}p" "$work/kernel.jsonl")"
echo "mqblk:  $(sed -n "${line}p" "$work/mqblk.jsonl")"
exit 1
