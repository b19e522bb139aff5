#!/usr/bin/env bash
# `gptctl submit FILE --resume-from JOB[:SNAPSHOT]`: a new job continues
# another job's full state (weights, moments, step, data cursor, RNG) under
# its own id. Plays the user's commands: job A finishes at step 20; B is
# submitted from A with trainer.max_steps=40 and continues at step 21 with
# the very losses `gptctl resume A trainer.max_steps=40` later gives A
# (C, from A's step-10 snapshot by id, continues at 11); B's
# folder holds its own copy of A's snapshot (owned by B), A's folder is
# untouched. Refused, naming what was wrong, and queueing nothing: a key
# that may not differ, nothing left to train, an unknown job, an unknown
# snapshot, another user's job.
source "$(dirname "$0")/daemon_common.sh"

make_test_user gptdrf

db() { "$ITEST" sql "$T/state/gptd.db" "$1"; }
njobs() { db "SELECT count(*) FROM jobs"; }
refused() { # refused WANT1 WANT2 -- gptctl args: fails, output has both, nothing queued
    local w1=$1 w2=$2 n out rc
    shift 3
    n=$(njobs)
    set +e
    out=$("$@" 2>&1); rc=$?
    set -e
    [[ $rc -ne 0 && $out == *"$w1"* && $out == *"$w2"* ]] ||
        fail "$*: want a refusal with '$w1' and '$w2', got rc $rc: $out"
    [[ $(njobs) == "$n" ]] || fail "$*: the refusal queued a job"
}

tiny_job "$T/job.json" 20 1 10
chmod 0644 "$T/job.json"
start_gptd --socket-mode 0666

a=$("$GPTCTL" submit "$T/job.json")
wait_for 60 job_is "$a" completed
adir=$("$GPTCTL" --json snapshots "$a" | grep -o '"snapshot_dir":"[^"]*"' | cut -d'"' -f4)
[[ -f $adir/snap-000000000020.gpts ]] || fail "job $a has no step-20 snapshot in $adir"
before=$(cd "$adir" && ls -la --time-style=full-iso && md5sum snap-*.gpts .gptd-owner)

# --- refusals.
refused "model.n_embd" "is 32 in job $a but 64 here" -- "$GPTCTL" submit "$T/job.json" --resume-from "$a" \
    model.n_embd=64 trainer.max_steps=40
refused "trainer.seed" "only keys a resume may change" -- "$GPTCTL" submit "$T/job.json" \
    --resume-from "$a" trainer.seed=7 trainer.max_steps=40
refused "at step 20" "nothing left to train" -- "$GPTCTL" submit "$T/job.json" --resume-from "$a"
refused "no job 999" "resume-from" -- "$GPTCTL" submit "$T/job.json" --resume-from 999 \
    trainer.max_steps=40
refused "no snapshot 9999" "job $a" -- "$GPTCTL" submit "$T/job.json" --resume-from "$a:9999" \
    trainer.max_steps=40
refused "belongs to uid 0" "not to you" -- as_user submit "$T/job.json" --resume-from "$a" \
    trainer.max_steps=40
refused "JOB must be an integer" "x" -- "$GPTCTL" submit "$T/job.json" --resume-from x:1

# --- B continues A at step 21.
b=$("$GPTCTL" submit "$T/job.json" --resume-from "$a" trainer.max_steps=40 2>"$T/b.err")
grep -q "job $b continues job $a from its snapshot .* (step 20)" "$T/b.err" ||
    fail "submit did not say what B continues: $(cat "$T/b.err")"
wait_for 60 job_is "$b" completed
"$GPTCTL" --json logs "$b" >"$T/b.logs"
first=$(metric_steps "$T/b.logs" | head -n1)
last=$(metric_steps "$T/b.logs" | tail -n1)
[[ $first == 21 && $last == 40 ]] || fail "B logged steps $first..$last, want 21..40"
grep '"kind":"queued"' "$T/b.logs" | has "continues job $a" || fail "no event says what B continues"
"$GPTCTL" status "$b" | has -E "^continues job: +$a$" || fail "status does not name B's parent: $("$GPTCTL" status "$b")"
"$GPTCTL" status "$a" | has '^continues job:' && fail "status names a parent for A"
bdir=$("$GPTCTL" --json snapshots "$b" | grep -o '"snapshot_dir":"[^"]*"' | cut -d'"' -f4)
[[ $bdir != "$adir" && -f $bdir/snap-000000000020.gpts ]] ||
    fail "B's folder $bdir holds no copy of the step-20 snapshot"
[[ $(stat -c %i "$bdir/snap-000000000020.gpts") != $(stat -c %i "$adir/snap-000000000020.gpts") ]] ||
    fail "B's snapshot is a link to A's: A's pruning would reach it"
btoken=$(db "SELECT token FROM jobs WHERE id = $b")
grep -q "$btoken" "$bdir/.gptd-owner" || fail "B's folder is not B's: $(cat "$bdir/.gptd-owner")"
# The copy's header names B: B resumed from it, and the agent takes only its own job's snapshots.
grep '"kind":"resume"' "$T/b.logs" | has "resumed from $bdir/snap-000000000020.gpts at step 20" ||
    fail "B did not resume from its own copy: $(grep '"kind":"resume"' "$T/b.logs")"
"$GPTCTL" --json snapshots "$b" | has '"step":20' || fail "B's copied snapshot is not listed"
after=$(cd "$adir" && ls -la --time-style=full-iso && md5sum snap-*.gpts .gptd-owner)
[[ $before == "$after" ]] || fail "A's folder changed: before $before after $after"

# --- JOB:SNAPSHOT continues from that snapshot (A's step 10).
s10=$("$GPTCTL" --json snapshots "$a" | grep -o '"id":[0-9]*,"step":10,' | cut -d: -f2 | cut -d, -f1)
[[ -n $s10 ]] || fail "A has no step-10 snapshot"
c=$("$GPTCTL" submit "$T/job.json" --resume-from "$a:$s10" trainer.max_steps=15 2>/dev/null)
wait_for 60 job_is "$c" completed
"$GPTCTL" --json logs "$c" >"$T/c.logs"
[[ $(metric_steps "$T/c.logs" | head -n1) == 11 && $(metric_steps "$T/c.logs" | tail -n1) == 15 ]] ||
    fail "C (from A's step-10 snapshot) logged steps $(metric_steps "$T/c.logs" | tr '\n' ' ')"

# --- the same losses as resuming A itself.
"$GPTCTL" resume "$a" trainer.max_steps=40 >/dev/null
wait_for 60 job_is "$a" completed
for s in 21 30 40; do
    la=$(db "SELECT printf('%.9g', loss) FROM metrics WHERE job_id = $a AND step = $s")
    lb=$(db "SELECT printf('%.9g', loss) FROM metrics WHERE job_id = $b AND step = $s")
    [[ -n $la && $la == "$lb" ]] || fail "loss at step $s: A resumed $la, B $lb"
done
echo "daemon_resume_from: ok (B $b continued A $a at step $first, loss at 40 = $lb)"
