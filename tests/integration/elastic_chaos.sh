#!/usr/bin/env bash
# A bounded chaos loop over a three-node world ("1:3"): at least 12 events,
# each a kill -9 of a random node (the coordinator included) or the restart
# of the node killed before, at random moments. Afterwards:
#  - the job completes;
#  - metric steps strictly increase, with no duplicates;
#  - the loss has no jump larger than normal noise after any resume;
#  - nothing written by an earlier snapshot is lost: every resume starts at
#    or after the newest snapshot recorded before it.
source "$(dirname "$0")/elastic_common.sh"

COORD=n1
NODES=(n1 n2 n3)
start_node n1 --coordinator
start_node n2
start_node n3
elastic_job "$T/job.json" 14000 "1:3" 50 10
id=$(ctl n1 submit "$T/job.json")
wait_for 60 job_step_at_least n1 "$id" 200

RANDOM=${CHAOS_SEED:-$$}
events=0
deadline=$((SECONDS + 150))
while ((events < 12)); do
    ((SECONDS < deadline)) || fail "the chaos loop ran out of time after $events events"
    victim=${NODES[$((RANDOM % 3))]}
    kill_node "$victim"
    events=$((events + 1))
    echo "event $events: killed $victim"
    sleep "0.$((RANDOM % 9 + 1))"
    sleep $((RANDOM % 3))
    if [[ $victim == n1 ]]; then
        start_node n1 --coordinator
    else
        start_node "$victim"
    fi
    events=$((events + 1))
    echo "event $events: restarted $victim"
    # Let the world train a little before the next blow.
    before=$(db "SELECT coalesce(max(step), 0) FROM metrics WHERE job_id = $id")
    wait_for 30 job_step_at_least n1 "$id" $((before + 20))
    job_is n1 "$id" completed && break
done
echo "$events chaos events"

wait_for 180 job_is n1 "$id" completed
check_history "$id"
[[ $(job_field n1 "$id" step) == 14000 ]] || fail "job $id did not reach step 14000"

# The loss around each resume, against the step-to-step noise of the run.
db "SELECT step, run_id, loss FROM metrics WHERE job_id = $id ORDER BY step" >"$T/loss"
/usr/bin/python3 - "$T/loss" <<'EOF' || fail "the loss jumped after a resume"
import sys
rows = [l.strip().split("|") for l in open(sys.argv[1]) if l.strip()]
rows = [(int(s), int(r), float(x)) for s, r, x in rows]
diffs = sorted(abs(b[2] - a[2]) for a, b in zip(rows, rows[1:]) if a[1] == b[1])
noise = diffs[int(0.99 * (len(diffs) - 1))] if diffs else 0.1
worst = 0.0
for a, b in zip(rows, rows[1:]):
    if a[1] != b[1]:
        worst = max(worst, abs(b[2] - a[2]))
        if abs(b[2] - a[2]) > max(2 * noise, 0.05):
            print(f"loss {a[2]:.4f} at step {a[0]} -> {b[2]:.4f} at step {b[0]} after a resume "
                  f"(noise {noise:.4f})")
            sys.exit(1)
print(f"largest change across a resume {worst:.4f}; step-to-step noise (p99) {noise:.4f}")
EOF

# Resumes never go back behind a recorded snapshot.
db "SELECT id, kind, step FROM events WHERE job_id = $id AND kind IN ('snapshot', 'resume')
    ORDER BY id" | awk -F'|' '
    $2 == "snapshot" { if ($3 > newest) newest = $3 }
    $2 == "resume" { if ($3 < newest) { print "resumed at " $3 " after snapshot " newest; bad = 1 }
                     n++ }
    END { print n " resumes"; exit bad }' || fail "a resume lost a snapshot's work"
echo "elastic_chaos: ok ($events events)"
