#!/usr/bin/env bash
# Instructions per request of the NBD server (`mqblk serve`), counted by
# callgrind: the server runs under callgrind on a null device while
# qemu-io sends N 4 KiB reads (or writes) one at a time over a Unix
# socket; the count is (total(LONG) - total(SHORT)) / (LONG - SHORT), so
# start-up, the handshake and shutdown cancel.
#
#   scripts/nbd-cost.sh [MQBLK_BINARY] [read|write]
#
# Environment: NBD_COST_SHORT (2000), NBD_COST_LONG (10000).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
mqblk=${1:-target/release/mqblk}
op=${2:-read}
short=${NBD_COST_SHORT:-2000} long=${NBD_COST_LONG:-10000}
command -v valgrind >/dev/null || { echo "nbd-cost: needs valgrind" >&2; exit 2; }
command -v qemu-io >/dev/null || { echo "nbd-cost: needs qemu-io (qemu-utils)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# total N: the server's instructions serving N requests of `op`.
total() {
  local n=$1 sock=$work/s.sock pid
  rm -f "$sock"
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$mqblk" serve \
    --device null:gb=1,irqmode=0 --unix "$sock" >"$work/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.1; done
  [ -S "$sock" ] || { cat "$work/serve.log" >&2; echo "nbd-cost: the server did not start" >&2; exit 1; }
  local cmd="read -q"
  [ "$op" = write ] && cmd="write -q -P 0x5a"
  for i in $(seq "$n"); do echo "$cmd $(((i % 256) * 4096)) 4k"; done |
    qemu-io -f raw "nbd+unix:///?socket=$sock" >"$work/io.log" 2>&1
  kill -TERM "$pid"
  wait "$pid" || true
  grep -q "Error\|error" "$work/io.log" && { cat "$work/io.log" >&2; exit 1; }
  awk '/^(summary|totals):/ { print $2; exit }' "$work/cg.out"
}

a=$(total "$short")
b=$(total "$long")
awk -v a="$a" -v b="$b" -v n=$((long - short)) -v op="$op" \
  'BEGIN { printf "nbd %s 4k QD1: %.1f server instructions per request (%d - %d over %d)\n", op, (b - a) / n, b, a, n }'
