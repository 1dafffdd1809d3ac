#!/usr/bin/env bash
# Miri over the block layer (mqblk), its primitives (mqblk-sync) and the
# null driver (mqblk-null): their unit tests and the integration tests that
# need only threads, futexes, eventfds and the clock (plug, split,
# schedulers, zoned, polling, sbitmap properties, the memory store), under
# Tree Borrows; the block layer's unsafe request path
# and its primitives again under Stacked Borrows (see below for which
# binaries, and for the null driver). Test sizes
# shrink under cfg(miri). Left out: the file driver (mqblk-file: Miri does
# not emulate io_uring), the loom models (tests/loom_sbitmap.rs) and the
# stress binary (tests/stress.rs: sizes made for native speed).
#
# Two lanes run side by side, one per core: the integration binaries
# through nextest (a process per test: a hang is cut at 3 minutes and
# every test runs), and the unit tests one Miri process per crate. Each
# Miri process first checks the whole crate it runs, which for a unit-test
# binary is the crate itself: a process per unit test paid that about 4 s
# a test (110 unit tests). A unit-test binary stops at the first report
# of undefined behaviour; its tests one per process (to see every
# failure): cargo +nightly miri nextest run -p CRATE --lib.
#
# Every lane runs to its end even after a failure; each one's output is
# kept in target/miri/logs/MODEL-*.log, and the exit status is non-zero if
# any test failed or Miri reported undefined behaviour.
#
#   scripts/miri.sh             both borrow models
#   scripts/miri.sh tree        one model
#   scripts/miri.sh none        no aliasing model (diagnosis only: data
#                               races, use after free, leaks and
#                               uninitialised reads are still checked)
set -uo pipefail
cd "$(dirname "$0")/.."

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

# crossbeam-epoch (the memory store's grace periods, mqblk-null's mem/)
# does not satisfy Stacked Borrows: every pin reports a retag in its own
# internal.rs before any of our code runs past it (crossbeam-rs/crossbeam
# #545, open; crossbeam's CI checks epoch under Tree Borrows since #996,
# and Miri's README holds Tree Borrows sound for what the compiler
# exploits). Nearly every null test pins it, so Stacked Borrows runs the
# crates that do not use it.
integration_for() {
  case "$1" in
    # Stacked Borrows only where it can differ from Tree Borrows: the
    # binaries that drive the request path's unsafe code (requests,
    # buffers, completions, the client's rings) in different shapes. The
    # sbitmap (wake_policies, sbitmap_props) has no unsafe code, and the
    # schedulers (sched) are safe code over the same request path: an
    # aliasing model has nothing more to check there than Tree Borrows
    # already does (data races are checked under both).
    stacked) echo "binary(=plug) | binary(=split) | binary(=poll) | binary(=driver_contract)" ;;
    # Tree Borrows leaves out wake_policies: the wakeup policies are safe
    # code over atomics and mqblk-sync's waiter (whose unit tests run here
    # under both models); loom checks each policy's wakeup protocol
    # (tests/loom_sbitmap.rs), and the native run keeps the 64-thread
    # contention with exact accounting. Under Miri the binary cost six CPU
    # minutes of the suite's budget for no unsafe code.
    *) echo "binary(=plug) | binary(=split) | binary(=sched) | binary(=poll) | binary(=driver_contract) | binary(=sbitmap_props) | binary(=zoned) | binary(=poll_hybrid) | binary(=null_memory)" ;;
  esac
}
units_for() {
  case "$1" in
    stacked) echo "mqblk mqblk-sync" ;;
    *) echo "mqblk-null mqblk mqblk-sync" ;;
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

# The integration lane: one nextest run over every binary (slowest tests
# first, scripts/miri-nextest.toml). Prints nextest's failures, passing
# tests of 30 s or more (candidates for a smaller size under cfg(miri))
# and its summary.
integration_lane() {
  local model=$1 log=$logs/$1-integration.log
  local pkgs=(-p mqblk)
  [ "$model" != stacked ] && pkgs+=(-p mqblk-null)
  MIRIFLAGS="$(flags_for "$model")" cargo +nightly miri nextest run "${pkgs[@]}" -E "$(integration_for "$model")" \
    --tool-config-file "miri:$PWD/scripts/miri-nextest.toml" --no-fail-fast >"$log" 2>&1
  local rc=$?
  awk '/Summary \[/ { print; exit }
       /^ +(FAIL|SIGSEGV|SIGABRT|SIGKILL|TIMEOUT) \[/ { print }
       /^ +PASS \[/ { t = $0; sub(/^ +PASS \[ */, "", t); sub(/s\].*/, "", t); if (t + 0 >= 30) print }' "$log"
  return $rc
}

# The unit lane: each crate's unit tests in one Miri process, one crate
# after another (a crate past 25 minutes is hung; the slowest takes about
# 5 under Tree Borrows).
unit_lane() {
  local model=$1 crate rc=0 start log
  for crate in $(units_for "$model"); do
    log=$logs/$model-unit-$crate.log
    start=$SECONDS
    MIRIFLAGS="$(flags_for "$model")" timeout 1500 \
      cargo +nightly miri test -p "$crate" --lib -- --test-threads=1 >"$log" 2>&1
    local one=$?
    local result
    result=$(grep -h '^test result:' "$log" | tail -n 1)
    printf '   %-12s unit tests: %4d s  %s\n' "$crate" $((SECONDS - start)) "${result:-no result (exit $one)}"
    if [ $one -ne 0 ]; then
      rc=1
      grep -hE '^error: |panicked at|^test .* FAILED$|^---- ' "$log" | grep -v 'aborting due to' | head -n 8 | sed 's/^/      /'
    fi
  done
  return $rc
}

failed=()
summary=()
total_start=$SECONDS
for model in "${models[@]}"; do
  flags_for "$model" >/dev/null || exit 2
  echo "== Miri, $model borrows: integration tests (nextest) beside the unit tests of $(units_for "$model")"
  start=$SECONDS
  integration_lane "$model" >"$logs/$model-integration.summary" 2>&1 &
  lane=$!
  unit_lane "$model" >"$logs/$model-unit.summary" 2>&1
  unit_rc=$?
  wait $lane
  integration_rc=$?
  cat "$logs/$model-integration.summary" "$logs/$model-unit.summary"
  secs=$((SECONDS - start))
  if [ $unit_rc -ne 0 ] || [ $integration_rc -ne 0 ]; then
    failed+=("$model")
    summary+=("$(printf '%-8s %5ss  FAILED (logs: %s/%s-*.log)' "$model" "$secs" "$logs" "$model")")
  else
    summary+=("$(printf '%-8s %5ss  ok' "$model" "$secs")")
  fi
done

echo "== Miri summary (wall time per model, $(nproc) cores)"
printf '%s\n' "${summary[@]}"
echo "total $((SECONDS - total_start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "Miri: failures in ${failed[*]}: see the reports above and the logs in $logs" >&2
  exit 1
fi
echo "Miri: clean"
