#!/usr/bin/env bash
# Two nodes; which failures are retried (issue 19):
#  - a node killed (kill -9) mid-training is retried: the survivor re-forms
#    the world and the job completes, with restarts 1 and a failure event
#    "restart 1 of 3";
#  - a data file removed before a two-node job starts fails it at once on
#    both nodes: restarts 0, "(data error)" in its error;
#  - the member's snapshot folder claimed by another job's owner marker
#    (seen by the member's agent, not the coordinator): failed at once as
#    a "snapshot or model mismatch", restarts 0, the folder untouched.
source "$(dirname "$0")/elastic_common.sh"

COORD=n1
start_node n1 --coordinator
start_node n2
elastic_job "$T/job.json" 1500 "1:2" 50 5 '"wait_timeout_s": 60'
sed -i 's|"max_restarts": 100|"max_restarts": 3|' "$T/job.json"
printf 'abcab cabba %.0s' {1..60} >"$T/text.txt"
cp "$T/text.txt" "$T/other.txt"
cat >"$T/text.json" <<EOT
{"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "vocab_size": 8},
 "data": {"kind": "text", "path": "$T/text.txt"},
 "trainer": {"max_steps": 20, "micro_batch": 2, "global_batch": 4, "eval_every": 0,
             "eval_batches": 1, "threads": 1},
 "distributed": {"nodes": "2:2", "max_restarts": 3, "wait_timeout_s": 60},
 "snapshot": {"every": 5}}
EOT

job_done() { [[ $(job_field n1 "$1" state) =~ ^(completed|failed|cancelled)$ ]]; }
events() { db "SELECT group_concat(message, ' | ') FROM events WHERE job_id = $1 AND kind = '$2'"; }

# --- a node lost: retried.
id=$(ctl n1 submit "$T/job.json")
wait_for 60 world_size_is "$id" 2
wait_for 60 job_step_at_least n1 "$id" 100
# Queued behind it: a two-node job whose data goes, and one whose member
# folder is another job's.
data=$(ctl n1 submit "$T/text.json")
mkdir -p "$T/snaps/other/n2"
printf 'gptd-snapshot-owner 1\ntoken %016x\njob 999\nuid 0\n' 4242 >"$T/snaps/other/n2/.gptd-owner"
other=$(ctl n1 submit "$T/text.json" data.path="$T/other.txt" snapshot.dir="$T/snaps/other")
before=$(cd "$T/snaps/other/n2" && find . -printf "%p %s %m %T@\\n" | sort | md5sum)
step0=$(job_field n1 "$id" step)
kill_node n2
wait_for 30 world_size_is_after "$id" 1 "$step0"
rm "$T/text.txt"
start_node n2
wait_for 120 job_done "$id"
job_is n1 "$id" completed || fail "job $id: $(job_field n1 "$id" state): $(job_field n1 "$id" error)"
[[ $(job_field n1 "$id" restarts) == 1 ]] || fail "job $id: restarts $(job_field n1 "$id" restarts)"
f=$(events "$id" failure)
[[ $f == *"restart 1 of 3 from the newest snapshot"* ]] || fail "job $id: failure events: $f"
echo "node lost: retried, restarts 1: $f"

# --- a data error of a two-node world: at once.
wait_for 60 job_done "$data"
job_is n1 "$data" failed || fail "job $data: $(job_field n1 "$data" state)"
[[ $(job_field n1 "$data" restarts) == 0 ]] || fail "job $data used a restart"
e=$(job_field n1 "$data" error)
[[ $e == *"(data error)"*"$T/text.txt"*"No such file or directory"*"not restarted"* ]] ||
    fail "job $data: $e"
[[ $(events "$data" failure) != *"restart 1 of"* ]] || fail "job $data was restarted"
[[ $(db "SELECT count(*) FROM runs WHERE job_id = $data") == 1 ]] || fail "job $data ran again"
echo "data error on two nodes: $e"

# --- the member's folder is another job's: at once.
wait_for 60 job_done "$other"
job_is n1 "$other" failed || fail "job $other: $(job_field n1 "$other" state)"
[[ $(job_field n1 "$other" restarts) == 0 ]] || fail "job $other used a restart"
e=$(job_field n1 "$other" error)
[[ $e == *"node n2 failed (snapshot or model mismatch)"*"belongs to job 999"*"not restarted"* ]] ||
    fail "job $other: $e"
[[ $(cd "$T/snaps/other/n2" && find . -printf "%p %s %m %T@\\n" | sort | md5sum) == "$before" ]] ||
    fail "job $other touched job 999's folder: $(ls -la "$T/snaps/other/n2")"
echo "member folder of another job: $e"
echo "elastic_fail_retry: ok"
