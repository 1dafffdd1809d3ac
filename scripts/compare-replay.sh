#!/usr/bin/env bash
# Trace replay side by side: fio 3.33 and `mqblk bench`, each replaying the
# same fio iolog with replay_no_stall=1 on a null device (fio's null
# ioengine; mqblk's inline null device, irqmode=0), at iodepth 1 as fio
# replays an iolog.
#
# Two measures:
#  - instructions per replayed event (callgrind, all threads, exact on a
#    noisy machine): the difference between a log of LONG and one of SHORT
#    I/Os, so start-up, the log's parsing set-up and exit cancel;
#  - I/Os per second of wall time, ROUNDS alternating rounds (the first
#    of the pair changes every round), median and spread (min-max): over
#    the job's runtime in each program's JSON report (the replay alone),
#    and over the whole process (reading and parsing the log, start-up and
#    exit included: what a user waits for).
# Usage: scripts/compare-replay.sh [rounds] [short] [long]
#        (default 5 rounds, 200,000 and 1,000,000 I/Os)
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5} short=${2:-200000} long=${3:-1000000}
command -v fio >/dev/null || { echo "compare-replay: needs fio (apt-get install fio)" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "compare-replay: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
cargo build --release -q -p mqblk-cli
mqblk=$PWD/target/release/mqblk
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A log of N random 4k reads and writes over 1 GiB, written by fio itself.
make_log() {
  (cd "$work" && fio --name=w --ioengine=null --filename=f --size=1g --rw=randrw --bs=4k \
    --number_ios="$1" --io_size=1t --write_iolog="log$1" --output=/dev/null)
}
make_log "$short"
make_log "$long"

# run TOOL N [valgrind...]: replays log N; prints its JSON report.
run() {
  local tool=$1 n=$2
  shift 2
  case $tool in
    fio) (cd "$work" && "$@" fio --name=r --ioengine=null --thread --read_iolog="log$n" \
      --replay_no_stall=1 --replay_redirect=target --output-format=json) ;;
    mqblk) "$@" "$mqblk" bench --device null:gb=1,irqmode=0 --name=r --read_iolog="$work/log$n" \
      --replay_no_stall=1 --output-format=json ;;
  esac
}
# ios JSON: reads + writes done; secs JSON: the job's runtime in seconds.
ios() { python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(j["read"]["total_ios"] + j["write"]["total_ios"])'; }
eps() { python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; n=j["read"]["total_ios"]+j["write"]["total_ios"]; print("%.0f" % (n / (j["job_runtime"] / 1000)))'; }

ir() {
  local tool=$1 n=$2 done_ios
  done_ios=$(run "$tool" "$n" valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" 2>/dev/null | ios)
  [ "$done_ios" = "$n" ] || { echo "compare-replay: $tool replayed $done_ios of $n I/Os" >&2; exit 1; }
  awk '/^(summary|totals):/ { print $2; exit }' "$work/cg.out"
}

echo "compare-replay: $(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty), fio $(fio --version), logs of $short and $long I/Os (4k randrw), load $(cut -d' ' -f1-3 /proc/loadavg)"
for tool in fio mqblk; do
  a=$(ir "$tool" "$short")
  b=$(ir "$tool" "$long")
  awk -v t="$tool" -v a="$a" -v b="$b" -v n=$((long - short)) \
    'BEGIN { printf "%-6s instructions per replayed I/O: %.1f\n", t, (b - a) / n }'
done

# one TOOL: "job_ios_per_s process_ios_per_s" of one replay of the long log.
one() {
  local t0 t1 job
  t0=$(date +%s.%N)
  job=$(run "$1" "$long" | eps)
  t1=$(date +%s.%N)
  awk -v j="$job" -v n="$long" -v a="$t0" -v b="$t1" 'BEGIN { printf "%s %.0f\n", j, n / (b - a) }'
}
printf "%-6s %14s %14s %7s %18s %18s %7s\n" round fio_job_ios/s mqblk_job_ios/s ratio fio_process_ios/s mqblk_process_ios/s ratio
fj=() mj=() fp=() mp=()
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then
    read -r f g <<< "$(one fio)"; read -r m p <<< "$(one mqblk)"
  else
    read -r m p <<< "$(one mqblk)"; read -r f g <<< "$(one fio)"
  fi
  fj+=("$f"); mj+=("$m"); fp+=("$g"); mp+=("$p")
  printf "%-6s %14s %14s %7s %18s %18s %7s\n" "$r" "$f" "$m" "$(awk -v f="$f" -v m="$m" 'BEGIN { printf "%.2f", m / f }')" \
    "$g" "$p" "$(awk -v f="$g" -v m="$p" 'BEGIN { printf "%.2f", m / f }')"
done
stats() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { printf "median %s (%s-%s)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
echo "fio    I/Os per second of the job: $(stats "${fj[@]}"); of the process: $(stats "${fp[@]}")"
echo "mqblk  I/Os per second of the job: $(stats "${mj[@]}"); of the process: $(stats "${mp[@]}")"
