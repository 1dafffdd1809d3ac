#!/usr/bin/env python3
"""Summarizes the JSON lines of scripts/compare-ublk-guest.sh (called by
scripts/compare-ublk.sh): OUT.json and OUT.txt.

usage: compare-ublk-summary.py LINES.jsonl OUT COMMAND ELAPSED_S COMMIT
"""
# SPDX-License-Identifier: MIT OR Apache-2.0
import json
import statistics
import sys

lines_path, out, command, elapsed_s, commit = sys.argv[1:6]
lines = [json.loads(l) for l in open(lines_path) if l.strip()]
devices = {l["device"]: l for l in lines if l["type"] == "device"}
guest = next((l for l in lines if l["type"] == "guest"), {})
runs = [l for l in lines if l["type"] == "run"]
profile_runs = [l for l in lines if l["type"] in ("strace", "perf")]
perf_stat = [l for l in lines if l["type"] == "perf_stat"]
ROWS = ["randread-4k-qd1", "randread-4k-qd32", "read-1m-qd4"]
DEVS = ["null_blk", "mqblk", "rublk"]
RATIOS = [("mqblk", "null_blk"), ("mqblk", "rublk"), ("rublk", "null_blk")]


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def metric(run):
    return run["bw_bytes"] / 2**20 if run["row"].startswith("read-1m") else run["iops"]


summary = {}
for row in ROWS:
    unit = "MiB/s" if row.startswith("read-1m") else "IOPS"
    by_dev = {d: [r for r in runs if r["row"] == row and r["device"] == d] for d in DEVS}
    if not all(by_dev.values()):
        continue
    s = {"unit": unit, "devices": {}, "ratios": {}}
    for d, rs in by_dev.items():
        entry = {"throughput": spread([metric(r) for r in rs]),
                 "lat_mean_us": spread([r["lat_mean_ns"] / 1000 for r in rs])}
        if d != "null_blk":
            per = lambda key: spread([r[key] / r["requests"] for r in rs if r["requests"] > 0])
            entry["per_request"] = {
                "server_cpu_us": spread([r["srv_run_ns"] / 1000 / r["requests"] for r in rs if r["requests"] > 0]),
                "server_voluntary_switches": per("srv_vcsw"),
                "server_involuntary_switches": per("srv_ivcsw"),
            }
            entry["server_cpu_share"] = spread([r["srv_run_ns"] / 1e9 / r["window_s"] for r in rs])
            ticks = [(r["srv_utime_ticks"], r["srv_stime_ticks"]) for r in rs]
            tot = sum(u + t for u, t in ticks)
            entry["server_user_fraction"] = sum(u for u, _ in ticks) / tot if tot else None
        entry["requests_per_fio_io"] = spread([r["requests"] / r["fio_ios"] for r in rs if r["fio_ios"]]) \
            if all("fio_ios" in r for r in rs) else None
        s["devices"][d] = entry
    for a, b in RATIOS:
        per_round = []
        for rnd in sorted({r["round"] for r in runs}):
            ra = [metric(r) for r in by_dev[a] if r["round"] == rnd]
            rb = [metric(r) for r in by_dev[b] if r["round"] == rnd]
            if ra and rb and rb[0] > 0:
                per_round.append(ra[0] / rb[0])
        s["ratios"][f"{a}/{b}"] = {
            "of_medians": s["devices"][a]["throughput"]["median"] / s["devices"][b]["throughput"]["median"],
            "per_round": spread(per_round),
        }
    summary[row] = s

doc = {
    "what": "mqblk ublk (null, irqmode=0) vs the guest's null_blk (irqmode=0) vs rublk's null target, "
            "fio io_uring direct=1, alternating in one Linux 6.12 guest under qemu TCG",
    "command": command,
    "elapsed_s": int(elapsed_s),
    "commit": commit,
    "guest": guest,
    "devices": devices,
    "summary": summary,
    "runs": runs,
    "profile_runs": profile_runs,
    "perf_stat": perf_stat,
}
with open(out + ".json", "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")

t = []
t.append("mqblk ublk vs null_blk vs rublk null")
t.append(f"command: {command}")
t.append(f"commit {commit}; whole script {elapsed_s} s (build excluded when up to date)")
t.append(f"guest: Linux {guest.get('kernel')}, {guest.get('cpus')} vCPUs (qemu TCG), {guest.get('fio')}, "
         f"{guest.get('rublk')}; {guest.get('rounds')} rounds, each job ramp {guest.get('ramp_s')} s + "
         f"{guest.get('runtime_s')} s, the three devices one after another per row, order rotated each round")
t.append("devices:")
for d in DEVS:
    v = devices.get(d, {})
    t.append(f"  {d:8} {v.get('path')}: {v.get('command')}")
    t.append(f"           hw queues {v.get('nr_hw_queues')}, nr_requests {v.get('nr_requests')}, "
             f"max_sectors_kb {v.get('max_sectors_kb')}, logical block {v.get('logical_block_size')}, "
             f"scheduler '{v.get('scheduler')}', size {v.get('size_bytes')}"
             + (f", server threads (cpus allowed): {v.get('cpus_allowed')}" if v.get('cpus_allowed') else ""))
t.append("fio: --ioengine=io_uring --direct=1 --size=1g --time_based --ramp_time=R --runtime=S --randrepeat=0 "
         "--norandommap --clocksource=clock_gettime; rows: --rw=randread --bs=4k --iodepth=1 | "
         "--rw=randread --bs=4k --iodepth=32 | --rw=read --bs=1m --iodepth=4")
t.append("")
t.append(f"{'row':18} {'device':8} {'median':>9} {'min':>9} {'max':>9} {'unit':6} {'lat_mean_us':>11} "
         f"{'srv_cpu_us/req':>14} {'vcsw/req':>8} {'ivcsw/req':>9} {'srv_cpu_share':>13}")
for row, s in summary.items():
    for d in DEVS:
        e = s["devices"][d]
        th, pr = e["throughput"], e.get("per_request")
        extra = (f"{pr['server_cpu_us']['median']:14.1f} {pr['server_voluntary_switches']['median']:8.3f} "
                 f"{pr['server_involuntary_switches']['median']:9.3f} {e['server_cpu_share']['median']:13.2f}"
                 if pr else f"{'-':>14} {'-':>8} {'-':>9} {'-':>13}")
        t.append(f"{row:18} {d:8} {th['median']:9.0f} {th['min']:9.0f} {th['max']:9.0f} {s['unit']:6} "
                 f"{e['lat_mean_us']['median']:11.1f} {extra}")
t.append("")
t.append("ratios (throughput): of the medians; per round (side by side): median [min, max]")
for row, s in summary.items():
    parts = []
    for k, r in s["ratios"].items():
        pr = r["per_round"]
        parts.append(f"{k} {r['of_medians']:.2f} ({pr['median']:.2f} [{pr['min']:.2f}, {pr['max']:.2f}])")
    t.append(f"  {row:18} " + "; ".join(parts))
if perf_stat:
    t.append("")
    t.append("queue thread per request (perf stat -t QUEUE_TID over a separate untimed job: ramp "
             "and run, while perf record -a also ran; requests counted over the job)")
    names = [("task-clock", "cpu_us", 1e-3), ("context-switches", "switches", 1), ("cpu-migrations", "migrations", 1),
             ("raw_syscalls:sys_enter", "syscalls", 1), ("syscalls:sys_enter_io_uring_enter", "io_uring_enter", 1),
             ("syscalls:sys_enter_read", "read", 1), ("syscalls:sys_enter_write", "write", 1),
             ("syscalls:sys_enter_futex", "futex", 1)]
    t.append(f"  {'server':6} {'row':18} {'requests':>8} " + " ".join(f"{short:>14}" for _, short, _ in names))
    for d in ("mqblk", "rublk"):
        for row in ROWS:
            ps = {x["event"]: x for x in perf_stat if x["device"] == d and x["row"] == row}
            if not ps:
                continue
            reqs = next(iter(ps.values()))["requests"]
            cells = []
            for ev, _, scale in names:
                # task-clock is in msec: per request in us.
                v = ps.get(ev, {}).get("value")
                cells.append(f"{v * (1000 if ev == 'task-clock' else 1) / reqs:14.3f}" if v is not None and reqs
                             else f"{'-':>14}")
            t.append(f"  {d:6} {row:18} {reqs:8d} " + " ".join(cells))
with open(out + ".txt", "w") as f:
    f.write("\n".join(t) + "\n")
