#!/usr/bin/env bash
# Run to run stability of the default job (`mqblk bench` without options:
# 4k randread, iodepth 32, 10 s on null:gb=1, completed on the null
# device's completion thread on the job's CPU): runs it N times and prints
# each run's IOPS, the median, min, max and spread ((max - min) / median,
# in %), and per I/O the client's completion sleeps, the whole process's
# context switches (voluntary and involuntary, from its rusage) and CPU
# time (user + system). A handoff that settles into a sleep and a wake per
# I/O shows as about 1 sleep per I/O and a fraction of the IOPS; streaming
# is about 1/32 or fewer.
#
# Beside each run, what the machine gave it: the share of the run the
# hypervisor stole from this VM's CPUs (/proc/stat), and the CPU time per
# I/O. On a VM the same instructions per I/O take more or less CPU time
# from run to run as the host shares its cores: a job with no handoff at
# all (irqmode=0) spreads as well, and the variant below shows by how much.
#
#   scripts/default-job-stability.sh [N] [BIN]   (default 10, target/release/mqblk)
#
# Environment: STABILITY_RUNTIME=S runs the same job for S seconds instead
# of the default 10 (the job's options then given explicitly);
# STABILITY_BENCH_ARGS adds bench options (for instance
# "--device null:gb=1 --cpus_allowed=0-1" to let the two threads run on
# two CPUs; with it the job's options are given explicitly too);
# STABILITY_VARIANTS="label=ARGS;label=ARGS" compares variants of the job,
# run in turn (A B C A B C ...), N runs each, a summary per variant, for
# instance "default=;two-cpus=--device null:gb=1 --cpus_allowed=0-1;
# irqmode0=--device null:gb=1,irqmode=0 --cpus_allowed=0". The load
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

variants=${STABILITY_VARIANTS:-"default=${STABILITY_BENCH_ARGS:-}"}
exec python3 - "$runs" "$bin" "${STABILITY_RUNTIME:-}" "$variants" << 'EOF'
import json, resource, statistics, subprocess, sys

runs, binary, runtime, spec = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
variants = []
for part in filter(None, (p.strip() for p in spec.split(";"))):
    label, _, args = part.partition("=")
    variants.append((label.strip(), args.split()))
# The default job, as `mqblk bench` runs it without options; spelled out
# only when an option must change (runtime, placement, device).
def command(args):
    job = []
    if runtime or args:
        job = ["--name=randread", "--rw=randread", "--bs=4k", "--iodepth=32",
               f"--runtime={runtime or 10}", "--time_based=1"]
    return [binary, "bench", "--output-format=json"] + args + job

def cpu_ticks():
    # /proc/stat's cpu line: user nice system idle iowait irq softirq steal.
    f = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return sum(f), f[7]

for label, args in variants:
    print(f"{label}: {' '.join(command(args))}")
print(f"{'variant':>10} {'run':>3} {'load1':>6} {'IOPS':>11} {'sleeps/io':>10} {'ctx/io':>8} "
      f"{'vol/io':>8} {'invol/io':>8} {'cpu ns/io':>9} {'steal%':>6}")
results = {label: [] for label, _ in variants}
for run in range(1, runs + 1):
    for label, args in variants:
        load = open("/proc/loadavg").read().split()[0]
        before, (total0, steal0) = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_ticks()
        p = subprocess.run(command(args), capture_output=True, text=True)
        after, (total1, steal1) = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_ticks()
        if p.returncode != 0:
            sys.exit(f"default-job-stability: {label} run {run} failed ({p.returncode}): {p.stderr.strip()[-400:]}")
        try:
            out = p.stdout
            job = json.loads(out[out.index("{"):])["jobs"][0]
            iops, ios = job["read"]["iops"], job["read"]["total_ios"]
            sleeps = job["mqblk"]["completion_sleeps"]
        except (ValueError, KeyError, IndexError) as e:
            sys.exit(f"default-job-stability: {label} run {run} printed no figures ({e})")
        if ios == 0:
            sys.exit(f"default-job-stability: {label} run {run} did no I/O")
        # The whole process: the job thread, the completion thread, the rest.
        vol = after.ru_nvcsw - before.ru_nvcsw
        invol = after.ru_nivcsw - before.ru_nivcsw
        cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        steal = 100.0 * (steal1 - steal0) / max(1, total1 - total0)
        results[label].append(iops)
        print(f"{label:>10} {run:>3} {load:>6} {iops:>11,.0f} {sleeps / ios:>10.4f} {(vol + invol) / ios:>8.4f} "
              f"{vol / ios:>8.4f} {invol / ios:>8.4f} {cpu_s * 1e9 / ios:>9.1f} {steal:>6.1f}", flush=True)
for label, iops_all in results.items():
    med = statistics.median(iops_all)
    lo, hi = min(iops_all), max(iops_all)
    print(f"{label}: median {med:,.0f} IOPS, min {lo:,.0f}, max {hi:,.0f}, spread {(hi - lo) / med * 100:.1f}% "
          f"of the median (max/min {hi / lo:.2f}) over {runs} runs")
print(f"load now {open('/proc/loadavg').read().split()[0]}")
EOF
