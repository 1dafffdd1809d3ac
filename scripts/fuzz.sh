#!/usr/bin/env bash
# Runs the cargo-fuzz targets of the NBD and vhost-user-blk servers for a
# bounded time: nbd_connection (a whole connection fed arbitrary client
# bytes) for SECS seconds, nbd_parsers (the request and option parsers,
# and the nbd: driver's handshake and reply parsers)
# for SECS/3, vhost_request (a virtqueue whose guest memory and rings are
# arbitrary bytes) for SECS/3.
# Usage: scripts/fuzz.sh [SECS [TARGET...]]   (default 60, every target;
# a target named alone gets SECS/3 all the same, e.g. `scripts/fuzz.sh 120
# vhost_request` fuzzes the vhost queue for 40 s). Installs cargo-fuzz and
# a C++ compiler (libFuzzer is built from source) when missing.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
shift || true
targets=" ${*:-nbd_connection nbd_parsers vhost_request} "

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "   installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
if ! command -v c++ >/dev/null; then
  echo "   installing g++"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ >/dev/null
fi

# cargo-fuzz builds with AddressSanitizer (-Zsanitizer=address), a flag
# only nightly rustc accepts; RUSTC_BOOTSTRAP lets the stable toolchain
# (which ships the sanitizer runtimes) accept it, so no nightly is needed.
export RUSTC_BOOTSTRAP=1
# A crash, a leak or an input that runs past 30 s (a hang; libFuzzer's
# own limit is 20 minutes) fails the run and leaves its input in
# fuzz/artifacts/.
# New inputs go to corpus/ (kept between local runs, not committed); the
# committed seeds hold every command and option once (and one chain of
# each common vhost request type), and inputs that once failed a run.
mkdir -p corpus/nbd_connection corpus/vhost_request
if [[ $targets == *" nbd_connection "* ]]; then
  cargo fuzz run -O nbd_connection corpus/nbd_connection seeds/nbd_connection -- \
    -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1
fi
if [[ $targets == *" nbd_parsers "* ]]; then
  cargo fuzz run -O nbd_parsers -- -max_total_time="$((secs / 3))" -timeout=30 -print_final_stats=1
fi
# -max_len: the target's 26-byte preamble and both guest regions.
if [[ $targets == *" vhost_request "* ]]; then
  cargo fuzz run -O vhost_request corpus/vhost_request seeds/vhost_request -- \
    -max_total_time="$((secs / 3))" -max_len=32794 -timeout=30 -rss_limit_mb=4096 -print_final_stats=1
fi
