#!/usr/bin/env bash
# Issue 19's report: an elastic "2:3" job with trainer.global_batch 12 and
# micro_batch 4 trains at world 3 (4 sequences a rank); kill -9 one node and
# the world re-forms at 2, where 12 is no multiple of 4 x 2. It used to fail
# there ("must be a multiple of micro_batch (4) x world size (2)") until its
# restarts ran out; now each survivor takes 6 sequences in two
# micro-batches of 3, the job trains on at world 2 and completes, with one
# restart (the node loss) and no failure of the spec.
source "$(dirname "$0")/elastic_common.sh"

COORD=n1
start_node n1 --coordinator
start_node n2
start_node n3
elastic_job "$T/job.json" 1500 "2:3" 50
id=$(ctl n1 submit "$T/job.json" trainer.micro_batch=4)
wait_for 60 world_size_is "$id" 3
wait_for 60 job_step_at_least n1 "$id" 100
step0=$(job_field n1 "$id" step)
kill_node n3
wait_for 30 world_size_is_after "$id" 2 "$step0"
wait_for 90 job_is n1 "$id" completed
check_history "$id"
failures=$(db "SELECT count(*) FROM events WHERE job_id = $id AND kind = 'failure'")
[[ $failures == 1 ]] || fail "$failures failure events, want 1 (the node loss)"
if db "SELECT message FROM events WHERE job_id = $id" | has "multiple of"; then
    fail "the world-2 run refused the batch: $(db "SELECT message FROM events WHERE job_id = $id")"
fi
db "SELECT message FROM events WHERE job_id = $id AND kind IN ('start', 'continue', 'resume')" \
    | has "world size 2, 2 micro-batch(es) of up to 4 x" || fail "no world-2 run of 2 micro-batches"
runs=$(db "SELECT group_concat(world_size, ' ') FROM (SELECT world_size FROM runs
           WHERE job_id = $id ORDER BY id)")
echo "worlds: $runs"
[[ $runs == "3 2" ]] || fail "runs of job $id have world sizes \"$runs\", want \"3 2\""
echo "elastic_batch: ok"
