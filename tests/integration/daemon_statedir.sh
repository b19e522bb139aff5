#!/usr/bin/env bash
# The state directory keeps what gptd acknowledged (issue 14, "Nothing
# acknowledged is lost"):
#  - a second gptd on the same state directory is refused, naming the pid
#    of the one that holds it, which goes on serving;
#  - a cancel acknowledged to the client survives kill -9 before the step
#    boundary: after the restart the job is cancelled, not resumed;
#  - temporary snapshot files of killed writers are removed at start, in
#    every job's folder (the default one and a snapshot.dir) (only
#    our own name pattern, only regular files);
#  - an empty, missing-but-expected or damaged gptd.db stops gptd with the
#    file named and what to do; nothing is created in its place;
#  - a new job whose id an older database used does not take that job's
#    snapshot folder.
source "$(dirname "$0")/daemon_common.sh"
DB=$T/state/gptd.db

# A job whose steps take long enough (a wide model on one thread) that the
# kill below lands between the cancel and the next step boundary.
head -c 200000 /dev/urandom | base64 -w 100 >"$T/text.txt"
cat >"$T/slow.json" <<EOF2
{"name": "slow",
 "model": {"n_layer": 4, "n_head": 4, "n_embd": 256, "block_size": 128},
 "data": {"kind": "text", "path": "$T/text.txt"},
 "trainer": {"max_steps": 100000, "micro_batch": 8, "global_batch": 8, "log_every": 1,
             "eval_every": 0, "threads": 1},
 "snapshot": {"every": 0}}
EOF2

start_gptd
first=$GPTD_PID

# --- a second gptd on the same state directory.
set +e
timeout 20 "$GPTD" --state-dir "$T/state" --socket "$T/other.sock" 2>"$T/second.log"
rc=$?
set -e
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "a second gptd on the same state directory ran (rc $rc)"
grep -q "state directory $T/state is in use by another gptd (pid $first holds" "$T/second.log" ||
    fail "the refusal does not name the holder: $(cat "$T/second.log")"
[[ ! -e $T/other.sock ]] || fail "the refused gptd created its socket"
"$GPTCTL" status >/dev/null || fail "the first gptd stopped serving"
[[ $(cat "$T/state/gptd.lock") == "$first" ]] || fail "gptd.lock does not hold the pid"

# --- cancel, acknowledged, then kill -9 at once.
id=$("$GPTCTL" submit "$T/slow.json")
wait_for 60 job_step_at_least "$id" 2
# A queued job with a snapshot.dir of its own: its folder is cleaned too.
other=$("$GPTCTL" submit "$T/slow.json" snapshot.dir="$T/custom")
"$GPTCTL" cancel "$id" >/dev/null || fail "cancel was not acknowledged"
kill -9 "$GPTD_PID"
wait "$GPTD_PID" 2>/dev/null || true

# A dead writer's temporary, and files that only look like one.
snaps=$T/state/jobs/$id/snapshots
mkdir -p "$snaps"
echo junk >"$snaps/.snap-000000000007.gpts.Zz9Yy8"
echo keep >"$snaps/.snap-keep.txt"
ln -s "$T/text.txt" "$snaps/.snap-000000000008.gpts.Ln12Ab"
mkdir -p "$T/custom"
echo junk >"$T/custom/.snap-000000000009.gpts.Qq1Ww2"

start_gptd
job_is "$id" cancelled || fail "the acknowledged cancel was lost: job $id is $(job_state "$id")"
"$GPTCTL" --json logs "$id" >"$T/logs.json"
grep -q "cancelled by uid $(id -u) (acknowledged before gptd stopped)" "$T/logs.json" ||
    fail "no event for the cancel honoured at start"
runs=$("$ITEST" sql "$DB" "SELECT status FROM runs WHERE job_id = $id ORDER BY id" | tr '\n' ' ')
[[ $runs != *running* && $runs != *completed* ]] || fail "the cancelled job ran again: $runs"
# The scheduler has had its turn once it starts the job queued behind
# (had the cancelled job been requeued, it would be ahead of it and run
# instead): the job must still be cancelled.
wait_for 60 job_is "$other" running
job_is "$id" cancelled || fail "the cancelled job was resumed"
[[ ! -e $snaps/.snap-000000000007.gpts.Zz9Yy8 ]] || fail "the stale temporary was not removed"
[[ -f $snaps/.snap-keep.txt && -L $snaps/.snap-000000000008.gpts.Ln12Ab ]] ||
    fail "cleaning removed what is not ours"
[[ ! -e $T/custom/.snap-000000000009.gpts.Qq1Ww2 ]] ||
    fail "the stale temporary in job $other's snapshot.dir was not removed"
grep -q "removed 2 stale temporary snapshot files" "$T"/gptd.*.log || fail "cleaning not logged"
"$GPTCTL" cancel "$other" >/dev/null
wait_for 60 job_is "$other" cancelled
kill -TERM "$GPTD_PID"
wait "$GPTD_PID" || fail "gptd did not stop cleanly"

# refused_start WHY...: gptd exits non-zero at once, its log names the
# database and each WHY.
refused_start() {
    set +e
    timeout 20 "$GPTD" --state-dir "$T/state" --socket "$SOCK" 2>"$T/refused.log"
    local rc=$?
    set -e
    [[ $rc -ne 0 && $rc -ne 124 ]] || fail "gptd started (rc $rc) with $1"
    [[ ! -e $SOCK ]] || fail "gptd listened with $1"
    for w in "$@"; do
        grep -q -- "$w" "$T/refused.log" || fail "refusal lacks \"$w\": $(cat "$T/refused.log")"
    done
    grep -q "$DB" "$T/refused.log" || fail "refusal does not name $DB"
}

cp "$DB" "$T/good.db"
# --- zero-length database.
: >"$DB"
rm -f "$DB-wal" "$DB-shm"
refused_start "is empty (0 bytes)" "move it away"
[[ ! -s $DB ]] || fail "gptd wrote into the empty database"
# --- missing, while the state directory holds job folders.
rm -f "$DB"
refused_start "is missing" "$T/state/jobs"
[[ ! -e $DB ]] || fail "gptd created a new database"
# --- damaged in the middle.
cp "$T/good.db" "$DB"
head -c 4096 /dev/urandom | dd of="$DB" bs=4096 seek=1 conv=notrunc status=none
refused_start "is damaged" "move it away"

# The intact file starts, with the job still cancelled.
cp "$T/good.db" "$DB"
start_gptd
job_is "$id" cancelled || fail "after the restore job $id is $(job_state "$id")"

# --- a new job id whose default folder an older job (of an older database)
# still owns: refused, never resumed from or pruned.
next=$((other + 1)) # the newest job so far is $other
mkdir -p "$T/state/jobs/$next/snapshots"
printf 'gptd-snapshot-owner 1\ntoken 1234abcd\njob %d\nuid 0\n' "$next" \
    >"$T/state/jobs/$next/snapshots/.gptd-owner"
tiny_job "$T/tiny.json" 20
set +e
out=$("$GPTCTL" submit "$T/tiny.json" 2>&1)
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "a new job took an old job's folder"
[[ $out == *"belongs to job $next (uid 0)"*"this job id was used before the database"* ]] ||
    fail "the refusal does not explain: $out"
echo "daemon_statedir: ok"
