#!/usr/bin/env bash
# Runs the kernel oracle (tests/oracle/run.sh) on five zoned null
# configurations with a random 300-op script each (mqblk zone gen), and
# fails on the first mismatch. Called by scripts/test-all.sh.
#
#   tests/oracle/ci.sh [OPS] [SEED]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
ops=${1:-300}
seed=${2:-$(date +%s)}
cargo build --quiet --release -p mqblk-cli
mqblk=target/release/mqblk
tmp=$(mktemp -d /tmp/mqblk-oracle-ci.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# spec | gen arguments (zones of 1 GiB / zone_size; sectors of 512 bytes)
configs=(
  "null:gb=1,zoned=1,zone_size=64,memory_backed=1|--zones 16 --zone-sectors 131072"
  "null:gb=1,zoned=1,zone_size=64,zone_capacity=48,zone_nr_conv=2,memory_backed=1,zone_max_open=3,zone_max_active=5|--zones 16 --nr-conv 2 --zone-sectors 131072 --capacity-sectors 98304"
  "null:gb=1,zoned=1,zone_size=32,memory_backed=1,zone_max_open=2|--zones 32 --zone-sectors 65536"
  "null:gb=1,zoned=1,zone_size=128,zone_capacity=100,zone_nr_conv=1,memory_backed=1,zone_max_active=3|--zones 8 --nr-conv 1 --zone-sectors 262144 --capacity-sectors 204800"
  "null:gb=1,bs=4096,zoned=1,zone_size=64,memory_backed=1,zone_max_open=4,zone_max_active=4|--zones 16 --zone-sectors 131072 --block-sectors 8"
)
failed=0
i=0
for c in "${configs[@]}"; do
  spec=${c%%|*}
  gen=${c#*|}
  i=$((i + 1))
  # shellcheck disable=SC2086
  "$mqblk" zone gen --seed $((seed + i)) --ops "$ops" --device "$spec" $gen > "$tmp/script$i.txt"
  echo "== oracle $i/${#configs[@]}: seed $((seed + i)): $spec"
  if ! tests/oracle/run.sh "$spec" "$tmp/script$i.txt"; then
    failed=1
    cp "$tmp/script$i.txt" "/tmp/mqblk-oracle-failed-$i.txt"
    echo "   (script kept in /tmp/mqblk-oracle-failed-$i.txt)"
  fi
done
exit $failed
