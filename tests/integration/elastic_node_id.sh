#!/usr/bin/env bash
# Node identity: a node id another live node holds is refused at join.
#  - the coordinator and a second gptd both without --node-name (both take
#    the host name, as in the README's cluster when the flag is forgotten):
#    the second is refused, its log and its clients' errors name the id,
#    the node holding it and both addresses; the coordinator keeps one row
#    for the id and never reads the newcomer as a restart of itself;
#  - the same with a member's id, while a job runs on that member: the job
#    finishes without a restart used up;
#  - a restart of the member from its own state directory (kill -9, started
#    again at once) is a restart, not a refusal;
#  - the newcomer does not take the id once its holder is gone (it holds
#    no node key for it): only after `gptctl nodes --forget` (gptd(8),
#    "Security").
source "$(dirname "$0")/elastic_common.sh"

COORD=c0
# --- the coordinator and a newcomer, neither naming itself.
"$GPTD" --state-dir "$T/c0" --socket "$T/c0.sock" --log-level debug >>"$T/c0.log" 2>&1 &
NODE_PID[c0]=$!
wait_for 20 ctl c0 status
RDZV=$(ctl c0 --json status | grep -o '"rdzv":"[^"]*"' | cut -d'"' -f4)
HOST=$(ctl c0 --json status | grep -o '"node":"[^"]*"' | head -n1 | cut -d'"' -f4) # the host name
[[ -n $HOST ]] || fail "no node name in status"
cp "$T/c0/cluster.secret" "$T/secret"
"$GPTD" --state-dir "$T/dup" --socket "$T/dup.sock" --rdzv "$RDZV" --secret-file "$T/secret" \
    --log-level debug >>"$T/dup.log" 2>&1 &
NODE_PID[dup]=$!
wait_for 20 ctl dup status
refusal="node \"$HOST\" did not prove its node key: node id \"$HOST\" is taken: node $HOST at 127.0.0.1 is alive"
wait_for 20 grep -qF "refused this node: $refusal" "$T/dup.log"
grep -F "refused this node" "$T/dup.log" | head -n1 |
    grep -q "and the gptd at 127.0.0.1:[0-9]* is another node; start it with its own --node-name" ||
    fail "the refusal does not name the newcomer's address: $(grep -F refused "$T/dup.log")"
grep -qF "$refusal" "$T/c0.log" || fail "the coordinator's log does not say it refused the newcomer"
set +e
out=$(ctl dup list 2>&1); rc=$?
set -e
[[ $rc -ne 0 && $out == *"not in the cluster: "*"node id \"$HOST\" is taken"* ]] ||
    fail "list on the refused node: rc $rc: $out"
# Two heartbeat intervals later the coordinator still has one node, itself.
deadline=$((SECONDS + 3))
while ((SECONDS < deadline)); do
    [[ $(ctl c0 --json nodes | grep -o '"node":"[^"]*"' | sort -u | wc -l) == 1 ]] ||
        fail "nodes: $(ctl c0 --json nodes)"
    sleep 0.2
done
! grep -q "node $HOST restarted\|node $HOST is back" "$T/c0.log" ||
    fail "the newcomer was read as a restart of the coordinator: $(grep restarted "$T/c0.log")"
kill_node dup

# --- a member's id taken while a job runs on the member.
start_node m1
wait_for 20 node_is c0 m1 idle
wait_for 20 node_is c0 "$HOST" idle
elastic_job "$T/job.json" 400 "2" 100 10
id=$(ctl c0 submit "$T/job.json")
wait_for 60 job_step_at_least c0 "$id" 20
"$GPTD" --state-dir "$T/dup2" --socket "$T/dup2.sock" --node-name m1 --rdzv "$RDZV" \
    --secret-file "$T/secret" --log-level debug >>"$T/dup2.log" 2>&1 &
NODE_PID[dup2]=$!
wait_for 20 grep -qF 'refused this node: node "m1" did not prove its node key: node id "m1" is taken: node m1' \
    "$T/dup2.log"
wait_for 120 job_is c0 "$id" completed
[[ $(db "SELECT restarts FROM jobs WHERE id = $id") == 0 ]] ||
    fail "the job used up $(db "SELECT restarts FROM jobs WHERE id = $id") restarts"
! grep -q "node m1 restarted" "$T/c0.log" || fail "the newcomer was read as a restart of m1"

# --- m1 restarted from its own state directory: a restart, taken at once
# (the newcomer, still refused, does not get the id meanwhile).
kill_node m1
start_node m1
wait_for 20 grep -q "node m1 restarted\|node m1 is back" "$T/c0.log"
wait_for 20 node_is c0 m1 idle
ctl m1 list >/dev/null || fail "the restarted m1 is not in the cluster"
! grep -q "refused this node" "$T/m1.log" || fail "m1's restart was refused"

# --- once m1 is gone, the newcomer (another state directory) still may
# not take its id: m1's node key stays with the coordinator until root
# releases it.
kill_node m1
wait_for 30 grep -q 'speaking for node "m1": .* node m1 (last at 127.0.0.1) is gone' "$T/c0.log"
ctl dup2 list >/dev/null 2>&1 && fail "the newcomer took m1's id without its node key"
ctl c0 nodes --forget m1 >/dev/null
wait_for 30 grep -q "the coordinator took this node in as m1" "$T/dup2.log"
wait_for 20 ctl dup2 list
echo "elastic_node_id: ok"
