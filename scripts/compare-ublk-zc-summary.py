#!/usr/bin/env python3
"""The table of scripts/compare-ublk-zc.sh from the guest's JSON lines.

    compare-ublk-zc-summary.py LINES.jsonl OUT COMMAND ELAPSED_S COMMIT

Per row and device: IOPS (median, min-max over the rounds), the server
process's CPU per I/O (its threads' run time over the I/Os the device
completed in the job's window) and the whole guest's busy CPU per I/O
(/proc/stat: fio, the kernel, the server). Then, per row, the ratios the
zero-copy path is judged by, each the median (min-max) of the per-round
ratios: IOPS against loop with direct I/O and against the copying path,
server CPU per I/O against the copying path's (zero_copy and copy: both
reap=client). Last, every other device's IOPS against zero_copy's, round
by round (median, min-max, and the rounds it was ahead), for the variants
a targeted run puts beside it. Writes OUT.json and OUT.txt.
"""
import json
import statistics
import sys

lines_path, out, command, elapsed, commit = sys.argv[1:6]
lines = [json.loads(l) for l in open(lines_path) if l.startswith("{")]
runs = [l for l in lines if l["type"] == "run"]
devices = [l for l in lines if l["type"] == "device"]
guest = next(l for l in lines if l["type"] == "guest")
zc_summary = next((l["line"] for l in lines if l["type"] == "zero_copy_summary"), None)
rows = list(dict.fromkeys(r["row"] for r in runs))
names = [d["device"] for d in devices]


def per_io(r):
    ios = max(r["ios"], 1)
    return {
        "iops": r["iops"],
        "server_cpu_us_per_io": r["server_run_ns"] / ios / 1000 if r["device"] != "loop" else None,
        "guest_cpu_us_per_io": r["busy_jiffies"] * 1e6 / r["clk_tck"] / ios,
        "server_switches_per_io": r["server_switches"] / ios if r["device"] != "loop" else None,
    }


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def by_round(row, device):
    return {r["round"]: per_io(r) for r in runs if r["row"] == row and r["device"] == device}


summary = {}
for row in rows:
    summary[row] = {}
    for d in names:
        got = by_round(row, d)
        keys = ("iops", "server_cpu_us_per_io", "guest_cpu_us_per_io", "server_switches_per_io")
        summary[row][d] = {k: spread([g[k] for g in got.values()]) for k in keys}
    ratios = {}
    zc, copy, loop = by_round(row, "zero_copy"), by_round(row, "copy"), by_round(row, "loop")
    rounds = sorted(zc)
    ratios["iops_vs_loop"] = spread([zc[k]["iops"] / loop[k]["iops"] for k in rounds if k in loop])
    ratios["iops_vs_copy"] = spread([zc[k]["iops"] / copy[k]["iops"] for k in rounds if k in copy])
    ratios["server_cpu_vs_copy"] = spread(
        [zc[k]["server_cpu_us_per_io"] / copy[k]["server_cpu_us_per_io"] for k in rounds if k in copy])
    ratios["guest_cpu_vs_copy"] = spread(
        [zc[k]["guest_cpu_us_per_io"] / copy[k]["guest_cpu_us_per_io"] for k in rounds if k in copy])
    summary[row]["ratios"] = ratios
    against = {}
    for d in names:
        other = by_round(row, d)
        if d == "zero_copy" or not other:
            continue
        per_round = [other[k]["iops"] / zc[k]["iops"] for k in rounds if k in other]
        against[d] = dict(spread(per_round) or {}, ahead=sum(r > 1 for r in per_round))
    summary[row]["iops_vs_zero_copy"] = against

json.dump({"command": command, "commit": commit, "elapsed_s": int(elapsed), "guest": guest, "devices": devices,
           "zero_copy_summary": zc_summary, "runs": runs, "summary": summary}, open(out + ".json", "w"), indent=1)


def fmt(s, scale=1.0, digits=1):
    if s is None:
        return "-"
    return f"{s['median'] * scale:.{digits}f} ({s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f})"


t = []
t.append(f"== ublk zero copy: {command} at {commit}, {elapsed} s ==")
t.append(f"guest: Linux {guest['kernel']}, {guest['cpus']} vCPUs (qemu TCG), {guest['fio']}, rounds {guest['rounds']} x "
         f"{guest['runtime_s']} s (+{guest['ramp_s']} s ramp) per job; rublk {guest['rublk'] or 'not run'}")
t.append(f"zero-copy device flags: {guest['zero_copy_device_flags']}")
t.append("one 1 GiB file on ext4 on a RAM disk (brd), direct I/O everywhere; median (min-max) over the rounds")
t.append("")
t.append(f"{'row':18} {'device':12} {'kIOPS':22} {'server CPU us/IO':22} {'guest CPU us/IO':22} {'server switches/IO':22}")
for row in rows:
    for d in names:
        s = summary[row][d]
        t.append(f"{row:18} {d:12} {fmt(s['iops'], 1e-3, 2):22} {fmt(s['server_cpu_us_per_io']):22} "
                 f"{fmt(s['guest_cpu_us_per_io']):22} {fmt(s['server_switches_per_io'], 1, 2):22}")
t.append("")
t.append("zero copy, per-round ratios, median (min-max):")
t.append(f"{'row':18} {'IOPS / loop dio':22} {'IOPS / copying':22} {'server CPU / copying':22} {'guest CPU / copying':22}")
for row in rows:
    r = summary[row]["ratios"]
    t.append(f"{row:18} {fmt(r['iops_vs_loop'], 1, 2):22} {fmt(r['iops_vs_copy'], 1, 2):22} "
             f"{fmt(r['server_cpu_vs_copy'], 1, 2):22} {fmt(r['guest_cpu_vs_copy'], 1, 2):22}")
t.append("")
t.append("each device against zero_copy: per-round IOPS ratios, median (min-max), rounds ahead of it:")
for row in rows:
    for d, r in summary[row]["iops_vs_zero_copy"].items():
        if r:
            t.append(f"{row:18} {d + ' / zero_copy':34} {fmt(r, 1, 2):22} {r['ahead']} of {len(r['runs'])}")
t.append("")
t.append("server CPU: the server process's threads' run time (schedstat) over the I/Os the device completed in the")
t.append("job's window; loop has no server (its work is the kernel's, in the guest CPU column). guest CPU: /proc/stat's")
t.append("busy time of the whole guest (fio, the kernel, the server) over the same I/Os. server switches: its threads'")
t.append("context switches (voluntary and not) over the same I/Os: exact counts, which the machine's load does not move.")
if zc_summary:
    t.append(f"zero-copy server at the end: {zc_summary}")
t.append("")
t.append("devices:")
for d in devices:
    t.append(f"  {d['device']:12} {d['path']:12} max_sectors_kb {d['max_sectors_kb']}: {d['command']}")
open(out + ".txt", "w").write("\n".join(t) + "\n")
