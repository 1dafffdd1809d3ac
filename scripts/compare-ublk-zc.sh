#!/usr/bin/env bash
# Zero-copy `mqblk ublk` against its copying path, the kernel's loop
# driver with direct I/O and rublk's loop target, on one file, in one
# Linux 7.x guest (qemu TCG, tests/guest/run.sh): fio io_uring direct 4k
# random reads and writes at QD1 and QD32 and 1 MiB sequential reads and
# writes at QD4, the devices alternating, ROUNDS rounds. IOPS beside the
# server's CPU per I/O and the whole guest's. See
# scripts/compare-ublk-zc-guest.sh for what runs in the guest.
#
#   scripts/compare-ublk-zc.sh [ROUNDS]      (default 3; needs root)
#
# Environment: UBENCH_RUNTIME (s per job, 4), UBENCH_RAMP (1), UBENCH_PROFILE
# (0; 1: perf profiles of the 1 MiB rows into $UBENCH_OUT-profile.txt, each
# with the I/Os done while it ran; UBENCH_PROFILE_G=1 adds call graphs),
# UBENCH_COUNT (0; 1: exact counts per I/O of the rows UBENCH_PROFILE_ROWS
# names, from perf stat's tracepoints and the server's threads, into
# $UBENCH_OUT-counts.txt; its tracepoints once crashed a TCG guest that had
# just profiled: run it without UBENCH_PROFILE),
# UBENCH_OUT (docs/results/ublk-zero-copy), UBENCH_RUBLK (1; 0: without
# rublk), UBENCH_ROWS and UBENCH_DEVICES (space-separated subsets of the
# rows and devices below, for a targeted run; the ratios need loop and copy).
#
# Writes $UBENCH_OUT.json (every run, the devices, the summary),
# $UBENCH_OUT.txt (the table: median, min and max per device and row; the
# ratios of each round's figures; the commands) and $UBENCH_OUT-guest.log.
#
# rublk (GPL-2.0-or-later) is a tool to compare with, never code to copy:
# installed when missing as scripts/compare-ublk.sh installs it.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rounds=${1:-3}
[[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -ge 1 ] || { echo "usage: scripts/compare-ublk-zc.sh [ROUNDS]" >&2; exit 2; }
out=${UBENCH_OUT:-docs/results/ublk-zero-copy}
RUBLK_VERSION=0.2.15
cache=${MQBLK_CACHE:-$HOME/.cache/mqblk}
rublk=""
if [ "${UBENCH_RUBLK:-1}" = 1 ]; then
  rublk=$cache/rublk-$RUBLK_VERSION/bin/rublk
  if [ ! -x "$rublk" ]; then
    dpkg-query -W -f='${Status}' libclang-dev 2> /dev/null | grep -q 'ok installed' ||
      apt-get install -y -qq --no-install-recommends libclang-dev >&2
    CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} cargo install rublk --version "$RUBLK_VERSION" \
      --no-default-features --locked --root "$cache/rublk-$RUBLK_VERSION" >&2
  fi
fi
t0=$(date +%s)
command -v jq > /dev/null || { echo "jq is not installed (apt-get install jq)" >&2; exit 2; }
cargo build --release -q -p mqblk-cli
tests/guest/fetch-kernel.sh 7 > /dev/null
brd=$(find "$cache"/kernel-7.* -name brd.ko.xz | sort | tail -n 1)
[ -n "$brd" ] || { echo "compare-ublk-zc: no brd.ko.xz in the cached 7.x kernel" >&2; exit 1; }
blockdir=$(dirname "$brd")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/job.sh" <<JOB
export MQBLK_BIN=$root/target/release/mqblk RUBLK_BIN=$rublk KMOD_BLOCK_DIR=$blockdir UBENCH_ROUNDS=$rounds
export UBENCH_RUNTIME=${UBENCH_RUNTIME:-4} UBENCH_RAMP=${UBENCH_RAMP:-1} UBENCH_PROFILE=${UBENCH_PROFILE:-0} UBENCH_COUNT=${UBENCH_COUNT:-0} UBENCH_PROFILE_G=${UBENCH_PROFILE_G:-}
export UBENCH_PROFILE_ROWS="${UBENCH_PROFILE_ROWS:-read-1m-qd4 write-1m-qd4}"
export UBENCH_ROWS="${UBENCH_ROWS:-}" UBENCH_DEVICES="${UBENCH_DEVICES:-}"
exec bash $root/scripts/compare-ublk-zc-guest.sh
JOB
status=0
MQBLK_GUEST_SERIES=7 MQBLK_GUEST_TIMEOUT=${MQBLK_GUEST_TIMEOUT:-3600} tests/guest/run.sh "$work/job.sh" --cpus 2 --mem 3072 \
  > "$work/guest.out" || status=$?
elapsed=$(($(date +%s) - t0))
if [ "$status" != 0 ]; then
  echo "compare-ublk-zc: the guest failed (status $status); its output:" >&2
  tail -n 40 "$work/guest.out" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
cp "$work/guest.out" "$out-guest.log"
grep '^PROFILE ' "$work/guest.out" | sed 's/^PROFILE //' > "$out-profile.txt" || true
grep '^COUNT ' "$work/guest.out" | sed 's/^COUNT //' > "$out-counts.txt" || true
[ -s "$out-counts.txt" ] || rm -f "$out-counts.txt"
grep '^{' "$work/guest.out" > "$work/lines.jsonl"
command="scripts/compare-ublk-zc.sh $rounds (UBENCH_RUNTIME=${UBENCH_RUNTIME:-4} UBENCH_RAMP=${UBENCH_RAMP:-1}\
${UBENCH_ROWS:+ UBENCH_ROWS=\"$UBENCH_ROWS\"}${UBENCH_DEVICES:+ UBENCH_DEVICES=\"$UBENCH_DEVICES\"})"
python3 scripts/compare-ublk-zc-summary.py "$work/lines.jsonl" "$out" "$command" "$elapsed" \
  "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo '+dirty')"
cat "$out.txt"
echo "compare-ublk-zc: wrote $out.json, $out.txt, $out-guest.log in ${elapsed} s" >&2
