#!/usr/bin/env bash
# kill -9 the coordinator of a three-node world mid-training, then start it
# again: it reloads the job from SQLite, the other nodes reconnect by
# themselves, the world re-forms and the job resumes from the newest
# snapshot and completes, with strictly increasing metric steps.
#
# The restarted coordinator lost its copy of the newest snapshot and the job
# runs on as few as one node ("1:3"): it must not resume alone from its
# older copy before the members that hold the newest have reconnected.
source "$(dirname "$0")/elastic_common.sh"

COORD=n1
start_node n1 --coordinator
start_node n2
start_node n3
elastic_job "$T/job.json" 5000 "1:3" 50
id=$(ctl n2 submit "$T/job.json")
wait_for 60 world_size_is "$id" 3
wait_for 60 job_step_at_least n1 "$id" 400

kill_node n1
killed_at=$(db "SELECT max(step) FROM metrics WHERE job_id = $id")
snap_before=$(db "SELECT coalesce(max(step), -1) FROM snapshots WHERE job_id = $id")
event_before=$(db "SELECT max(id) FROM events")
newest=$(ls "$T/n1/jobs/$id/snapshots"/snap-*.gpts | tail -n 1)
rm -f "$newest"
t0=$(now_ms)
start_node n1 --coordinator
wait_for 30 world_size_is_after "$id" 3 "$killed_at"
echo "the world trained again $(($(now_ms) - t0)) ms after the coordinator restarted"
wait_for 120 job_is n1 "$id" completed
check_history "$id"
runs=$(db "SELECT group_concat(status, ' ') FROM (SELECT status FROM runs WHERE job_id = $id
           ORDER BY id)")
# On "1:3" the world may first re-form with the nodes back so far and grow
# when the last one returns.
[[ $runs =~ ^lost( reformed)*\ completed$ ]] ||
    fail "runs of job $id: \"$runs\", want \"lost [reformed ...] completed\""
resumed=$(db "SELECT count(*) FROM events WHERE job_id = $id AND kind = 'resume'")
((resumed >= 1)) || fail "no resume event after the coordinator restart"
# Whichever node came back first, the world resumed from the newest
# snapshot recorded before the kill (the members hold it), never an older one.
first=$(db "SELECT min(step) FROM events WHERE job_id = $id AND kind = 'resume'
            AND id > $event_before")
((first >= snap_before)) ||
    fail "resumed at step $first after the coordinator restart; step $snap_before was recorded"
echo "elastic_coord: ok (coordinator killed near step $killed_at, resumed at $first," \
    "newest snapshot $snap_before)"
