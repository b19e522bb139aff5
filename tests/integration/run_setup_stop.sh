#!/usr/bin/env bash
# SIGTERM during the slow set-up of a 2-worker `gptd run` (issue 14): the
# stop is heard during the set-up (each rank's model allocation and weight
# draw, then the start broadcast), not after it at the first step: the run
# exits 0 within seconds, trains no step, and its stop event says
# "during set-up".
# usage: run_setup_stop.sh GPTD JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 JOB=$2

# ~0.5 GB of model, gradients and moments per rank: seconds of set-up.
"$GPTD" run "$JOB" --json --workers 2 --snapshot-dir "$T/snap" model.n_embd=768 model.n_layer=4 \
    model.n_head=8 model.block_size=16 trainer.micro_batch=1 trainer.global_batch=2 \
    trainer.max_steps=1000 trainer.peak_gflops=1 snapshot.every=0 > "$T/log" 2> "$T/err" &
pid=$!; PIDS+=($pid)
# Wait until gptd run handles SIGTERM (loading the CUDA libraries twice, for
# the re-exec that sets OMP_WAIT_POLICY, can take a while), then a little
# more so that the signal lands in the set-up.
for _ in $(seq 200); do
    cgt=$(awk '/^SigCgt:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [[ -n $cgt ]] && (( 0x$cgt & 0x4000 )) && break
    sleep 0.05
done
sleep 0.3
t0=$SECONDS
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
took=$((SECONDS - t0))
[[ $rc -eq 0 ]] || fail "exit status $rc: $(cat "$T/err")"
[[ $took -le 20 ]] || fail "took $took s to stop"
jq -e 'select(.type=="metric")' "$T/log" >/dev/null && fail "a step was trained: $(head -c 400 "$T/log")"
msg=$(jq -r 'select(.type=="event" and .kind=="stop") | .message' "$T/log")
[[ $msg == *"during set-up"* ]] || fail "the stop was not heard during set-up: $(cat "$T/log")"
echo "run_setup_stop: SIGTERM during the set-up of 2 workers: stopped in $took s: $msg"
