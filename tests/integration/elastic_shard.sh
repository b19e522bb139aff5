#!/usr/bin/env bash
# Full (FSDP-style) sharding across three elastic nodes: kill -9 one node
# mid-training; the survivors re-form from the newest snapshot (every node
# holds a complete copy: sharded state is gathered when a snapshot is
# taken), re-shard it over the new world and complete the job.
source "$(dirname "$0")/elastic_common.sh"

COORD=n1
start_node n1 --coordinator
start_node n2
start_node n3
elastic_job "$T/job.json" 3000 "2:3" 50 5 '"sharding": "full"'
id=$(ctl n1 submit "$T/job.json")
wait_for 60 world_size_is "$id" 3
wait_for 60 job_step_at_least n1 "$id" 200

step0=$(job_field n1 "$id" step)
kill_node n3
wait_for 30 world_size_is_after "$id" 2 "$step0"
echo "world re-formed with 2 nodes after step $step0"
wait_for 180 job_is n1 "$id" completed
check_history "$id"
work=$(db "SELECT count(*) FROM runs WHERE job_id = $id")
((work >= 2)) || fail "expected at least two runs (worlds) of job $id"
for n in n1 n2; do
    ls "$T/$n/jobs/$id/snapshots/" | has "$(printf '%012d' 3000)" ||
        fail "$n has no copy of the final snapshot"
done
echo "elastic_shard: ok"
