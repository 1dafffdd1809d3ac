#!/usr/bin/env bash
# The whole mqblk test suite, from a fresh Debian machine: installs what the
# tests need, then runs unit, integration, CLI and doc tests (debug build, so
# lifecycle assertions are on; the guest tests boot Linux 6.12 and 7.x
# under qemu),
# stock fio's libblkio engine on libblkio.so.1 (tests/blkio/fio.sh), the
# performance gate (scripts/perf-gate.sh), the loom models (bounded
# preemptions), Miri (scripts/miri.sh), cargo-fuzz on the NBD and
# vhost-user-blk servers (bounded) and the zoned kernel oracle (installs
# qemu and busybox; fetches Debian's kernels without installing them).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's header carries the time since the start, and the suite ends
# with the time per stage: the suite must stay under 60 minutes on a fresh
# machine, installs and builds included.
suite_start=$SECONDS
stage_names=()
stage_starts=()
stage() {
  stage_names+=("$1")
  stage_starts+=("$SECONDS")
  printf '== [%dm%02ds] %s\n' $(((SECONDS - suite_start) / 60)) $(((SECONDS - suite_start) % 60)) "$1"
}
stage_report() {
  echo "== time per stage (s)"
  local i end
  for i in "${!stage_names[@]}"; do
    end=${stage_starts[$((i + 1))]:-$SECONDS}
    printf '%6d  %s\n' $((end - stage_starts[i])) "${stage_names[i]}"
  done
  printf '%6d  total\n' $((SECONDS - suite_start))
}
# A stage that fails ends the suite: the background lane (the guest tests
# and the oracle) with it.
on_exit() {
  [ -z "${fetch_pid:-}" ] || kill "$fetch_pid" 2>/dev/null || true
  if [ -n "${lane_pid:-}" ] && kill -0 "$lane_pid" 2>/dev/null; then
    pkill -P "$lane_pid" 2>/dev/null || true
    kill "$lane_pid" 2>/dev/null || true
  fi
  stage_report
}
trap on_exit EXIT

# Tools the tests need. The Rust toolchain is assumed (rustup's cargo).
stage "installs (cargo-nextest, Debian packages)"
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "== installing cargo-nextest"
  cargo install cargo-nextest --locked
fi

# The guests first (qemu, a static busybox, cpio and kmod's modinfo for the
# initramfs; libc6-dev, which every link needs), in one transaction before
# anything runs: on a machine whose qemu-utils came from bookworm-backports,
# installing bookworm's qemu-system-x86 removes it, so qemu-img is checked
# (and reinstalled, matching qemu-system) only after this.
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v modinfo >/dev/null || need+=(kmod)
command -v xz >/dev/null || need+=(xz-utils)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
# OpenSSL's headers and pkg-config for the openssl crate (TLS in the NBD
# server and the nbd: driver), which every build of mqblk-nbd links: the
# lints below build it.
[ -e /usr/include/openssl/ssl.h ] || need+=(libssl-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  apt-get update -qq
  apt_updated=1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Real clients for the NBD server tests, real servers for the nbd:
# driver's (nbdkit, qemu-nbd; psktool makes its TLS keys), fio for its
# nbd engine, and
# btrfs-progs for the zoned btrfs on /dev/ublkb0 (guest_ublk_zoned_7),
# nbd-client for the kernel nbd client in the guest (guest_nbd),
# valgrind for the performance gate's instruction counts, and sqlite3 for
# the power-cut test in the guest (guest_crash), and a sans-serif font for
# the experiments' charts (plotters lays text out with it), and gnuplot
# for fio's fio_generate_plots on bench's logs (tests/fio_examples.rs);
# psktool and certtool (gnutls-bin) for the TLS tests' keys and
# certificates (tests/nbd_tls.rs, the nbd: driver's TLS tests).
need=()
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
for tool in nbdinfo:libnbd-bin nbdcopy:libnbd-bin qemu-img:qemu-utils qemu-io:qemu-utils qemu-nbd:qemu-utils nbdkit:nbdkit fio:fio losetup:mount mkfs.btrfs:btrfs-progs nbd-client:nbd-client valgrind:valgrind sqlite3:sqlite3 mkfs.ext4:e2fsprogs blkparse:blktrace gnuplot:gnuplot-nox psktool:gnutls-bin certtool:gnutls-bin; do
  command -v "${tool%%:*}" >/dev/null || [[ " ${need[*]} " == *" ${tool#*:} "* ]] || need+=("${tool#*:}")
done
# fio's fio_jsonplus_clat2csv (tests/bench_output.rs) imports six, which
# Debian's fio package does not pull in.
python3 -c 'import six' 2>/dev/null || need+=(python3-six)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  [ -n "${apt_updated:-}" ] || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The guests' fio: stock fio built lean (libaio and io_uring, a handful of
# libraries: Debian's loads 64 over 9p, 11-17 s a start under TCG), once
# and cached (tests/guest/run.sh would build it too, inside a guest test).
scripts/fio-libblkio.sh --guest >/dev/null
# fio's own job files (examples/ of Debian's fio source), for
# crates/mqblk-cli/tests/fio_examples.rs; cached in ~/.cache/mqblk.
scripts/fio-examples.sh >/dev/null

# The guests' kernels (Linux 6.12 and 7.x, and 6.1 for the oracle:
# tests/guest/fetch-kernel.sh, cached), fetched beside the lints and unit
# tests: the fetch waits on the network, not the CPUs. The background lane
# waits for it before its first guest.
mkdir -p target
(tests/guest/fetch-kernel.sh 6.12 && tests/guest/fetch-kernel.sh 7 && tests/guest/fetch-kernel.sh 6.1) > target/kernel-fetch.log 2>&1 &
fetch_pid=$!

stage "formatting and lints (cargo fmt --check, clippy -D warnings, module order)"
for component in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$component" || rustup component add "$component"
done
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
# The block layer's modules in one declared order, bottom up: no use
# climbs back up (no import cycle).
python3 scripts/module-order.py

# The qemu guests run in a background lane from the end of the unit tests
# to the end of the suite, beside the stages below, so that the second core
# is not idle while a guest runs: the guest tests one at a time, then the
# zoned kernel oracle unless the foreground took it (run_oracle below).
# Their reports come at the end.
guests='test(/^guest_.*_script_passes$/)'
stage "unit, integration and CLI tests (then the guest tests start, in the background)"
cargo nextest run --workspace -E "not $guests"
guest_log=target/guest-tests.log
oracle_log=target/oracle.log
rm -f target/guest-tests.status target/oracle.status target/background.times
rm -rf target/oracle.claim
# The zoned kernel oracle (Linux 6.1, 6.12 and 7.x null_blk under qemu against
# mqblk: 5 configurations x 300 ops, one boot per kernel) runs in
# whichever lane comes to it first: the background lane after its guest
# tests, or the foreground after the fuzzing while the guests still run
# (mkdir is the claim). The foreground had sat 0-250 s waiting for the
# lane, or the lane for it, by how busy each run's CPUs were.
run_oracle() { # LANE
  mkdir target/oracle.claim 2>/dev/null || return 0
  local start=$SECONDS status=0
  # Fixed seeds keep CI reproducible; explore with tests/oracle/ci.sh 300 $(date +%s) 4.
  # The 6.12 and 7.x kernels come through tests/guest/run.sh (fetched once, cached).
  tests/oracle/ci.sh 300 100 > "$oracle_log" 2>&1 || status=$?
  echo "$status" > target/oracle.status
  printf '%6d  the zoned kernel oracle (Linux 6.1, 6.12 and 7.x null_blk vs mqblk), in the %s\n' $((SECONDS - start)) "$1" >> target/background.times
}
if ! wait "$fetch_pid"; then
  echo "== fetching the guests' kernels failed (target/kernel-fetch.log below); the guests try again"
  cat target/kernel-fetch.log
fi
(
  start=$SECONDS
  # Their whole output stays in the log, passing or not: each check prints
  # its own time, which is where the suite's minutes in a guest go.
  status=0
  # --workspace, as the unit stage: the same features, so its test
  # binaries serve (with -p mqblk-cli, cargo resolved other features and
  # rebuilt them: 2m15s in the lane).
  cargo nextest run --workspace -E "$guests" --no-fail-fast --success-output final > "$guest_log" 2>&1 || status=$?
  echo "$status" > target/guest-tests.status
  printf '%6d  the qemu guest tests (Linux 6.12: ublk, nbd, vhost-user-blk and its reconnect, power cuts, smoke; Linux 7.x: ublk, zoned ublk, smoke)\n' $((SECONDS - start)) >> target/background.times
  run_oracle "background lane"
) &
lane_pid=$!

# The loom models first: they build in their own target directory
# (target/loom), so they run while the background lane's release build
# holds target/'s lock, which the stages after them wait for (the loop
# test, the doc tests and fio's libblkio engine sat 2-3 minutes on it
# when they came first).
stage "loom models"
# Optimised, but without the release profile's debug info, thin LTO and
# single codegen unit (kept there for the bench's profiles and speed): the
# build was half of this stage, and a model's failure prints its
# interleaving either way.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
  cargo test -p mqblk --release --test loom_sbitmap --lib -- loom
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
  cargo test -p mqblk-null -p mqblk-sync --release --lib -- loom

# Ignored by default (an unprivileged run lists it as skipped); as root it
# runs here, and a failure fails the suite.
stage "loop block device test (needs root)"
if [ "$(id -u)" = 0 ]; then
  cargo nextest run -p mqblk-file --test file_driver --run-ignored only -E 'test(=loop_block_device_when_root)'
else
  echo "   SKIPPED loop_block_device_when_root: not root"
fi

stage "doc tests"
cargo test --doc --workspace

# A client we did not write: stock fio's libblkio engine on our
# libblkio.so.1. fio 3.41 comes from Debian's source (sid), built once and
# cached in ~/.cache/mqblk (scripts/fio-libblkio.sh); every fio run is
# killed after 120 s, so a hang fails a case instead of the suite.
stage "fio's libblkio engine on libblkio.so.1 (tests/blkio/fio.sh)"
cargo build --release -p mqblk-blkio
tests/blkio/fio.sh target/release

# Connections that leave nothing behind: the NBD and vhost-user servers
# under clients we did not write (fio's nbd engine; libblkio's
# virtio-blk-vhost-user driver under fio's libblkio engine) that connect,
# verify and disconnect for a minute; fails if a run fails or a server's
# memory, fds or threads grow.
stage "soak: serve and vhost under connecting clients (scripts/soak.sh 1)"
scripts/soak.sh 1

# Instructions per I/O against the counts recorded in BENCHMARKS.md
# (callgrind: exact, so a 2% regression fails here and not by chance).
stage "performance gate (scripts/perf-gate.sh)"
scripts/perf-gate.sh

# Miri reports go to target/miri/logs/; a failure here fails the suite at
# the end, after the fuzzing and the background lane have had their say too.
stage "Miri (Tree Borrows and Stacked Borrows)"
miri_status=0
scripts/miri.sh || miri_status=$?

stage "fuzzing the NBD and vhost-user-blk servers (cargo-fuzz, bounded: 45 s + 15 s + 15 s)"
scripts/fuzz.sh 45

stage "the zoned kernel oracle, unless the background lane has begun it"
run_oracle foreground

stage "waiting for the background lane: the qemu guest tests (and the oracle, if it took it)"
wait "$lane_pid" || true
# (No status file: the lane was killed before that part ended.)
guest_status=$(cat target/guest-tests.status 2>/dev/null || echo 99)
oracle_status=$(cat target/oracle.status 2>/dev/null || echo 99)
echo "== the background lane's time (s)"
cat target/background.times 2>/dev/null || true
echo "== the zoned kernel oracle: the last 40 lines of $oracle_log"
tail -n 40 "$oracle_log" 2>/dev/null || echo "(none)"
grep -E '^ +(PASS|FAIL|SIGSEGV|SIGABRT|SIGKILL|TIMEOUT) \[|Summary \[' "$guest_log" || true
# Each guest test writes its script's output to target/guest-logs/NAME.out
# and .err as it runs (a test nextest killed leaves them too): show the
# tails of those that did not pass.
if [ "$guest_status" -ne 0 ]; then
  # (NAME: smoke, or smoke_7 for the test of the 7.x guest, as the logs
  # are named: crates/mqblk-cli/tests/common/mod.rs.)
  for name in $(grep -oE '^ +(FAIL|SIGSEGV|SIGABRT|SIGKILL|TIMEOUT) \[.*guest_[a-z0-9_]+_script_passes' "$guest_log" |
      sed -E 's/.*guest_([a-z0-9_]+)_script_passes/\1/' | sort -u); do
    # (.err holds a hung guest's report: every task's state and stack.)
    for tail in out:80 err:320; do
      echo "== the guest test $name: the last ${tail#*:} lines of target/guest-logs/$name.${tail%:*}"
      tail -n "${tail#*:}" "target/guest-logs/$name.${tail%:*}" 2>/dev/null || echo "(none)"
    done
  done
fi

if [ "$guest_status" -ne 0 ]; then
  echo "FAILED: the qemu guest tests (cargo nextest exited $guest_status; $guest_log)" >&2
fi
if [ "$oracle_status" -ne 0 ]; then
  echo "FAILED: the zoned kernel oracle (tests/oracle/ci.sh exited $oracle_status; $oracle_log)" >&2
fi
if [ "$miri_status" -ne 0 ]; then
  echo "FAILED: Miri (scripts/miri.sh exited $miri_status; its reports are above and in target/miri/logs/)" >&2
fi
[ "$guest_status" -eq 0 ] && [ "$oracle_status" -eq 0 ] && [ "$miri_status" -eq 0 ]
