#!/usr/bin/env bash
# A cluster job whose global rank 0 runs on a member: its last records reach
# the coordinator before the coordinator records the job's end.
#  - two gptd on this host, the member's id sorting before the
#    coordinator's, so a fresh world of both gives the member rank 0 (the
#    README's cluster, where "two" sorts before the host name);
#  - the job ends completed with its final step in `list` and `status`, the
#    final snapshot in `gptctl snapshots` and the `done` event in its logs;
#  - the member killed right after writing its final snapshot: the job is
#    never completed with records missing. Either the records made it (then
#    all of them are there) or the job is resumed or failed with a reason.
source "$(dirname "$0")/elastic_common.sh"

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

# --- the member killed right after its final snapshot (the window in which
# its last metric, snapshot row and done event are on their way).
id2=$(ctl am submit "${JOB[@]}" distributed.wait_timeout_s=600)
snap=$T/am/jobs/$id2/snapshots/snap-000000000100.gpts
wait_for 120 job_step_at_least zc "$id2" 80
deadline=$((SECONDS + 60))
until [[ -e $snap ]]; do
    ((SECONDS < deadline)) || fail "the member never wrote $snap"
done
kill_node am
grep -q "agent: round [0-9]* of job $id2: ranks 0-0 of 2" "$T/am.log" ||
    fail "global rank 0 of job $id2 did not run on the member"
# The member comes back (same state directory): a world of two can form
# again, so the job reaches an end of some kind.
start_node am
wait_for 120 job_ended "$id2"
state=$(job_field zc "$id2" state)
if [[ $state == completed ]]; then
    why=$(final_records_ok "$id2") || fail "job $id2 completed without its last records: $why"
else
    error=$(ctl zc --json status "$id2" | grep -o '"error":"[^"]*"' || true)
    [[ -n $error && $error != '"error":""' ]] || fail "job $id2 $state without a reason"
    echo "job $id2 $state: $error"
fi
check_history "$id2"
echo "elastic_records: ok"
