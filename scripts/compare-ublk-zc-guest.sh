#!/usr/bin/env bash
# The guest side of scripts/compare-ublk-zc.sh: runs inside the Linux 7.x
# guest of tests/guest/run.sh; prints JSON lines (`{"type":...}`) for the
# host to collect.
#
# One 1 GiB file, written through once, on ext4 on a RAM disk (brd:
# O_DIRECT reaches memory, no host I/O under TCG), served each of these ways,
# 1 queue of 64 tags, scheduler none, direct I/O on the file:
#   zero_copy    /dev/ublkb0  `mqblk ublk add --device file:...,direct=1,reap=client
#                             --zero-copy on`: the kernel registers each request's
#                             pages in the queue's ring (AUTO_BUF_REG), which reads
#                             and writes the file with them; its queue thread
#                             pinned to one CPU (--cpu-affinity single, the default)
#   zero_copy_unpinned /dev/ublkb6  the same with --cpu-affinity off
#   zero_copy_explicit /dev/ublkb5  the same with --zero-copy explicit: the file
#                             driver registers the pages in its own ring (three
#                             linked SQEs a request; the queue thread reaps that ring)
#   copy         /dev/ublkb1  the same with --zero-copy off (the kernel
#                             copies through the server's buffers)
#   zero_copy_cq /dev/ublkb3  explicit zero copy without reap=client: the file
#                             driver's completion thread wakes the queue thread
#   loop         /dev/loopN   `losetup --direct-io=on` (the kernel's own)
#   rublk        /dev/ublkb2  `rublk add loop` (the peer ublk server; its loop
#                             target opens the file with O_DIRECT), if RUBLK_BIN
#   rublk_zc     /dev/ublkb4  `rublk add loop -z`: rublk's zero copy (AUTO_BUF_REG)
# Rows (fio io_uring, direct=1): 4k randread and randwrite at QD1 and QD32,
# 1 MiB sequential read and write at QD4. ROUNDS rounds; in each, each row
# runs on every device one after the other, the order rotated every
# round; one fio process per round, stonewalled jobs. Each job's
# exec_prerun and exec_postrun snapshot the device's completed I/Os, the
# server process's CPU time (its threads' schedstat: the ublk queue thread
# and the file driver's completion threads) and the whole guest's busy
# time (/proc/stat: fio, the kernel, the server), so the counts per I/O are
# exact and cost nothing inside the measured window.
#
# Settings (environment; scripts/compare-ublk-zc.sh sets them): MQBLK_BIN,
# RUBLK_BIN (empty: no rublk), KMOD_BLOCK_DIR (the guest kernel's
# drivers/block, for brd.ko.xz and loop.ko.xz),
# UBENCH_ROUNDS (3), UBENCH_RUNTIME (4 s), UBENCH_RAMP (1 s), UBENCH_PROFILE
# (0; 1: a perf profile of the 1 MiB rows after the timed rounds;
# UBENCH_PROFILE_ROWS names others), UBENCH_COUNT (0; 1: exact counts per
# I/O of those rows: perf stat's tracepoints, the server's threads' switches), UBENCH_ROWS and UBENCH_DEVICES (empty:
# all; else the rows and devices to run, space-separated).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -uo pipefail

[ "${MQBLK_GUEST:-}" = 1 ] || { echo "compare-ublk-zc-guest.sh: run me with scripts/compare-ublk-zc.sh" >&2; exit 2; }
mqblk=${MQBLK_BIN:?MQBLK_BIN names the mqblk binary}
rublk=${RUBLK_BIN:-}
rounds=${UBENCH_ROUNDS:-3}
runtime=${UBENCH_RUNTIME:-4}
ramp=${UBENCH_RAMP:-1}
cd /tmp || exit 2

# ---- the file: ext4 on a 1.25 GiB RAM disk ------------------------------------------
# brd and loop are modules the guest harness does not load: unpacked here
# from the guest kernel's own tree.
blockdir=${KMOD_BLOCK_DIR:?KMOD_BLOCK_DIR names the guest kernel drivers/block directory}
for m in brd loop; do
  xz -dc "$blockdir/$m.ko.xz" > "/tmp/$m.ko" || { echo "no $m.ko.xz in $blockdir" >&2; exit 1; }
done
insmod /tmp/brd.ko rd_nr=1 rd_size=$((1280 * 1024)) || { echo "insmod brd failed" >&2; exit 1; }
insmod /tmp/loop.ko max_loop=1 || { echo "insmod loop failed" >&2; exit 1; }
mkfs.ext4 -q -F /dev/ram0 && mkdir -p /tmp/zc && mount -t ext4 /dev/ram0 /tmp/zc || { echo "ext4 on ram0 failed" >&2; exit 1; }
img=/tmp/zc/disk.img
# Written through once, so every read reaches written blocks (an unwritten
# extent would read as zeros without touching the RAM disk).
dd if=/dev/zero of=$img bs=1M count=1024 oflag=direct status=none || { echo "writing $img failed" >&2; exit 1; }

depth=64
spec="file:path=$img,direct=1"
declare -A path=() pid=() cmd=()
devices=(zero_copy zero_copy_unpinned zero_copy_explicit copy zero_copy_cq loop)

# start_mqblk NAME ID MODE [SPEC_EXTRA [OPTIONS]]
start_mqblk() {
  local name=$1 id=$2 mode=$3 extra=${4:-} opts=${5:-}
  cmd[$name]="$mqblk ublk add --device $spec$extra --queues 1 --depth $depth --id $id --zero-copy $mode$opts"
  ${cmd[$name]} > "/tmp/$name.out" 2> "/tmp/$name.err" &
  pid[$name]=$!
  for _ in $(seq 600); do
    [ -b "/dev/ublkb$id" ] && grep -q serving "/tmp/$name.out" && break
    kill -0 "${pid[$name]}" 2>/dev/null || break
    sleep 0.1
  done
  [ -b "/dev/ublkb$id" ] || { echo "$name: no /dev/ublkb$id: $(cat "/tmp/$name.out" "/tmp/$name.err")" >&2; exit 1; }
  path[$name]=/dev/ublkb$id
  echo "$name: $(cat "/tmp/$name.out")" >&2
}
cleanup() {
  for d in zero_copy zero_copy_unpinned zero_copy_explicit copy zero_copy_cq; do [ -z "${pid[$d]:-}" ] || kill "${pid[$d]}" 2>/dev/null; done
  [ -z "$rublk" ] || { "$rublk" del -n 2; "$rublk" del -n 4; } > /dev/null 2>&1
  [ -z "${path[loop]:-}" ] || losetup -d "${path[loop]}"
}
trap cleanup EXIT

# reap=client: under explicit registration the ublk queue thread reaps
# the file's ring itself, one wakeup a request; zero_copy_cq keeps the
# file driver's completion thread (two wakeups a request: that thread's,
# then the queue thread's). Auto registration has no second ring.
start_mqblk zero_copy 0 on ,reap=client
grep -q "zero copy, auto-registered, queue 0 on CPU" /tmp/zero_copy.out || { echo "zero_copy: not auto-registered zero copy on one CPU: $(cat /tmp/zero_copy.out)" >&2; exit 1; }
start_mqblk zero_copy_unpinned 6 on ,reap=client " --cpu-affinity off"
grep -q "zero copy, auto-registered, queue threads unpinned" /tmp/zero_copy_unpinned.out || { echo "zero_copy_unpinned: $(cat /tmp/zero_copy_unpinned.out)" >&2; exit 1; }
start_mqblk zero_copy_explicit 5 explicit ,reap=client
grep -q "zero copy, queue 0" /tmp/zero_copy_explicit.out || { echo "zero_copy_explicit: not zero copy: $(cat /tmp/zero_copy_explicit.out)" >&2; exit 1; }
start_mqblk copy 1 off ,reap=client
start_mqblk zero_copy_cq 3 explicit
cmd[loop]="losetup --direct-io=on -f --show $img"
path[loop]=$(${cmd[loop]}) || { echo "losetup failed" >&2; exit 1; }
pid[loop]=-
[ "$(cat "/sys/block/${path[loop]#/dev/}/loop/dio")" = 1 ] || { echo "loop: direct I/O is off" >&2; exit 1; }
# start_rublk NAME ID [OPTIONS]: rublk's loop target (direct I/O on the
# file, 1 MiB buffers); it daemonizes: `add` returns once the device is live.
start_rublk() {
  local name=$1 id=$2 opts=${3:-}
  cmd[$name]="$rublk add loop -n $id -q 1 -d $depth -b 1MiB -f $img --quiet $opts"
  ${cmd[$name]} > "/tmp/$name.out" 2>&1 || { echo "$name add failed: $(cat "/tmp/$name.out")" >&2; exit 1; }
  for _ in $(seq 600); do [ -b "/dev/ublkb$id" ] && break; sleep 0.1; done
  [ -b "/dev/ublkb$id" ] || { echo "$name: no /dev/ublkb$id: $(cat "/tmp/$name.out")" >&2; exit 1; }
  path[$name]=/dev/ublkb$id
  pid[$name]=$("$mqblk" ublk list | awk -v id="$id" '$1 == id { print $6 }')
  devices+=("$name")
}
if [ -n "$rublk" ]; then
  start_rublk rublk 2
  # rublk's zero copy: AUTO_BUF_REG, the file I/O on the ublk queue's ring.
  start_rublk rublk_zc 4 -z
fi

for d in "${devices[@]}"; do
  b=${path[$d]#/dev/}
  echo none > "/sys/block/$b/queue/scheduler" 2>/dev/null
  jq -M -cn --arg device "$d" --arg path "${path[$d]}" --arg cmd "${cmd[$d]}" --arg pid "${pid[$d]}" \
    --arg scheduler "$(cat "/sys/block/$b/queue/scheduler")" \
    --argjson max_sectors_kb "$(cat "/sys/block/$b/queue/max_sectors_kb")" \
    --argjson size_bytes "$(blockdev --getsize64 "${path[$d]}")" \
    '{type: "device", $device, $path, command: $cmd, server_pid: $pid, $scheduler, $max_sectors_kb, $size_bytes}'
done
jq -M -cn --arg kernel "$(uname -r)" --arg fio "$(fio --version)" --arg rublk "$([ -z "$rublk" ] || "$rublk" --version)" \
  --argjson cpus "$(nproc)" --argjson rounds "$rounds" --argjson runtime_s "$runtime" --argjson ramp_s "$ramp" \
  --arg features "$("$mqblk" ublk info 0 | awk '$1 == "flags" { print $2 }')" \
  '{type: "guest", $kernel, $fio, $rublk, $cpus, $rounds, $runtime_s, $ramp_s, zero_copy_device_flags: $features}'

# ---- snapshots around each fio job --------------------------------------------------
# snap.sh PHASE JOB BLOCKDEV PID: one line into /tmp/snaps.txt:
#   PHASE JOB uptime_s ios_completed server_run_ns busy_jiffies server_switches
# (reads + writes completed; the server's threads' run time, 0 without
# one; the guest's busy time from /proc/stat's cpu line: all but idle and
# iowait; the server's threads' context switches, voluntary and not).
cat > /tmp/snap.sh <<'SNAP'
#!/bin/sh
phase=$1 job=$2 dev=$3 pid=$4
tasks=""
[ "$pid" = - ] || tasks="/proc/$pid/task/*/schedstat /proc/$pid/task/*/status"
# shellcheck disable=SC2086 # the glob expands here
awk -v phase="$phase" -v job="$job" '
  FILENAME == "/proc/uptime" { now = $1 }
  FILENAME == "/proc/stat" && $1 == "cpu" { busy = $2 + $3 + $4 + $7 + $8 + $9 }
  FILENAME ~ /^\/sys\/block/ { ios = $1 + $5 }
  FILENAME ~ /schedstat$/ { run += $1 }
  /^(non)?voluntary_ctxt_switches/ { switches += $2 }
  END { printf "%s %s %s %.0f %.0f %.0f %.0f\n", phase, job, now, ios, run, busy, switches }
' /proc/uptime /proc/stat "/sys/block/$dev/stat" $tasks >> /tmp/snaps.txt
SNAP
chmod +x /tmp/snap.sh

rows=(randread-4k-qd1 randwrite-4k-qd1 randread-4k-qd32 randwrite-4k-qd32 read-1m-qd4 write-1m-qd4)
# shellcheck disable=SC2206 # word splitting wanted: a list of names
[ -z "${UBENCH_ROWS:-}" ] || rows=($UBENCH_ROWS)
if [ -n "${UBENCH_DEVICES:-}" ]; then
  keep=()
  for d in "${devices[@]}"; do
    [[ " $UBENCH_DEVICES " == *" $d "* ]] && keep+=("$d")
  done
  devices=("${keep[@]}")
fi
job_section() { # NAME DEVICE ROW
  local name=$1 d=$2 row=$3 rw bs qd
  IFS=- read -r rw bs qd <<< "$row"
  echo "[$name]"
  echo "stonewall"
  echo "filename=${path[$d]}"
  echo "rw=$rw"
  echo "bs=$bs"
  echo "iodepth=${qd#qd}"
  echo "exec_prerun=/tmp/snap.sh pre $name ${path[$d]#/dev/} ${pid[$d]}"
  echo "exec_postrun=/tmp/snap.sh post $name ${path[$d]#/dev/} ${pid[$d]}"
}
fio_global="[global]
ioengine=io_uring
direct=1
size=1g
time_based
runtime=$runtime
ramp_time=$ramp
randrepeat=0
norandommap
clocksource=clock_gettime"

# emit_runs FIO_JSON: one JSON line per job (named run.ROUND.ROW.DEVICE),
# fio's figures (reads or writes, as the row) joined with the snapshots.
emit_runs() {
  local json=$1 name round row d delta dir
  for name in $(jq -M -r '.jobs[].jobname' "$json"); do
    IFS=. read -r _ round row d <<< "$name"
    case $row in *write*) dir=write ;; *) dir=read ;; esac
    delta=$(awk -v j="$name" '$2 == j && $1 == "pre" { for (i = 3; i <= NF; i++) a[i] = $i }
      $2 == j && $1 == "post" { for (i = 3; i <= NF; i++) b[i] = $i }
      END { printf "{\"window_s\":%.3f,\"ios\":%.0f,\"server_run_ns\":%.0f,\"busy_jiffies\":%.0f,\"server_switches\":%.0f}",
        b[3] - a[3], b[4] - a[4], b[5] - a[5], b[6] - a[6], b[7] - a[7] }' /tmp/snaps.txt)
    jq -M -c --argjson round "$round" --arg row "$row" --arg device "$d" --arg dir "$dir" --argjson delta "$delta" \
      --arg name "$name" --argjson hz "$(getconf CLK_TCK)" \
      '.jobs[] | select(.jobname == $name) |
       {type: "run", $round, $row, $device, iops: .[$dir].iops, bw_bytes: .[$dir].bw_bytes,
        clat_p50_ns: .[$dir].clat_ns.percentile["50.000000"], fio_ios: .[$dir].total_ios,
        fio_error: .error, clk_tck: $hz} + $delta' "$json"
  done
}

t_start=$(date +%s)
n=${#devices[@]}
for round in $(seq 1 "$rounds"); do
  : > /tmp/snaps.txt
  {
    echo "$fio_global"
    for row in "${rows[@]}"; do
      for ((k = 0; k < n; k++)); do
        d=${devices[$(((round - 1 + k) % n))]}
        job_section "run.$round.$row.$d" "$d" "$row"
      done
    done
  } > /tmp/round.fio
  if ! timeout 1200 fio --output-format=json --output=/tmp/round.json /tmp/round.fio > /tmp/fio.log 2>&1; then
    echo "fio failed in round $round: $(tail -n 5 /tmp/fio.log)" >&2
    exit 1
  fi
  emit_runs /tmp/round.json
  echo "round $round done at $(($(date +%s) - t_start)) s" >&2
done
# ---- profile (UBENCH_PROFILE=1), not timed: where the guest's CPU goes ------------
# perf record -a of cpu-clock (perf's cycles never fire under TCG) over a
# 1 MiB read and write job on each device, one fio job at a time.
if [ "${UBENCH_PROFILE:-0}" = 1 ] && command -v perf > /dev/null; then
  for row in ${UBENCH_PROFILE_ROWS:-read-1m-qd4 write-1m-qd4}; do
    for d in "${devices[@]}"; do
      { echo "$fio_global"; job_section "prof.0.$row.$d" "$d" "$row"; } | sed 's/^runtime=.*/runtime=3/' > /tmp/prof.fio
      b=${path[$d]#/dev/}
      before=$(awk '{ print $1 + $5 }' "/sys/block/$b/stat")
      perf record -a ${UBENCH_PROFILE_G:+-g} -e cpu-clock -F 999 -o /tmp/prof.data -- fio /tmp/prof.fio > /tmp/prof.log 2>&1
      echo "PROFILE $row $d ios $(($(awk '{ print $1 + $5 }' "/sys/block/$b/stat") - before)) samples $(perf report -i /tmp/prof.data --stdio 2>/dev/null | awk '/^# Samples/ { print $3 }')"
      # By thread first (whose CPU: the server's queue thread, io_uring's
      # workers, loop's kworkers, fio), then by thread and symbol.
      perf report -i /tmp/prof.data --stdio --no-children --sort comm --percent-limit 0.2 2> /dev/null |
        grep -v '^#' | grep -v '^$' | head -n 30 | sed "s/^/PROFILE $row $d comm: /"
      perf report -i /tmp/prof.data --stdio --no-children --sort comm,sym --percent-limit 0.25 2> /dev/null |
        grep -v '^#' | grep -v '^$' | head -n 80 | sed "s/^/PROFILE $row $d: /"
    done
  done
fi

# ---- counts (UBENCH_COUNT=1), not timed: exact events per I/O -----------------------
# perf stat -a over one fio job per device: context switches, io_uring's
# punts to its workers (io_uring_queue_async_work), io_uring_enter calls,
# and the device's completed I/Os around it.
thread_switches() { # PID: "tid comm switches" per thread (nothing for -)
  [ "$1" != - ] || return 0
  for t in /proc/$1/task/*; do
    echo "${t##*/} $(cat "$t/comm") $(awk '/^voluntary_ctxt_switches/ { v = $2 } /^nonvoluntary_ctxt_switches/ { n = $2 } END { print v, n }' "$t/status")"
  done
}
if [ "${UBENCH_COUNT:-0}" = 1 ] && command -v perf > /dev/null; then
  for row in ${UBENCH_PROFILE_ROWS:-write-1m-qd4}; do
    for d in "${devices[@]}"; do
      { echo "$fio_global"; job_section "count.0.$row.$d" "$d" "$row"; } | sed 's/^runtime=.*/runtime=3/;/^exec_/d' > /tmp/count.fio
      b=${path[$d]#/dev/}
      before=$(awk '{ print $1 + $5 }' "/sys/block/$b/stat")
      thread_switches "${pid[$d]}" > /tmp/th.before
      perf stat -a -x, -e context-switches,io_uring:io_uring_queue_async_work,io_uring:io_uring_submit_req,syscalls:sys_enter_io_uring_enter,io_uring:io_uring_complete \
        -o /tmp/count.txt -- fio /tmp/count.fio > /tmp/count.log 2>&1
      after=$(awk '{ print $1 + $5 }' "/sys/block/$b/stat")
      thread_switches "${pid[$d]}" > /tmp/th.after
      ios=$((after - before))
      awk -F, -v row="$row" -v d="$d" -v ios="$ios" '/^[0-9]/ { printf "COUNT %s %s ios %d %s %.3f per I/O (%s)\n", row, d, ios, $3, $1 / ios, $1 }' /tmp/count.txt
      if [ "${pid[$d]}" != - ]; then
        awk -v row="$row" -v d="$d" -v ios="$ios" 'FNR == 1 { f++ } { if (f == 1) { a[$1] = $3; an[$1] = $4 } else { c[$1] = $2; b[$1] = $3; bn[$1] = $4 } }
          END { for (t in b) printf "COUNT %s %s thread %s %s switches voluntary %.3f involuntary %.3f per I/O\n", row, d, t, c[t], (b[t] - a[t]) / ios, (bn[t] - an[t]) / ios }' \
          /tmp/th.before /tmp/th.after
      fi
    done
  done
fi

# The zero-copy server's own counts: every read and write zero copy, none
# copied after a failed registration.
kill "${pid[zero_copy]}"
wait "${pid[zero_copy]}"
jq -M -cn --arg line "$(tail -n 1 /tmp/zero_copy.out)" '{type: "zero_copy_summary", $line}'
pid[zero_copy]=""
