#!/usr/bin/env bash
# `gptctl resume JOB distributed.comm_shm=... distributed.shard_buffers=...`:
# the transport of CPU workers may change when a job resumes, because it
# does not change the math. Two identical jobs (two workers, full sharding)
# train to step 10; one resumes to step 20 unchanged (shared memory, auto:
# one gathered unit buffer), the other with the ring and two buffers. The
# changed resume is accepted, runs over the ring (its "continue" event), and
# ends bit for bit where the unchanged one does: the same losses at every
# step and the same parameters in the step-20 snapshots.
# usage: daemon_resume_transport.sh GPTD GPTCTL ITEST_CLIENT SOURCE_DIR SNAPDIFF
source "$(dirname "$0")/daemon_common.sh"
SNAPDIFF=$5

tiny_job "$T/job.json" 10 1 10
start_gptd
SPEC=(distributed.workers_per_node=2 distributed.sharding=full trainer.micro_batch=8)
a=$("$GPTCTL" submit "$T/job.json" "${SPEC[@]}")
b=$("$GPTCTL" submit "$T/job.json" "${SPEC[@]}")
wait_for 120 job_is "$a" completed
wait_for 120 job_is "$b" completed

out=$("$GPTCTL" resume "$a" trainer.max_steps=20) || fail "plain resume: $out"
out=$("$GPTCTL" resume "$b" trainer.max_steps=20 distributed.comm_shm=off \
    distributed.shard_buffers=2 2>&1) || fail "resume with a changed transport refused: $out"
[[ $out == *"distributed.comm_shm"* && $out == *"distributed.shard_buffers"* ]] ||
    fail "the resume does not show what changed: $out"
wait_for 120 job_is "$a" completed
wait_for 120 job_is "$b" completed

# continue_event JOB: the message of the job's last "continue" event.
continue_event() {
    "$GPTCTL" --json logs "$1" | grep '"kind":"continue"' | tail -n 1
}
continue_event "$a" | has "over comm shm" || fail "the plain resume: $(continue_event "$a")"
continue_event "$b" | has "over comm tcp" || fail "the changed resume: $(continue_event "$b")"

# losses JOB: step and loss of every metric, bit for bit as stored.
losses() {
    "$ITEST" sql "$T/state/gptd.db" "SELECT step, printf('%a', loss) FROM metrics
        WHERE job_id = $1 ORDER BY step"
}
losses "$a" >"$T/a.losses"
losses "$b" >"$T/b.losses"
[[ $(wc -l <"$T/a.losses") -eq 20 ]] || fail "job $a: $(wc -l <"$T/a.losses") metrics, want 20"
diff "$T/a.losses" "$T/b.losses" || fail "losses differ after the changed resume"

# snap_at JOB STEP: the path of the job's snapshot at STEP.
snap_at() {
    "$GPTCTL" --json snapshots "$1" | python3 -c 'import json, sys
for s in json.load(sys.stdin)["snapshots"]:
    if s["step"] == int(sys.argv[1]):
        print(s["path"])' "$2"
}
sa=$(snap_at "$a" 20) sb=$(snap_at "$b" 20)
[[ -n $sa && -n $sb ]] || fail "no step-20 snapshots: '$sa' '$sb'"
"$SNAPDIFF" "$sa" "$sb" 0 || fail "the step-20 parameters differ"
echo "daemon_resume_transport: ok (20 equal losses, equal step-20 parameters)"
