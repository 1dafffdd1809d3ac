#!/usr/bin/env bash
# mqblk's vhost-user-blk server against qemu-storage-daemon's, serving the
# same Linux 6.12 guest (qemu TCG, tests/guest/run.sh) side by side.
#
#   cargo build --release -p mqblk-cli && scripts/compare-vhost.sh [ROUNDS] [SECONDS] [OUT]
#
# Defaults: 3 rounds, 8 s per fio run, docs/results/vhost-compare.txt.
# Four disks of 2 queues each, one guest:
#   vda  mqblk vhost add --device null:gb=1 --queues 2
#   vdb  qemu-storage-daemon: null-co (size 1 GiB), vhost-user-blk export, num-queues=2
#   vdc  mqblk vhost add --device file:path=F,reap=client,submit_queues=2 --queues 2
#        (a ring per queue that the queue's worker reaps itself, as
#        `mqblk bench` and the C library open files; the driver's default
#        puts a completion thread between the ring and the worker)
#   vdd  qemu-storage-daemon: file F (cache.direct=off, as mqblk's file
#        driver's default), vhost-user-blk export, num-queues=2
# where F is one 1 GiB file of random data under /tmp, in the host's page
# cache (read once before), so that the files' rows measure the servers
# and not the VM's disk. Rows: 4k randread QD1, 4k randread QD32, 1M read
# QD4, 1M write QD4 (fio io_uring, direct=1, time_based; the file rows'
# writes land in the host's page cache of F, through both servers alike),
# each round running every row on each disk in turn (the servers
# alternate within a round). MQBLK_COMPARE_ROWS="read 1m 4,write 1m 4"
# runs only the rows it names (comma-separated "rw bs qd"), for profiling.
#
# CPU per request: the guest prints a marker before and after each fio run
# and waits; the host, reading the guest's output as it comes, samples the
# server's utime+stime (/proc/PID/stat) at each marker. Each server serves
# one disk only, so its CPU between the markers is that run's.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
rows_spec=${MQBLK_COMPARE_ROWS:-randread 4k 1,randread 4k 32,read 1m 4,write 1m 4}
disks=(vda vdb vdc vdd)

# ---------------------------------------------------------------------------
# The guest half: ROUNDS and SECONDS come in target/compare-vhost.env.
if [ "${MQBLK_GUEST:-}" = 1 ]; then
  # shellcheck disable=SC1091
  . "$root/target/compare-vhost.env" || { echo "FAIL: no $root/target/compare-vhost.env from the host" >&2; exit 1; }
  IFS=, read -r -a rows <<< "$rows_spec"
  insmod "$MQBLK_GUEST_MODULES/virtio_blk.ko" || { echo "FAIL: insmod virtio_blk" >&2; exit 1; }
  for _ in $(seq 300); do [ -b /dev/vdd ] && break; sleep 0.1; done
  for d in "${disks[@]}"; do
    [ -b /dev/$d ] || { echo "FAIL: no /dev/$d" >&2; exit 1; }
    echo none > /sys/block/$d/queue/scheduler
    q=/sys/block/$d/queue
    echo "disk $d: $(blockdev --getsize64 /dev/$d) bytes, $(find /sys/block/$d/mq -mindepth 1 -maxdepth 1 -type d | wc -l) queues," \
      "max_segments $(cat $q/max_segments), max_segment_size $(cat $q/max_segment_size), max_sectors_kb $(cat $q/max_sectors_kb)"
  done
  for round in $(seq "$rounds"); do
    for row in "${rows[@]}"; do
      read -r rw bs qd <<< "$row"
      for d in "${disks[@]}"; do
        out=/tmp/fio-$d.json
        echo "MARK begin $round $d $rw $bs $qd"
        sleep 2
        timeout -k 10 $((seconds + 120)) "${MQBLK_GUEST_FIO:-fio}" --name=cmp --filename=/dev/$d --direct=1 --ioengine=io_uring \
          --rw="$rw" --bs="$bs" --iodepth="$qd" --time_based --runtime="$seconds" --ramp_time=1 \
          --output-format=json --output="$out" > /dev/null 2>&1 || echo "FAIL: fio on $d: $rw $bs QD$qd" >&2
        # fio's JSON has a read, then a write section, each with these keys.
        case $rw in *write*) n=2 ;; *) n=1 ;; esac
        ios=$(grep '"total_ios"' "$out" | sed -n "${n}p" | tr -dc 0-9)
        iops=$(grep '"iops"' "$out" | sed -n "${n}p" | sed -E 's/.*: *([0-9.]+).*/\1/')
        echo "MARK end $round $d $rw $bs $qd ios=$ios iops=$iops"
        sleep 2
      done
    done
  done
  echo "compare-vhost guest: done"
  exit 0
fi

# ---------------------------------------------------------------------------
# The host half.
rounds=${1:-3} seconds=${2:-8} out=${3:-$root/docs/results/vhost-compare.txt}
# The guest reads its parameters from the checkout, over the host's /,
# where its own tmpfs hides /tmp and /run.
case $root in /tmp/* | /run/*) echo "compare-vhost.sh: run it from a checkout outside /tmp and /run (the guest cannot see $root)" >&2; exit 2 ;; esac
IFS=, read -r -a rows <<< "$rows_spec"
mqblk=${MQBLK_BIN:-$root/target/release/mqblk}
[ -x "$mqblk" ] || { echo "compare-vhost.sh: no $mqblk (cargo build --release -p mqblk-cli)" >&2; exit 2; }
command -v qemu-storage-daemon >/dev/null || { echo "compare-vhost.sh: needs qemu-storage-daemon (apt-get install qemu-system-common)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mqblk-cmp-vhost.XXXXXX")
pids=()
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$work" "$root/target/compare-vhost.env"
}
trap cleanup EXIT

file=$work/backing.img
head -c 1G /dev/urandom > "$file"
cat "$file" > /dev/null
# The guest reads its parameters from the checkout (it sees the host's /
# read-only, but its own /tmp and /run).
mkdir -p "$root/target"
printf 'rounds=%s\nseconds=%s\nrows_spec="%s"\n' "$rounds" "$seconds" "$rows_spec" > "$root/target/compare-vhost.env"

wait_socket() {
  for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done
  echo "compare-vhost.sh: no socket $1: $(cat "$2" 2>/dev/null)" >&2
  exit 1
}
"$mqblk" vhost add --device null:gb=1 --socket "$work/vda.sock" --queues 2 > "$work/vda.log" 2>&1 &
pids[0]=$!
qemu-storage-daemon --blockdev driver=null-co,node-name=n0,size=1073741824 \
  --export type=vhost-user-blk,id=e0,node-name=n0,addr.type=unix,addr.path="$work/vdb.sock",num-queues=2,writable=on \
  > "$work/vdb.log" 2>&1 &
pids[1]=$!
"$mqblk" vhost add --device "file:path=$file,reap=client,submit_queues=2" --socket "$work/vdc.sock" --queues 2 > "$work/vdc.log" 2>&1 &
pids[2]=$!
qemu-storage-daemon --blockdev driver=file,node-name=f0,filename="$file",cache.direct=off \
  --export type=vhost-user-blk,id=e1,node-name=f0,addr.type=unix,addr.path="$work/vdd.sock",num-queues=2,writable=on \
  > "$work/vdd.log" 2>&1 &
pids[3]=$!
for i in 0 1 2 3; do wait_socket "$work/${disks[i]}.sock" "$work/${disks[i]}.log"; done

qemu_args=()
for i in 0 1 2 3; do
  qemu_args+=(--qemu -chardev --qemu "socket,id=c$i,path=$work/${disks[i]}.sock")
  qemu_args+=(--qemu -device --qemu "vhost-user-blk-pci,chardev=c$i,num-queues=2")
done

# CPU ticks (utime + stime) of server $1 (an index into pids).
ticks() { awk '{ print $14 + $15 }' "/proc/${pids[$1]}/stat"; }
hz=$(getconf CLK_TCK)
declare -A begin_ticks
results=$work/results.txt
: > "$results"
MQBLK_GUEST_TIMEOUT=$((600 + rounds * ${#rows[@]} * 4 * (seconds + 8) * 3)) \
  "$root/tests/guest/run.sh" "$0" --shared-mem "${qemu_args[@]}" 2>&1 |
  while IFS= read -r line; do
    echo "$line"
    case "$line" in
      "disk vd"*) echo "# $line" >> "$work/disks.txt" ;;
      "MARK begin "*)
        read -r _ _ round d _ <<< "$line"
        for i in 0 1 2 3; do [ "${disks[i]}" = "$d" ] && begin_ticks[$d]=$(ticks "$i"); done ;;
      "MARK end "*)
        read -r _ _ round d rw bs qd ios iops <<< "$line"
        for i in 0 1 2 3; do
          [ "${disks[i]}" = "$d" ] || continue
          echo "$round $d $rw $bs $qd ${ios#ios=} ${iops#iops=} $(($(ticks "$i") - ${begin_ticks[$d]}))" >> "$results"
        done ;;
    esac
  done
status=${PIPESTATUS[0]}
[ "$status" = 0 ] || { echo "compare-vhost.sh: the guest failed (status $status)" >&2; exit 1; }

# summary DISK: "median (min-max) cpu" of DISK's runs of the row in $rw
# $bs $qd: IOPS over the rounds and the server's CPU us per request.
summary() {
  awk -v d="$1" -v rw="$rw" -v bs="$bs" -v qd="$qd" -v hz="$hz" '
    $2 == d && $3 == rw && $4 == bs && $5 == qd { n++; iops[n] = $7; cpu[n] = ($6 > 0 ? $8 / hz * 1e6 / $6 : 0) }
    function median(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    END { if (!n) { print "- -"; exit }
      m = median(iops, n); lo = iops[1]; hi = iops[n]; c = median(cpu, n)
      printf "%.0f (%.0f-%.0f) %.1f\n", m, lo, hi, c }' "$results"
}

# One line per row and disk: median IOPS (min-max) over the rounds, and
# the server's CPU per request in microseconds (median). The commit is read
# before OUT is opened (and docs/results left out): the output file
# itself would mark the tree dirty.
commit="$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet -- . ':!docs/results' || echo +dirty)"
{
  echo "# mqblk vhost-user-blk against qemu-storage-daemon $(qemu-storage-daemon --version | head -n 1 | awk '{ print $3 }'), one Linux 6.12 guest (qemu TCG, 2 vCPUs)"
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $commit, $(nproc) CPUs, host kernel $(uname -r)"
  echo "# scripts/compare-vhost.sh $rounds $seconds: $rounds rounds, ${seconds} s per fio run (io_uring, direct=1, ramp 1 s), the servers alternating within each round"
  echo "# backing: null = mqblk null:gb=1 / qemu-storage-daemon null-co; file = one 1 GiB file in the page cache through both (buffered)"
  echo "# CPU per request = the server's utime+stime from just before fio starts to just after it ends (ramp included; 1/${hz} s ticks) / the I/Os fio counted after its ramp"
  printf '%-8s %-18s %-26s %-26s %-12s %-12s\n' backing row "mqblk IOPS" "qsd IOPS" "mqblk us/IO" "qsd us/IO"
  for row in "${rows[@]}"; do
    read -r rw bs qd <<< "$row"
    for pair in "null vda vdb" "file vdc vdd"; do
      read -r backing ours theirs <<< "$pair"
      read -r m1 r1 c1 <<< "$(summary "$ours")"
      read -r m2 r2 c2 <<< "$(summary "$theirs")"
      printf '%-8s %-18s %-26s %-26s %-12s %-12s\n' "$backing" "$rw $bs QD$qd" "$m1 $r1" "$m2 $r2" "$c1" "$c2"
    done
  done
  echo
  # The disks as the guest's virtio_blk set them up (from each server's
  # seg_max and size_max).
  cat "$work/disks.txt" 2>/dev/null
  # How the guest's requests reached mqblk (logged when QEMU hung up).
  for d in vda vdc; do
    echo "# $d, mqblk's log: $(grep -ho 'connection ended: .*' "$work/$d.log" | tail -n 1)"
  done
  echo "# raw: round disk rw bs qd ios iops cpu_ticks"
  cat "$results"
} > "$out"
cat "$out"
