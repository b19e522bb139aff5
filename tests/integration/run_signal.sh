#!/usr/bin/env bash
# SIGINT and SIGTERM during `gptd run`: a snapshot of the step reached is
# written, the process exits 0, and --resume finishes the job from there.
# usage: run_signal.sh GPTD JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 JOB=$2

for sig in INT TERM; do
    d="$T/$sig"
    "$GPTD" run "$JOB" --json --snapshot-dir "$d" trainer.max_steps=100000 snapshot.every=0 \
        > "$d.log" 2> "$d.err" &
    pid=$!; PIDS+=($pid)
    # Wait (bounded) until training is under way.
    for _ in $(seq 300); do
        [[ $(jq -r 'select(.type=="metric") | .step' "$d.log" 2>/dev/null | tail -n1) -ge 5 ]] \
            2>/dev/null && break
        sleep 0.05
    done
    kill -s "$sig" "$pid"
    rc=0; wait "$pid" || rc=$?
    [[ $rc -eq 0 ]] || fail "SIG$sig: exit status $rc: $(cat "$d.err")"
    step=$(jq -r 'select(.type=="event" and .kind=="stop") | .step' "$d.log")
    [[ -n "$step" && -f "$d/snap-$(printf '%012d' "$step").gpts" ]] \
        || fail "SIG$sig: no snapshot for the stop step '$step' in $(ls "$d")"
    "$GPTD" run "$JOB" --json --snapshot-dir "$d" trainer.max_steps=$((step + 5)) --resume \
        > "$d.resume.log" || fail "SIG$sig: resume failed"
    first=$(jq -r 'select(.type=="metric") | .step' "$d.resume.log" | head -n1)
    [[ "$first" -eq $((step + 1)) ]] || fail "SIG$sig: resumed at step $first, expected $((step + 1))"
    echo "SIG$sig: stopped at step $step with a snapshot, resumed at $first"
done
