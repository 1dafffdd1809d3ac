#!/usr/bin/env bash
# fio's fixedbufs on and off, fio's io_uring engine and mqblk bench side by
# side, on the loop device of scripts/compare-fio-file.sh (/dev/loop0 over a
# 1 GiB tmpfs file, set up by hand: losetup --direct-io=on -f FILE), both
# pinned with cpus_allowed=1; four alternating 2 s rounds, medians.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p mqblk-cli
for cell in "randread 4k 32" "randread 4k 1"; do set -- $cell
 declare -A acc=()
 for r in 1 2 3 4; do for fb in 0 1; do
  A="--name=x --filename=/dev/loop0 --direct=1 --rw=$1 --bs=$2 --iodepth=$3 --runtime=2 --time_based --cpus_allowed=1 --fixedbufs=$fb --output-format=json"
  f=$(fio --ioengine=io_uring $A 2>/dev/null | python3 -c "import json,sys; print('%.0f' % json.load(sys.stdin)['jobs'][0]['read']['iops'])")
  m=$(./target/release/mqblk bench $A 2>/dev/null | python3 -c "import json,sys; print('%.0f' % json.load(sys.stdin)['jobs'][0]['read']['iops'])")
  acc[f$fb]+="$f "; acc[m$fb]+="$m "
 done; done
 python3 -c "
import statistics as st
d={'fio fb=0':'${acc[f0]}','fio fb=1':'${acc[f1]}','mqblk fb=0':'${acc[m0]}','mqblk fb=1':'${acc[m1]}'}
print('$cell (pinned, 4 rounds):', ', '.join('%s median %.0f [%s]' % (k, st.median(map(float,v.split())), v.strip()) for k,v in d.items()))"
done
