#!/usr/bin/env bash
# Three nodes train one elastic job ("2:3"):
#  - kill -9 a node that is not the coordinator mid-training: it is declared
#    dead, the two survivors re-form and train on within 10 s;
#  - start it again: it registers as waiting and the world takes it in at a
#    step boundary within 10 s of its start (the world grows back to 3);
#  - the job completes; metric steps strictly increase; the failure counts
#    one restart, the admission none.
source "$(dirname "$0")/elastic_common.sh"

COORD=n1
start_node n1 --coordinator
start_node n2
start_node n3
elastic_job "$T/job.json" 6000 "2:3" 50
id=$(ctl n1 submit "$T/job.json")
wait_for 60 world_size_is "$id" 3
wait_for 60 job_step_at_least n1 "$id" 300

# --- kill -9 n3.
step0=$(job_field n1 "$id" step)
t0=$(now_ms)
kill_node n3
wait_for 20 world_size_is_after "$id" 2 "$step0"
t1=$(now_ms)
recover_ms=$((t1 - t0))
echo "survivors trained on $recover_ms ms after the kill"
((recover_ms <= 10000)) || fail "survivors took $recover_ms ms to resume (> 10 s)"
node_is n1 n3 dead || fail "n3 is not shown dead: $(ctl n1 nodes)"

# --- start n3 again: it rejoins and the world grows back.
step1=$(job_field n1 "$id" step)
t2=$(now_ms)
start_node n3
wait_for 20 world_size_is_after "$id" 3 "$step1"
t3=$(now_ms)
rejoin_ms=$((t3 - t2))
echo "n3 was a member again $rejoin_ms ms after it started"
((rejoin_ms <= 10000)) || fail "n3 took $rejoin_ms ms to rejoin (> 10 s)"

wait_for 120 job_is n1 "$id" completed
check_history "$id"
dead=$(db "SELECT count(*) FROM events WHERE job_id = $id AND kind = 'node_dead'")
((dead >= 1)) || fail "no node_dead event"
failures=$(db "SELECT count(*) FROM events WHERE job_id = $id AND kind = 'failure'")
[[ $failures == 1 ]] || fail "$failures failure events, want 1 (admitting n3 is no failure)"
runs=$(db "SELECT group_concat(world_size, ' ') FROM (SELECT world_size FROM runs
           WHERE job_id = $id ORDER BY id)")
echo "worlds: $runs"
[[ $runs == "3 2 3" ]] || fail "runs of job $id have world sizes \"$runs\", want \"3 2 3\""
# Each node keeps its own copy of the snapshots.
for n in n1 n2; do
    ls "$T/$n/jobs/$id/snapshots/" | has "$(printf '%012d' 6000)" ||
        fail "$n has no copy of the final snapshot"
done
echo "elastic_kill: ok (resumed in $recover_ms ms, rejoined in $rejoin_ms ms)"
