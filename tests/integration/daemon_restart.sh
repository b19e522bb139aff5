#!/usr/bin/env bash
# gptd dies or stops mid-job:
#  - kill -9, start again: the job resumes from its newest snapshot by
#    itself and completes; its metric steps are strictly increasing, with
#    no duplicates and no gap wider than the snapshot interval;
#  - SIGTERM: a snapshot is written at the stop step, gptd exits 0, and the
#    job resumes on the next start.
source "$(dirname "$0")/daemon_common.sh"

tiny_job "$T/job.json" 1500 5 50

check_steps() { # JOB: the history's metric steps
    "$GPTCTL" --json logs "$1" >"$T/logs.$1.json"
    metric_steps "$T/logs.$1.json" >"$T/steps.$1"
    [[ $(head -n1 "$T/steps.$1") -eq 5 ]] || fail "job $1: history does not start at step 5"
    [[ $(tail -n1 "$T/steps.$1") -eq 1500 ]] || fail "job $1: history does not reach 1500"
    awk 'NR > 1 { d = $1 - prev; if (d <= 0 || d > 50) { print "bad step " prev " -> " $1;
         exit 1 } } { prev = $1 }' "$T/steps.$1" || fail "job $1: steps not strictly increasing"
}

# --- kill -9 mid-job.
start_gptd
id=$("$GPTCTL" submit "$T/job.json")
wait_for 120 job_step_at_least "$id" 120
killed_at=$(job_field "$id" step)
kill -9 "$GPTD_PID"
wait "$GPTD_PID" 2>/dev/null || true
[[ -S $SOCK ]] || fail "expected the stale socket to be left behind by kill -9"
start_gptd # replaces the stale socket
wait_for 120 job_is "$id" completed
check_steps "$id"
runs=$("$ITEST" sql "$T/state/gptd.db" "SELECT status FROM runs WHERE job_id = $id ORDER BY id" |
    tr '\n' ' ')
[[ $runs == "lost completed " ]] || fail "runs of job $id: \"$runs\", want \"lost completed \""
grep -q '"kind":"resume"' "$T/logs.$id.json" || fail "job $id: no resume event after kill -9"

# --- SIGTERM mid-job.
id2=$("$GPTCTL" submit "$T/job.json")
wait_for 120 job_step_at_least "$id2" 120
kill -TERM "$GPTD_PID"
set +e
wait "$GPTD_PID"
rc=$?
set -e
[[ $rc -eq 0 ]] || fail "gptd exited $rc on SIGTERM, want 0"
[[ ! -e $SOCK ]] || fail "the socket is left behind after a clean stop"
state=$("$ITEST" sql "$T/state/gptd.db" "SELECT state || ' ' || resume FROM jobs WHERE id = $id2")
[[ $state == "queued 1" ]] || fail "after SIGTERM job $id2 is \"$state\", want queued to resume"
stop_step=$("$ITEST" sql "$T/state/gptd.db" \
    "SELECT max(step) FROM events WHERE job_id = $id2 AND kind = 'snapshot'")
[[ -n $stop_step ]] && ((stop_step >= 120)) || fail "no snapshot at the stop (got \"$stop_step\")"
((stop_step % 50 != 0)) || echo "note: stopped exactly on a snapshot step ($stop_step)"
ls "$T/state/jobs/$id2/snapshots/" | has "$(printf '%012d' "$stop_step")" ||
    fail "the stop snapshot (step $stop_step) is not on disk"
start_gptd
wait_for 120 job_is "$id2" completed
check_steps "$id2"
grep -q "resumed from .*$(printf '%012d' "$stop_step")" "$T/logs.$id2.json" ||
    fail "job $id2 did not resume from the stop snapshot"
echo "daemon_restart: ok (killed near step ${killed_at:-?}, stopped at step $stop_step)"
