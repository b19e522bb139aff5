#!/usr/bin/env bash
# Permission errors fail a job at once (issue 19): a user created by this
# test submits jobs with distributed.max_restarts 3; after submit, while a
# root job holds the queue,
#  - its data file becomes root's 0600 file: the job fails with "permission
#    error" and "Permission denied" on data.path;
#  - its snapshot.dir is taken from it while it trains (chown root, 0700):
#    the next snapshot fails as the user, and the job with "permission
#    error" and snapshot.dir;
# each with 0 restarts and no "restart N of" event. A snapshot.dir in a
# folder it may not write is refused when the job starts (no world forms,
# restarts 0); a job of the same user on a readable file still completes.
source "$(dirname "$0")/daemon_common.sh"

make_test_user gptdff

# The user reaches the socket and the data through $T (search only) and
# runs a copy of gptctl (the build tree may be closed to it).
mkdir -p "$T/data" "$T/snaps/root" "$T/snaps/user"
chmod 0755 "$T/data" "$T/snaps" "$T/snaps/root"
chown "$U" "$T/snaps/user"
text() { printf 'the quick brown fox jumps over the lazy dog\n%.0s' {1..40}; }
text >"$T/data/good.txt"
text >"$T/data/later.txt"
chmod 0644 "$T/data/"*.txt

start_gptd --data-roots "$T/data" --snapshot-roots "$T/snaps" --socket-mode 0666
cat >"$T/job.json" <<JOB
{"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16},
 "data": {"kind": "text", "path": "$T/data/good.txt"},
 "trainer": {"max_steps": 4, "micro_batch": 2, "global_batch": 2, "eval_every": 0,
             "eval_batches": 1, "threads": 1},
 "distributed": {"max_restarts": 3},
 "snapshot": {"every": 2}}
JOB
chmod 0644 "$T/job.json"
tiny_job "$T/block.json" 1000000 5 0

job_done() { [[ $(job_state "$1") =~ ^(completed|failed|cancelled)$ ]]; }
job_error() { "$GPTCTL" --json status "$1" | grep -o '"error":"[^"]*"' | cut -d'"' -f4 || true; }

block=$("$GPTCTL" submit "$T/block.json")
wait_for 30 job_is "$block" running
data=$(as_user submit "$T/job.json" data.path="$T/data/later.txt")
root=$(as_user submit "$T/job.json" snapshot.dir="$T/snaps/root/job")
good=$(as_user submit "$T/job.json")
chmod 0600 "$T/data/later.txt"
"$GPTCTL" cancel "$block" >/dev/null
wait_for 60 job_done "$good"
snap=$(as_user submit "$T/job.json" snapshot.dir="$T/snaps/user/run" trainer.max_steps=1000000 \
    snapshot.every=20)
wait_for 60 job_is "$snap" running
wait_for 60 job_step_at_least "$snap" 1
chown root "$T/snaps/user/run"
chmod 0700 "$T/snaps/user/run"

for id in "$data" "$snap"; do
    wait_for 60 job_done "$id"
    job_is "$id" failed || fail "job $id: $(job_state "$id"), expected failed"
    [[ $(job_field "$id" restarts) == 0 ]] || fail "job $id used $(job_field "$id" restarts) restarts"
    as_user --json logs "$id" >"$T/logs.$id"
    grep -q '"restart [0-9]* of' "$T/logs.$id" && fail "job $id was restarted: $(cat "$T/logs.$id")"
    grep '"kind":"failure"' "$T/logs.$id" | has "(permission error).*not restarted" ||
        fail "job $id: no final permission failure event: $(cat "$T/logs.$id")"
done
e=$(job_error "$data")
[[ $e == *"(permission error)"*"data.path"*"$T/data/later.txt"*"Permission denied"* ]] ||
    fail "job $data: $e"
echo "unreadable data file: $e"
e=$(job_error "$snap")
[[ $e == *"(permission error)"*"$T/snaps/user/run"*"Permission denied"* ]] || fail "job $snap: $e"
echo "snapshot folder taken away: $e"
job_is "$root" failed || fail "job $root: $(job_state "$root"), expected failed"
[[ $(job_field "$root" restarts) == 0 ]] || fail "job $root used a restart"
[[ $(job_error "$root") == *"snapshot.dir"*"Permission denied"* ]] || fail "job $root: $(job_error "$root")"
[[ -e $T/snaps/root/job ]] && fail "gptd made $T/snaps/root/job for the user"
job_is "$good" completed || fail "job $good: $(job_state "$good"): $(job_error "$good")"

kill -TERM "$GPTD_PID"
wait "$GPTD_PID"
echo "daemon_fail_perm: ok"
