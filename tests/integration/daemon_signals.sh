#!/usr/bin/env bash
# Repeated and mixed stop signals while a job runs (issue 14: two SIGINTs or
# SIGTERMs 10 ms to 1 s apart used to leave gptd alive forever with its
# socket removed). For each pattern below, sent to a gptd whose job is
# mid-step:
#  - gptd exits 0 within a bound (no hang), and its socket is gone;
#  - a snapshot of the job at the stop step is on disk and recorded;
#  - the job is queued to resume, and the next gptd resumes it from that
#    snapshot (the next pattern then runs against that gptd).
# A second signal hurries the stop but keeps the snapshot; a third makes gptd
# exit as soon as the snapshot attempt has ended. SIGHUP during a stop is
# ignored, and so is any signal that arrives after the stop has closed the
# signal handlers (it used to kill gptd with status 128 + signal).
source "$(dirname "$0")/daemon_common.sh"

EXIT_BOUND_S=20
tiny_job "$T/job.json" 1000000 5 0 # snapshots only at the stop

# send_pattern "SIG SIG ..." GAP_S: the signals, GAP_S seconds apart.
send_pattern() {
    local first=1
    for s in $1; do
        ((first)) || sleep "$2"
        first=0
        kill -"$s" "$GPTD_PID" 2>/dev/null || true
    done
}

start_gptd
id=$("$GPTCTL" submit "$T/job.json")
prev_step=0
n=0
for pattern in "INT INT:0.01" "TERM TERM:0.01" "TERM TERM:0.2" "INT TERM:1" "TERM HUP INT:0.05" \
    "TERM TERM TERM:0.01" "INT INT INT:0.3" "HUP TERM TERM:0.1" "TERM HUP:0.5" \
    "INT TERM TERM TERM:0.2"; do
    sigs=${pattern%%:*}
    gap=${pattern##*:}
    n=$((n + 1))
    wait_for 60 job_step_at_least "$id" $((prev_step + 10))
    t0=$SECONDS
    send_pattern "$sigs" "$gap"
    deadline=$((SECONDS + EXIT_BOUND_S))
    while kill -0 "$GPTD_PID" 2>/dev/null; do
        ((SECONDS < deadline)) || fail "[$sigs / ${gap}s] gptd still alive after ${EXIT_BOUND_S}s"
        sleep 0.05
    done
    set +e
    wait "$GPTD_PID"
    rc=$?
    set -e
    [[ $rc -eq 0 ]] || fail "[$sigs / ${gap}s] gptd exited $rc, want 0"
    [[ ! -e $SOCK ]] || fail "[$sigs / ${gap}s] the socket is left behind"
    state=$("$ITEST" sql "$T/state/gptd.db" "SELECT state || ' ' || resume FROM jobs WHERE id = $id")
    [[ $state == "queued 1" ]] || fail "[$sigs / ${gap}s] job is \"$state\", want queued to resume"
    snap_step=$("$ITEST" sql "$T/state/gptd.db" \
        "SELECT max(step) FROM events WHERE job_id = $id AND kind = 'snapshot'")
    [[ -n $snap_step ]] && ((snap_step > prev_step)) ||
        fail "[$sigs / ${gap}s] no new snapshot at the stop (newest \"$snap_step\", before $prev_step)"
    ls "$T/state/jobs/$id/snapshots/" | has "$(printf '%012d' "$snap_step")" ||
        fail "[$sigs / ${gap}s] the stop snapshot (step $snap_step) is not on disk"
    log="$T/gptd.$((${#PIDS[@]} - 1)).log"
    if [[ $sigs == "TERM TERM TERM" ]] && grep -q "third stop signal" "$log"; then
        # Three signals within 20 ms: when the third arrives while the
        # snapshot is written, gptd takes the forced exit once it is. (The
        # stop can also end before bash delivers the third signal: nodes
        # hear "stopping" at once since rounds are watched, so a quick
        # snapshot wins the race; the checks above hold either way.)
        grep -q "exiting now (third stop signal; the snapshot attempt has ended)" "$log" ||
            fail "[$sigs / ${gap}s] no forced exit after the snapshot: $(tail -n 5 "$log")"
    fi
    echo "[$sigs / ${gap}s] stopped in $((SECONDS - t0))s with a snapshot at step $snap_step"
    start_gptd
    wait_for 60 job_step_at_least "$id" $((snap_step + 1))
    "$GPTCTL" --json logs "$id" >"$T/logs.json"
    grep -q "resumed from .*$(printf '%012d' "$snap_step")" "$T/logs.json" ||
        fail "[$sigs / ${gap}s] the job did not resume from the stop snapshot (step $snap_step)"
    prev_step=$snap_step
done
"$GPTCTL" cancel "$id" >/dev/null
kill -TERM "$GPTD_PID"
wait "$GPTD_PID"
echo "daemon_signals: ok ($n patterns)"
