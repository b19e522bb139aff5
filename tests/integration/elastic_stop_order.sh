#!/usr/bin/env bash
# Every gptd of a cluster stopped at once (`scontrol requeue`, a host-wide
# shutdown), a member first: the member's leave re-forms the world at an
# agreed step boundary where every node writes its snapshot; the
# coordinator's own stop then arrives while that snapshot is being written.
# The job must end stopped at that snapshot (never aborted mid-way, losing
# the steps since the last periodic one), and resume from it when the
# cluster is back: the new run's first metric is the step after it.
source "$(dirname "$0")/elastic_common.sh"

COORD=n1
start_node n1 --coordinator
start_node n2
# Steps of a few hundred milliseconds, so the coordinator's stop lands while
# the leave's step boundary and snapshot are still ahead; periodic
# snapshots far apart: any snapshot below step 5000 is the stop's.
cat >"$T/job.json" <<JOB
{"name": "stop-order",
 "model": {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 6, "vocab_size": 10},
 "data": {"kind": "synthetic", "task": "addition", "digits": 2},
 "trainer": {"max_steps": 100000, "micro_batch": 120, "global_batch": 480, "log_every": 1,
             "eval_every": 0, "threads": 1, "seed": 3},
 "optimizer": {"lr": 1e-3, "warmup_steps": 0},
 "distributed": {"nodes": "2:2", "max_restarts": 100},
 "snapshot": {"every": 5000}}
JOB
id=$(ctl n1 submit "$T/job.json")
wait_for 60 world_size_is "$id" 2
wait_for 60 job_step_at_least n1 "$id" 3

# n2 first; n1 as soon as its leave has re-opened the round.
reached=$(db "SELECT max(step) FROM metrics WHERE job_id = $id")
kill -TERM "${NODE_PID[n2]}"
left() { grep -q "round [0-9]* opened: node n2 left" "$T/n1.log"; }
wait_for 20 left
kill -TERM "${NODE_PID[n1]}"
for n in n2 n1; do
    wait "${NODE_PID[$n]}" || fail "gptd $n exited with $? after SIGTERM"
    unset "NODE_PID[$n]"
done

snap=$(db "SELECT max(step) FROM events WHERE job_id = $id AND kind = 'snapshot'")
[[ -n $snap ]] || fail "no snapshot was written when the cluster stopped (step $reached reached)"
((snap >= reached)) || fail "the stop snapshot is at step $snap; step $reached was reached"
last=$(db "SELECT max(step) FROM metrics WHERE job_id = $id")
((snap == last)) || fail "steps $((snap + 1))..$last were trained after the stop snapshot $snap"
for n in n1 n2; do
    ls "$T/$n/jobs/$id/snapshots/" | has "$(printf '%012d' "$snap")" ||
        fail "$n has no copy of the step $snap snapshot"
done
state=$(db "SELECT state FROM jobs WHERE id = $id")
[[ $state == queued ]] || fail "job $id is $state after the stop, want queued (to resume)"
echo "stopped at the step $snap snapshot (step $reached reached before the signals)"

# --- the cluster is back: the job resumes from exactly that snapshot.
start_node n1 --coordinator
start_node n2
resumed_run() {
    [[ -n $(db "SELECT min(step) FROM metrics WHERE job_id = $id AND run_id =
                (SELECT max(id) FROM runs WHERE job_id = $id)
                AND run_id > (SELECT min(id) FROM runs WHERE job_id = $id)") ]]
}
wait_for 60 resumed_run
first=$(db "SELECT min(step) FROM metrics WHERE job_id = $id AND run_id =
            (SELECT max(id) FROM runs WHERE job_id = $id)")
((first == snap + 1)) || fail "the resumed run starts at step $first, want $((snap + 1))"
ctl n1 cancel "$id" >/dev/null
check_history "$id"
echo "elastic_stop_order: ok (stop snapshot at step $snap, resumed at step $first)"
