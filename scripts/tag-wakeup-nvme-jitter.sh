#!/usr/bin/env bash
# tag-wakeup's nvme profile: what the stash cuts as the device's completions
# spread out (jitter_pct) and as its queues deepen toward the source's 1,023
# tags. 72 jobs of fio-like 1 MB random reads (4 requests each) on 4 hardware
# queues, 5.6's wakeup (batch2020) against the RFC's stash, the policies
# alternating within each round; and one job, the floor. Counts are the job
# threads' voluntary context switches and tag waits, per I/O.
#
#   scripts/tag-wakeup-nvme-jitter.sh [ROUNDS] > docs/results/tag-wakeup-nvme-jitter.txt
#
# Needs target/release/mqblk (cargo build --release -p mqblk-cli).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
mqblk=target/release/mqblk
[[ -x $mqblk ]] || { echo "build first: cargo build --release -p mqblk-cli" >&2; exit 2; }

# One cell: prints "ctx_per_io tag_waits_per_io iops".
cell() { # DEVICE JOBS IODEPTH
    local out
    out=$("$mqblk" bench --device "$1" --group_reporting --name=t --rw=randread --bs=1m --numjobs="$2" \
        --iodepth="$3" --runtime=2 --time_based --gtod_reduce=1 2>&1)
    awk '
        /mqblk        : ctx vol=/ {
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^vol=/) { split($i, a, "="); vol = a[2] }
                if ($i ~ /^tag_waits=/) { split($i, a, "="); sub(",", "", a[2]); waits = a[2] }
            }
        }
        /^Disk stats/ { disk = 1 }
        disk && /null: ios=/ { split($4, a, "[=/]"); reads = a[2] }
        END { printf "%.3f %.3f %d\n", vol / reads, waits / reads, reads }
    ' <<<"$out"
}

echo "# $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), $(nproc) CPUs, $(uname -r)"
echo "# command: scripts/tag-wakeup-nvme-jitter.sh $rounds; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# each cell: mqblk bench --device DEVICE,wake=POLICY --rw=randread --bs=1m --numjobs=JOBS --iodepth=IODEPTH"
echo "#   --runtime=2 --time_based --gtod_reduce=1; DEVICE = null:gb=2000,irqmode=2,completion_nsec=20000,"
echo "#   channels=32,mbps=100,max_sectors=512,submit_queues=4,hw_queue_depth=TAGS[,jitter_pct=J]"
echo "# per round: ctx/IO (voluntary switches of the job threads per 1 MB read), waits/IO (tag waits per read)"
printf '%-34s | %-8s | %s\n' "tags x iodepth, jitter, jobs" policy "round: ctx/IO waits/IO reads"
for setup in "64 17 0 72" "64 17 25 72" "256 65 0 72" "256 65 10 72" "256 65 25 72" "256 65 50 72" \
    "256 65 0 1" "256 65 25 1"; do
    read -r tags depth jitter jobs <<<"$setup"
    dev="null:gb=2000,irqmode=2,completion_nsec=20000,channels=32,mbps=100,max_sectors=512,submit_queues=4"
    dev+=",hw_queue_depth=$tags"
    ((jitter > 0)) && dev+=",jitter_pct=$jitter"
    declare -A got=()
    for ((r = 1; r <= rounds; r++)); do
        for policy in batch2020 stash; do
            got[$policy]+=" $(cell "$dev,wake=$policy" "$jobs" "$depth" | awk '{printf "%s %s %s;", $1, $2, $3}')"
        done
    done
    for policy in batch2020 stash; do
        printf '%-34s | %-8s |%s\n' "4 x $tags x $depth, jitter $jitter%, $jobs jobs" "$policy" "${got[$policy]}"
    done
    unset got
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
