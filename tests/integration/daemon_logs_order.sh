#!/usr/bin/env bash
# `gptctl logs` prints a resumed job's records in the order they happened:
# run by run, each run by step, so the second run's records follow the
# first's although they reuse its steps. Job A trains to step 300 with a
# snapshot every 100, then is resumed from its step-100 snapshot and
# extended to 400: run 2 redoes steps 101-300. `logs`, `logs --since` and
# `logs -f` (started while run 2 trains) each print every record once, with
# non-decreasing timestamps, and the 400 metrics span more than one replay
# page (256 metrics), so the page boundary falls inside the overlap.
source "$(dirname "$0")/daemon_common.sh"

# check FILE WHAT FIRST [FOLLOWED]: every record once, times non-decreasing,
# run 2's metric steps 101..400 once each, both runs' records there; after
# the end, one metric per step FIRST..400 (a follower that began during run
# 2 also saw run 1's records of steps run 2 had not redone yet).
check() {
    local f=$1 what=$2 first=$3 follow=${4:-0} n dups bad
    grep -v '"type":"end"' "$f" >"$f.recs"
    n=$(wc -l <"$f.recs")
    dups=$(sort "$f.recs" | uniq -d | wc -l)
    [[ $dups == 0 ]] || fail "$what: $dups records printed twice"
    bad=$(grep -o '"time":[0-9.e+-]*' "$f.recs" | cut -d: -f2 |
        awk 'NR > 1 && $1 < prev && !bad { bad = NR } { prev = $1 } END { if (bad) print bad }')
    [[ -z $bad ]] || fail "$what: out of time order at record $bad: $(sed -n "$((bad - 1)),${bad}p" "$f.recs" | cut -c1-200)"
    [[ $(grep -c '"time":' "$f.recs") == "$n" ]] || fail "$what: a record without a time"
    # Run 2's metrics are steps 101..400 (or FIRST..400), each once.
    grep '"type":"metric"' "$f.recs" | grep '"run_id":2,' | grep -o '"step":[0-9]*' | cut -d: -f2 |
        sort -n >"$f.run2"
    seq $((first > 101 ? first : 101)) 400 | diff -q - "$f.run2" >/dev/null ||
        fail "$what: run 2's metric steps are not 101..400 once each: $(uniq -d "$f.run2" | head -3)"
    if [[ $follow == 0 ]]; then # after the end: one record per step, run 1's up to 100
        metric_steps "$f.recs" | sort -n >"$f.steps"
        seq "$first" 400 | diff -q - "$f.steps" >/dev/null ||
            fail "$what: metric steps are not $first..400 once each: $(uniq -d "$f.steps" | head -3)"
    fi
    (($(grep -c '"kind":"done"' "$f.recs") == 2)) ||
        fail "$what: not both runs' ends: $(grep -o '"kind":"[a-z]*"' "$f.recs" | sort | uniq -c | tr -s '\n ' ' ')"
    ((first > 1)) && return
    grep '"kind":"resume"' "$f.recs" | has 'at step 100' || fail "$what: no resume of run 2"
    (($(grep -c '"kind":"start"' "$f.recs") == 1)) || fail "$what: not one start"
}

tiny_job "$T/job.json" 300 1 100
start_gptd
a=$("$GPTCTL" submit "$T/job.json")
wait_for 60 job_is "$a" completed
snap=$("$GPTCTL" --json snapshots "$a" | grep -o '"id":[0-9]*,"step":100,' | cut -d: -f2 | cut -d, -f1)
[[ -n $snap ]] || fail "no step-100 snapshot: $("$GPTCTL" --json snapshots "$a")"
"$GPTCTL" resume "$a" --snapshot "$snap" trainer.max_steps=400 >/dev/null
wait_for 30 job_is "$a" running
"$GPTCTL" --json logs -f "$a" >"$T/follow.json"
wait_for 60 job_is "$a" completed
[[ $(tail -n1 "$T/follow.json") == *'"type":"end"'* ]] || fail "logs -f did not end with the job"

"$GPTCTL" --json logs "$a" >"$T/all.json"
check "$T/all.json" "logs" 1
check "$T/follow.json" "logs -f" 1 1
"$GPTCTL" --json logs --since 150 "$a" >"$T/since.json"
check "$T/since.json" "logs --since 150" 150
# The first run's last record (its end at step 300) comes before the second
# run's resume, not among run 2's steps 101-300.
grep -n '"kind":"resume"' "$T/all.json.recs" | head -n1 | cut -d: -f1 >"$T/resume.line"
grep -n '"run_id":1,' "$T/all.json.recs" | tail -n1 | cut -d: -f1 >"$T/run1.last"
(($(cat "$T/run1.last") < $(cat "$T/resume.line"))) || fail "a run-1 record after run 2's resume"
# Run 2's world resumes from the step-100 snapshot: its event is at step
# 100, where the run starts, not at 300, where run 1 ended.
grep '"kind":"world"' "$T/all.json.recs" | grep '"run_id":2,' | has '"step":100,' ||
    fail "run 2's world event is not at step 100: $(grep '"kind":"world"' "$T/all.json.recs")"
# The text output has the same records in the same order.
"$GPTCTL" logs "$a" | grep -c . >"$T/text.n"
(($(cat "$T/text.n") >= $(wc -l <"$T/all.json.recs"))) || fail "text logs print fewer records"
echo "daemon_logs_order: ok ($(wc -l <"$T/all.json.recs") records in order)"
