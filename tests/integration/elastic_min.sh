#!/usr/bin/env bash
# A job that needs two nodes ("2:3") with only the coordinator up shows
# waiting-for-nodes and continues when a second node arrives; a node with
# the wrong secret cannot join (the coordinator never lists it).
source "$(dirname "$0")/elastic_common.sh"

COORD=n1
start_node n1 --coordinator
elastic_job "$T/job.json" 300 "2:3" 50
id=$(ctl n1 submit "$T/job.json")
wait_for 20 job_is n1 "$id" waiting
db "SELECT kind FROM events WHERE job_id = $id" | has -x waiting ||
    fail "no waiting event"

# --- a node with the wrong secret is refused.
printf 'not-the-cluster-secret\n' >"$T/bad-secret"
chmod 600 "$T/bad-secret"
start_node bad --secret-file "$T/bad-secret"
wait_for 10 grep -q "refused this node" "$T/bad.log"
sleep 1.5 # several of its connection attempts
job_is n1 "$id" waiting || fail "job $id left waiting with only a wrong-secret node"
if ctl n1 --json nodes | has '"node":"bad"'; then
    fail "the node with the wrong secret is listed by the coordinator"
fi
kill_node bad

# --- a good node arrives: the job runs and completes.
start_node n2
wait_for 20 job_is n1 "$id" running
wait_for 120 job_is n1 "$id" completed
check_history "$id"
[[ $(db "SELECT max(world_size) FROM metrics WHERE job_id = $id") == 2 ]] ||
    fail "job $id did not run on two nodes"
echo "elastic_min: ok"
