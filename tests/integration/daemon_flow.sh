#!/usr/bin/env bash
# gptd + gptctl, the main flow: exit codes (gptd not running too), validate,
# submit -> completes -> the metrics in SQLite equal what `logs` printed;
# two `logs -f` followers started mid-run see history then live metrics and
# exit when the job ends; cancel; three queued jobs run in order; priority;
# snapshots, sample, plot, nodes.
source "$(dirname "$0")/daemon_common.sh"

tiny_job "$T/job.json" 60
tiny_job "$T/long.json" 100000 5 50

# --- gptd not running: exit 3 with a message naming the socket.
set +e
out=$("$GPTCTL" list 2>&1); rc=$?
set -e
[[ $rc -eq 3 ]] || fail "list without gptd: rc $rc, want 3"
[[ $out == *"$SOCK"* ]] || fail "the unreachable message does not name the socket: $out"

# --- usage errors: exit 2.
set +e
"$GPTCTL" frobnicate >/dev/null 2>&1; rc1=$?
"$GPTCTL" logs >/dev/null 2>&1; rc2=$?
"$GPTCTL" cancel notanumber >/dev/null 2>&1; rc3=$?
set -e
[[ $rc1 -eq 2 && $rc2 -eq 2 && $rc3 -eq 2 ]] || fail "usage errors: rc $rc1 $rc2 $rc3, want 2"

start_gptd

# --- validate: good file, bad override (exit 1 naming the path).
"$GPTCTL" validate "$T/job.json" >/dev/null
set +e
out=$("$GPTCTL" validate "$T/job.json" model.n_head=3 2>&1); rc=$?
set -e
[[ $rc -eq 1 ]] || fail "invalid spec: rc $rc, want 1"
[[ $out == *model* ]] || fail "the spec error does not name the path: $out"

# --- requests that fail: exit 1.
set +e
"$GPTCTL" status 999 >/dev/null 2>&1; rc=$?
set -e
[[ $rc -eq 1 ]] || fail "status of a missing job: rc $rc, want 1"

# --- submit, follow, then compare the database with `logs --json`.
id=$("$GPTCTL" submit "$T/job.json")
[[ $id =~ ^[0-9]+$ ]] || fail "submit printed \"$id\", not a job id"
wait_for 60 job_is "$id" completed
"$GPTCTL" --json logs "$id" >"$T/logs.json"
grep -q '"type":"end".*"state":"completed"' "$T/logs.json" || fail "logs did not end"
metric_steps "$T/logs.json" >"$T/logged_steps"
[[ $(wc -l <"$T/logged_steps") -eq 12 ]] || fail "want 12 metrics (60 steps / 5)"
"$ITEST" sql "$T/state/gptd.db" "SELECT step FROM metrics WHERE job_id = $id ORDER BY step" \
    >"$T/db_steps"
diff "$T/logged_steps" "$T/db_steps" || fail "metric steps in the database differ from logs"
# Losses too, to the precision printed.
grep '"type":"metric"' "$T/logs.json" | grep -o '"loss":[-0-9.e]*' | cut -d: -f2 |
    awk '{printf "%.6f\n", $1}' >"$T/logged_loss"
"$ITEST" sql "$T/state/gptd.db" "SELECT printf('%.6f', loss) FROM metrics WHERE job_id = $id
    ORDER BY step" >"$T/db_loss"
diff "$T/logged_loss" "$T/db_loss" || fail "losses in the database differ from logs"
"$GPTCTL" list | has "completed" || fail "list does not show the completed job"

# --- snapshots, sample, plot, nodes on the finished job.
"$GPTCTL" snapshots "$id" | has "snap-" || fail "no snapshots listed"
"$GPTCTL" --json sample "$id" --prompt 12 --tokens 4 | has '"text"' || fail "sample"
"$GPTCTL" plot "$id" -o "$T/loss.svg" >/dev/null
grep -q "<polyline" "$T/loss.svg" && grep -q ">step<" "$T/loss.svg" || fail "plot svg"
"$GPTCTL" nodes | has idle || fail "nodes"
# Each node reports its compute backends and GPUs (none on a CPU host).
"$GPTCTL" --json nodes | has '"backends":\["cpu"' || fail "nodes: no backends"
"$GPTCTL" nodes | head -n1 | has DEVICES || fail "nodes: no DEVICES column"

# --- two followers start mid-run: history, then live, then exit at the end.
long=$("$GPTCTL" submit "$T/long.json" trainer.max_steps=600)
wait_for 60 job_step_at_least "$long" 100
"$GPTCTL" --json logs -f "$long" >"$T/f1.json" &
f1=$!
"$GPTCTL" logs --follow "$long" >"$T/f2.txt" &
f2=$!
wait_for 120 job_is "$long" completed
wait_for 20 bash -c "! kill -0 $f1 && ! kill -0 $f2"
wait "$f1" || fail "follower 1 exited with an error"
wait "$f2" || fail "follower 2 exited with an error"
metric_steps "$T/f1.json" >"$T/f1_steps"
[[ $(head -n1 "$T/f1_steps") -eq 5 ]] || fail "follower 1 missed the history"
[[ $(tail -n1 "$T/f1_steps") -eq 600 ]] || fail "follower 1 missed the live end"
# (An evaluation may send a second record for a step it completes: count steps.)
n=$(sort -n -u "$T/f1_steps" | wc -l)
[[ $n -eq 120 ]] || fail "follower 1: $n distinct metric steps, want 120"
sort -n -c "$T/f1_steps" || fail "follower 1: steps out of order"
grep -q "step 600/600" "$T/f2.txt" || fail "follower 2 did not print the last step"
grep -q "job $long completed" "$T/f2.txt" || fail "follower 2 did not see the end"

# --- cancel a running job.
c=$("$GPTCTL" submit "$T/long.json")
wait_for 60 job_step_at_least "$c" 20
"$GPTCTL" cancel "$c" >/dev/null
wait_for 60 job_is "$c" cancelled
set +e
"$GPTCTL" cancel "$c" >/dev/null 2>&1; rc=$?
set -e
[[ $rc -eq 1 ]] || fail "cancelling a cancelled job: rc $rc, want 1"

# --- queue order: a long job holds the runner; then three FIFO jobs and one
# with a higher priority. The priority job runs first, then FIFO.
hold=$("$GPTCTL" submit "$T/long.json")
wait_for 60 job_is "$hold" running
a=$("$GPTCTL" submit "$T/job.json" trainer.max_steps=10)
b=$("$GPTCTL" submit "$T/job.json" trainer.max_steps=10)
cc=$("$GPTCTL" submit "$T/job.json" trainer.max_steps=10)
p=$("$GPTCTL" submit "$T/job.json" trainer.max_steps=10 --priority 5)
for j in $a $b $cc $p; do job_is "$j" queued || fail "job $j should be queued"; done
"$GPTCTL" cancel "$hold" >/dev/null
for j in $a $b $cc $p; do wait_for 60 job_is "$j" completed; done
order=$("$ITEST" sql "$T/state/gptd.db" \
    "SELECT job_id FROM runs WHERE job_id IN ($a,$b,$cc,$p) ORDER BY started, id" | tr '\n' ' ')
[[ $order == "$p $a $b $cc " ]] || fail "run order \"$order\", want \"$p $a $b $cc \""

# --- gptd stops cleanly when idle.
kill -TERM "$GPTD_PID"
wait "$GPTD_PID" || fail "gptd exited with $? on SIGTERM"
echo "daemon_flow: ok"
