#!/usr/bin/env python3
"""Pools the per-round IOPS ratios of two devices over several runs of
scripts/compare-ublk-zc.sh (their .json files): each round is one
alternating pair in one guest boot, so rounds from several boots pool into
one sample of ratios.

    scripts/compare-ublk-zc-pool.py A/B ROW[,ROW...] RUN.json...

Prints, per row, the rounds, the median, quartiles, min-max and the rounds
where A was ahead of B.

SPDX-License-Identifier: MIT OR Apache-2.0
"""
import json
import statistics
import sys

if len(sys.argv) < 4 or "/" not in sys.argv[1]:
    sys.exit("usage: compare-ublk-zc-pool.py A/B ROW[,ROW...] RUN.json...")
a, b = sys.argv[1].split("/", 1)
rows = sys.argv[2].split(",")
files = sys.argv[3:]
for row in rows:
    ratios = []
    for f in files:
        by = {}
        for r in json.load(open(f))["runs"]:
            if r["row"] == row:
                by.setdefault(r["device"], {})[r["round"]] = r["iops"]
        if a not in by or b not in by:
            sys.exit(f"{f}: no {a} or no {b} in row {row}")
        ratios += [by[a][k] / by[b][k] for k in sorted(by[a]) if k in by[b]]
    q1, q2, q3 = statistics.quantiles(ratios, n=4)
    print(f"{row:18} {a} / {b}: {len(ratios)} rounds from {len(files)} runs, median {statistics.median(ratios):.2f}, "
          f"quartiles {q1:.2f}-{q3:.2f}, min-max {min(ratios):.2f}-{max(ratios):.2f}, "
          f"{sum(r > 1 for r in ratios)} rounds ahead")
