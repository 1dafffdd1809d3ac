#!/usr/bin/env bash
# Two builds of `mqblk serve` side by side on the host: exact syscall counts
# of the server per I/O, then IOPS in alternating rounds.
#
#   scripts/nbd-syscalls.sh A_BINARY B_BINARY [rounds]   (default 7 rounds)
#
# The device is a 64 MiB tmpfs file of random data, reap=client (the
# server's thread reaps its own ring: the case where the completion eventfd
# and the ring's poll fd are both in the event loop). The client is fio's
# nbd engine over a Unix socket, 4k randread at QD32.
#   counts: strace -c -f on the server while fio reads 20480 blocks; counts
#           do not depend on the machine's load
#   IOPS:   no strace, 5 s per run, A and B alternating, which goes first
#           swapping every round; median and spread (min-max) per build and
#           of B/A per round
# Needs fio and strace (installed with apt when missing).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
usage="usage: scripts/nbd-syscalls.sh A_BINARY B_BINARY [rounds]"
a=$(realpath "${1:?$usage}")
b=$(realpath "${2:?$usage}")
rounds=${3:-7}
for t in fio strace; do
  command -v $t >/dev/null || apt-get install -y -q $t >/dev/null
done
dir=$(mktemp -d)
file=/dev/shm/mqblk-nbd-syscalls.img
server=
cleanup() {
  [ -z "$server" ] || kill -TERM "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir" "$file"
}
trap cleanup EXIT
dd if=/dev/urandom of=$file bs=1M count=64 status=none

start_server() { # BINARY
  rm -f "$dir/s.sock"
  "$1" serve --device "file:path=$file,reap=client" --unix "$dir/s.sock" > "$dir/server.log" 2>&1 &
  server=$!
  for _ in $(seq 300); do [ -S "$dir/s.sock" ] && return 0; sleep 0.1; done
  echo "nbd-syscalls: $1 serve did not come up: $(cat "$dir/server.log")" >&2
  exit 1
}
stop_server() {
  kill -TERM "$server"
  wait "$server" || true
  server=
}
fio_job() { # extra fio options...
  fio --name=r --ioengine=nbd --uri="nbd+unix:///?socket=$dir/s.sock" --rw=randread --bs=4k \
    --iodepth=32 --size=64m --output-format=terse --terse-version=3 "$@" | grep ';'
}

echo "== syscalls of the server per I/O (20480 4k randreads, QD32)"
for bin in "$a" "$b"; do
  start_server "$bin"
  strace -c -f -q -p "$server" -o "$dir/st.txt" &
  tracer=$!
  sleep 1
  fio_job --io_size=80m > "$dir/f.txt"
  sleep 0.5
  kill -INT "$tracer"
  wait "$tracer" || true
  stop_server
  ios=$(($(cut -d';' -f6 "$dir/f.txt") / 4))
  echo "-- $bin: fio read $ios 4k blocks"
  awk -v ios="$ios" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ { printf "   %-16s %6d  %.3f per I/O\n", $NF, $4, $4 / ios }' "$dir/st.txt"
done

echo "== IOPS, $rounds alternating rounds of 5 s (no strace)"
: > "$dir/iops.txt"
for r in $(seq "$rounds"); do
  order="$a $b"
  [ $((r % 2)) -eq 0 ] && order="$b $a"
  for bin in $order; do
    start_server "$bin"
    fio_job --time_based --runtime=5 > "$dir/f.txt"
    stop_server
    tag=A
    [ "$bin" = "$b" ] && tag=B
    echo "$r $tag $(cut -d';' -f8 "$dir/f.txt")" >> "$dir/iops.txt"
  done
done
python3 - "$dir/iops.txt" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r, tag, iops = line.split()
    runs.setdefault(tag, {})[int(r)] = int(iops)
def cell(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"
for tag in "AB":
    xs = [v / 1000 for v in runs[tag].values()]
    print(f"   {tag} kIOPS median (min-max): {cell(xs)}   rounds: {' '.join(f'{x:.1f}' for x in xs)}")
ratio = [runs["B"][r] / runs["A"][r] for r in runs["A"]]
print(f"   B/A per round, median (min-max): {statistics.median(ratio):.3f} ({min(ratio):.3f}-{max(ratio):.3f})")
EOF
