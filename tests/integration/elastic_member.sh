#!/usr/bin/env bash
# The embedded default and what members see:
#  - a gptd with no endpoint is the coordinator of its own cluster on
#    loopback (an ephemeral port), and lists itself as such;
#  - other gptd join it through that endpoint and its state directory's
#    secret; one without it is told (and the coordinator's log says) which
#    file to pass with --secret-file;
#  - on a member's socket, `list`, `status JOB` and `logs -f JOB` show the
#    coordinator's job: metrics with increasing steps, then its completion;
#  - `cancel` and `resume [--snapshot ID]` on a member act on the
#    coordinator's queue (the world resumes from exactly the chosen
#    snapshot); `sample` on a member uses the member's own copy, or fails
#    naming the snapshot it lacks, and the coordinator keeps its replies
#    (`samples` on either node);
#  - a member stopped with SIGTERM leaves without using up a restart
#    (distributed.max_restarts counts failures only), a kill -9 uses one,
#    and the count is kept in the coordinator's database.
source "$(dirname "$0")/elastic_common.sh"

COORD=n1
# --- n1: no --rdzv, no --coordinator.
"$GPTD" --state-dir "$T/n1" --socket "$T/n1.sock" --node-id n1 --log-level debug \
    >>"$T/n1.log" 2>&1 &
NODE_PID[n1]=$!
wait_for 20 ctl n1 status
role=$(ctl n1 --json status | grep -o '"role":"[^"]*"' | cut -d'"' -f4)
[[ $role == coordinator ]] || fail "a gptd without an endpoint is \"$role\", not coordinator"
RDZV=$(ctl n1 --json status | grep -o '"rdzv":"[^"]*"' | cut -d'"' -f4)
[[ $RDZV == 127.0.0.1:* && ${RDZV#*:} -gt 0 ]] || fail "no loopback endpoint: \"$RDZV\""
ctl n1 --json nodes | has '"node":"n1"[^}]*"role":"coordinator"' ||
    ctl n1 --json nodes | has '"role":"coordinator"[^}]*"node":"n1"' ||
    fail "n1 does not list itself as the coordinator: $(ctl n1 --json nodes)"
ctl n1 nodes | has "^coordinator: n1, store at $RDZV" || fail "nodes: no coordinator line"
cp "$T/n1/cluster.secret" "$T/secret"

# --- two members join through the loopback endpoint.
start_node n2
start_node n3
wait_for 20 node_is n1 n2 idle
wait_for 20 node_is n1 n3 idle
wait_for 20 node_is n2 n1 idle # the node table reaches members too

# --- a gptd joining without the secret: a clear error naming the file, at
# once (a forwarded request does not wait), on both sides.
"$GPTD" --state-dir "$T/n4" --socket "$T/n4.sock" --node-id n4 --rdzv "$RDZV" \
    >>"$T/n4.log" 2>&1 &
NODE_PID[n4]=$!
wait_for 20 ctl n4 status
wait_for 20 grep -q "refused this node: it has no cluster secret.*--secret-file" "$T/n4.log"
set +e
out=$(timeout 10 env GPTD_SOCKET="$T/n4.sock" "$GPTCTL" list 2>&1); rc=$?
set -e
[[ $rc -eq 1 && $out == *--secret-file* ]] || fail "list on a node without the secret: rc $rc: $out"
grep -q "wrong or missing cluster secret.*--secret-file naming a copy of $T/n1/cluster.secret" \
    "$T/n1.log" || fail "the coordinator's log does not name its secret file"
kill_node n4

# --- a job submitted and followed on a member.
elastic_job "$T/job.json" 300 "1:3" 50 10
id=$(ctl n2 submit "$T/job.json")
ctl n3 --json logs -f "$id" >"$T/follow.json" &
follower=$!
wait_for 60 job_is n3 "$id" completed
wait_for 20 bash -c "! kill -0 $follower 2>/dev/null"
wait "$follower" || fail "logs -f on a member failed"
grep -q '"type":"end".*"state":"completed"' "$T/follow.json" ||
    fail "the member's stream did not end with the completion: $(tail -n3 "$T/follow.json")"
grep '"type":"metric"' "$T/follow.json" | grep -o '"step":[0-9]*' | cut -d: -f2 >"$T/steps"
(($(wc -l <"$T/steps") >= 10)) || fail "only $(wc -l <"$T/steps") metrics on the member"
awk 'NR > 1 && $1 <= prev { exit 1 } { prev = $1 }' "$T/steps" ||
    fail "metric steps on the member do not increase"
[[ $(tail -n1 "$T/steps") == 300 ]] || fail "the member's last metric is step $(tail -n1 "$T/steps")"
ctl n2 list | has "completed" || fail "list on a member does not show the job"
# The same history, replayed on a member after the end.
ctl n2 --json logs "$id" | grep -c '"type":"metric"' >"$T/n_replay"
[[ $(cat "$T/n_replay") == $(wc -l <"$T/steps") ]] ||
    fail "replay on a member: $(cat "$T/n_replay") metrics, live: $(wc -l <"$T/steps")"

# --- sample on a member uses its own copy of the job's snapshots.
snap_of() { db "SELECT id FROM snapshots WHERE job_id = $id AND step = $1 LIMIT 1"; }
s200=$(snap_of 200)
s250=$(snap_of 250)
[[ -n $s200 && -n $s250 ]] || fail "no step 200/250 snapshots: $(db "SELECT step FROM snapshots")"
# Every snapshot row has its size, in the members' databases too.
for n in n1 n2 n3; do
    [[ $("$ITEST" sql "$T/$n/gptd.db" "SELECT count(*) FROM snapshots WHERE size <= 0") == 0 ]] ||
        fail "$n: snapshots without a size: $("$ITEST" sql "$T/$n/gptd.db" "SELECT node, step, size FROM snapshots")"
done
ctl n3 --json sample "$id" --prompt 12 --tokens 4 | has '"snapshot":"'"$T"'/n3/' ||
    fail "sample on n3 did not use n3's copy: $(ctl n3 --json sample "$id" --prompt 12 --tokens 4)"
ctl n3 --json sample "$id" --snapshot "$s250" --prompt 12 --tokens 4 |
    grep -q 'n3/jobs/'"$id"'/snapshots/snap-000000000250' || fail "sample --snapshot on n3"
# Both are kept in the coordinator's database, as `samples` on either node
# reads them: n3's copies, the chosen snapshot's id and step.
kept() { [[ $(ctl "$1" --json samples "$id" | jq '.samples | length') == "$2" ]]; }
wait_for 10 kept n1 2
ctl n3 --json samples "$id" | jq -e --arg dir "$T/n3/" --argjson s "$s250" \
    '[.samples[] | .snapshot | startswith($dir)] == [true, true] and .samples[0].snapshot_id == $s
     and .samples[0].step == 250 and .samples[0].prompt == "12" and .samples[1].step >= 250' \
    >/dev/null || fail "n3's samples as kept: $(ctl n1 --json samples "$id")"
rm -f "$T/n3/jobs/$id/snapshots/snap-000000000200.gpts"
set +e
out=$(ctl n3 sample "$id" --snapshot "$s200" --prompt 12 --tokens 4 2>&1); rc=$?
set -e
[[ $rc -eq 1 && $out == *"snapshot $s200 (step 200)"*"not on node n3"* ]] ||
    fail "sample of a snapshot n3 lacks: rc $rc: $out"

# --- resume --snapshot on a member: queued on the coordinator, and the
# world resumes from exactly that (older) snapshot.
ctl n2 resume "$id" --snapshot "$s250" | has queued || fail "resume on a member"
[[ $("$ITEST" sql "$T/n2/gptd.db" "SELECT count(*) FROM jobs") == 0 ]] ||
    fail "the member's own database got a job"
wait_for 60 job_is n1 "$id" completed
run=$(db "SELECT max(run_id) FROM metrics WHERE job_id = $id")
first=$(db "SELECT min(step) FROM metrics WHERE job_id = $id AND run_id = $run")
[[ $first == 260 ]] || fail "resume from the step 250 snapshot: first metric at step $first"
db "SELECT message FROM events WHERE job_id = $id AND kind = 'resume' ORDER BY id DESC LIMIT 1" |
    grep -q 'at step 250' || fail "no resume at step 250"

# --- cancel on a member cancels the coordinator's job.
elastic_job "$T/cancel.json" 100000 "1:3" 50 10
idc=$(ctl n3 submit "$T/cancel.json")
wait_for 60 job_step_at_least n1 "$idc" 20
ctl n3 cancel "$idc" | has cancel || fail "cancel on a member"
wait_for 30 job_is n1 "$idc" cancelled
set +e
out=$(ctl n2 cancel "$idc" 2>&1); rc=$?
set -e
[[ $rc -eq 1 && $out == *"already cancelled"* ]] || fail "second cancel on a member: rc $rc: $out"

# --- restarts: SIGTERM of a member is a leave, kill -9 a failure.
elastic_job "$T/long.json" 100000 "1:3" 50 10
sed -i 's/"max_restarts": 100/"max_restarts": 1/' "$T/long.json"
id2=$(ctl n2 submit "$T/long.json")
wait_for 60 world_size_is "$id2" 3
ctl n2 --json logs -f "$id2" >"$T/follow2.json" &
follower2=$!
wait_for 60 job_step_at_least n1 "$id2" 100
kill -TERM "${NODE_PID[n3]}"
wait "${NODE_PID[n3]}" || fail "n3 did not stop cleanly on SIGTERM"
unset "NODE_PID[n3]"
wait_for 20 node_is n1 n3 left
wait_for 30 world_size_is "$id2" 2
[[ $(db "SELECT restarts FROM jobs WHERE id = $id2") == 0 ]] ||
    fail "a SIGTERM of a member used up a restart"
job_is n1 "$id2" running || fail "job $id2 is $(job_field n1 "$id2" state) after a leave"

step=$(db "SELECT max(step) FROM metrics WHERE job_id = $id2")
kill_node n2
wait_for 30 world_size_is_after "$id2" 1 "$step"
wait_for 10 bash -c "[[ \$(\"$ITEST\" sql \"$T/n1/gptd.db\" \
    \"SELECT restarts FROM jobs WHERE id = $id2\") == 1 ]]"
job_is n1 "$id2" running || fail "job $id2 is $(job_field n1 "$id2" state) after one failure"
grep -q '"type":"metric"' "$T/follow2.json" || fail "no live metrics on n2 before it died"
kill "$follower2" 2>/dev/null || true

# The count survives a coordinator restart.
ctl n1 cancel "$id2" >/dev/null
wait_for 30 job_is n1 "$id2" cancelled
kill_node n1
"$GPTD" --state-dir "$T/n1" --socket "$T/n1.sock" --node-id n1 >>"$T/n1.log" 2>&1 &
NODE_PID[n1]=$!
wait_for 20 ctl n1 status
[[ $(ctl n1 --json status "$id2" | grep -o '"restarts":[0-9]*' | cut -d: -f2) == 1 ]] ||
    fail "the restart count did not survive the coordinator's restart"
check_history "$id2"
echo "elastic_member: ok (endpoint $RDZV)"
