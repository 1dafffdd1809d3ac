#!/usr/bin/env bash
# Runs the kernel oracle (tests/oracle/run.sh) on five zoned null
# configurations with random scripts (mqblk zone gen) against each kernel
# (one guest boot per kernel for all of them), and fails on the first
# mismatch. Called by scripts/test-all.sh.
#
#   tests/oracle/ci.sh [OPS] [SEED] [SCRIPTS_PER_CONFIG]
#
# OPS ops per script (300), SEED the first seed (the time), and
# SCRIPTS_PER_CONFIG scripts per configuration (1); script j of
# configuration i has seed SEED + 100 * j + i. ORACLE_KERNELS picks the
# kernels ("6.1 6.12 7": Debian 12's 6.1, its backported 6.12 and Debian's
# newest 7.x). A failing script is kept in
# /tmp/mqblk-oracle-failed-<kernel>-<i>-<seed>.txt. Each kernel also runs
# zero-length.txt (fixed) on two of the configurations and
# failed-write-then-reset.txt on one.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
ops=${1:-300}
seed=${2:-$(date +%s)}
per_config=${3:-1}
kernels=${ORACLE_KERNELS:-6.1 6.12 7}
cargo build --quiet --release -p mqblk-cli
mqblk=target/release/mqblk
tmp=$(mktemp -d /tmp/mqblk-oracle-ci.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# spec | gen arguments (zones of 1 GiB / zone_size; sectors of 512 bytes).
# Zones of 8-32 MiB: the generator's largest writes scale with the zone
# (to the capacity, longer than one or two zones), and under TCG the time
# of a script is the time to copy its bytes (64 MiB zones: 60-130 s a
# script; these: see docs/results/suite-time.txt).
configs=(
  "null:gb=1,zoned=1,zone_size=16,memory_backed=1|--zones 64 --zone-sectors 32768"
  "null:gb=1,zoned=1,zone_size=16,zone_capacity=12,zone_nr_conv=2,memory_backed=1,zone_max_open=3,zone_max_active=5|--zones 64 --nr-conv 2 --zone-sectors 32768 --capacity-sectors 24576"
  "null:gb=1,zoned=1,zone_size=8,memory_backed=1,zone_max_open=2|--zones 128 --zone-sectors 16384"
  "null:gb=1,zoned=1,zone_size=32,zone_capacity=25,zone_nr_conv=1,memory_backed=1,zone_max_active=3|--zones 32 --nr-conv 1 --zone-sectors 65536 --capacity-sectors 51200"
  "null:gb=1,bs=4096,zoned=1,zone_size=16,memory_backed=1,zone_max_open=4,zone_max_active=4|--zones 64 --zone-sectors 32768 --block-sectors 8"
)
pairs=()
seeds=()
for ((j = 0; j < per_config; j++)); do
  for i in "${!configs[@]}"; do
    c=${configs[$i]}
    spec=${c%%|*}
    gen=${c#*|}
    s=$((seed + 100 * j + i + 1))
    # shellcheck disable=SC2086
    "$mqblk" zone gen --seed "$s" --ops "$ops" --spans-at-limits --device "$spec" $gen > "$tmp/script-$s.txt"
    pairs+=("$spec" "$tmp/script-$s.txt")
    seeds+=("$s")
  done
done
# And a fixed script of zero-length ops, on a device with and without a
# smaller zone capacity.
for spec in "${configs[0]%%|*}" "${configs[3]%%|*}"; do
  pairs+=("$spec" tests/oracle/zero-length.txt)
  seeds+=(zero-length)
done
# And writes after a zone's failed write and its reset (capacity 25 MB).
pairs+=("${configs[3]%%|*}" tests/oracle/failed-write-then-reset.txt)
seeds+=(failed-write-then-reset)
# The kernels' guests run side by side, each one TCG vCPU (two cores here;
# the times of the three side by side, 300 ops a script, are in
# docs/results/zoned-oracle-7.txt).
for k in $kernels; do
  echo "== oracle, kernel $k: $((${#seeds[@]} - 3)) scripts of $ops ops (seeds ${seeds[0]}..${seeds[-4]}), zero-length.txt twice and failed-write-then-reset.txt"
  (
    start=$(date +%s)
    status=0
    tests/oracle/run.sh --kernel "$k" "${pairs[@]}" > "$tmp/out-$k.txt" 2> "$tmp/err-$k.txt" || status=$?
    echo "$status $(($(date +%s) - start))" > "$tmp/status-$k.txt"
  ) &
done
wait
failed=0
for k in $kernels; do
  read -r status secs < "$tmp/status-$k.txt"
  cat "$tmp/err-$k.txt" >&2
  cat "$tmp/out-$k.txt"
  if [ "$status" != 0 ]; then
    failed=1
    # Keep the scripts that failed (the report names their specs in order).
    n=0
    while IFS= read -r line; do
      case "$line" in
        "oracle: null:"*"mismatch at op"*|"oracle: null:"*"run failed"*)
          ;;
        "oracle: null:"*) n=$((n + 1)); continue ;;
        *) continue ;;
      esac
      s=${seeds[$n]}
      if [ -f "$tmp/script-$s.txt" ]; then
        cp "$tmp/script-$s.txt" "/tmp/mqblk-oracle-failed-$k-$((n % ${#configs[@]} + 1))-$s.txt"
        echo "   (script kept in /tmp/mqblk-oracle-failed-$k-$((n % ${#configs[@]} + 1))-$s.txt)"
      fi
      n=$((n + 1))
    done < "$tmp/out-$k.txt"
  fi
  echo "== oracle, kernel $k: $secs s (status $status)"
done
exit $failed
