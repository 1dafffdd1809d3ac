#!/usr/bin/env bash
# `mqblk ublk` against the guest kernel's null_blk and against rublk's null
# target, side by side in one Linux 6.12 guest (qemu TCG,
# tests/guest/run.sh): fio io_uring direct 4k randread QD1 and QD32 and
# 1 MiB sequential read QD4, the three devices alternating, ROUNDS rounds;
# then a profile of both ublk servers (context switches, CPU time and
# syscalls per request; perf record). See scripts/compare-ublk-guest.sh for
# what runs in the guest.
#
#   scripts/compare-ublk.sh [ROUNDS]      (default 5; needs root)
#
# Environment: UBENCH_RUNTIME (s per job, 5), UBENCH_RAMP (1),
# UBENCH_PROFILE (1; 0 skips the profile), UBENCH_PROFILE_RUNTIME (3),
# UBENCH_OUT (docs/results/ublk-compare).
#
# Writes $UBENCH_OUT.json (every run, the devices, summary), $UBENCH_OUT.txt
# (the table: median, min, max per device; ratios of medians and the
# median, min and max of the per-round ratios; counts per request; the
# commands), $UBENCH_OUT-profile.txt (perf output) and $UBENCH_OUT-guest.log
# (everything the guest printed).
#
# rublk (GPL-2.0-or-later) is a tool to compare with, never code to copy:
# installed when missing with `cargo install rublk --version $RUBLK_VERSION
# --no-default-features --locked` into ${MQBLK_CACHE:-~/.cache/mqblk}/rublk-VERSION
# (needs libclang-dev, installed with apt when missing).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rounds=${1:-5}
[[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -ge 1 ] || { echo "usage: scripts/compare-ublk.sh [ROUNDS]" >&2; exit 2; }
out=${UBENCH_OUT:-docs/results/ublk-compare}
RUBLK_VERSION=0.2.15
cache=${MQBLK_CACHE:-$HOME/.cache/mqblk}
rublk=$cache/rublk-$RUBLK_VERSION/bin/rublk
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
t0=$(date +%s)

command -v fio > /dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 2; }
command -v jq > /dev/null || { echo "jq is not installed (apt-get install jq)" >&2; exit 2; }
if [ ! -x "$rublk" ]; then
  dpkg-query -W -f='${Status}' libclang-dev 2> /dev/null | grep -q 'ok installed' ||
    apt-get install -y -qq --no-install-recommends libclang-dev >&2
  echo "compare-ublk: installing rublk $RUBLK_VERSION into $cache/rublk-$RUBLK_VERSION" >&2
  cargo install rublk --version "$RUBLK_VERSION" --no-default-features --locked \
    --root "$cache/rublk-$RUBLK_VERSION" >&2
fi
cargo build --release -q -p mqblk-cli
mqblk=$root/target/release/mqblk

# The guest gets no environment from the host: a wrapper script sets it.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/job.sh" <<EOF
export MQBLK_BIN=$mqblk RUBLK_BIN=$rublk UBENCH_ROUNDS=$rounds
export UBENCH_RUNTIME=${UBENCH_RUNTIME:-5} UBENCH_RAMP=${UBENCH_RAMP:-1}
export UBENCH_PROFILE=${UBENCH_PROFILE:-1} UBENCH_PROFILE_RUNTIME=${UBENCH_PROFILE_RUNTIME:-3}
exec bash $root/scripts/compare-ublk-guest.sh
EOF
status=0
MQBLK_GUEST_TIMEOUT=${MQBLK_GUEST_TIMEOUT:-2400} tests/guest/run.sh "$work/job.sh" --cpus 2 --mem 2048 \
  > "$work/guest.out" || status=$?
elapsed=$(($(date +%s) - t0))
if [ "$status" != 0 ]; then
  echo "compare-ublk: the guest failed (status $status); its output:" >&2
  tail -n 40 "$work/guest.out" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
cp "$work/guest.out" "$out-guest.log"
grep '^PROFILE ' "$work/guest.out" | sed 's/^PROFILE //' > "$out-profile.txt" || true
grep '^{' "$work/guest.out" > "$work/lines.jsonl"
command="scripts/compare-ublk.sh $rounds (UBENCH_RUNTIME=${UBENCH_RUNTIME:-5} UBENCH_RAMP=${UBENCH_RAMP:-1} UBENCH_PROFILE=${UBENCH_PROFILE:-1})"
python3 scripts/compare-ublk-summary.py "$work/lines.jsonl" "$out" "$command" "$elapsed" \
  "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo '+dirty')"
cat "$out.txt"
echo "compare-ublk: wrote $out.json, $out.txt, $out-profile.txt in ${elapsed} s" >&2
