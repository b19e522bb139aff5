#!/usr/bin/env bash
# Exact global batch at any world size (issue 19): trainer.global_batch 7
# with micro_batch 4 divides neither the world nor micro_batch x world.
# From the same start, 12 steps at world 1, 2 and 5 (threads) and 3 (three
# processes over the TCP ring) give the same per-step losses and final
# parameters within fp32 tolerance (relative 1e-4, as ddp_equiv.sh: only
# the order of fp32 sums differs) and the same data cursor (snapdiff
# compares step, epoch and position). So do full sharding at world 3
# (collectives in every micro-batch) and micro_batch 1 at world 2, where
# the rank one sequence short runs an empty, zero-weight micro-batch to
# keep the collectives in step, with and without full sharding.
# Then a world change that used to fail ("must be a multiple of
# micro_batch (4) x world size (2)"): global_batch 12, micro_batch 4,
# snapshot at world 3, resume at world 2; the losses follow the
# uninterrupted world-3 run. Last, `gptd run` refuses 8 workers for a
# global batch of 7 before it starts.
# usage: batch_equiv.sh GPTD SNAPDIFF JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 SNAPDIFF=$2 JOB=$3
over=(trainer.max_steps=12 snapshot.every=0 trainer.global_batch=7 trainer.micro_batch=4)

# compare A B STEPS [SNAPDIFF]: losses step for step; the final snapshots
# (parameters and data cursor) when asked.
compare() {
    paste <(losses "$T/$1.log") <(losses "$T/$2.log") | awk -v want="$3" '
        { n++; d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > max) max = r;
          if ($1 != $3) bad = 1 }
        END { printf "%d steps, max relative loss difference %.3g\n", n, max;
              exit (bad || n != want || max > 1e-4) }' || fail "$2: losses differ from $1"
    if [[ ${4:-} == snapdiff ]]; then
        "$SNAPDIFF" "$(ls "$T/$1"/*.gpts | tail -n1)" "$(ls "$T/$2"/*.gpts | tail -n1)" 1e-4 \
            || fail "$2: parameters or data cursor differ from $1"
    fi
}
run_threads() { # NAME WORKERS OVERRIDE...
    local name=$1 w=$2
    shift 2
    "$GPTD" run "$JOB" --json --snapshot-dir "$T/$name" --workers "$w" "${over[@]}" "$@" \
        >"$T/$name.log" || fail "$name failed"
}

run_threads w1 1
jq -r 'select(.type=="event" and .kind=="start") | .message' "$T/w1.log" \
    | has "2 micro-batch(es) of up to 4 x" || fail "world 1: not 2 micro-batches of up to 4"
for w in 2 5; do
    echo "world $w (threads):"
    run_threads "w$w" $w
    compare w1 "w$w" 12 snapdiff
done

echo "world 3 (processes):"
port=$(free_port)
pids=()
for r in 1 2; do
    "$GPTD" run "$JOB" --json --snapshot-dir "$T/p3.r$r" --world 3 --rank $r \
        --rdzv 127.0.0.1:$port "${over[@]}" >/dev/null &
    pids+=($!) PIDS+=($!)
done
"$GPTD" run "$JOB" --json --snapshot-dir "$T/p3" --world 3 --rank 0 --rdzv 127.0.0.1:$port \
    "${over[@]}" >"$T/p3.log" || fail "world 3 rank 0 failed"
for p in "${pids[@]}"; do wait "$p" || fail "world 3: a rank failed"; done
compare w1 p3 12 snapdiff

echo "world 3, full sharding (threads):"
run_threads f3 3 distributed.sharding=full
compare w1 f3 12
for mode in none full; do
    echo "world 2, micro_batch 1, sharding $mode (threads):"
    run_threads "m1$mode" 2 trainer.micro_batch=1 distributed.sharding=$mode
    compare w1 "m1$mode" 12
done

echo "global_batch 12, micro_batch 4: world 3 -> world 2:"
over=(trainer.max_steps=12 snapshot.every=0 trainer.global_batch=12 trainer.micro_batch=4)
run_threads ref3 3
"$GPTD" run "$JOB" --json --snapshot-dir "$T/r2" --workers 3 --stop-after 6 "${over[@]}" \
    >/dev/null || fail "the world-3 run to step 6 failed"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/r2" --workers 2 --resume "${over[@]}" >"$T/r2.log" \
    || fail "the world-2 resume of the world-3 snapshot failed"
jq -r 'select(.type=="event" and .kind=="resume") | .message' "$T/r2.log" \
    | has "world size 3, now 2" || fail "no resume from the world-3 snapshot"
losses "$T/ref3.log" | tail -n 6 >"$T/ref3.tail"
paste "$T/ref3.tail" <(losses "$T/r2.log") | awk '
    { n++; d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > max) max = r; if ($1 != $3) bad = 1 }
    END { printf "steps 7-12, max relative loss difference %.3g\n", max;
          exit (bad || n != 6 || max > 1e-4) }' || fail "world 2 diverged from world 3"
"$SNAPDIFF" "$(ls "$T"/ref3/*.gpts | tail -n1)" "$(ls "$T"/r2/*.gpts | tail -n1)" 1e-4 \
    || fail "world 2 final parameters or cursor differ"
# A world larger than the global batch is refused before anything starts.
if "$GPTD" run "$JOB" --snapshot-dir "$T/big" --workers 8 "${over[@]}" trainer.global_batch=7 \
    >"$T/big.out" 2>&1; then
    fail "gptd run accepted 7 sequences for 8 workers"
fi
grep -qF "trainer.global_batch: 7 is smaller than the world size (8)" "$T/big.out" \
    || fail "gptd run's refusal: $(cat "$T/big.out")"
[[ ! -e "$T/big" ]] || fail "gptd run made a snapshot folder for a refused world"
echo "exact global batch ok"
