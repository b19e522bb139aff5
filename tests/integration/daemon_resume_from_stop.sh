#!/usr/bin/env bash
# `gptctl submit --resume-from` copies a large snapshot on a work thread,
# one copy at a time, while the other requests wait their turn (each
# holding a queue slot); what happens when a client or gptd goes away
# mid-copy. With max_queued_jobs = 4, three submits continue a
# 50M-parameter model's job (600 MB snapshots) at once, and the clients of
# the first (being copied) and of the second (waiting) are killed: all
# three jobs are still copied, and every slot comes back (four submits at
# once fit). Those four are under way when gptd gets SIGTERM: the ones
# waiting their turn are answered "gptd is stopping" (not a dropped
# connection) and record nothing, gptd stops with status 0, and after a
# restart every job recorded has its copy (it continues from it, never
# from scratch). Then gptd is killed (SIGKILL) mid-copy: after a restart
# the job held during its copy is failed, saying why, never started
# (`gptctl resume` of it, which has no snapshot, is refused too), and a
# submit fits.
source "$(dirname "$0")/daemon_common.sh"

db() { "$ITEST" sql "$T/state/gptd.db" "$1"; }
njobs() { db "SELECT count(*) FROM jobs"; }
# wait_held: the id of a job held during its copy, once `gptctl list` shows one.
wait_held() {
    local ids=""
    for _ in $(seq 1 600); do
        ids=$(held_ids || true)
        [[ -n $ids ]] && break
        sleep 0.05
    done
    [[ -n $ids ]] || fail "no job was shown held during its copy"
    echo "${ids%% *}"
}
final() { [[ $(job_state "$1") == cancelled || $(job_state "$1") == completed ]]; }
# connected PID: the running gptd logged the client's connection.
connected() { grep -q "client pid $1 uid $(id -u) connected" "$T/gptd.$((${#PIDS[@]} - 1)).log"; }
# scheduler_pass: submits a tiny job and waits until it completes, which
# takes a scheduler pass that saw every queued job ahead of it (one node:
# a job wrongly queued before it would have run first).
scheduler_pass() {
    local j
    j=$("$GPTCTL" submit "$T/tiny.json")
    wait_for 120 final "$j"
}
# stop_job JOB: cancels it (its run is daemon_resume_from's; spare the CPU).
stop_job() {
    "$GPTCTL" cancel "$1" >/dev/null 2>&1 || true
    wait_for 120 final "$1"
}
# copied JOB: out of its hold, not failed, its copy recorded.
copied() {
    local st
    st=$(job_state "$1")
    [[ $st != failed && $st != cancelled ]] ||
        fail "job $1 is $st: $(db "SELECT error FROM jobs WHERE id = $1")"
    [[ $(db "SELECT count(*) FROM snapshots WHERE job_id = $1") -ge 1 ]] ||
        fail "job $1 has no snapshot recorded"
}

big_job "$T/big.json"
tiny_job "$T/tiny.json" 2
start_gptd --max-queued-jobs 4

g=$("$GPTCTL" submit "$T/big.json")
wait_for 120 job_is "$g" completed

# --- clients killed mid-copy and while waiting their turn.
declare -a sub
for i in 1 2 3; do
    "$GPTCTL" submit "$T/big.json" --resume-from "$g" trainer.max_steps=2 >"$T/s$i.id" 2>"$T/s$i.out" &
    sub[$i]=$!
    wait_for 20 connected "${sub[$i]}" # in this order
done
wait_held >/dev/null
kill -9 "${sub[1]}" "${sub[2]}"
wait "${sub[3]}" || fail "submit 3 failed: $(cat "$T/s3.out")"
ids=$(db "SELECT id FROM jobs WHERE id > $g ORDER BY id") # the third was copied last
[[ $(wc -w <<<"$ids") == 3 ]] || fail "jobs $ids recorded, want 3"
for id in $ids; do
    copied "$id"
    stop_job "$id"
done

# --- SIGTERM mid-copy, with requests waiting their turn (four slots: a
# slot the killed clients leaked would refuse the fourth). A copy takes
# long enough that the last ones still wait when the first is seen held.
n=$(njobs)
for i in 1 2 3 4; do
    "$GPTCTL" submit "$T/big.json" --resume-from "$g" trainer.max_steps=2 >"$T/t$i.id" 2>"$T/t$i.out" &
    sub[$i]=$!
    # All connected, in this order (once accepted, a request is answered
    # even when it is read after the stop began).
    wait_for 20 connected "${sub[$i]}"
done
wait_held >/dev/null
kill -TERM "$GPTD_PID"
set +e
wait "$GPTD_PID"
rc=$?
set -e
((rc == 0)) || fail "gptd stopped with status $rc after SIGTERM mid-copy"
dropped=0 stopping=0
for i in 1 2 3 4; do
    wait "${sub[$i]}" 2>/dev/null || true
    if grep -q "gptd is stopping" "$T/t$i.out"; then
        stopping=$((stopping + 1))
    elif grep -q "closed the connection" "$T/t$i.out"; then
        dropped=$((dropped + 1)) # the one under way: its job is recorded all the same
    else
        grep -q "continues job $g from its snapshot" "$T/t$i.out" ||
            fail "request $i said: $(cat "$T/t$i.out")"
    fi
done
((stopping >= 1 && dropped <= 1)) ||
    fail "$stopping requests were refused (gptd is stopping) and $dropped dropped; want the waiting ones refused: $(cat "$T"/t?.out)"
start_gptd --max-queued-jobs 4
for id in $(db "SELECT id FROM jobs WHERE id > $n ORDER BY id"); do
    copied "$id" # recorded only with its copy: continues from it, never from scratch
    stop_job "$id"
done

# --- SIGKILL mid-copy: the held job is failed after the restart. (The
# copy may be recorded between the look and the kill: then again.)
held=""
for attempt in 1 2 3; do
    "$GPTCTL" submit "$T/big.json" --resume-from "$g" trainer.max_steps=2 >/dev/null 2>&1 &
    sub[1]=$!
    id=$(wait_held)
    kill -9 "$GPTD_PID"
    wait "$GPTD_PID" 2>/dev/null || true
    wait "${sub[1]}" 2>/dev/null || true
    start_gptd --max-queued-jobs 4
    if [[ $(db "SELECT count(*) FROM snapshots WHERE job_id = $id") == 0 ]]; then
        held=$id
        break
    fi
    copied "$id"
    stop_job "$id"
done
[[ -n $held ]] || fail "every copy was recorded before gptd was killed"
scheduler_pass
[[ $(job_state "$held") == failed ]] || fail "job $held is $(job_state "$held") after the kill"
err=$(db "SELECT error FROM jobs WHERE id = $held")
[[ $err == *"the copy was not finished: submit again"* ]] || fail "job $held's error: $err"
set +e
out=$("$GPTCTL" resume "$held" 2>&1)
rc=$?
set -e
[[ $rc -ne 0 && $out == *"its --resume-from copy was not finished"* ]] ||
    fail "gptctl resume of job $held (no copy): want a refusal, got rc $rc: $out"
scheduler_pass
[[ $(job_state "$held") == failed ]] || fail "job $held is $(job_state "$held") after the resume"
[[ $(db "SELECT count(*) FROM runs WHERE job_id = $held") == 0 ]] || fail "job $held was started"
out=$("$GPTCTL" submit "$T/big.json" --resume-from "$g" trainer.max_steps=2 2>&1) ||
    fail "a submit after the restart was refused: $out"
stop_job "$(tail -n1 <<<"$out" | grep -o '^[0-9]*')"
echo "daemon_resume_from_stop: ok"
