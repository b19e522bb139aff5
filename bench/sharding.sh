#!/usr/bin/env bash
# Per-rank memory and tokens/s for distributed.sharding none / optimizer /
# full at world 2 and 4 (processes on loopback, static rendezvous) on the
# small configuration. Memory comes from the engine's own accounting in the
# metrics (bytes per rank); peak RSS per process from /usr/bin/time.
# Goal: full cuts per-rank parameter+gradient+optimizer memory by at least
# 0.9 x (1 - 1/world) and keeps at least 70% of none's throughput.
#
#   bench/sharding.sh [BUILD_DIR] [DATA]
set -euo pipefail
build=${1:-build}
data=${2:-../shared/data/tinyshakespeare.txt}
tmp=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
rate() { jq -rs '[.[] | select(.type=="metric" and .step >= 3) | .tokens_per_s] | sort
                  | .[length/2|floor]' "$1"; }
last() { jq -r "select(.type==\"metric\") | .$2" "$1" | tail -n 1; }
for w in 2 4; do
    for mode in none optimizer full; do
        port=$((30000 + RANDOM % 20000))
        pids=()
        for ((r = 1; r < w; r++)); do
            OMP_NUM_THREADS=1 "$build/gptd" run bench/jobs/small.json --json --world $w --rank $r \
                --rdzv 127.0.0.1:$port --snapshot-dir "$tmp/x$r" data.path="$data" \
                trainer.global_batch=$((8 * w)) distributed.sharding=$mode > /dev/null 2>&1 &
            pids+=($!)
        done
        OMP_NUM_THREADS=1 /usr/bin/time -f %M -o "$tmp/rss" "$build/gptd" run bench/jobs/small.json \
            --json --world $w --rank 0 --rdzv 127.0.0.1:$port --snapshot-dir "$tmp/s" \
            data.path="$data" trainer.global_batch=$((8 * w)) distributed.sharding=$mode \
            > "$tmp/$w$mode.log" 2>/dev/null
        wait "${pids[@]}"
        p=$(last "$tmp/$w$mode.log" mem_params_bytes); g=$(last "$tmp/$w$mode.log" mem_grads_bytes)
        o=$(last "$tmp/$w$mode.log" mem_optim_bytes); k=$(last "$tmp/$w$mode.log" mem_work_bytes)
        echo "{\"bench\":\"sharding\",\"world\":$w,\"sharding\":\"$mode\",\"tokens_per_s\":$(rate "$tmp/$w$mode.log"),\"mem_params_bytes\":$p,\"mem_grads_bytes\":$g,\"mem_optim_bytes\":$o,\"mem_state_bytes\":$((p + g + o)),\"mem_work_bytes\":$k,\"rank0_peak_rss_kb\":$(cat "$tmp/rss")}" | tee -a "$tmp/all"
    done
done
jq -s '
  . as $all |
  def get(w; m): $all | map(select(.world == w and .sharding == m))[0];
  [2, 4] | map(. as $w | {summary: "sharding", world: $w,
     state_cut: (1 - get($w; "full").mem_state_bytes / get($w; "none").mem_state_bytes),
     state_cut_goal: (0.9 * (1 - 1 / $w)),
     state_plus_work_cut: (1 - (get($w; "full").mem_state_bytes + get($w; "full").mem_work_bytes)
                               / get($w; "none").mem_state_bytes),
     full_throughput_vs_none: (get($w; "full").tokens_per_s / get($w; "none").tokens_per_s),
     throughput_goal: 0.7}) | .[]' "$tmp/all"
