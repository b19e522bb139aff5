#!/usr/bin/env bash
# Queue fairness on a gptd shared by several users (one node: its own
# loopback cluster), with user_max_priority = 2 and
# max_queued_jobs_per_uid = 3 from a config file, while a root job holds
# the node so that every other job stays queued:
#  - a user created by this test is refused a priority above 2, with an
#    error naming the priority, the limit and user_max_priority; 2 itself
#    is accepted; root may submit with priority 50;
#  - the user's fourth queued job is refused with an error naming
#    max_queued_jobs_per_uid; root queues more than 3; once one of the
#    user's jobs leaves the queue (cancelled) the user may submit again;
#    a sweep (submit -m) of 4 is refused whole, one of 3 queued whole; a
#    raw sweep_jobs that lies cannot pass the cap, nor come without a sweep;
#  - head of line: a job needing 2 nodes on this 1-node cluster stays queued
#    with "needs 2 nodes, cluster has 1" and does not hold up the 1-node job
#    behind it, which starts as soon as the root job ends; once nothing else
#    runs, the big one starts alone and waits for nodes, as before.
source "$(dirname "$0")/daemon_common.sh"

make_test_user gptdqp

# The user reaches the socket and the job file through $T (search only) and
# runs a copy of gptctl (the build tree may be closed to it).
uid=$(id -u "$U")

cat >"$T/queue.conf" <<EOF
user_max_priority = 2
max_queued_jobs_per_uid = 3
EOF
start_gptd --config "$T/queue.conf" --socket-mode 0666
tiny_job "$T/job.json" 1000000 5 0
chmod 0644 "$T/job.json"

# list_field JOB KEY: a field of JOB in `gptctl --json list`.
list_field() {
    "$GPTCTL" --json list | /usr/bin/python3 -c '
import json, sys
for j in json.load(sys.stdin)["jobs"]:
    if j["id"] == int(sys.argv[1]):
        v = j.get(sys.argv[2])
        print("" if v is None else v)' "$1" "$2"
}

block=$("$GPTCTL" submit "$T/job.json")
wait_for 30 job_is "$block" running

# --- priorities: a user up to user_max_priority, root any.
if out=$(as_user submit --priority 3 "$T/job.json" 2>&1); then
    fail "the user was allowed priority 3 above user_max_priority 2: $out"
fi
[[ $out == *"priority 3 is above user_max_priority (2)"* ]] || fail "priority refusal: $out"
echo "refused: $out"
u1=$(as_user submit --priority 2 "$T/job.json") || fail "the user was refused priority 2"
[[ $(list_field "$u1" priority) == 2 ]] || fail "job $u1 has priority $(list_field "$u1" priority)"
[[ $(list_field "$u1" owner_uid) == "$uid" ]] || fail "job $u1 is not the user's"
r1=$("$GPTCTL" submit --priority 50 "$T/job.json") || fail "root was refused priority 50"
[[ $(list_field "$r1" priority) == 50 ]] || fail "job $r1 has priority $(list_field "$r1" priority)"

# --- the per-uid cap: 3 queued jobs of the user, root not capped.
u2=$(as_user submit "$T/job.json")
u3=$(as_user submit "$T/job.json")
if out=$(as_user submit "$T/job.json" 2>&1); then
    fail "the user queued a fourth job past max_queued_jobs_per_uid 3: $out"
fi
[[ $out == *"uid $uid already has 3 jobs queued or being submitted (max_queued_jobs_per_uid = 3)"* ]] ||
    fail "queue cap refusal: $out"
echo "refused: $out"
for i in 1 2 3; do "$GPTCTL" submit "$T/job.json" >/dev/null || fail "root was capped at $i"; done
# Only queued jobs count: one cancelled, the user may queue again.
as_user cancel "$u3" >/dev/null
job_is "$u3" cancelled || fail "job $u3: $(job_state "$u3")"
u4=$(as_user submit "$T/job.json") || fail "the user could not submit after a cancel"
for id in $("$GPTCTL" --json list | /usr/bin/python3 -c '
import json, sys
print(" ".join(str(j["id"]) for j in json.load(sys.stdin)["jobs"] if j["state"] == "queued"))'); do
    "$GPTCTL" cancel "$id" >/dev/null
done
job_is "$u4" cancelled || fail "job $u4: $(job_state "$u4")"
# A sweep is refused whole when its jobs do not all fit, never queued in
# part; one that fits is queued whole.
if out=$(as_user submit "$T/job.json" -m trainer.seed=1,2,3,4 2>&1); then
    fail "the user queued a sweep of 4 past max_queued_jobs_per_uid 3: $out"
fi
[[ $out == *"a sweep of 4 jobs does not fit: uid $uid already has 0 jobs queued or being submitted (max_queued_jobs_per_uid = 3)"* ]] ||
    fail "sweep refusal: $out"
echo "refused: $out"
queued_mine() {
    "$GPTCTL" --json list | /usr/bin/python3 -c '
import json, sys
print(sum(j["state"] == "queued" and j["owner_uid"] == int(sys.argv[1])
          for j in json.load(sys.stdin)["jobs"]))' "$uid"
}
[[ $(queued_mine) == 0 ]] || fail "a refused sweep left $(queued_mine) jobs queued"
as_user submit "$T/job.json" -m trainer.seed=1,2,3 >/dev/null || fail "a sweep of 3 was refused"
[[ $(queued_mine) == 3 ]] || fail "a sweep of 3 queued $(queued_mine) jobs"
# The user's own control lines, not gptctl's: sweep_jobs is only a request
# for room, so a lie cannot pass the cap (each submit is still counted),
# and it comes with a sweep or not at all.
cp "$ITEST" "$T/bin/itest_client"
chmod 0755 "$T/bin/itest_client"
raw() { runuser -u "$U" -- "$T/bin/itest_client" send "$SOCK"; }
spec=$(jq -c . "$T/job.json")
out=$(echo "{\"op\":\"submit\",\"id\":1,\"spec\":$spec,\"sweep\":\"sw-lie\",\"sweep_jobs\":1}" | raw)
[[ $out == *'"ok":false'* && $out == *"uid $uid already has 3 jobs queued or being submitted (max_queued_jobs_per_uid = 3)"* ]] ||
    fail "a sweep claiming 1 job past the cap: $out"
out=$(echo "{\"op\":\"submit\",\"id\":2,\"spec\":$spec,\"sweep_jobs\":2}" | raw)
[[ $out == *'"ok":false'* && $out == *"sweep_jobs comes only with a sweep"* ]] ||
    fail "sweep_jobs without a sweep: $out"
[[ $(queued_mine) == 3 ]] || fail "the raw submits queued jobs: $(queued_mine) queued"

for id in $("$GPTCTL" --json list | /usr/bin/python3 -c '
import json, sys
print(" ".join(str(j["id"]) for j in json.load(sys.stdin)["jobs"] if j["state"] == "queued"))'); do
    "$GPTCTL" cancel "$id" >/dev/null
done

# --- head of line: a job the cluster is too small for is passed over.
big=$("$GPTCTL" submit "$T/job.json" distributed.nodes=2:2)
small=$("$GPTCTL" submit "$T/job.json")
wait_for 10 eval '[[ $(list_field '"$small"' waiting_for) == "needs 1 node, 0 free" ]]'
[[ $(list_field "$big" waiting_for) == "needs 2 nodes, cluster has 1" ]] ||
    fail "job $big: $(list_field "$big" waiting_for)"
[[ $(list_field "$big" queue_position) == 1 && $(list_field "$small" queue_position) == 2 ]] ||
    fail "queue order: $big at $(list_field "$big" queue_position), $small at $(list_field "$small" queue_position)"
"$GPTCTL" list | has -E "^ *$big +tiny +queued #1: needs 2 nodes, cluster has 1 " ||
    fail "gptctl list does not say why job $big waits: $("$GPTCTL" list)"
"$GPTCTL" cancel "$block" >/dev/null
wait_for 30 job_is "$small" running
job_is "$big" queued || fail "job $big: $(job_state "$big"), expected queued"
[[ $(list_field "$big" waiting_for) == "needs 2 nodes, cluster has 1" ]] ||
    fail "job $big: $(list_field "$big" waiting_for)"
# Alone, it starts on the one node and waits for a second.
"$GPTCTL" cancel "$small" >/dev/null
wait_for 30 job_is "$big" waiting
"$GPTCTL" cancel "$big" >/dev/null
wait_for 30 job_is "$big" cancelled
echo "queue_policy: ok"
