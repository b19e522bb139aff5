#!/usr/bin/env bash
# A member that claims more than it can deliver (gptd(8), "Security"):
# the fault counts against the node, not against other users' jobs.
#  - three gptd on this host: the coordinator n1, the liar "liar" (a GPU
#    count of 1 stood in by GPTD_TEST_GPU_COUNT, and --workers 3: it claims
#    three ranks its one GPU cannot hold) and the honest n3;
#  - job A (2 nodes, max_restarts 0) is placed on n1 and the liar (table
#    order); the liar's ranks fail to start on its own claim: the liar is
#    quarantined (`gptctl nodes`: state, reason, until when; a
#    node_quarantined event), and A forms again on n1 and n3 without
#    spending a restart, and completes;
#  - job B (1 node), submitted while A runs, waits with a queue reason that
#    names the quarantine, is never placed on the liar, and completes with
#    restarts 0; the honest nodes are never quarantined;
#  - the liar restarted with another claim (--workers 1, no stand-in GPU)
#    is placed again: its quarantine ends.
source "$(dirname "$0")/elastic_common.sh"

COORD=n1
start_node n1 --coordinator
GPTD_TEST_GPU_COUNT=1 start_node liar --workers 3
start_node n3
three_idle() { [[ $(ctl n1 --json nodes | grep -o '"state":"idle"' | wc -l) == 3 ]]; }
wait_for 20 three_idle

# list_field JOB KEY: a field of JOB in `gptctl --json list` on n1.
list_field() {
    ctl n1 --json list | /usr/bin/python3 -c '
import json, sys
for j in json.load(sys.stdin)["jobs"]:
    if j["id"] == int(sys.argv[1]):
        v = j.get(sys.argv[2])
        print("" if v is None else v)' "$1" "$2"
}
# node_field NODE KEY: a field of NODE in `gptctl --json nodes` on n1.
node_field() {
    ctl n1 --json nodes | /usr/bin/python3 -c '
import json, sys
for n in json.load(sys.stdin)["nodes"]:
    if n["node"] == sys.argv[1]:
        v = n.get(sys.argv[2])
        print("" if v is None else v)' "$1" "$2"
}
job_ended() { [[ $(job_field n1 "$1" state) =~ ^(completed|failed|cancelled)$ ]]; }
events_of() { db "SELECT kind || ': ' || message FROM events WHERE job_id = $1 ORDER BY id"; }

# --- job A lands on the liar, which cannot start its ranks.
elastic_job "$T/a.json" 5000 "2:2" 100000 50 '"max_restarts": 0'
sed -i 's|"max_restarts": 100, ||' "$T/a.json"
grep -q '"max_restarts": 0}' "$T/a.json" || fail "job A's spec: $(cat "$T/a.json")"
a=$(ctl n1 submit "$T/a.json")
wait_for 60 node_is n1 liar quarantined
why=$(node_field liar quarantine)
[[ $why == *"workers asks for 3 workers but this node has 1 GPU"* ]] ||
    fail "the quarantine does not say why: '$why'"
until=$(node_field liar quarantined_until)
[[ $until =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$ ]] || fail "no quarantine end: '$until'"
(($(date -u -d "$until" +%s) > $(date -u +%s) + 60)) || fail "the quarantine ends too soon: $until"
ctl n1 nodes >"$T/nodes.txt"
grep -q "^liar  *quarantined " "$T/nodes.txt" || fail "gptctl nodes: $(cat "$T/nodes.txt")"
grep -q "^quarantined: liar until $until: .*workers asks for 3 workers" "$T/nodes.txt" ||
    fail "gptctl nodes does not say why and until when: $(cat "$T/nodes.txt")"

# --- job B waits, naming the quarantine, while A runs on n1 and n3.
wait_for 60 job_step_at_least n1 "$a" 1
elastic_job "$T/b.json" 200 "1:1" 100000 50
b=$(ctl n1 submit "$T/b.json")
job_is n1 "$a" running || fail "job A is not running while B waits: $(job_field n1 "$a" state)"
wf=$(list_field "$b" waiting_for)
[[ $wf == *"quarantined: liar"* ]] || fail "job B's queue reason does not name the quarantine: '$wf'"

wait_for 180 job_ended "$a"
wait_for 180 job_ended "$b"
for j in "$a" "$b"; do
    [[ $(job_field n1 "$j" state) == completed ]] ||
        fail "job $j: $(job_field n1 "$j" state): $(ctl n1 --json status "$j"); $(events_of "$j")"
    [[ $(job_field n1 "$j" restarts) == 0 ]] || fail "job $j used a restart: $(events_of "$j")"
done
grep -q "agent: round [0-9]* of job $a: ranks" "$T/n3.log" || fail "job A never ran on n3"
! grep -q "agent: round [0-9]* of job $b: ranks" "$T/liar.log" || fail "job B ran on the liar"
events_of "$a" | grep -q "^node_quarantined: node liar quarantined for [0-9]* s" ||
    fail "no node_quarantined event: $(events_of "$a")"
events_of "$a" | grep -q "placed again without the quarantined node (no restart used)" ||
    fail "job A's history does not say it was placed again: $(events_of "$a")"
for n in n1 n3; do
    [[ -z $(node_field "$n" quarantine) ]] || fail "the honest node $n was quarantined"
done
node_is n1 liar quarantined || fail "the liar's quarantine ended early: $(node_state n1 liar)"

# --- the liar comes back with another claim: placed again.
kill_node liar
start_node liar --workers 1
wait_for 30 node_is n1 liar idle
[[ -z $(node_field liar quarantine) ]] || fail "the quarantine stayed: $(node_field liar quarantine)"
echo "liar quarantined ($why) until $until; jobs $a and $b completed with restarts 0"
