#!/usr/bin/env bash
# The guest side of scripts/compare-ublk.sh: runs inside the Linux
# 6.12 guest of tests/guest/run.sh; prints JSON lines (`{"type":...}`) and
# profile text lines (`PROFILE ...`) on stdout for the host to collect.
#
# Three devices, each 1 queue of 64 tags, requests up to 1 MiB, 512-byte
# blocks, scheduler none:
#   null_blk  /dev/nullb0  the guest kernel's null_blk (irqmode=0)
#   mqblk     /dev/ublkb0  `mqblk ublk add --device null:...,irqmode=0`
#   rublk     /dev/ublkb1  `rublk add null` (the peer ublk server; its null
#                          target has a fixed 250 GiB size, fio reads the
#                          first 1 GiB of every device)
# Rows (fio io_uring, direct=1): 4k randread QD1, 4k randread QD32, 1 MiB
# sequential read QD4. Timed phase: ROUNDS rounds; in each round, each row
# runs on the three devices one after the other, the order rotated every
# round; one fio process per round (starting fio under TCG takes ~6 s), one
# job per (row, device), with stonewall. Each job's exec_prerun and
# exec_postrun snapshot the device's completed reads and the server's
# context switches and CPU time (/proc/PID/task/*), so the counts per
# request are exact and cost nothing inside the measured window.
# Profile phase (UBENCH_PROFILE=1), not timed: per server and row, a
# system-wide `perf record` of cpu-clock samples and syscall tracepoints
# (exact syscall counts per thread, where the CPU time goes).
#
# Settings (environment; scripts/compare-ublk.sh sets them): MQBLK_BIN,
# RUBLK_BIN, UBENCH_ROUNDS (5), UBENCH_RUNTIME (5 s), UBENCH_RAMP (1 s),
# UBENCH_PROFILE (1), UBENCH_PROFILE_RUNTIME (3 s).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -uo pipefail

[ "${MQBLK_GUEST:-}" = 1 ] || { echo "compare-ublk-guest.sh: run me with scripts/compare-ublk.sh" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
mqblk=${MQBLK_BIN:-$root/target/release/mqblk}
rublk=${RUBLK_BIN:?RUBLK_BIN names the rublk binary}
rounds=${UBENCH_ROUNDS:-5}
runtime=${UBENCH_RUNTIME:-5}
ramp=${UBENCH_RAMP:-1}
profile=${UBENCH_PROFILE:-1}
profile_runtime=${UBENCH_PROFILE_RUNTIME:-3}
for b in "$mqblk" "$rublk"; do [ -x "$b" ] || { echo "compare-ublk-guest.sh: no $b" >&2; exit 2; }; done
# fio writes exec_prerun/postrun output files into its working directory.
cd /tmp || exit 2

# ---- the devices (1 queue x 64 tags, max request 1 MiB, 512-byte blocks) ---------
depth=64
null_params="nr_devices=1 gb=1 bs=512 irqmode=0 hw_queue_depth=$depth submit_queues=1 max_sectors=2048"
mqblk_spec="null:gb=1,bs=512,irqmode=0,hw_queue_depth=$depth,submit_queues=1,max_sectors=2048"
mqblk_cmd="$mqblk ublk add --device $mqblk_spec --queues 1 --depth $depth --id 0"
rublk_cmd="$rublk add null -n 1 -q 1 -d $depth -b 1MiB --quiet"

declare -A path=([null_blk]=/dev/nullb0 [mqblk]=/dev/ublkb0 [rublk]=/dev/ublkb1)
declare -A pid=([null_blk]=-)
devices=(mqblk rublk null_blk)

cleanup() {
  [ -z "${pid[mqblk]:-}" ] || kill "${pid[mqblk]}" 2>/dev/null
  "$rublk" del -n 1 > /dev/null 2>&1
}
trap cleanup EXIT

# shellcheck disable=SC2086 # word splitting of the parameter lists is intended
insmod "$MQBLK_GUEST_MODULES/null_blk.ko" $null_params || { echo "insmod null_blk failed" >&2; exit 1; }
# shellcheck disable=SC2086
$mqblk_cmd > /tmp/mqblk.out 2> /tmp/mqblk.err &
pid[mqblk]=$!
for _ in $(seq 600); do
  [ -b /dev/ublkb0 ] && grep -q serving /tmp/mqblk.out && break
  kill -0 "${pid[mqblk]}" 2>/dev/null || break
  sleep 0.1
done
[ -b /dev/ublkb0 ] || { echo "mqblk ublk: no /dev/ublkb0: $(cat /tmp/mqblk.out /tmp/mqblk.err)" >&2; exit 1; }
# rublk daemonizes: `add` returns once the device is live (/run must be writable).
$rublk_cmd > /tmp/rublk.out 2>&1 || { echo "rublk add failed: $(cat /tmp/rublk.out)" >&2; exit 1; }
for _ in $(seq 600); do [ -b /dev/ublkb1 ] && break; sleep 0.1; done
[ -b /dev/ublkb1 ] || { echo "rublk: no /dev/ublkb1: $(cat /tmp/rublk.out)" >&2; exit 1; }
pid[rublk]=$("$mqblk" ublk list | awk '$1 == 1 { print $6 }')
[ -d "/proc/${pid[rublk]}" ] || { echo "rublk: no server pid ($("$mqblk" ublk list))" >&2; exit 1; }

# The queue threads (one queue each): mqblk's is named ublk-q0; rublk's is
# the thread besides the main one named rublk.
declare -A qtid=()
for t in /proc/"${pid[mqblk]}"/task/*; do [ "$(cat "$t/comm")" = ublk-q0 ] && qtid[mqblk]=${t##*/}; done
for t in /proc/"${pid[rublk]}"/task/*; do
  [ "${t##*/}" != "${pid[rublk]}" ] && [ "$(cat "$t/comm")" = rublk ] && qtid[rublk]=${t##*/}
done

q() { cat "/sys/block/$1/queue/$2"; }
for d in "${devices[@]}"; do
  b=${path[$d]#/dev/}
  echo none > "/sys/block/$b/queue/scheduler" || { echo "scheduler none on $b failed" >&2; exit 1; }
  threads="" affinity=""
  if [ "${pid[$d]}" != - ]; then
    for t in /proc/"${pid[$d]}"/task/*; do
      threads="$threads $(cat "$t/comm")"
      affinity="$affinity $(cat "$t/comm")=$(awk '/Cpus_allowed_list/ { print $2 }' "$t/status")"
    done
  fi
  case $d in
    null_blk) cmd="insmod null_blk.ko $null_params" ;;
    mqblk) cmd=$mqblk_cmd ;;
    rublk) cmd=$rublk_cmd ;;
  esac
  jq -M -cn --arg device "$d" --arg path "${path[$d]}" --arg cmd "$cmd" --arg pid "${pid[$d]}" \
    --arg threads "${threads# }" --arg affinity "${affinity# }" \
    --arg queue_tid "${qtid[$d]:-}" --arg scheduler "$(q "$b" scheduler)" --argjson size_bytes "$(blockdev --getsize64 "${path[$d]}")" \
    --argjson logical_block_size "$(q "$b" logical_block_size)" --argjson max_sectors_kb "$(q "$b" max_sectors_kb)" \
    --argjson max_hw_sectors_kb "$(q "$b" max_hw_sectors_kb)" --argjson nr_requests "$(q "$b" nr_requests)" \
    --argjson nr_hw_queues "$(ls "/sys/block/$b/mq" | wc -l)" \
    '{type: "device", $device, $path, command: $cmd, server_pid: $pid, $queue_tid, server_threads: $threads,
      cpus_allowed: $affinity, $scheduler, $size_bytes, $logical_block_size, $max_sectors_kb,
      $max_hw_sectors_kb, $nr_requests, $nr_hw_queues}'
done
jq -M -cn --arg kernel "$(uname -r)" --arg fio "$(fio --version)" --arg rublk "$("$rublk" --version)" \
  --argjson cpus "$(nproc)" --argjson rounds "$rounds" --argjson runtime_s "$runtime" --argjson ramp_s "$ramp" \
  '{type: "guest", $kernel, $fio, $rublk, $cpus, $rounds, $runtime_s, $ramp_s}'

# ---- snapshots around each fio job --------------------------------------------------
# snap.sh PHASE JOB BLOCKDEV PID: one line into /tmp/snaps.txt:
#   PHASE JOB time_s reads_completed sectors_read vcsw ivcsw run_ns utime_ticks stime_ticks
# (the server's counters summed over its threads; zeros without a server).
cat > /tmp/snap.sh <<'SNAP'
#!/bin/sh
# One awk over every file (each exec crosses 9p under TCG: keep them few).
phase=$1 job=$2 dev=$3 pid=$4
tasks=""
[ "$pid" = - ] || tasks="/proc/$pid/task/*/schedstat /proc/$pid/task/*/stat /proc/$pid/task/*/status"
# shellcheck disable=SC2086 # the globs expand here
awk -v phase="$phase" -v job="$job" '
  FILENAME == "/proc/uptime" { now = $1 }
  FILENAME ~ /^\/sys\/block/ { reads = $1; sectors = $3 }
  FILENAME ~ /schedstat$/ { run += $1 }
  FILENAME ~ /\/stat$/ && FILENAME ~ /^\/proc\/[0-9]/ { sub(/.*\) /, ""); split($0, f, " "); ut += f[12]; st += f[13] }
  /^voluntary_ctxt_switches/ { v += $2 }
  /^nonvoluntary_ctxt_switches/ { n += $2 }
  END { printf "%s %s %s %.0f %.0f %.0f %.0f %.0f %.0f %.0f\n", phase, job, now, reads, sectors, v, n, run, ut, st }
' /proc/uptime "/sys/block/$dev/stat" $tasks >> /tmp/snaps.txt
SNAP
chmod +x /tmp/snap.sh

# job_section NAME DEVICE ROW RUNTIME [EXTRA_PRE EXTRA_POST]: one stonewalled fio job.
job_section() {
  local name=$1 d=$2 row=$3 rt=$4 pre=${5:-} post=${6:-}
  local b=${path[$d]#/dev/}
  echo "[$name]"
  echo "stonewall"
  echo "filename=${path[$d]}"
  echo "runtime=$rt"
  case $row in
    randread-4k-qd1) echo "rw=randread"; echo "bs=4k"; echo "iodepth=1" ;;
    randread-4k-qd32) echo "rw=randread"; echo "bs=4k"; echo "iodepth=32" ;;
    read-1m-qd4) echo "rw=read"; echo "bs=1m"; echo "iodepth=4" ;;
  esac
  echo "exec_prerun=${pre:+$pre && }/tmp/snap.sh pre $name $b ${pid[$d]}"
  echo "exec_postrun=/tmp/snap.sh post $name $b ${pid[$d]}${post:+ && $post}"
}
fio_global="[global]
ioengine=io_uring
direct=1
size=1g
time_based
ramp_time=$ramp
randrepeat=0
norandommap
clocksource=clock_gettime"
rows=(randread-4k-qd1 randread-4k-qd32 read-1m-qd4)

# emit_runs FIO_JSON TYPE: one JSON line per job, fio's figures joined with
# the snapshot deltas (jobs are named TYPE.ROUND.ROW.DEVICE).
emit_runs() {
  local json=$1 name type round row d delta
  for name in $(jq -M -r '.jobs[].jobname' "$json"); do
    IFS=. read -r type round row d <<< "$name"
    delta=$(awk -v j="$name" '$2 == j && $1 == "pre" { for (i = 3; i <= NF; i++) a[i] = $i }
      $2 == j && $1 == "post" { for (i = 3; i <= NF; i++) b[i] = $i }
      END { printf "{\"window_s\":%.3f,\"requests\":%.0f,\"sectors\":%.0f,\"srv_vcsw\":%.0f,\"srv_ivcsw\":%.0f,\"srv_run_ns\":%.0f,\"srv_utime_ticks\":%.0f,\"srv_stime_ticks\":%.0f}",
        b[3] - a[3], b[4] - a[4], b[5] - a[5], b[6] - a[6], b[7] - a[7], b[8] - a[8], b[9] - a[9], b[10] - a[10] }' /tmp/snaps.txt)
    jq -M -c --arg name "$name" --arg type "$type" --argjson round "$round" --arg row "$row" --arg device "$d" \
      --argjson delta "$delta" \
      '.jobs[] | select(.jobname == $name) |
       {$type, $round, $row, $device, iops: .read.iops, bw_bytes: .read.bw_bytes,
        lat_mean_ns: .read.lat_ns.mean, clat_p50_ns: .read.clat_ns.percentile["50.000000"],
        clat_p99_ns: .read.clat_ns.percentile["99.000000"], fio_ios: .read.total_ios,
        fio_runtime_ms: .read.runtime, fio_error: .error, fio_usr_cpu: .usr_cpu, fio_sys_cpu: .sys_cpu,
        fio_ctx: .ctx} + $delta' "$json"
  done
}

# ---- timed phase ------------------------------------------------------------------
t_start=$(date +%s)
for round in $(seq 1 "$rounds"); do
  {
    echo "$fio_global"
    for row in "${rows[@]}"; do
      for k in 0 1 2; do
        d=${devices[$(((round - 1 + k) % 3))]}
        job_section "run.$round.$row.$d" "$d" "$row" "$runtime"
      done
    done
  } > /tmp/round.fio
  if ! timeout 900 fio --output-format=json --output=/tmp/round.json /tmp/round.fio > /tmp/fio.log 2>&1; then
    echo "fio failed in round $round: $(tail -n 5 /tmp/fio.log)" >&2
    exit 1
  fi
  emit_runs /tmp/round.json run
  echo "round $round done at $(($(date +%s) - t_start)) s" >&2
done

[ "$profile" = 1 ] || exit 0

# ---- profile phase (not timed): perf record -a, one per (server, row) ----------------
# perf record -a of cpu-clock at 999 Hz (perf's cycles event never fires
# under TCG; the timer does): system wide, so fio, the kernel's ublk driver,
# the server and idle all show. perf stat -t of the server's queue thread:
# task-clock, context switches and syscall tracepoints (exact counts;
# tracepoints recorded with perf record lost most events here). perf 6.1
# counts only the first thread with -p, so -t names the queue thread.
# strace is no good here: rublk's queue thread stops serving once ptrace
# interrupts it (seen: fio hung on /dev/ublkb1 with strace attached).
command -v perf > /dev/null || { echo "no perf: no profile" >&2; exit 0; }
mount -t tracefs nodev /sys/kernel/tracing 2> /dev/null
mount -t debugfs nodev /sys/kernel/debug 2> /dev/null
cat > /tmp/perf-start.sh <<'PS'
#!/bin/bash
# perf-start.sh NAME QUEUE_TID: perf record -a of cpu-clock, and perf stat
# of the queue thread (in-kernel counters: exact, nothing lost).
rm -f "/tmp/perf-$1.data" "/tmp/perfstat-$1.txt"
echo "$(< /proc/uptime) perf-start $1" >> /tmp/profile.log
# Bounded: they end by themselves should the stop never come.
timeout -s INT 240 perf record -a -o "/tmp/perf-$1.data" -e cpu-clock -F 999 \
  > "/tmp/perf-$1.log" 2>&1 < /dev/null &
echo $! > "/tmp/perf-$1.pid"
timeout -s INT 240 perf stat -t "$2" -x, -o "/tmp/perfstat-$1.txt" \
  -e task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter,syscalls:sys_enter_io_uring_enter \
  -e syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_futex < /dev/null > /dev/null 2>&1 &
echo $! > "/tmp/perfstat-$1.pid"
for _ in $(seq 120); do [ -s "/tmp/perf-$1.data" ] && [ -e "/tmp/perfstat-$1.txt" ] && break; sleep 0.5; done
sleep 2
echo "$(< /proc/uptime) perf started" >> /tmp/profile.log
PS
cat > /tmp/perf-stop.sh <<'PS'
#!/bin/bash
kill -INT "$(< "/tmp/perf-$1.pid")" "$(< "/tmp/perfstat-$1.pid")"
for _ in $(seq 240); do [[ $(< "/tmp/perf-$1.log") == *"Captured and wrote"* ]] && break; sleep 0.5; done
for _ in $(seq 60); do [[ $(< "/tmp/perfstat-$1.txt") == *task-clock* ]] && break; sleep 0.5; done
echo "$(< /proc/uptime) perf stopped: $(< "/tmp/perf-$1.log")" >> /tmp/profile.log
PS
chmod +x /tmp/perf-start.sh /tmp/perf-stop.sh
: > /tmp/profile.log
tail -f /tmp/profile.log >&2 &
tail_pid=$!
{
  echo "$fio_global"
  for d in mqblk rublk; do
    for row in "${rows[@]}"; do
      n="perf.0.$row.$d"
      job_section "$n" "$d" "$row" "$profile_runtime" "/tmp/perf-start.sh $n ${qtid[$d]}" "/tmp/perf-stop.sh $n"
    done
  done
} > /tmp/perf.fio
: > /tmp/snaps.txt
if timeout 900 fio --output-format=json --output=/tmp/perf.json /tmp/perf.fio > /tmp/fio.log 2>&1; then
  emit_runs /tmp/perf.json perf
  for d in mqblk rublk; do
    for row in "${rows[@]}"; do
      n="perf.0.$row.$d"
      reqs=$(awk -v j="$n" '$2 == j && $1 == "pre" { a = $4 } $2 == j && $1 == "post" { b = $4 } END { print b - a }' /tmp/snaps.txt)
      # perf stat of the queue thread over the recording (which spans the
      # job's ramp and run: a little more than the requests counted).
      awk -F, -v dev="$d" -v row="$row" -v reqs="$reqs" '$1 ~ /^[0-9.]+$/ {
          printf "{\"type\":\"perf_stat\",\"device\":\"%s\",\"row\":\"%s\",\"event\":\"%s\",\"value\":%s,\"unit\":\"%s\",\"requests\":%d}\n",
            dev, row, $3, $1, $2, reqs }' "/tmp/perfstat-$n.txt"
      sed "s/^/PROFILE perf stat -t ${qtid[$d]} ($d queue thread) $row ($reqs requests): /" "/tmp/perfstat-$n.txt"
      perf report -i "/tmp/perf-$n.data" --stdio -n --no-children --sort comm --percent-limit 0.5 2> /dev/null |
        grep -v '^#' | grep -v '^$' | head -n 15 | sed "s/^/PROFILE perf record -a $d $row by thread: /"
      perf report -i "/tmp/perf-$n.data" --stdio -n --no-children --sort comm,dso,sym --percent-limit 0.7 2> /dev/null |
        awk '/^# Samples: .* of event/ { show = /cpu-clock/ } show' | grep -v '^$' | head -n 50 |
        sed "s/^/PROFILE perf record -a $d $row ($reqs requests): /"
    done
  done
else
  echo "profile: fio failed: $(tail -n 5 /tmp/fio.log)" >&2
fi
kill "$tail_pid"
echo "profile done at $(($(date +%s) - t_start)) s" >&2
