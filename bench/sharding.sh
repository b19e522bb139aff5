#!/usr/bin/env bash
# Measured memory per rank for distributed.sharding none / optimizer / full
# at worlds 1 to 4, beside the engine's own accounting (mem_* metrics).
# One rank per process (`gptd run --world N --rank R`, collectives through
# the shared-memory communicator, all ranks sharing one snapshot folder,
# so sharded runs write sliced snapshots), so a process's memory is its
# rank's:
#   peak_rss_kb       VmHWM of the process over the whole run (getrusage
#                     via /usr/bin/time): start, training and the final
#                     snapshot;
#   train_rss_kb      the largest VmRSS sampled (every 50 ms from
#                     /proc/PID/status) before rank 0 logged its last step;
#   snapshot_rss_kb   the largest VmRSS sampled after it: the snapshot
#                     (every run ends with one) and the exit;
#   anon_rss_kb       the largest RssAnon sampled: the rank's private
#                     memory. RSS also counts the pages of the shared-memory
#                     communicator (engine/comm_shm.c: one segment per host
#                     that every rank maps and reads) in every process:
#   shmem_rss_kb      the largest RssShmem sampled, that segment's part;
#   pss_kb            the largest Pss sampled (/proc/PID/smaps_rollup):
#                     RSS with each shared page (the segment, the shared
#                     libraries) divided among the processes that map it,
#                     so the ranks' Pss add up to what they take together.
#   device_peak_kb    on a host where nvidia-smi lists GPUs (the ranks then
#                     train on them, the CUDA backend being the default
#                     there; world N needs N GPUs): the largest device memory
#                     nvidia-smi reports for the process, CUDA context and
#                     NCCL's buffers included (device_ratio beside it);
#                     absent elsewhere.
# The goal's ratio is given for the peak (ratio), for the private memory
# (anon_ratio) and for Pss (pss_ratio). MODES="full" (or "none optimizer")
# limits the modes (the goal needs "none" for the unsharded state).
# Model: JOB (default bench/jobs/shard_mem_gpt2.json: GPT-2 small's
# shape, 12 layers, 768 wide, char vocabulary: 85 M parameters, 1.36 GB of
# training state), 2 steps. JOB=bench/jobs/shard_mem.json (8 layers, 512
# wide, 25 M) runs in a third of the time, but there a rank's share of the
# state at world 4 (100 MB) is not large beside what every process holds
# whatever the model (~12 MB of library pages, the comm segment's 12 MiB at
# world 4), which the goal's formula has no term for.
# Goal (issue 19): with full, peak per rank at world N at most
#   1.15 x (unsharded state / N + activations + one layer's parameters),
# printed as goal_kb and ratio for each full line, using the accounted
# unsharded state (params + grads + m + v of the world-1 none run),
# mem_acts_bytes and the largest block's parameters (12 C^2 + 13 C floats).
#
#   bench/sharding.sh [BUILD_DIR] [DATA]        prints JSON lines
set -euo pipefail
build=${1:-build}
data=${2:-/work/shared/data/tinyshakespeare.txt}
job=${JOB:-$(dirname "$0")/jobs/shard_mem_gpt2.json}
tmp=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
last() { jq -r "select(.type==\"metric\") | .$2" "$1" | tail -n 1; }
C=$(jq .model.n_embd "$job")
steps=$(jq .trainer.max_steps "$job")
layer_bytes=$(( (12 * C * C + 13 * C) * 4 ))
base_state=0
gpus=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
for mode in ${MODES:-none optimizer full}; do
    for w in 1 2 3 4; do
        [[ $mode != none && $w == 1 ]] && continue # sharding over one rank is none
        ((gpus == 0 || w <= gpus)) || continue     # one GPU per rank
        # a port nobody listens on now (a busy one failed the whole bench)
        until port=$((30000 + RANDOM % 20000)); [[ -z $(ss -Htln "sport = :$port") ]]; do :; done
        run=$tmp/$mode$w
        mkdir -p "$run"
        pids=()
        for ((r = w - 1; r >= 0; r--)); do
            OMP_NUM_THREADS=1 /usr/bin/time -f %M -o "$run/hwm.$r" "$build/gptd" run "$job" \
                --json --world "$w" --rank "$r" --rdzv 127.0.0.1:$port \
                --snapshot-dir "$run/snap" data.path="$data" trainer.global_batch="$w" \
                distributed.sharding=$mode > "$run/log.$r" 2> "$run/err.$r" &
            pids+=($!)
        done
        # Sample each rank's VmRSS; the phase flips when rank 0 logs its last step.
        : > "$run/samples"
        while :; do
            alive=0
            gpu_mib=""
            if ((gpus)); then
                gpu_mib=$(nvidia-smi --query-compute-apps=pid,used_memory \
                    --format=csv,noheader,nounits 2>/dev/null || true)
            fi
            phase=train
            grep -q "\"type\":\"metric\",\"step\":$steps," "$run/log.0" 2>/dev/null &&
                phase=snapshot
            for t in "${pids[@]}"; do
                for p in $(pgrep -P "$t" 2>/dev/null || true); do
                    alive=1
                    r=$({ tr '\0' ' ' < "/proc/$p/cmdline"; } 2>/dev/null |
                        sed -n 's/.*--rank \([0-9]*\).*/\1/p' || true)
                    rss=$({ awk '/^(VmRSS|RssAnon|RssShmem)/ {printf "%s ", $2}' \
                        "/proc/$p/status"; } 2>/dev/null || true)
                    pss=$({ awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup"; } 2>/dev/null ||
                        true)
                    dev=$(awk -F', *' -v p="$p" '$1 == p {print $2 * 1024}' <<< "$gpu_mib")
                    [[ -n $rss ]] && rss="$rss${pss:-0} ${dev:-0}"
                    if [[ -n $r && -n $rss ]]; then echo "$r $phase $rss" >> "$run/samples"; fi
                done
            done
            ((alive)) || break
            sleep 0.05
        done
        for t in "${pids[@]}"; do wait "$t" || { cat "$run"/err.*; exit 1; }; done
        slices=$(ls "$run/snap" | grep -c '\.gptslice$' || true)
        for ((r = 0; r < w; r++)); do
            log=$run/log.0
            p=$(last "$log" mem_params_bytes); g=$(last "$log" mem_grads_bytes)
            o=$(last "$log" mem_optim_bytes); k=$(last "$log" mem_work_bytes)
            a=$(last "$log" mem_acts_bytes)
            state=$((p + g + o))
            if [[ $mode == none && $w == 1 ]]; then base_state=$state; fi
            tr=$(awk -v r=$r '$1 == r && $2 == "train" && $3 > m {m = $3} END {print m + 0}' "$run/samples")
            sn=$(awk -v r=$r '$1 == r && $2 == "snapshot" && $3 > m {m = $3} END {print m + 0}' "$run/samples")
            an=$(awk -v r=$r '$1 == r && $4 > m {m = $4} END {print m + 0}' "$run/samples")
            sh=$(awk -v r=$r '$1 == r && $5 > m {m = $5} END {print m + 0}' "$run/samples")
            ps=$(awk -v r=$r '$1 == r && $6 > m {m = $6} END {print m + 0}' "$run/samples")
            dv=$(awk -v r=$r '$1 == r && $7 > m {m = $7} END {print m + 0}' "$run/samples")
            device=""
            if ((gpus)); then device=",\"device_peak_kb\":$dv"; fi
            hwm=$(tail -n 1 "$run/hwm.$r")
            goal=""
            if [[ $mode == full ]]; then
                gk=$(( (base_state / w + a + layer_bytes) * 115 / 100 / 1024 ))
                goal=$(printf ',"goal_kb":%d,"ratio":%.3f,"anon_ratio":%.3f,"pss_ratio":%.3f' "$gk" \
                    "$(echo "$hwm / ($gk / 1.15)" | bc -l)" "$(echo "$an / ($gk / 1.15)" | bc -l)" \
                    "$(echo "$ps / ($gk / 1.15)" | bc -l)")
                if ((gpus)); then
                    goal+=$(printf ',"device_ratio":%.3f' "$(echo "$dv / ($gk / 1.15)" | bc -l)")
                fi
            fi
            echo "{\"bench\":\"sharding\",\"sharding\":\"$mode\",\"world\":$w,\"rank\":$r,\"peak_rss_kb\":$hwm,\"train_rss_kb\":$tr,\"snapshot_rss_kb\":$sn,\"anon_rss_kb\":$an,\"shmem_rss_kb\":$sh,\"pss_kb\":$ps,\"mem_params_bytes\":$p,\"mem_grads_bytes\":$g,\"mem_optim_bytes\":$o,\"mem_state_bytes\":$state,\"mem_work_bytes\":$k,\"mem_acts_bytes\":$a,\"unsharded_state_bytes\":$base_state,\"snapshot_slices\":$slices$device$goal}"
        done
    done
done
