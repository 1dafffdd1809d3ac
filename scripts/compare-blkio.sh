#!/usr/bin/env bash
# The libblkio reference comparison: one stock fio binary (the one
# scripts/fio-libblkio.sh builds), one tmpfs file, 4k randread at QD1 and
# QD32, direct=1, one job, cells alternating round by round (the starting
# configuration rotates each round) so that machine noise hits all of them:
#   fio-io_uring       fio's own io_uring engine (the ceiling)
#   libblkio-io_uring  fio's libblkio engine with Debian's libblkio 1.5 and
#                      its io_uring driver (scripts/libblkio-reference.sh)
#   libblkio-mqblk     fio's libblkio engine with our libblkio.so.1 from
#                      --mqblk-libdir, libblkio_driver=mqblk,
#                      libblkio_path=file:path=<the same file>
#                      (only when --mqblk-libdir is given)
#   libblkio-mqblk-si  the same with single_issuer=1 added to the spec: the
#                      ring gets IORING_SETUP_SINGLE_ISSUER and DEFER_TASKRUN
#                      as fio's io_uring engine sets them (right for a
#                      program that uses each queue from one thread, as fio
#                      does; not the C library's default, see README)
# Prints a table (median, min-max of IOPS over the rounds; median p50 and p99
# completion latency; median CPU time of the fio process per I/O; median
# context switches of the job per I/O (fio's ctx); IOPS over
# fio-io_uring's in the same round) and writes every cell and the summary as
# JSON, with the load average before and after (the machine may be shared).
#
# Usage: scripts/compare-blkio.sh [--rounds N] [--runtime S] [--size SIZE]
#          [--json PATH] [--mqblk-libdir LIBDIR]
#   defaults: 5 rounds, 5 s a cell (after 1 s of ramp), a 1g file,
#   JSON to target/compare-blkio.json
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "compare-blkio: $*" >&2; exit 2; }

rounds=5 runtime=5 size=1g json=target/compare-blkio.json mqblk_libdir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --mqblk-libdir) mqblk_libdir=$(realpath "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^# SPDX/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
{ [[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -ge 1 ]; } || die "--rounds wants a count"
[[ $runtime =~ ^[0-9]+$ ]] || die "--runtime wants seconds"
command -v python3 >/dev/null || die "needs python3"

ref_libdir=$(scripts/libblkio-reference.sh) || die "could not fetch the reference libblkio"
fio=$(scripts/fio-libblkio.sh "$ref_libdir/pkgconfig") || die "no fio with the libblkio engine"
if [ -n "$mqblk_libdir" ]; then
  [ -e "$mqblk_libdir/libblkio.so.1" ] || die "no libblkio.so.1 in $mqblk_libdir"
fi

file=/dev/shm/mqblk-compare-blkio.$$
cells=$(mktemp)
trap 'rm -f "$file" "$cells" "$cells.err"' EXIT
# Written, not sparse: every read finds a page.
LD_LIBRARY_PATH=$ref_libdir "$fio" --name=lay --filename="$file" --size="$size" --rw=write --bs=1m \
  --ioengine=psync >/dev/null || die "could not lay out $file"

configs=(fio-io_uring libblkio-io_uring)
[ -z "$mqblk_libdir" ] || configs+=(libblkio-mqblk libblkio-mqblk-si)
# Prints "LD_LIBRARY_PATH engine options" for a configuration.
config_args() {
  case "$1" in
    fio-io_uring) echo "$ref_libdir --ioengine=io_uring --filename=$file" ;;
    libblkio-io_uring) echo "$ref_libdir --ioengine=libblkio --libblkio_driver=io_uring --libblkio_path=$file" ;;
    libblkio-mqblk) echo "$mqblk_libdir --ioengine=libblkio --libblkio_driver=mqblk --libblkio_path=file:path=$file" ;;
    libblkio-mqblk-si) echo "$mqblk_libdir --ioengine=libblkio --libblkio_driver=mqblk --libblkio_path=file:path=$file,single_issuer=1" ;;
  esac
}
common="--name=x --direct=1 --rw=randread --bs=4k --size=$size --runtime=$runtime --ramp_time=1 --time_based --output-format=json"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "compare-blkio: $(LD_LIBRARY_PATH=$ref_libdir "$fio" --version) ($fio), $rounds rounds x ${#configs[@]} configurations x QD1/QD32, ${runtime} s a cell, file $file ($size, tmpfs)" >&2
for round in $(seq 1 "$rounds"); do
  for qd in 1 32; do
    for k in "${!configs[@]}"; do
      cfg=${configs[$(((k + round - 1) % ${#configs[@]}))]}
      read -r libdir engine_args <<<"$(config_args "$cfg")"
      # shellcheck disable=SC2086 # word-split option lists
      out=$(LD_LIBRARY_PATH=$libdir "$fio" $common --iodepth=$qd $engine_args 2>"$cells.err") || {
        sed 's/^/  /' "$cells.err" >&2
        die "fio failed: $cfg QD$qd: LD_LIBRARY_PATH=$libdir $fio $common --iodepth=$qd $engine_args"
      }
      python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
r = j["read"]
p = r["clat_ns"].get("percentile", {})
# CPU time per I/O (fio process, user + system) holds up better than IOPS
# when other work shares the CPUs.
cpu_s = (j["usr_cpu"] + j["sys_cpu"]) / 100 * j["job_runtime"] / 1000
print(json.dumps({"config": sys.argv[1], "iodepth": int(sys.argv[2]), "round": int(sys.argv[3]),
    "iops": round(r["iops"]), "clat_p50_us": round(p.get("50.000000", 0) / 1000, 2),
    "clat_p99_us": round(p.get("99.000000", 0) / 1000, 2),
    "cpu_us_per_io": round(cpu_s * 1e6 / max(r["total_ios"], 1), 3),
    "ctx_per_io": round(j["ctx"] / max(r["total_ios"], 1), 4), "error": j["error"]}))
' "$cfg" "$qd" "$round" <<<"$(sed -n '/^{/,$p' <<<"$out")" >> "$cells"
      tail -n 1 "$cells" >&2
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p "$(dirname "$json")"
python3 - "$cells" "$json" "$rounds" "$runtime" "$size" "$load_before" "$load_after" \
  "$(LD_LIBRARY_PATH=$ref_libdir "$fio" --version)" "$ref_libdir" "${mqblk_libdir:-}" "$common" \
  "$(uname -r)" "$(nproc)" <<'PY'
import json, statistics as st, sys
(cells_path, json_path, rounds, runtime, size, load_before, load_after, fio_version,
 ref_libdir, mqblk_libdir, common, kernel, cpus) = sys.argv[1:]
cells = [json.loads(l) for l in open(cells_path) if l.strip()]
configs = list(dict.fromkeys(c["config"] for c in cells))
summary = []
for qd in (1, 32):
    for cfg in configs:
        xs = [c for c in cells if c["config"] == cfg and c["iodepth"] == qd]
        iops = sorted(c["iops"] for c in xs)
        row = {"config": cfg, "iodepth": qd, "rounds": len(xs),
               "iops_median": st.median(iops), "iops_min": iops[0], "iops_max": iops[-1],
               "clat_p50_us_median": st.median(c["clat_p50_us"] for c in xs),
               "clat_p99_us_median": st.median(c["clat_p99_us"] for c in xs)}
        row["cpu_us_per_io_median"] = st.median(c["cpu_us_per_io"] for c in xs)
        row["ctx_per_io_median"] = st.median(c["ctx_per_io"] for c in xs)
        # Paired: this configuration's IOPS over fio-io_uring's in the same round.
        base = {c["round"]: c["iops"] for c in cells if c["config"] == configs[0] and c["iodepth"] == qd}
        ratios = sorted(c["iops"] / base[c["round"]] for c in xs if base.get(c["round"]))
        row["iops_vs_fio_io_uring_median"] = round(st.median(ratios), 3)
        row["iops_vs_fio_io_uring_min"] = round(ratios[0], 3)
        row["iops_vs_fio_io_uring_max"] = round(ratios[-1], 3)
        summary.append(row)
out = {"what": "4k randread, direct=1, one job, one tmpfs file, cells alternating",
       "fio": fio_version, "reference_libblkio": ref_libdir, "mqblk_libblkio": mqblk_libdir or None,
       "rounds": int(rounds), "runtime_s": int(runtime), "ramp_s": 1, "size": size,
       "fio_common_options": common, "kernel": kernel, "cpus": int(cpus),
       "loadavg_before": load_before, "loadavg_after": load_after,
       "summary": summary, "cells": cells}
json.dump(out, open(json_path, "w"), indent=1)
print("%s, %d rounds x %d s, 4k randread direct=1, tmpfs file %s; kernel %s, %s CPUs, loadavg %s -> %s"
      % (fio_version, int(rounds), int(runtime), size, kernel, cpus, load_before, load_after))
print("%-17s | %-3s | %-23s | %-6s | %-7s | %-10s | %-10s | %s" % (
    "config", "QD", "kIOPS median (min-max)", "p50 us", "p99 us", "CPU us/IO", "ctx/IO", "IOPS / fio io_uring, same round: median (min-max)"))
for r in summary:
    print("%-17s | %-3d | %-23s | %-6.1f | %-7.1f | %-10.2f | %-10.4f | %.2f (%.2f-%.2f)" % (
        r["config"], r["iodepth"], "%.1f (%.1f-%.1f)" % (r["iops_median"] / 1e3, r["iops_min"] / 1e3, r["iops_max"] / 1e3),
        r["clat_p50_us_median"], r["clat_p99_us_median"], r["cpu_us_per_io_median"], r["ctx_per_io_median"],
        r["iops_vs_fio_io_uring_median"], r["iops_vs_fio_io_uring_min"], r["iops_vs_fio_io_uring_max"]))
print("JSON: %s" % json_path)
PY
