#!/usr/bin/env bash
# Stock fio's libblkio engine (a client we did not write) driving a
# libblkio.so.1: by default ours (crates/mqblk-blkio) with
# libblkio_driver=mqblk and mqblk device specs as libblkio_path. One fio run
# per case; each prints one line per fio job ("ok" or "FAIL") and the script
# exits 1 if any failed.
#
# Usage: tests/blkio/fio.sh [--reference] [LIBDIR [PCDIR]]
#   LIBDIR  directory holding libblkio.so.1 (default $MQBLK_BLKIO_LIBDIR, else
#           target/release); set as LD_LIBRARY_PATH for fio
#   PCDIR   its blkio.pc, used only if fio must be built (default
#           LIBDIR/pkgconfig)
#   --reference  Debian's libblkio 1.5 (scripts/libblkio-reference.sh) with
#           its io_uring driver on a tmpfs file instead, every case run on
#           that file: checks this script and fio against the library we
#           imitate. Cases that need poll queues are skipped there (io_uring
#           polling needs a block device that polls; tmpfs has none).
#
# fio comes from scripts/fio-libblkio.sh (built once and cached; the first
# run fetches fio's source from Debian and builds it, about 2-3 minutes on 2
# CPUs). Each fio run (its forked job processes too) is killed after
# MQBLK_FIO_TIMEOUT seconds (120), so a hang fails the case instead of
# hanging the suite.
#
# The cases (mqblk driver; "null" means null:gb=1, "mem" memory_backed=1):
#   randread-{block,eventfd,loop}         null, 4k QD16, each wait mode
#   randwrite-verify-{block,eventfd,loop} mem, 4k QD16, verify=crc32c
#   hipri-randread, hipri-randwrite-verify  hipri=1 (one poll queue), wait
#                                         modes block and loop
#   threads2-randwrite-verify             thread, numjobs=2: one blkio, two
#                                         queues, each job its own 32 MiB
#   threads-mixed-hipri                   thread: a poll-queue job and a
#                                         plain-queue job on one blkio
#   procs2-randread                       numjobs=2 processes, a blkio each
#   vectored-bsrange-verify               libblkio_vectored, 4k-64k blocks
#   randwrite-flush-verify                fsync=16: a blkioq_flush every 16
#   randtrim-discard                      mem,discard=1: blkioq_discard
#   randtrim-write-zeroes                 libblkio_write_zeroes_on_trim=1
#   file-randwrite-verify, file-randread  file:path=<tmpfs file> (reap=client
#                                         by default: a ring per queue)
#   file-threads2-eventfd-verify          two queues, each waiting on its
#                                         completion fd (eventfd mode)
#   file-reap-thread-randread             reap=thread named, eventfd mode
#   file-single-issuer-eventfd-verify,    single_issuer=1 (DEFER_TASKRUN
#   file-single-issuer-loop-randread      rings): completions left as task
#                                         work reach pollers that never
#                                         wait (completion fd, busy loop)
#   control-verify-without-memory         null without memory_backed: verify
#                                         must fail (mqblk driver only)
# Every job must end with error 0, the fio run with status 0, and move
# exactly the bytes it was given (verify jobs read back every byte written).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/../.."
die() { echo "blkio-fio: $*" >&2; exit 2; }

reference=0
args=()
for a in "$@"; do
  case "$a" in
    --reference) reference=1 ;;
    -h|--help) sed -n '2,/^# SPDX/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $a" ;;
    *) args+=("$a") ;;
  esac
done
[ ${#args[@]} -le 2 ] || die "usage: tests/blkio/fio.sh [--reference] [LIBDIR [PCDIR]]"
if [ $reference = 1 ]; then
  [ ${#args[@]} = 0 ] || die "--reference takes no LIBDIR"
  libdir=$(scripts/libblkio-reference.sh) || die "could not fetch the reference libblkio"
  driver=io_uring
else
  libdir=${args[0]:-${MQBLK_BLKIO_LIBDIR:-target/release}}
  driver=mqblk
fi
libdir=$(realpath "$libdir")
pcdir=${args[1]:-$libdir/pkgconfig}
[ -e "$libdir/libblkio.so.1" ] || die "no libblkio.so.1 in $libdir (build crates/mqblk-blkio: cargo build --release -p mqblk-blkio)"
fio=$(scripts/fio-libblkio.sh "$pcdir") || die "no fio with the libblkio engine (scripts/fio-libblkio.sh failed)"
timeout_s=${MQBLK_FIO_TIMEOUT:-120}
command -v python3 >/dev/null || die "needs python3 (reads fio's JSON)"

tmp=$(mktemp -d)
file=/dev/shm/mqblk-blkio-fio.$$
trap 'rm -rf "$tmp" "$file"' EXIT
truncate -s 256M "$file"

LD_LIBRARY_PATH=$libdir "$fio" --enghelp=libblkio >/dev/null ||
  die "$fio has no libblkio engine or cannot load libblkio.so.1 from $libdir"
echo "blkio-fio: $(LD_LIBRARY_PATH=$libdir "$fio" --version) (${fio%/fio}), libblkio.so.1 from $libdir, driver $driver"

# Checks fio's JSON on stdin: every job error 0 and the expected bytes.
# Args: case name, expectations per job: "read=BYTES,write=BYTES,trim=BYTES,
# syncs=MIN" (keys left out: 0).
check_json() {
  python3 -c '
import json, sys
name = sys.argv[1]
want = {"read": 0, "write": 0, "trim": 0, "syncs": 0}
for kv in sys.argv[2].split(","):
    k, v = kv.split("=")
    want[k] = int(v)
jobs = json.load(sys.stdin)["jobs"]
bad = 0
for i, j in enumerate(jobs):
    why, what = [], []
    if j["error"] != 0:
        why.append("error %d" % j["error"])
    for d in ("write", "read", "trim"):
        got = j[d]["io_bytes"]
        if got != want[d]:
            why.append("%s %d bytes, want %d" % (d, got, want[d]))
        if got == 0:
            continue
        if d == "read" and want["write"]:
            what.append("verified %d MiB" % (got >> 20))
        else:
            what.append("%s %d MiB %.1fk IOPS" % (d, got >> 20, j[d]["iops"] / 1000))
    syncs = j.get("sync", {}).get("total_ios", 0)
    if want["syncs"]:
        if syncs < want["syncs"]:
            why.append("%d flushes, want at least %d" % (syncs, want["syncs"]))
        what.append("%d flushes" % syncs)
    label = "%s[%d:%s]" % (name, i, j["jobname"]) if len(jobs) > 1 else name
    if why:
        bad += 1
        print("FAIL %-36s %s" % (label, "; ".join(why)))
    else:
        print("ok   %-36s %s" % (label, ", ".join(what)))
sys.exit(1 if bad else 0)
' "$@"
}

# run_fio STDOUT STDERR FIO_ARGS...: fio with LD_LIBRARY_PATH=$libdir, killed
# after $timeout_s (status 124). fio forks each job into a process of its own
# process group, which timeout(1) cannot reach: every fio process of this run
# carries a --description token of its own and is killed by its pid.
run_fio() {
  local out=$1 err=$2 token="mqblk-blkio-fio.$$.$ran" pid waited=0 status=0 p
  shift 2
  LD_LIBRARY_PATH=$libdir "$fio" --description="$token" "$@" >"$out" 2>"$err" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ $waited -lt $((timeout_s * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    grep -l -a -F -- "--description=$token" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 |
      while read -r p; do kill -KILL "$p" 2>/dev/null || true; done
    wait "$pid" 2>/dev/null || true
    return 124
  fi
  wait "$pid" || status=$?
  return $status
}

failed=0 ran=0 skipped=0
# run_case NAME NEEDS PATH EXPECT FIO_ARGS...
# NEEDS: "-", or "poll" or "discard" (skipped in --reference mode: io_uring
# polling needs a block device that polls, and libblkio's io_uring driver
# answers EOPNOTSUPP to discard on a regular file). PATH is the mqblk device
# spec (the tmpfs file in --reference mode). EXPECT: see check_json.
run_case() {
  local name=$1 needs=$2 path=$3 expect=$4 status=0
  shift 4
  if [ $reference = 1 ]; then
    if [ "$needs" != - ]; then
      echo "skip $name (needs $needs: not on a tmpfs file with libblkio's io_uring driver)"
      skipped=$((skipped + 1))
      return
    fi
    path=$file
  fi
  ran=$((ran + 1))
  run_fio "$tmp/$name.json" "$tmp/$name.err" --output-format=json \
    --ioengine=libblkio --libblkio_driver=$driver --libblkio_path="$path" "$@" || status=$?
  if [ $status = 124 ] || { [ $status -ne 0 ] && [ ! -s "$tmp/$name.json" ]; }; then
    echo "FAIL $name: fio exited $status$([ $status = 124 ] && echo " (killed after ${timeout_s} s)")"
    sed 's/^/     /' "$tmp/$name.err" | tail -n 8
    failed=$((failed + 1))
    return
  fi
  # fio's stderr may precede the JSON on stdout when the job fails early.
  sed -n '/^{/,$p' "$tmp/$name.json" > "$tmp/$name.clean"
  if ! check_json "$name" "$expect" < "$tmp/$name.clean"; then
    sed 's/^/     /' "$tmp/$name.err" | tail -n 8
    failed=$((failed + 1))
  elif [ $status -ne 0 ]; then
    echo "FAIL $name: fio exited $status"
    sed 's/^/     /' "$tmp/$name.err" | tail -n 8
    failed=$((failed + 1))
  fi
}

M=$((1 << 20))
null=null:gb=1
mem=null:gb=1,memory_backed=1
verify=(--verify=crc32c --do_verify=1 --verify_fatal=1)
common=(--bs=4k --iodepth=16 --size=64m)

R64=read=$((64 * M))
RW64=read=$((64 * M)),write=$((64 * M))
RW32=read=$((32 * M)),write=$((32 * M))
for wait in block eventfd loop; do
  run_case "randread-$wait" - $null "$R64" \
    --name=r --rw=randread "${common[@]}" --libblkio_wait_mode=$wait
  run_case "randwrite-verify-$wait" - $mem "$RW64" \
    --name=w --rw=randwrite "${common[@]}" "${verify[@]}" --libblkio_wait_mode=$wait
done
# hipri=1: the engine asks for num-poll-queues=1 and num-queues=0 and does
# its I/O on the poll queue (eventfd waiting is refused with hipri).
run_case hipri-randread poll $null "$R64" \
  --name=r --rw=randread "${common[@]}" --hipri=1
run_case hipri-randwrite-verify poll $mem "$RW64" \
  --name=w --rw=randwrite "${common[@]}" "${verify[@]}" --hipri=1 --libblkio_wait_mode=loop
# thread: the subjobs share one blkio (num-queues = 2), each on its own queue
# and its own 32 MiB of the device, so their verify reads see their writes.
run_case threads2-randwrite-verify - $mem "$RW32" \
  --name=w --thread --numjobs=2 --rw=randwrite --bs=4k --iodepth=16 --size=32m \
  --offset_increment=32m "${verify[@]}"
# One blkio with num-queues=1 and num-poll-queues=1.
run_case threads-mixed-hipri poll $mem "$RW32" \
  --thread --rw=randwrite --bs=4k --iodepth=16 --size=32m "${verify[@]}" \
  --name=plain --offset=0 --name=poll --offset=32m --hipri=1
# Without thread each fio process opens its own blkio (its own null device).
run_case procs2-randread - $null "$R64" \
  --name=r --numjobs=2 --rw=randread "${common[@]}"
run_case vectored-bsrange-verify - $mem "$RW64" \
  --name=w --rw=randwrite --bsrange=4k-64k --iodepth=8 --size=64m --libblkio_vectored=1 "${verify[@]}"
# blkioq_flush every 16 writes; trims as blkioq_discard and as
# blkioq_write_zeroes.
run_case randwrite-flush-verify - $mem "$RW64,syncs=$((64 * M / 4096 / 16 - 1))" \
  --name=w --rw=randwrite "${common[@]}" --fsync=16 "${verify[@]}"
run_case randtrim-discard discard $mem,discard=1 "trim=$((64 * M))" \
  --name=t --rw=randtrim --bs=64k --iodepth=8 --size=64m
run_case randtrim-write-zeroes - $mem "trim=$((64 * M))" \
  --name=t --rw=randtrim --bs=64k --iodepth=8 --size=64m --libblkio_write_zeroes_on_trim=1
run_case file-randwrite-verify - "file:path=$file" "$RW64" \
  --name=w --rw=randwrite "${common[@]}" "${verify[@]}"
run_case file-randread - "file:path=$file" "$R64" \
  --name=r --rw=randread "${common[@]}" --libblkio_wait_mode=eventfd
# A plain file spec gets reap=client with a ring per queue (lib.rs
# fast_file_spec): two queues of one blkio, each waiting on its completion
# fd (registered with its own ring). And the completion-thread mode, named.
run_case file-threads2-eventfd-verify - "file:path=$file" "$RW32" \
  --name=w --thread --numjobs=2 --rw=randwrite --bs=4k --iodepth=16 --size=32m \
  --offset_increment=32m "${verify[@]}" --libblkio_wait_mode=eventfd
run_case file-reap-thread-randread - "file:path=$file,reap=thread" "$R64" \
  --name=r --rw=randread "${common[@]}" --libblkio_wait_mode=eventfd
# single_issuer=1: DEFER_TASKRUN rings, whose completions from io_uring's
# workers wait as task work until the queue's thread enters the kernel; a
# queue polled without waiting (after each completion fd wakeup, or in a
# loop) must still reap them (it hung before ring.rs entered for them).
run_case file-single-issuer-eventfd-verify - "file:path=$file,single_issuer=1" "$RW64" \
  --name=w --rw=randwrite "${common[@]}" "${verify[@]}" --libblkio_wait_mode=eventfd
run_case file-single-issuer-loop-randread - "file:path=$file,single_issuer=1" "$R64" \
  --name=r --rw=randread "${common[@]}" --libblkio_wait_mode=loop

# The control: on a null device without memory_backed written data is gone,
# so verify must fail (a verify that never fails checks nothing).
if [ $reference = 0 ]; then
  ran=$((ran + 1))
  status=0
  run_fio "$tmp/control.out" "$tmp/control.err" --ioengine=libblkio --libblkio_driver=$driver \
    --libblkio_path=$null --name=w --rw=randwrite "${common[@]}" "${verify[@]}" || status=$?
  cat "$tmp/control.err" >> "$tmp/control.out"
  if [ $status -ne 0 ] && [ $status -ne 124 ] && grep -qiE 'verify|bad magic|crc32c' "$tmp/control.out"; then
    echo "ok   control-verify-without-memory     fio failed verification as it must ($(grep -m1 -oiE '[a-z0-9]*: *verify failed|bad magic header[^,]*' "$tmp/control.out" || echo "exit $status"))"
  else
    echo "FAIL control-verify-without-memory: verify of a null device without memory_backed did not fail (fio exited $status)"
    sed 's/^/     /' "$tmp/control.out" | tail -n 8
    failed=$((failed + 1))
  fi
fi

echo "blkio-fio: $ran cases run, $skipped skipped, $failed failed"
[ $failed = 0 ]
