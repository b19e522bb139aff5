#!/usr/bin/env bash
# A sweep a user can read (issue 35, item 1): `gptctl submit -m` stores each
# job's overrides with it, and `list`, `list --sweep`, `status` and the plot
# legend show them ("#5 lr=1e-3 n_embd=48"); `list --sweep` ends with, and
# `gptctl sweep ID` prints, the runs sorted by best validation loss, each
# with its overrides, steps, tokens and time; the dashboard's job list
# (/api/jobs, which app.js shows beside the name) carries them too.
source "$(dirname "$0")/daemon_common.sh"

cat >"$T/job.json" <<'JSON'
{"name": "adder",
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 6, "vocab_size": 10},
 "data": {"kind": "synthetic", "task": "addition", "digits": 2},
 "trainer": {"max_steps": 8, "micro_batch": 8, "global_batch": 8, "log_every": 2,
             "eval_every": 4, "eval_batches": 1, "threads": 1},
 "optimizer": {"lr": 1e-3, "warmup_steps": 0},
 "snapshot": {"every": 100}}
JSON
start_gptd --http 127.0.0.1:0
wait_for 10 grep -q 'http: serving /metrics on 127.0.0.1:[0-9]' "$T/gptd.0.log"
PORT=$(grep -o 'http: serving /metrics on 127.0.0.1:[0-9]*' "$T/gptd.0.log" | tail -n1 | cut -d: -f3)

out=$("$GPTCTL" submit -m "$T/job.json" optimizer.lr=1e-3,3e-3 model.n_embd=32,48 trainer.seed=7)
sweep=$(grep -o 'sweep sw-[0-9a-f]*' <<<"$out" | head -n1 | cut -d' ' -f2)
[[ -n $sweep ]] || fail "no sweep id: $out"
ids=$(grep -o '^[0-9]*' <<<"$out" | tr '\n' ' ')
(($(wc -w <<<"$ids") == 4)) || fail "want 4 jobs: $out"
for j in $ids; do
    wait_for 120 job_is "$j" completed
done

# list: every job of the sweep with the overrides that set it apart (the
# key all four share, trainer.seed, is left out).
out=$("$GPTCTL" list)
head -1 <<<"$out" | has 'OVERRIDES$' || fail "list has no OVERRIDES column: $out"
set -- $ids
for want in "$1 .*lr=1e-3 n_embd=32$" "$2 .*lr=1e-3 n_embd=48$" "$3 .*lr=3e-3 n_embd=32$" \
            "$4 .*lr=3e-3 n_embd=48$"; do
    has "^ *$want" <<<"$out" || fail "list lacks \"$want\": $out"
done
has 'seed' <<<"$out" && fail "list shows the override all jobs share: $out"
# The overrides are stored with the job: --json carries them as an object.
"$GPTCTL" --json list | has "\"overrides\":{\"optimizer.lr\":\"1e-3\",\"model.n_embd\":\"48\"}" ||
    fail "list --json lacks the overrides object"

# list --sweep: the jobs, then the runs best first.
out=$("$GPTCTL" list --sweep "$sweep")
has "^sweep $sweep: 4 jobs, best validation loss first$" <<<"$out" || fail "no summary: $out"
summary=$(sed -n '/^sweep /,$p' <<<"$out" | tail -n +2)
head -1 <<<"$summary" | has -E '^RANK +JOB +OVERRIDES +BEST VAL +FINAL LOSS +STEPS +TOKENS +TIME +STATE$' ||
    fail "summary header: $summary"
rows=$(tail -n +2 <<<"$summary")
(($(wc -l <<<"$rows") == 4)) || fail "want 4 summary rows: $summary"
# Sorted by best validation loss: column 5 (after "lr=.. n_embd=..") ascends.
vals=$(awk '{ print $5 }' <<<"$rows")
[[ $vals == "$(sort -g <<<"$vals")" ]] || fail "summary not sorted by best val loss: $summary"
# Each row: rank, #job, its overrides, steps 8, tokens 8*8*6=384, a time, completed.
while read -r rank job lr embd best final steps tokens time state; do
    [[ $job =~ ^#[0-9]+$ && $lr == lr=* && $embd == n_embd=* && $steps == 8 && $tokens == 384 &&
       $time =~ ^[0-9]+:[0-9][0-9]$ && $state == completed ]] || fail "summary row: $rank $job $lr $embd $best $final $steps $tokens $time $state"
    "$ITEST" sql "$T/state/gptd.db" "SELECT min(val_loss) FROM metrics WHERE job_id = ${job#\#}" |
        awk -v b="$best" '{ d = $1 - b; exit !(d < 0.0001 && d > -0.0001) }' ||
        fail "job $job: best val loss $best is not its lowest"
done <<<"$rows"
# gptctl sweep ID prints the same table at any time.
[[ $("$GPTCTL" sweep "$sweep" | tail -n +2) == "$(sed -n '/^sweep /,$p' <<<"$out")" ]] ||
    fail "gptctl sweep differs from list --sweep: $("$GPTCTL" sweep "$sweep")"

# status shows the overrides and the fuller record.
out=$("$GPTCTL" status "$4")
has -E '^overrides: +lr=3e-3 n_embd=48$' <<<"$out" || fail "status lacks the overrides: $out"
has -E "^sweep: +$sweep$" <<<"$out" || fail "status lacks the sweep: $out"
has -E '^best val loss: +[0-9]+\.[0-9]{4}$' <<<"$out" || fail "status lacks best val loss: $out"
has -E '^tokens seen: +384$' <<<"$out" || fail "status lacks tokens seen: $out"
has -E '^elapsed: +[0-9]+:[0-9][0-9]$' <<<"$out" || fail "status lacks elapsed: $out"

# The plot legend names each job by its overrides.
"$GPTCTL" plot $ids -o "$T/sweep.svg" >/dev/null
has ">#$1 lr=1e-3 n_embd=32<" "$T/sweep.svg" || fail "plot legend: $(grep -o '>#[^<]*<' "$T/sweep.svg")"
has ">#$4 lr=3e-3 n_embd=48<" "$T/sweep.svg" || fail "plot legend: $(grep -o '>#[^<]*<' "$T/sweep.svg")"
# The dashboard's job list.
wait_for 10 bash -c "curl -sf http://127.0.0.1:$PORT/api/jobs | grep -q '\"overrides\":{\"optimizer.lr\":\"3e-3\",\"model.n_embd\":\"48\"}'" ||
    fail "/api/jobs lacks the overrides: $(curl -s "http://127.0.0.1:$PORT/api/jobs")"
echo "daemon_sweep_readable ok"
