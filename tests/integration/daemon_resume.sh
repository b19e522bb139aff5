#!/usr/bin/env bash
# `gptctl resume JOB --snapshot ID` on a single gptd (its own cluster of
# one): the run resumes from exactly that snapshot, not from the newest one
# (its first metric is that snapshot's step + 1); a plain `resume` of a
# completed job at its end is refused (nothing left to train); a snapshot of another job or of no
# file is refused or fails with an error naming it.
source "$(dirname "$0")/daemon_common.sh"

tiny_job "$T/job.json" 60 1 20
start_gptd

id=$("$GPTCTL" submit "$T/job.json")
wait_for 60 job_is "$id" completed
db() { "$ITEST" sql "$T/state/gptd.db" "$1"; }
older=$(db "SELECT id FROM snapshots WHERE job_id = $id AND step = 20")
newest=$(db "SELECT max(step) FROM snapshots WHERE job_id = $id")
[[ -n $older ]] || fail "no step 20 snapshot: $(db "SELECT id, step FROM snapshots")"
((newest > 20)) || fail "want a snapshot newer than step 20, newest is $newest"

# --- resume from the older snapshot: the new run starts at step 21.
"$GPTCTL" resume "$id" --snapshot "$older" | has queued || fail "resume --snapshot"
wait_for 60 job_is "$id" completed
run=$(db "SELECT max(run_id) FROM metrics WHERE job_id = $id")
first=$(db "SELECT min(step) FROM metrics WHERE job_id = $id AND run_id = $run")
[[ $first == 21 ]] || fail "resume --snapshot $older (step 20): first metric at step $first, want 21"
[[ $(db "SELECT max(step) FROM metrics WHERE job_id = $id AND run_id = $run") == 60 ]] ||
    fail "the resumed run did not reach step 60"
"$GPTCTL" --json logs "$id" | grep '"kind":"resume"' | tail -n1 | has 'at step 20' ||
    fail "no resume event at step 20: $("$GPTCTL" --json logs "$id" | grep '"kind":"resume"')"

# --- a snapshot of another job is refused.
other=$("$GPTCTL" submit "$T/job.json" trainer.max_steps=20)
wait_for 60 job_is "$other" completed
set +e
out=$("$GPTCTL" resume "$other" --snapshot "$older" 2>&1); rc=$?
set -e
[[ $rc -eq 1 && $out == *"not job $other's"* ]] || fail "foreign snapshot: rc $rc: $out"

# --- the chosen file is gone: the job fails naming the snapshot.
gone=$(db "SELECT id FROM snapshots WHERE job_id = $id AND step = 40")
rm -f "$(db "SELECT path FROM snapshots WHERE id = $gone")"
"$GPTCTL" resume "$id" --snapshot "$gone" >/dev/null
wait_for 60 job_is "$id" failed
err=$(job_field "$id" error)
[[ $err == *"snapshot $gone (step 40)"* ]] || fail "the failure does not name the snapshot: $err"

# --- plain resume from the newest snapshot (step 60 = max_steps): nothing
# is left to train, so it is refused and the job stays as it was.
set +e
out=$("$GPTCTL" resume "$id" 2>&1); rc=$?
set -e
[[ $rc -ne 0 && $out == *"at step $newest"* && $out == *"nothing left to train"* ]] ||
    fail "plain resume at the end: rc $rc: $out"
[[ $(job_state "$id") == failed ]] || fail "a refused resume changed the job"
echo "daemon_resume: ok (resumed from snapshot $older at step 20)"
