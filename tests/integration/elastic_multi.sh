#!/usr/bin/env bash
# Several jobs at once on a cluster of three gptd (n1 the coordinator, n2,
# n3): two 1-node jobs run side by side on disjoint nodes (both running and
# both training at the same time, `gptctl nodes` showing each node's job,
# `gptctl status` both jobs); a
# 2-node job waits for two free nodes while they hold two of the three, and
# `gptctl list` says so ("queued #1: needs 2 nodes, 1 free"), with the job
# behind it in order ("#2") and a higher priority going first; a node freed
# by a cancel is taken by the next job at once (its start follows the
# cancelled job's end by less than 3 s, from the events' times); a node that
# dies affects only the job on it.
source "$(dirname "$0")/elastic_common.sh"

COORD=n1
start_node n1 --coordinator
start_node n2
start_node n3
# Every node is known to the coordinator with its agent's state.
three_idle() {
    [[ $(ctl n1 --json nodes | grep -o '"state":"idle"' | wc -l) == 3 ]]
}
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
# node_job NODE: the job placed on NODE ("" when none).
node_job() {
    ctl n1 --json nodes | /usr/bin/python3 -c '
import json, sys
for n in json.load(sys.stdin)["nodes"]:
    if n["node"] == sys.argv[1]:
        print("" if n.get("job") is None else n["job"])' "$1"
}
# run_time JOB: when JOB started on the cluster (its "run" event).
run_time() { db "SELECT min(time) FROM events WHERE job_id = $1 AND kind = 'run'"; }

# --- two 1-node jobs run side by side.
elastic_job "$T/one.json" 100000 "1:1" 100000 5
elastic_job "$T/two.json" 100000 "2:2" 100000 5
a=$(ctl n1 submit "$T/one.json")
b=$(ctl n1 submit "$T/one.json")
wait_for 30 job_is n1 "$a" running
wait_for 30 job_is n1 "$b" running
wait_for 30 job_step_at_least n1 "$a" 5
wait_for 30 job_step_at_least n1 "$b" 5
# Both train at once: job a steps on while b runs.
sa=$(job_field n1 "$a" step)
wait_for 20 job_step_at_least n1 "$a" $((sa + 5))
job_is n1 "$a" running && job_is n1 "$b" running || fail "jobs $a and $b do not run at once"
ctl n1 status | has -E "^running jobs: +$a, $b\$" || fail "status does not list both jobs: $(ctl n1 status)"
# Disjoint nodes: one node each, the third free.
declare -A on=()
for n in n1 n2 n3; do on[$n]=$(node_job "$n"); done
[[ $(printf '%s\n' "${on[@]}" | grep -cx "$a") == 1 ]] || fail "job $a is not on one node: ${on[*]}"
[[ $(printf '%s\n' "${on[@]}" | grep -cx "$b") == 1 ]] || fail "job $b is not on one node: ${on[*]}"
[[ $(printf '%s\n' "${on[@]}" | grep -cx "") == 1 ]] || fail "no node is free: ${on[*]}"
for n in n1 n2 n3; do
    [[ ${on[$n]} == "$b" ]] && node_b=$n
    [[ -z ${on[$n]} ]] && node_free=$n
done
ctl n1 nodes | grep -E "^$node_b +running .* $b +0-0 " >/dev/null ||
    fail "gptctl nodes does not show job $b on $node_b: $(ctl n1 nodes)"
# A member's gptctl sees the same (the table it reads is a second old).
wait_for 10 eval '[[ $(ctl n2 --json nodes | grep -o "\"job\":'"$a"'[,}]" | wc -l) == 1 ]]'


# --- a 2-node job waits for two free nodes; the one behind it waits in order.
c=$(ctl n1 submit "$T/two.json")
d=$(ctl n1 submit "$T/one.json")
wait_for 10 eval '[[ $(list_field '"$c"' waiting_for) == "needs 2 nodes, 1 free" ]]'
[[ $(list_field "$c" queue_position) == 1 ]] || fail "job $c is not first in the queue"
[[ $(list_field "$d" queue_position) == 2 ]] || fail "job $d is not second in the queue"
[[ $(list_field "$d" waiting_for) == "needs 1 node, 1 free; job $c starts first" ]] ||
    fail "job $d: $(list_field "$d" waiting_for)"
ctl n1 list | grep -E "^ *$c +elastic +queued #1: needs 2 nodes, 1 free " >/dev/null ||
    fail "gptctl list does not show why job $c waits: $(ctl n1 list)"
ctl n2 list | has "queued #2: needs 1 node, 1 free; job $c starts first" ||
    fail "a member's gptctl list does not show the queue: $(ctl n2 list)"
job_is n1 "$c" queued && job_is n1 "$d" queued || fail "a job started without its nodes"
# A higher priority goes first.
e=$(ctl n1 submit --priority 5 "$T/two.json")
wait_for 10 eval '[[ $(list_field '"$e"' queue_position) == 1 ]]'
wait_for 10 eval '[[ $(list_field '"$c"' queue_position) == 2 ]]'
ctl n1 cancel "$e" >/dev/null
wait_for 10 eval '[[ $(list_field '"$c"' queue_position) == 1 ]]'

# --- a freed node is taken by the next job at once.
ctl n1 cancel "$a" >/dev/null
wait_for 30 job_is n1 "$a" cancelled
wait_for 10 job_is n1 "$c" running
t_end=$(db "SELECT max(time) FROM events WHERE job_id = $a AND kind = 'state'")
t_start=$(run_time "$c")
/usr/bin/python3 -c 'import sys; e, s = map(float, sys.argv[1:]); sys.exit(not (e <= s < e + 3))' \
    "$t_end" "$t_start" || fail "job $c started at $t_start, job $a ended at $t_end"
echo "elastic_multi: job $c started $(/usr/bin/python3 -c 'import sys; print("%.3f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$t_end" "$t_start") s after job $a ended"
wait_for 60 job_step_at_least n1 "$c" 5
[[ $(db "SELECT max(world_size) FROM metrics WHERE job_id = $c") == 2 ]] ||
    fail "job $c does not run on two nodes"
job_is n1 "$d" queued || fail "job $d runs without a free node"
[[ $(list_field "$d" waiting_for) == "needs 1 node, 0 free" ]] ||
    fail "job $d: $(list_field "$d" waiting_for)"

# --- a node that dies fails only the job on it: a node of job b (or, when
# that is the coordinator, one of job c) dies; the other job goes on.
victim=$node_b gone=$b other=$c
if [[ $node_b == n1 ]]; then
    for n in n2 n3; do [[ $(node_job "$n") == "$c" ]] && victim=$n; done
    gone=$c other=$b
fi
so=$(job_field n1 "$other" step)
rounds=$(db "SELECT count(*) FROM events WHERE job_id = $other AND kind IN ('failure', 'round')")
kill_node "$victim"
wait_for 20 eval 'db "SELECT count(*) FROM events WHERE job_id = '"$gone"' AND kind = '"'"'node_dead'"'"'" | has -x 1'
wait_for 20 job_step_at_least n1 "$other" $((so + 5))
[[ $(db "SELECT count(*) FROM events WHERE job_id = $other AND kind IN ('failure', 'round')") == "$rounds" ]] ||
    fail "job $other re-formed when $victim (job $gone) died: $(db "SELECT kind, message FROM events WHERE job_id = $other")"
job_is n1 "$other" running || fail "job $other stopped when $victim (job $gone) died"
[[ $(db "SELECT count(*) FROM events WHERE job_id = $gone AND kind = 'failure'") == 1 ]] ||
    fail "job $gone did not fail over when $victim died"
echo "elastic_multi: ok"
