#!/usr/bin/env bash
# The tutorial's central scenario through the daemon: a job completes, the
# user raises trainer.max_steps with `gptctl resume JOB KEY=VALUE`, and the
# job continues from its newest snapshot to the new end. Keys that would
# change the model or the data are refused at once, naming the key; a
# resume with nothing left to train says so and queues nothing; the spec of
# each run is kept and `gptctl status` shows what changed; an extension
# that reshapes a cosine schedule prints the learning rate to come. The
# same refusal from `gptd run --resume` against a newer snapshot.
source "$(dirname "$0")/daemon_common.sh"

tiny_job "$T/job.json" 30 5 10
start_gptd
db() { "$ITEST" sql "$T/state/gptd.db" "$1"; }

id=$("$GPTCTL" submit "$T/job.json" optimizer.schedule=cosine optimizer.min_lr=1e-4)
wait_for 60 job_is "$id" completed

# --- keys that would change the model, the data or the batches: refused.
for bad in model.n_layer=3 data.digits=3 trainer.micro_batch=8 snapshot.dir=/tmp/x; do
    set +e
    out=$("$GPTCTL" resume "$id" "$bad" 2>&1); rc=$?
    set -e
    key=${bad%%=*}
    [[ $rc -ne 0 && $out == *"$key"* && $out == *"cannot change when a job resumes"* ]] ||
        fail "resume $bad: want a refusal naming $key, got rc $rc: $out"
done
set +e
out=$("$GPTCTL" resume "$id" trainer.max_step=60 2>&1); rc=$?
set -e
[[ $rc -ne 0 && $out == *"trainer.max_step"* && $out == *"unknown key"* ]] ||
    fail "a misspelt key: rc $rc: $out"
[[ $(job_state "$id") == completed ]] || fail "a refused resume changed the job's state"

# --- nothing left to train: said, nothing queued, no NaN.
set +e
out=$("$GPTCTL" resume "$id" 2>&1); rc=$?
set -e
[[ $rc -ne 0 && $out == *"at step 30"* && $out == *"nothing left to train"* ]] ||
    fail "plain resume of a finished job: rc $rc: $out"
set +e
out=$("$GPTCTL" resume "$id" trainer.max_steps=20 2>&1); rc=$?
set -e
[[ $rc -ne 0 && $out == *"trainer.max_steps is 20"* ]] || fail "max_steps below: rc $rc: $out"
[[ $(job_state "$id") == completed ]] || fail "a refused resume queued the job"

# --- extend: continue from step 30 to 60 with the new key.
out=$("$GPTCTL" resume "$id" trainer.max_steps=60)
[[ $out == *"continues from step 30 to step 60"* ]] || fail "resume plan: $out"
[[ $out == *"trainer.max_steps 30 -> 60"* ]] || fail "resume changes: $out"
[[ $out == *"learning rate:"* ]] || fail "no learning-rate preview for a cosine schedule: $out"
wait_for 60 job_is "$id" completed
run=$(db "SELECT max(run_id) FROM metrics WHERE job_id = $id")
first=$(db "SELECT min(step) FROM metrics WHERE job_id = $id AND run_id = $run")
last=$(db "SELECT max(step) FROM metrics WHERE job_id = $id AND run_id = $run")
[[ $first == 35 && $last == 60 ]] || fail "the extension trained steps $first..$last, want 35..60"
loss=$(job_field "$id" loss)
[[ $loss != null && $loss != nan ]] || fail "final loss $loss"
# Every step of the new run's lr follows the new cosine to 60 (above min_lr
# before the end: the old schedule had already decayed to 1e-4 at step 30).
lr35=$(db "SELECT lr FROM metrics WHERE job_id = $id AND step = 35")
awk -v x="$lr35" 'BEGIN { exit !(x > 2e-4) }' || fail "lr at step 35 is $lr35: still the old schedule"

# --- the spec of each run is stored and status shows the change.
[[ $(db "SELECT json_extract(spec_json, '\$.trainer.max_steps') FROM runs WHERE job_id = $id ORDER BY id LIMIT 1") == 30 ]] ||
    fail "the first run's spec is not max_steps 30"
[[ $(db "SELECT json_extract(spec_json, '\$.trainer.max_steps') FROM runs WHERE job_id = $id ORDER BY id DESC LIMIT 1") == 60 ]] ||
    fail "the last run's spec is not max_steps 60"
st=$("$GPTCTL" status "$id")
grep -q "runs:" <<<"$st" || fail "status shows no runs: $st"
grep -q "trainer.max_steps 30 -> 60" <<<"$st" || fail "status does not show the change: $st"
"$GPTCTL" --json status "$id" | has '"runs":\[' || fail "status --json has no runs"
"$GPTCTL" --json logs "$id" | grep '"kind":"spec"' | has 'trainer.max_steps 30 -> 60' ||
    fail "no spec event"

# --- gptd run --resume with max_steps below the snapshot: said, nothing done.
tiny_job "$T/run.json" 20 5 10
"$GPTD" run "$T/run.json" --snapshot-dir "$T/runsnap" >/dev/null 2>&1 || fail "gptd run"
before=$(ls "$T/runsnap")
set +e
out=$("$GPTD" run "$T/run.json" --snapshot-dir "$T/runsnap" --resume trainer.max_steps=10 2>&1)
rc=$?
set -e
[[ $rc -ne 0 && $out == *"nothing left to train"* && $out != *nan* ]] ||
    fail "gptd run --resume below the snapshot: rc $rc: $out"
[[ $(ls "$T/runsnap") == "$before" ]] || fail "the refused run changed the snapshot folder"
echo "daemon_resume_extend: ok (30 -> 60 steps, lr at 35 = $lr35)"
