#!/usr/bin/env bash
# Miri over the block layer (mqblk), its primitives (mqblk-sync) and the
# null driver (mqblk-null): their unit tests and the integration tests that
# need only threads, futexes, eventfds and the clock (plug, split,
# polling, sbitmap properties, the memory store), under
# Tree Borrows; the block layer's unsafe request path
# and its primitives again under Stacked Borrows (see below for which
# binaries, and for the null driver). Test sizes
# shrink under cfg(miri). Left out: the file driver (mqblk-file: Miri does
# not emulate io_uring), mqblk-null's zoned tests and the schedulers
# (safe code over the same unsafe parts: see below), the loom models
# (tests/loom_sbitmap.rs) and the
# stress binary (tests/stress.rs: sizes made for native speed).
#
# Each test binary (an integration test file, or a crate's unit tests) is
# one Miri process, and two run at a time, one per core, the longest
# first, both borrow models' binaries in one pool. Each Miri process first
# checks the whole crate it runs: a process per test paid that 2-4 s a
# test (111 tests), 40% of a binary's CPU time (plug: 102 CPU-s as a
# process per test, 61 as one process). A binary stops at the first
# report of undefined behaviour, and a binary past 25 minutes is hung and
# cut (the slowest, mqblk-null's unit tests, take about 140 CPU-seconds
# under Tree Borrows: 4 to 17 minutes, as busy as the machine is); to see
# every
# failure of one binary, a process per test:
#   cargo +nightly miri nextest run -p CRATE --test NAME   (or --lib)
#
# Every binary runs to its end even after another fails; each one's
# output is kept in target/miri/logs/MODEL-CRATE-BINARY.log, and the exit
# status is non-zero if any test failed or Miri reported undefined
# behaviour.
#
#   scripts/miri.sh             both borrow models
#   scripts/miri.sh tree        one model
#   MIRI_BINARIES="mqblk:plug mqblk:lib" scripts/miri.sh tree
#                               those binaries only
#   scripts/miri.sh none        no aliasing model (diagnosis only: data
#                               races, use after free, leaks and
#                               uninitialised reads are still checked)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

if ! cargo +nightly miri --version >/dev/null 2>&1; then
  echo "== installing Miri (nightly: miri, rust-src)"
  if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal || true
  fi
  if ! rustup component add --toolchain nightly miri rust-src; then
    echo "miri.sh: cannot install Miri (rustup component add --toolchain nightly miri rust-src failed)" >&2
    exit 1
  fi
fi
# Builds the Miri sysroot the first time; quick when it is there.
if ! cargo +nightly miri setup >/dev/null 2>&1; then
  echo "miri.sh: 'cargo +nightly miri setup' failed: no Miri sysroot, Miri not run" >&2
  cargo +nightly miri setup >&2 || true
  exit 1
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "== installing cargo-nextest"
  cargo install cargo-nextest --locked || { echo "miri.sh: cannot install cargo-nextest" >&2; exit 1; }
fi

export CARGO_TARGET_DIR=target/miri
logs=target/miri/logs
mkdir -p "$logs"

models=(tree stacked)
if [ $# -gt 0 ]; then
  models=("$1")
fi

# The binaries, as CRATE:BINARY ("lib": the crate's unit tests), the
# longest first (Tree Borrows, in the order below, wall seconds in the
# suite's run at 66d65c5, two at a time beside the guests: 282, 208, 131,
# 117, 113, 69, 67, 55, 46, 53, 20).
#
# crossbeam-epoch (the memory store's grace periods, mqblk-null's mem/)
# does not satisfy Stacked Borrows: every pin reports a retag in its own
# internal.rs before any of our code runs past it (crossbeam-rs/crossbeam
# #545, open; crossbeam's CI checks epoch under Tree Borrows since #996,
# and Miri's README holds Tree Borrows sound for what the compiler
# exploits). Nearly every null test pins it, so Stacked Borrows runs the
# crates that do not use it.
binaries_for() {
  if [ -n "${MIRI_BINARIES:-}" ]; then
    echo "$MIRI_BINARIES"
    return
  fi
  case "$1" in
    # Stacked Borrows only where it can differ from Tree Borrows: the
    # binaries that drive the request path's unsafe code (requests,
    # buffers and their segments, completions, the client's rings): the
    # block layer's and mqblk-sync's unit tests, the driver contract and
    # the segment tests. plug, poll and split drive the same unsafe code
    # through safe callers (a plug's list, a poll loop, a split's
    # children are safe code over those requests), so they run under
    # Tree Borrows only: 100 s of the suite's wall time for no unsafe
    # line the four do not reach. The sbitmap (wake_policies,
    # sbitmap_props) has no unsafe code, and the schedulers (sched) are
    # safe code over the same request path (data races are checked
    # under both models).
    stacked) echo "mqblk:lib mqblk:driver_contract mqblk:segments mqblk-sync:lib" ;;
    # Tree Borrows leaves out wake_policies: the wakeup policies are safe
    # code over atomics and mqblk-sync's waiter (whose unit tests run here
    # under both models); loom checks each policy's wakeup protocol
    # (tests/loom_sbitmap.rs), and the native run keeps the 64-thread
    # contention with exact accounting. Under Miri the binary cost six CPU
    # minutes of the suite's budget for no unsafe code.
    #
    # It leaves out too mqblk-null's zoned tests and the schedulers
    # (sched): safe code (the zone state machine and its locks, the
    # schedulers' queues) over the request path and the memory store.
    # The unsafe code under them runs in the binaries kept: requests and
    # buffers in mqblk's, the store's pages and their release (a zone
    # reset's included: mem::release_tests) in null's unit tests and
    # null_memory. The two cost 480 of the stage's 1,840 lane-seconds in
    # the suite's run at 66d65c5 (4 of its 17 minutes, beside the guests).
    *) echo "mqblk-null:lib mqblk-null:poll_toggle mqblk:lib mqblk:plug mqblk-null:null_memory mqblk:driver_contract mqblk:poll mqblk:sbitmap_props mqblk:split mqblk:segments mqblk-sync:lib" ;;
  esac
}
flags_for() {
  case "$1" in
    tree) echo "-Zmiri-tree-borrows" ;;
    stacked) echo "" ;;
    none) echo "-Zmiri-disable-stacked-borrows" ;;
    *) echo "miri.sh: unknown borrow model '$1' (tree, stacked or none)" >&2; exit 2 ;;
  esac
}

# Runs one binary ("MODEL CRATE BINARY") and prints one line: its time and
# libtest's result, or why it failed. Exit status: the binary's.
run_binary() {
  local model=$1 crate=$2 binary=$3 start=$SECONDS
  local log=$logs/$model-$crate-$binary.log target=(--lib)
  [ "$binary" != lib ] && target=(--test "$binary")
  MIRIFLAGS="$(flags_for "$model")" timeout "$binary_limit_s" \
    cargo +nightly miri test -p "$crate" "${target[@]}" -- --test-threads=1 >"$log" 2>&1
  local rc=$?
  local result
  result=$(grep -h '^test result:' "$log" | tail -n 1)
  [ $rc -eq 124 ] && result="hung: cut after $binary_limit_s s"
  printf '   %-8s %-11s %-16s %4d s  %s\n' "$model" "$crate" "$binary" $((SECONDS - start)) "${result:-no result (exit $rc)}"
  if [ $rc -ne 0 ]; then
    grep -hE '^error: |panicked at|^test .* FAILED$|^---- ' "$log" | grep -v 'aborting due to' | head -n 8 | sed 's/^/      /'
  fi
  return $rc
}

binary_limit_s=1500
lanes=$(nproc)
jobs_list=()
for model in "${models[@]}"; do
  flags_for "$model" >/dev/null || exit 2
  for b in $(binaries_for "$model"); do
    jobs_list+=("$model ${b%%:*} ${b#*:}")
  done
done
# The longest first: Tree Borrows' heaviest binaries, then the rest.
mapfile -t jobs_list < <(printf '%s\n' "${jobs_list[@]}" | awk '{ print ($1 == "tree" ? 0 : 1) "\t" NR "\t" $0 }' | sort -n -k1,1 -k2,2 | cut -f3-)

total_start=$SECONDS
echo "== Miri: building the test binaries"
crates=()
for model in "${models[@]}"; do
  for b in $(binaries_for "$model"); do crates+=(-p "${b%%:*}"); done
done
if ! cargo +nightly miri test --no-run "${crates[@]}" --lib --tests >"$logs/build.log" 2>&1; then
  grep -hE '^error' -A 8 "$logs/build.log" | head -n 40 >&2
  echo "miri.sh: the Miri build failed (log: $logs/build.log)" >&2
  exit 1
fi
echo "== Miri: ${#jobs_list[@]} test binaries, $lanes at a time ($(printf '%s ' "${models[@]}")borrows), built in $((SECONDS - total_start)) s"
rm -f "$logs"/*.failed
for job in "${jobs_list[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$lanes" ]; do
    wait -n || true
  done
  # shellcheck disable=SC2086 # job is "MODEL CRATE BINARY"
  { run_binary $job || touch "$logs/${job// /-}.failed"; } &
done
wait

failed=$(find "$logs" -name '*.failed' -printf '%f\n' | sed 's/\.failed$//' | sort)
echo "== Miri: $((SECONDS - total_start)) s, $lanes cores"
if [ -n "$failed" ]; then
  echo "Miri: failures in $(echo "$failed" | paste -sd " "): see the reports above and the logs in $logs" >&2
  exit 1
fi
echo "Miri: clean"
