#!/usr/bin/env bash
# Miri over the block layer (mqblk), its primitives (mqblk-sync) and the
# null driver (mqblk-null): their unit tests and the integration tests that
# need only threads, futexes, eventfds and the clock (plug, split,
# schedulers, zoned, polling, wake policies, sbitmap properties, the
# memory store), under Tree Borrows and then Stacked Borrows. Test sizes
# shrink under cfg(miri). Left out: the file driver (mqblk-file: Miri does
# not emulate io_uring), the loom models (tests/loom_sbitmap.rs) and the
# stress binary (tests/stress.rs: sizes made for native speed).
#
# Every test runs even after one fails (findings are collected), each
# model's output is kept in target/miri/logs/MODEL.log, and the exit
# status is non-zero if any test failed or Miri reported undefined
# behaviour.
#
#   scripts/miri.sh             both borrow models, every binary
#   scripts/miri.sh tree plug   one model, some binaries (--lib for unit tests)
#   scripts/miri.sh none        no aliasing model (diagnosis only: data
#                               races, use after free, leaks and
#                               uninitialised reads are still checked; shows
#                               what an aliasing report hides and how long
#                               tests take when they run to the end)
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
binaries=(--lib plug split sched zoned poll poll_hybrid null_memory driver_contract wake_policies sbitmap_props)
if [ $# -gt 0 ]; then
  models=("$1")
  shift
fi
if [ $# -gt 0 ]; then
  binaries=("$@")
fi

# Isolation stays on (the default): the monotonic clock, sleeps, futexes
# and eventfds all work inside it, and nothing here needs the host.
flags_for() {
  case "$1" in
    tree) echo "-Zmiri-tree-borrows" ;;
    stacked) echo "" ;;
    none) echo "-Zmiri-disable-stacked-borrows" ;;
    *) echo "miri.sh: unknown borrow model '$1' (tree, stacked or none)" >&2; exit 2 ;;
  esac
}

# crossbeam-epoch (the memory store's grace periods, driver/null/mem/)
# does not satisfy Stacked Borrows: every pin reports a retag in its own
# internal.rs before any of our code runs past it (crossbeam-rs/crossbeam
# #545, open; crossbeam's CI checks epoch under Tree Borrows since #996,
# and Miri's README holds Tree Borrows sound for what the compiler
# exploits). Under Stacked Borrows a test that fails with exactly that
# report, and nothing else, is counted as stopped, not failed: those tests
# run to the end under Tree Borrows above, and any other failure, in the
# same binary or the same test, still fails the run.
#
# known_upstream LOG: prints how many failed tests failed only that way,
# or 0 when any failure (a panic, a timeout, a report elsewhere) is other.
known_upstream() {
  awk '/^ +(FAIL|SIGSEGV|SIGABRT|SIGKILL|TIMEOUT) \[/ {
         cur = $(NF-1) " " $NF; if (!(cur in seen)) seen[cur] = $1; want = 0; next }
       cur != "" && /^ +error: / && !/aborting due to/ && !(cur in class) {
         msg = $0; want = 1; next }
       want && /-->/ {
         class[cur] = (msg ~ /borrow stack/ && $2 ~ /crossbeam-epoch-[0-9.]+\/src\//) ? "known" : "other"
         want = 0 }
       END { n = 0
             for (t in seen) {
               if (seen[t] != "FAIL" || class[t] != "known") { print 0; exit }
               n++ }
             print n }' "$1"
}

# One nextest run per model over every binary, so a long test in one
# binary overlaps the short ones of the next instead of leaving a core
# idle at each binary's end (per-binary runs: 1,511 s; see the summary).
filter=""
for bin in "${binaries[@]}"; do
  if [ "$bin" = --lib ]; then term="kind(lib)"; else term="binary(=$bin)"; fi
  filter="${filter:+$filter | }$term"
done

failed=()
summary=()
total_start=$SECONDS
for model in "${models[@]}"; do
  flags=$(flags_for "$model") || exit 2
  log=$logs/$model.log
  echo "== Miri, ${model} borrows: ${binaries[*]}"
  start=$SECONDS
  MIRIFLAGS="$flags" cargo +nightly miri nextest run -p mqblk -p mqblk-sync -p mqblk-null -E "$filter" \
    --tool-config-file "miri:$PWD/scripts/miri-nextest.toml" --no-fail-fast \
    >"$log" 2>&1
  rc=$?
  secs=$((SECONDS - start))
  # Failures, and passing tests that took 30 s or more (candidates for
  # a smaller size under cfg(miri)), once each, then nextest's summary.
  awk '/Summary \[/ { print; exit }
       /^ +(FAIL|SIGSEGV|SIGABRT|SIGKILL|TIMEOUT) \[/ { print }
       /^ +PASS \[/ { t = $0; sub(/^ +PASS \[ */, "", t); sub(/s\].*/, "", t); if (t + 0 >= 30) print }' "$log"
  # Tests passed and failed per binary (nextest names "CRATE" the unit
  # tests and "CRATE::NAME" an integration binary).
  awk '/^ +PASS \[/ { p[$(NF-1)]++ }
       /^ +(FAIL|SIGSEGV|SIGABRT|SIGKILL|TIMEOUT) \[/ { f[$(NF-1)]++ }
       END { for (b in p) printf "   %-24s %4d passed %4d failed\n", b, p[b], f[b]
             for (b in f) if (!(b in p)) printf "   %-24s %4d passed %4d failed\n", b, 0, f[b] }' "$log" | sort
  known=0
  if [ $rc -ne 0 ] && [ "$model" = stacked ]; then
    known=$(known_upstream "$log")
  fi
  if [ "$known" -gt 0 ]; then
    echo "   $known tests stopped at crossbeam-epoch's own Stacked Borrows report (crossbeam-rs/crossbeam#545); every other test passed"
    summary+=("$(printf '%-8s %5ss  ok (%s stopped in crossbeam-epoch, #545)' "$model" "$secs" "$known")")
  elif [ $rc -ne 0 ]; then
    failed+=("$model")
    # Miri's own words for each failure (and each panic's first line), one
    # line per distinct report: how often it came, the error, where,
    # and the first such test.
    awk '/^ +(FAIL|SIGSEGV|SIGABRT|TIMEOUT) \[/ { test = $(NF-1) " " $NF }
         /^ +error: / && !/aborting due to/ { msg = $0; sub(/^ +error: /, "", msg)
           gsub(/<[0-9]+>/, "<tag>", msg); gsub(/alloc[0-9]+/, "alloc", msg); want = 1; next }
         want && /-->/ { print msg "  at " $2 "\t" test; want = 0 }
         panic { m = $0; sub(/^ +/, "", m); print where ": " m "\t" test; panic = 0 }
         /^ +thread .* panicked at / { where = $0; sub(/^.* panicked at /, "panicked at ", where)
           sub(/:$/, "", where); panic = 1 }' "$log" |
      awk -F'\t' '{ n[$1]++; if (!($1 in first)) first[$1] = $2 }
         END { for (m in n) printf "   %3d x %s  (e.g. %s)\n", n[m], m, first[m] }' | sort -rn
    summary+=("$(printf '%-8s %5ss  FAILED (log: %s)' "$model" "$secs" "$log")")
  else
    summary+=("$(printf '%-8s %5ss  ok' "$model" "$secs")")
  fi
done

echo "== Miri summary (wall time per model, $(nproc) cores)"
printf '%s\n' "${summary[@]}"
echo "total $((SECONDS - total_start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "Miri: failures in ${failed[*]}: see the logs above for Miri's reports" >&2
  exit 1
fi
echo "Miri: clean"
