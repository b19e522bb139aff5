#!/usr/bin/env bash
# Failures that retrying cannot heal fail the job at once (issue 19), with
# distributed.max_restarts 3 left unused: the job is failed, its restart
# count is 0, no "restart N of" event, and its error names the class and
# the error. Each file is broken after submit (submit checks it), while a
# root job holds the queue:
#  - spec: a text file swapped for one with more distinct characters than
#    model.vocab_size ("spec error", "model.vocab_size");
#  - data: data.path removed ("data error", "No such file");
#  - snapshot or model mismatch: a finished job resumed after its every
#    snapshot was damaged ("no valid snapshot to resume from"; the damaged
#    files are quarantined), and one resumed after its text file changed
#    its characters ("was taken with a different vocabulary"); a folder
#    holding another job's snapshots is refused before any world forms
#    (restarts 0 too).
# The permission class is daemon_fail_perm.sh (a second user); the
# retried class (a node killed) is elastic_fail_retry.sh.
source "$(dirname "$0")/daemon_common.sh"

start_gptd
tiny_job "$T/block.json" 1000000 5 0
text() { printf 'abcab cabba %.0s' {1..60}; }
cat >"$T/text.json" <<EOT
{"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "vocab_size": 8},
 "data": {"kind": "text", "path": "$T/text.txt"},
 "trainer": {"max_steps": 20, "micro_batch": 2, "global_batch": 2, "eval_every": 0,
             "eval_batches": 1, "threads": 1},
 "distributed": {"max_restarts": 3},
 "snapshot": {"every": 5}}
EOT
text >"$T/text.txt"
text >"$T/gone.txt"
mkdir -p "$T/snaps/foreign"

job_done() { [[ $(job_state "$1") =~ ^(completed|failed|cancelled)$ ]]; }
job_error() { "$GPTCTL" --json status "$1" | grep -o '"error":"[^"]*"' | cut -d'"' -f4 || true; }
hold() { BLOCK=$("$GPTCTL" submit "$T/block.json"); wait_for 30 job_is "$BLOCK" running; }
release() { "$GPTCTL" cancel "$BLOCK" >/dev/null; wait_for 60 job_done "$BLOCK"; }

# failed_at_once JOB PATTERN...: the job failed without a restart, its
# error and its final failure event saying each PATTERN.
failed_at_once() {
    local id=$1 e p
    shift
    wait_for 60 job_done "$id"
    job_is "$id" failed || fail "job $id: $(job_state "$id"), expected failed"
    [[ $(job_field "$id" restarts) == 0 ]] || fail "job $id used $(job_field "$id" restarts) restarts"
    e=$(job_error "$id")
    "$GPTCTL" --json logs "$id" >"$T/logs.$id"
    grep -q '"restart [0-9]* of' "$T/logs.$id" && fail "job $id was restarted: $(cat "$T/logs.$id")"
    grep '"kind":"failure"' "$T/logs.$id" | has "not restarted (retrying cannot heal it)" ||
        fail "job $id: no final failure event: $(cat "$T/logs.$id")"
    for p in "$@"; do
        grep -qF -- "$p" <<<"$e" || fail "job $id: error does not say '$p': $e"
        grep '"kind":"failure"' "$T/logs.$id" | has -F -- "$p" ||
            fail "job $id: the failure event does not say '$p': $(cat "$T/logs.$id")"
    done
    # What a person reads: the restarts and the reason.
    "$GPTCTL" status "$id" >"$T/status.$id"
    grep -Eq '^restarts: +0$' "$T/status.$id" || fail "job $id: status: $(cat "$T/status.$id")"
    grep -qF -- "$1" "$T/status.$id" || fail "job $id: status lacks '$1': $(cat "$T/status.$id")"
    echo "job $id failed at once: $e"
}

# --- jobs whose snapshots will not fit them: trained to their end first.
text >"$T/vocab.txt"
text >"$T/snap.txt"
snap=$("$GPTCTL" submit "$T/text.json" data.path="$T/snap.txt" snapshot.dir="$T/snaps/damaged")
vocab=$("$GPTCTL" submit "$T/text.json" data.path="$T/vocab.txt")
wait_for 60 job_is "$snap" completed
wait_for 60 job_is "$vocab" completed
ls "$T/snaps/damaged"/*.gpts >/dev/null || fail "job $snap wrote no snapshot"

hold
spec=$("$GPTCTL" submit "$T/text.json")
data=$("$GPTCTL" submit "$T/text.json" data.path="$T/gone.txt")
foreign=$("$GPTCTL" submit "$T/text.json" snapshot.dir="$T/snaps/foreign")
# Broken after submit, before they run.
printf 'the quick brown fox jumps over the lazy dog %.0s' {1..30} >"$T/text.txt"
rm "$T/gone.txt"
cp "$T/snaps/damaged"/*.gpts "$T/snaps/foreign/"
for f in "$T/snaps/damaged"/*.gpts; do
    printf 'damaged' | dd of="$f" bs=1 seek=200 conv=notrunc status=none
done
"$GPTCTL" resume "$snap" trainer.max_steps=40 >/dev/null
printf 'xyz zyx yzx %.0s' {1..60} >"$T/vocab.txt" # as many characters, other ones
"$GPTCTL" resume "$vocab" trainer.max_steps=40 >/dev/null
release

failed_at_once "$spec" "spec error" "model.vocab_size is 8 but the data has"
failed_at_once "$data" "data error" "$T/gone.txt" "No such file or directory"
failed_at_once "$snap" "snapshot or model mismatch" "no valid snapshot to resume from"
failed_at_once "$vocab" "snapshot or model mismatch" "was taken with a different vocabulary"
# Another job's snapshots in the folder: the coordinator refuses to start
# it (no world is formed, so there is nothing to restart).
wait_for 60 job_done "$foreign"
job_is "$foreign" failed || fail "job $foreign: $(job_state "$foreign"), expected failed"
[[ $(job_field "$foreign" restarts) == 0 ]] || fail "job $foreign used a restart"
job_error "$foreign" | has "holds snapshots of another job" ||
    fail "job $foreign: $(job_error "$foreign")"
ls "$T/snaps/damaged" | has '\.corrupt$' || fail "the damaged snapshots were not quarantined"
grep -q "failed (data error)" "$T"/gptd.*.log || fail "gptd's log does not name the class"

kill -TERM "$GPTD_PID"
wait "$GPTD_PID"
echo "daemon_fail_fast: ok"
