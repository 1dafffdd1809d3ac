#!/usr/bin/env bash
# NBD over TLS side by side: mqblk serve and nbdkit, both with
# --tls=require and the same x509 credentials (certtool: a CA, a server
# certificate for 127.0.0.1, a client certificate), driven by fio's nbd
# engine over loopback TCP: 4k randread iodepth 32 and 1 MiB sequential
# read iodepth 4, one client. x509 rather than a PSK: fio's engine lets
# libnbd read no local file named in a URI (tls-psk-file, tls-certificates
# are refused), so the client's credentials come from libnbd's default
# directory, $HOME/.pki/libnbd, under a HOME made for the run. The
# handshake differs from a PSK's; the records that carry the data do not.
#   mqblk-tls:  mqblk serve, null:gb=1,memory_backed=1,submit_queues=2
#   nbdkit-tls: nbdkit's memory plugin, 1G
# Both laid out by a 1 MiB write pass first (a memory-backed null device's
# unwritten pages would go out as holes). With BEFORE=PATH (an mqblk
# binary without TLS), also clear connections to it and to this tree's
# mqblk on the same device (clear-before, clear-after): what TLS's changes
# cost the clear path. The servers' order rotates every round; each run
# prints its command, fio's IOPS and MB/s, and the server's CPU time over
# the run (utime+stime from /proc, as % of one CPU). At the end, per
# cell, the median and spread (min-max) over the rounds, and
# mqblk-tls/nbdkit-tls (and clear-after/clear-before) per round. With
# TLS_BEFORE=PATH (another mqblk binary), also that binary's TLS server
# (tls-before) and mqblk-tls/tls-before per round: what a change to the
# TLS path gains.
# Needs fio, nbdkit and certtool. Usage: scripts/compare-nbd-tls.sh [rounds [secs]]
# (default 3 rounds of 3 s runs).
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} secs=${2:-3}
for t in fio nbdkit certtool; do command -v $t >/dev/null || { echo "$t is not installed" >&2; exit 2; }; done
cargo build --release -q -p mqblk-cli
mqblk=target/release/mqblk
dir=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
pki=$dir/pki home=$dir/home
mkdir -p "$pki" "$home/.pki/libnbd"
printf 'cn = ca\nca\ncert_signing_key\nexpiration_days = 2\n' > "$pki/ca.info"
printf 'cn = 127.0.0.1\nip_address = 127.0.0.1\ntls_www_server\nsigning_key\nencryption_key\nexpiration_days = 2\n' > "$pki/server.info"
printf 'cn = client\ntls_www_client\nsigning_key\nencryption_key\nexpiration_days = 2\n' > "$pki/client.info"
for k in ca server client; do certtool --generate-privkey --key-type=ecdsa --outfile "$pki/$k-key.pem" 2>/dev/null; done
certtool --generate-self-signed --load-privkey "$pki/ca-key.pem" --template "$pki/ca.info" --outfile "$pki/ca-cert.pem" 2>/dev/null
for k in server client; do
  certtool --generate-certificate --load-ca-certificate "$pki/ca-cert.pem" --load-ca-privkey "$pki/ca-key.pem" \
    --load-privkey "$pki/$k-key.pem" --template "$pki/$k.info" --outfile "$pki/$k-cert.pem" 2>/dev/null
done
cp "$pki"/ca-cert.pem "$pki"/client-cert.pem "$pki"/client-key.pem "$home/.pki/libnbd/"
export HOME=$home
dev=null:gb=1,memory_backed=1,submit_queues=2
declare -A pid uri
start() { # NAME PORT COMMAND...
  local name=$1 port=$2
  shift 2
  echo "server $name: $*"
  "$@" >/dev/null 2>&1 &
  pids+=($!) pid[$name]=$!
}
start mqblk-tls 10911 $mqblk serve --device $dev --listen 127.0.0.1:10911 --tls=require --tls-certificates="$pki"
start nbdkit-tls 10912 nbdkit -f -p 10912 -i 127.0.0.1 --tls=require --tls-certificates="$pki" memory 1G
uri[mqblk-tls]="nbds://127.0.0.1:10911/" uri[nbdkit-tls]="nbds://127.0.0.1:10912/"
servers=(mqblk-tls nbdkit-tls)
if [ -n "${BEFORE:-}" ]; then
  start clear-before 10913 "$BEFORE" serve --device $dev --listen 127.0.0.1:10913
  start clear-after 10914 $mqblk serve --device $dev --listen 127.0.0.1:10914
  uri[clear-before]="nbd://127.0.0.1:10913/" uri[clear-after]="nbd://127.0.0.1:10914/"
  servers+=(clear-before clear-after)
fi
if [ -n "${TLS_BEFORE:-}" ]; then
  start tls-before 10915 "$TLS_BEFORE" serve --device $dev --listen 127.0.0.1:10915 --tls=require --tls-certificates="$pki"
  uri[tls-before]="nbds://127.0.0.1:10915/"
  servers+=(tls-before)
fi
sleep 2
for s in "${servers[@]}"; do
  fio --name=w --ioengine=nbd --uri="${uri[$s]}" --rw=write --bs=1m --iodepth=4 --size=1g >/dev/null 2>&1 ||
    { echo "laying out $s failed: fio --name=w --ioengine=nbd --uri=${uri[$s]} --rw=write --bs=1m --iodepth=4 --size=1g" >&2; exit 1; }
done
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
# fio's nbd engine prints "connected to NBD server" before its JSON.
summary() { python3 -c 'import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):])["jobs"][0]; r=j["read"]; print("%.0f IOPS %.0f MB/s p99=%.0fus fio_cpu=%.0f%%" % (r["iops"], r["bw_bytes"]/1e6, r["clat_ns"]["percentile"]["99.000000"]/1000, j["usr_cpu"]+j["sys_cpu"]))'; }
out=$dir/runs.txt
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
  k=$(((round - 1) % ${#servers[@]}))
  order=("${servers[@]:k}" "${servers[@]:0:k}")
  for s in "${order[@]}"; do
    for job in "randread 4k 32" "read 1m 4"; do
      set -- $job
      cmd=(fio --name=x --ioengine=nbd "--uri=${uri[$s]}" --rw=$1 --bs=$2 --iodepth=$3 --size=1g
           --runtime="$secs" --time_based --output-format=json)
      c0=$(cpu_ticks "${pid[$s]}")
      r=$("${cmd[@]}" 2>/dev/null | summary)
      c1=$(cpu_ticks "${pid[$s]}")
      server_cpu=$(((c1 - c0) * 100 / hz / secs))
      echo "round=$round $s $job | $r server_cpu=${server_cpu}% | ${cmd[*]}" | tee -a "$out"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "median (min-max) over $rounds rounds; ratios per round:"
python3 - "$out" << 'EOF'
import collections, re, statistics, sys
cells = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    m = re.match(r"round=(\d+) (\S+) (\S+ \S+ \S+) \| (\d+) IOPS (\d+) MB/s .* server_cpu=(\d+)%", line)
    if m:
        rnd, server, job, iops, mbs, cpu = m.groups()
        cells[job].setdefault(server, {})[int(rnd)] = (int(iops), int(mbs), int(cpu))
def spread(v):
    return f"{statistics.median(v):>9,.0f} ({min(v):,}-{max(v):,})"
for job, servers in cells.items():
    print(f"{job}:")
    for server, runs in servers.items():
        iops = [r[0] for r in runs.values()]
        mbs = [r[1] for r in runs.values()]
        cpu = [r[2] for r in runs.values()]
        print(f"  {server:12} IOPS {spread(iops)}  MB/s {spread(mbs)}  server CPU% {spread(cpu)}")
    for a, b in (("mqblk-tls", "nbdkit-tls"), ("mqblk-tls", "tls-before"), ("tls-before", "nbdkit-tls"), ("clear-after", "clear-before")):
        x, y = servers.get(a, {}), servers.get(b, {})
        r = [x[k][0] / y[k][0] for k in x if k in y and y[k][0]]
        if r:
            print(f"  {a}/{b} {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})")
EOF
