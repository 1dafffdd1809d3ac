#!/usr/bin/env bash
# Run to run stability of the default job (`mqblk bench` without options:
# 4k randread, iodepth 32, 10 s on null:gb=1, completed on the null
# device's completion thread): runs it N times and prints each run's IOPS,
# the median, min, max and spread ((max - min) / median, in %), and per
# I/O the client's completion sleeps and the whole process's context
# switches (voluntary and involuntary, from its rusage). A handoff that
# settles into a sleep and a wake per I/O shows as about 1 sleep per I/O
# and a fraction of the IOPS; streaming is about 1/32 or fewer.
#
#   scripts/default-job-stability.sh [N] [BIN]   (default 10, target/release/mqblk)
#
# Environment: STABILITY_RUNTIME=S runs the same job for S seconds instead
# of the default 10 (the job's options then given explicitly);
# STABILITY_BENCH_ARGS adds bench options (for instance
# "--device null:gb=1,irq_cpus=0 --cpus_allowed=0" to put both threads on
# one CPU; with it the job's options are given explicitly too). The load
# average is printed beside each run: the machine may be shared. Exits 2
# if it cannot run (no binary, a run that fails or prints no figures).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "default-job-stability: $*" >&2; exit 2; }

runs=${1:-10}
bin=${2:-}
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || die "usage: scripts/default-job-stability.sh [N] [BIN]"
if [ -z "$bin" ]; then
  cargo build --release -q -p mqblk-cli || die "build failed"
  bin=target/release/mqblk
fi
[ -x "$bin" ] || die "no executable at $bin"
command -v python3 > /dev/null || die "needs python3"

# The default job, as `mqblk bench` runs it without options; spelled out
# only when an option must change (runtime, placement).
job=()
if [ -n "${STABILITY_RUNTIME:-}" ] || [ -n "${STABILITY_BENCH_ARGS:-}" ]; then
  job=(--name=randread --rw=randread --bs=4k --iodepth=32 "--runtime=${STABILITY_RUNTIME:-10}" --time_based=1)
fi
# shellcheck disable=SC2206 # split on purpose: a list of options
extra=(${STABILITY_BENCH_ARGS:-})

exec python3 - "$runs" "$bin" "${extra[@]}" "${job[@]}" << 'EOF'
import json, resource, statistics, subprocess, sys

runs, binary, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
cmd = [binary, "bench", "--output-format=json"] + args
print("command:", " ".join(cmd))
print(f"{'run':>3} {'load1':>6} {'IOPS':>11} {'sleeps/io':>10} {'ctx/io':>8} {'vol/io':>8} {'invol/io':>8}")
iops_all = []
for run in range(1, runs + 1):
    load = open("/proc/loadavg").read().split()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"default-job-stability: run {run} failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    try:
        out = p.stdout
        job = json.loads(out[out.index("{"):])["jobs"][0]
        iops, ios = job["read"]["iops"], job["read"]["total_ios"]
        sleeps = job["mqblk"]["completion_sleeps"]
    except (ValueError, KeyError, IndexError) as e:
        sys.exit(f"default-job-stability: run {run} printed no figures ({e})")
    if ios == 0:
        sys.exit(f"default-job-stability: run {run} did no I/O")
    # The whole process: the job thread, the completion thread, the rest.
    vol = after.ru_nvcsw - before.ru_nvcsw
    invol = after.ru_nivcsw - before.ru_nivcsw
    iops_all.append(iops)
    print(f"{run:>3} {load:>6} {iops:>11,.0f} {sleeps / ios:>10.4f} {(vol + invol) / ios:>8.4f} "
          f"{vol / ios:>8.4f} {invol / ios:>8.4f}", flush=True)
med = statistics.median(iops_all)
lo, hi = min(iops_all), max(iops_all)
print(f"median {med:,.0f} IOPS, min {lo:,.0f}, max {hi:,.0f}, spread {(hi - lo) / med * 100:.1f}% of the median "
      f"(max/min {hi / lo:.2f}) over {runs} runs; load now {open('/proc/loadavg').read().split()[0]}")
EOF
