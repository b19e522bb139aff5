#!/usr/bin/env bash
# A cluster job whose global rank 0 runs on a member: its last records reach
# the coordinator before the coordinator records the job's end.
#  - two gptd on this host, the member's id sorting before the
#    coordinator's, so a fresh world of both gives the member rank 0 (the
#    README's cluster, where "two" sorts before the host name);
#  - the job ends completed with its final step in `list` and `status`, the
#    final snapshot in `gptctl snapshots` and the `done` event in its logs;
#  - the member killed right after renaming its final snapshot into place
#    (tests/tools/rename_kill kills it there, before the done event and the
#    snapshot row that follow can leave): the job is not completed with
#    records missing, and no world is started to find nothing left to
#    train; it fails saying that the member holding global rank 0 was lost
#    after the last step, that the final snapshot is on its disk, and since
#    which step the records are missing.
#   elastic_records.sh GPTD GPTCTL ITEST SRC RENAME_KILL
source "$(dirname "$0")/elastic_common.sh"
KILL_LIB=$5

COORD=zc
"$GPTD" --state-dir "$T/zc" --socket "$T/zc.sock" --node-name zc --log-level debug \
    >>"$T/zc.log" 2>&1 &
NODE_PID[zc]=$!
wait_for 20 ctl zc status
RDZV=$(ctl zc --json status | grep -o '"rdzv":"[^"]*"' | cut -d'"' -f4)
cp "$T/zc/cluster.secret" "$T/secret"
start_node am
wait_for 20 node_is zc am idle
wait_for 20 node_is zc zc idle

JOB=("$SRC/etc/jobs/adder.json" distributed.nodes=2 trainer.max_steps=100
    trainer.micro_batch=16 trainer.log_every=10 trainer.threads=1)

# final_records_ok JOB: the coordinator holds the final step, the final
# snapshot and the done event of JOB (run on its socket, as a user would).
final_records_ok() {
    local id=$1
    [[ $(job_field zc "$id" step) == 100 ]] ||
        { echo "status: step $(job_field zc "$id" step), not 100"; return 1; }
    ctl zc list | grep -E "^ *$id " | has "100/100" ||
        { echo "list: $(ctl zc list | grep -E "^ *$id ")"; return 1; }
    ctl zc --json snapshots "$id" | has '"step":100' ||
        { echo "snapshots: $(ctl zc --json snapshots "$id")"; return 1; }
    ctl zc --json logs "$id" | has '"kind":"done"' ||
        { echo "no done event: $(ctl zc --json logs "$id" | tail -n 2)"; return 1; }
    ctl zc --json logs "$id" | grep '"type":"metric"' | tail -n 1 | has '"step":100' ||
        { echo "last metric: $(ctl zc --json logs "$id" | grep '"type":"metric"' | tail -n 1)"
          return 1; }
}

job_ended() { [[ $(job_field zc "$1" state) =~ ^(completed|failed|cancelled)$ ]]; }

# --- rank 0 on the member, nothing killed: every last record arrives.
id=$(ctl am submit "${JOB[@]}")
wait_for 120 job_ended "$id"
job_is zc "$id" completed ||
    fail "job $id is $(job_field zc "$id" state): $(ctl zc --json status "$id" | grep -o '"error":"[^"]*"')"
grep -q "agent: round [0-9]* of job $id: ranks 0-0 of 2" "$T/am.log" ||
    fail "global rank 0 of job $id did not run on the member: $(grep 'agent: round' "$T/am.log")"
why=$(final_records_ok "$id") || fail "job $id completed without its last records: $why"
check_history "$id"

# --- the member killed right after its final snapshot is in place, before
# the records that follow it (the snapshot row, the done event) can leave.
# It restarts under rename_kill, which ends it at that rename of the next
# job's step 100 snapshot.
kill_node am
next=$((id + 1))
LD_PRELOAD=$KILL_LIB GPTD_TEST_KILL_AFTER_RENAME=/jobs/$next/snapshots/snap-000000000100.gpts \
    start_node am
wait_for 20 node_is zc am idle
id2=$(ctl am submit "${JOB[@]}" distributed.wait_timeout_s=600)
[[ $id2 == "$next" ]] || fail "the job is $id2, not $next: rename_kill watches job $next's snapshot"
am_pid=${NODE_PID[am]}
wait_for 120 bash -c "! kill -0 $am_pid 2>/dev/null"
rc=0
wait "$am_pid" || rc=$?
unset "NODE_PID[am]"
((rc == 137)) || fail "the member ended with status $rc, not killed at its final snapshot"
[[ -f $T/am/jobs/$id2/snapshots/snap-000000000100.gpts ]] || fail "the member's final snapshot is gone"
grep -q "agent: round [0-9]* of job $id2: ranks 0-0 of 2" "$T/am.log" ||
    fail "global rank 0 of job $id2 did not run on the member"
# The member comes back (same state directory) with the final snapshot: a
# world of two could form again, and would find nothing left to train.
start_node am
wait_for 120 job_ended "$id2"
state=$(job_field zc "$id2" state)
error=$(ctl zc --json status "$id2" | jq -r '.job.error // ""')
[[ $state == failed ]] || fail "job $id2 is $state after its rank 0 was lost with its last records: $error"
for want in "node am, which held global rank 0, was lost after the job's last step (100)" \
    "the final snapshot is on node am's disk (step 100)" "done event never reached"; do
    [[ $error == *"$want"* ]] || fail "job $id2's error does not say '$want': $error"
done
[[ $error != *"nothing left to train"* ]] || fail "job $id2 still fails on a resumed world: $error"
echo "job $id2 $state: $error"
check_history "$id2"
echo "elastic_records: ok"
