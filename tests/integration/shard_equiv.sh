#!/usr/bin/env bash
# Sharded data parallelism: distributed.sharding optimizer (ZeRO-1) and full
# (FSDP-like) match none over 20 steps at world 2 and world 3 (uneven
# shards: the tiny model's 26,176 parameters and every unit split three
# ways leave remainders), as threads and as processes. Tolerance: relative
# 1e-4 on losses and parameters, as in ddp_equiv.sh (only the fp32
# summation order differs: reduce-scatter + all-gather vs all-reduce).
# Full sharding with one and with two gathered unit buffers
# (distributed.shard_buffers). Then the per-rank memory the engine reports
# shrinks with the world size.
# usage: shard_equiv.sh GPTD SNAPDIFF JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 SNAPDIFF=$2 JOB=$3
over=(trainer.max_steps=20 snapshot.every=0)

compare() { # NAME_A NAME_B
    paste <(losses "$T/$1.log") <(losses "$T/$2.log") | awk '
        { n++; d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > max) max = r;
          if ($1 != $3) bad = 1 }
        END { printf "%d steps, max relative loss difference %.3g\n", n, max;
              exit (bad || n != 20 || max > 1e-4) }' || fail "$2: losses differ from $1"
    "$SNAPDIFF" "$(ls "$T/$1"/*.gpts | tail -n1)" "$(ls "$T/$2"/*.gpts | tail -n1)" 1e-4 \
        || fail "$2: parameters differ from $1"
}

run_threads() { # NAME WORLD MODE [OVERRIDE...]
    "$GPTD" run "$JOB" --json --snapshot-dir "$T/$1" --workers "$2" "${over[@]}" \
        distributed.sharding="$3" "${@:4}" > "$T/$1.log" || fail "$1 failed"
}
run_procs() { # NAME WORLD MODE
    local port pids=() r
    port=$(free_port)
    for ((r = 1; r < $2; r++)); do
        "$GPTD" run "$JOB" --json --snapshot-dir "$T/$1.r$r" --world "$2" --rank $r \
            --rdzv 127.0.0.1:$port "${over[@]}" distributed.sharding="$3" > /dev/null &
        pids+=($!); PIDS+=($!)
    done
    "$GPTD" run "$JOB" --json --snapshot-dir "$T/$1" --world "$2" --rank 0 \
        --rdzv 127.0.0.1:$port "${over[@]}" distributed.sharding="$3" > "$T/$1.log" \
        || fail "$1 rank 0 failed"
    for p in "${pids[@]}"; do wait "$p" || fail "$1: a rank failed"; done
}

run_threads none1 1 none
for w in 2 3; do
    for mode in optimizer full; do
        echo "world $w $mode (threads):"
        run_threads "t$w$mode" $w $mode
        compare none1 "t$w$mode"
        echo "world $w $mode (processes):"
        run_procs "p$w$mode" $w $mode
        compare none1 "p$w$mode"
    done
done
# One gathered unit buffer (every collective waits) and two (prefetch and
# overlap) compute the same; the second pair shows in the working memory.
for b in 1 2; do
    echo "world 3 full, distributed.shard_buffers=$b (threads):"
    run_threads "t3fullb$b" 3 full distributed.shard_buffers=$b
    compare none1 "t3fullb$b"
done

# Memory accounting from the engine's own metrics (per rank, bytes).
mem() { jq -r "select(.type==\"metric\") | .$2" "$T/$1.log" | tail -n 1; }
w1=$(mem t3fullb1 mem_work_bytes) w2=$(mem t3fullb2 mem_work_bytes)
echo "world 3 full: working buffers $w1 bytes with one unit buffer, $w2 with two"
(( w2 > w1 )) || fail "distributed.shard_buffers=2 does not add a unit buffer pair"
n4=$(mem none1 mem_params_bytes)  # parameters x 4 bytes
for w in 2 3; do
    opt=$(mem "t${w}optimizer" mem_optim_bytes)
    full=$(( $(mem "t${w}full" mem_params_bytes) + $(mem "t${w}full" mem_grads_bytes) \
             + $(mem "t${w}full" mem_optim_bytes) ))
    echo "world $w: optimizer state $opt bytes (none: $((2 * n4))); full params+grads+optim $full bytes (none: $((4 * n4)))"
    # Slices differ by at most one element per unit (45 units here).
    (( opt <= 2 * n4 / w + 8 * 64 )) || fail "optimizer state does not shrink at world $w"
    (( full <= 4 * n4 / w + 16 * 64 )) || fail "full sharding state does not shrink at world $w"
done
echo "sharding ok"
