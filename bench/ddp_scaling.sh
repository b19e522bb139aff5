#!/usr/bin/env bash
# DDP scaling on the small configuration (6 layers, 6 heads, 384 wide,
# block 256, tinyshakespeare): two workers of one thread each against one
# worker of one thread, the same global batch, measured in one run.
# Goal: at least 1.85x tokens/s. Prints JSON lines, then the ratio.
#
#   bench/ddp_scaling.sh [BUILD_DIR] [DATA]
set -euo pipefail
build=${1:-build}
data=${2:-../shared/data/tinyshakespeare.txt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# tokens/s of the steady state: the median over steps 3..8.
rate() { jq -rs '[.[] | select(.type=="metric" and .step >= 3) | .tokens_per_s] | sort
                  | .[length/2|floor]' "$1"; }
for w in 1 2; do
    OMP_NUM_THREADS=1 "$build/gptd" run bench/jobs/small.json --json --workers $w \
        --snapshot-dir "$tmp/s$w" data.path="$data" > "$tmp/w$w.log"
    echo "{\"bench\":\"ddp_scaling\",\"config\":\"small\",\"workers\":$w,\"threads_per_worker\":1,\"tokens_per_s\":$(rate "$tmp/w$w.log")}"
done
r1=$(rate "$tmp/w1.log"); r2=$(rate "$tmp/w2.log")
echo "{\"summary\":\"ddp_scaling\",\"speedup_2_vs_1\":$(echo "$r2 / $r1" | bc -l | cut -c1-5),\"goal\":1.85}"
