#!/usr/bin/env bash
# gptd run --comm-timeout-s bounds a hung peer (issue 34): a world of two
# processes over the TCP ring trains, then rank 1 is stopped (SIGSTOP: a
# rank stuck inside a kernel, its sockets open, nothing sent). Rank 0 must
# fail within the timeout (2 s, well under 15 s wall clock on a loaded
# machine), not after the 300 s default, and say the collective timed out.
# A timeout above a day is refused as usage.
# usage: run_comm_timeout.sh GPTD JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 JOB=$2
over=(trainer.max_steps=100000 snapshot.every=0 trainer.global_batch=4 trainer.micro_batch=2)

port=$(free_port)
"$GPTD" run "$JOB" --json --snapshot-dir "$T/r1" --world 2 --rank 1 \
    --rdzv 127.0.0.1:$port --comm-timeout-s 2 "${over[@]}" distributed.comm_shm=off \
    >"$T/r1.log" 2>&1 &
r1=$!
PIDS+=($r1)
"$GPTD" run "$JOB" --json --snapshot-dir "$T/r0" --world 2 --rank 0 \
    --rdzv 127.0.0.1:$port --comm-timeout-s 2 "${over[@]}" distributed.comm_shm=off \
    >"$T/r0.log" 2>&1 &
r0=$!
PIDS+=($r0)
trained() { [[ $(grep -c '"type":"metric"' "$T/r0.log") -ge 5 ]]; }
wait_for 60 trained || fail "the world of two did not train: $(tail -3 "$T/r0.log")"
kill -STOP "$r1"
t0=$(date +%s%N)
gone() { ! kill -0 "$r0" 2>/dev/null; }
wait_for 30 gone || fail "rank 0 still runs 30 s after its peer stopped"
ms=$((($(date +%s%N) - t0) / 1000000))
rc=0
wait "$r0" || rc=$?
kill -9 "$r1" 2>/dev/null || true
echo "rank 0 ended ${ms} ms after its peer stopped (rc $rc)"
((rc != 0)) || fail "rank 0 exited 0 with a hung peer"
((ms <= 15000)) || fail "rank 0 took ${ms} ms (> 15 s) with --comm-timeout-s 2"
grep -qi "timed out" "$T/r0.log" || fail "rank 0 does not say the collective timed out: $(tail -3 "$T/r0.log")"

rc=0
"$GPTD" run "$JOB" --comm-timeout-s 86401 >"$T/big.log" 2>&1 || rc=$?
((rc == 2)) || fail "--comm-timeout-s 86401: exit $rc, want 2"
has -- "--comm-timeout-s" "$T/big.log" || fail "the refusal does not name --comm-timeout-s"
echo "ok"
