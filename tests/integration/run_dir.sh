#!/usr/bin/env bash
# Foreground runs with a home (issue 35, item 4), played as a user types
# them: `gptd run job.json` twice in a row both train (no "belongs to
# another `gptd run`" refusal), each in a new run folder under the job's
# snapshot folder holding metrics.jsonl, spec.json, overrides.json and its
# snapshots; --resume continues the newest run folder and appends to its
# metrics.jsonl; --run-dir DIR is refused for a second fresh run (the
# refusal stays for real conflicts, naming --overwrite) and --overwrite
# starts it afresh; gptctl plot takes run folders; gptd run -m ends with its
# runs ranked by best validation loss.
#   run_dir.sh GPTD GPTCTL
source "$(dirname "$0")/run_common.sh"
GPTD=$1
GPTCTL=$2
cd "$T"
cat >job.json <<'JSON'
{"name": "tiny",
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 6, "vocab_size": 10},
 "data": {"kind": "synthetic", "task": "addition", "digits": 2},
 "trainer": {"max_steps": 6, "micro_batch": 8, "global_batch": 8, "log_every": 2,
             "eval_every": 3, "eval_batches": 1, "threads": 1},
 "optimizer": {"lr": 1e-3, "warmup_steps": 0},
 "snapshot": {"every": 100}}
JSON

# --- the same command twice: two runs, two folders.
"$GPTD" run job.json optimizer.lr=2e-3 >out1 2>err1 || fail "first run: $(cat err1)"
"$GPTD" run job.json optimizer.lr=2e-3 >out2 2>err2 || fail "a plain rerun failed: $(cat err2)"
has 'belongs to another' err2 && fail "the rerun was refused: $(cat err2)"
mapfile -t runs < <(ls -d gptd-snapshots/tiny/run-* | sort)
((${#runs[@]} == 2)) || fail "want 2 run folders: $(ls -R gptd-snapshots)"
for r in "${runs[@]}"; do
    for f in metrics.jsonl spec.json overrides.json snap-000000000006.gpts .gptd-owner; do
        [[ -s $r/$f ]] || fail "$r lacks $f: $(ls -A "$r")"
    done
    [[ $(jq -c . "$r/overrides.json") == '["optimizer.lr=2e-3"]' ]] ||
        fail "$r/overrides.json: $(cat "$r/overrides.json")"
    [[ $(jq .optimizer.lr "$r/spec.json") == 0.002 ]] || fail "$r/spec.json: $(cat "$r/spec.json")"
    [[ $(last_metric "$r/metrics.jsonl" step) == 6 ]] || fail "$r/metrics.jsonl: $(cat "$r/metrics.jsonl")"
    has '^{"type":"event","kind":"start"' "$r/metrics.jsonl" || fail "$r/metrics.jsonl has no events"
    has -F "the run's records are in $r " err1 err2 || fail "no run told where its records are"
done

# --- --resume continues the newest run folder, appending its records.
"$GPTD" run job.json optimizer.lr=2e-3 trainer.max_steps=8 --resume >out3 2>err3 ||
    fail "resume: $(cat err3)"
[[ -e ${runs[1]}/snap-000000000008.gpts && ! -e ${runs[0]}/snap-000000000008.gpts ]] ||
    fail "resume did not continue the newest run: $(ls -R gptd-snapshots)"
[[ $(jq -r 'select(.type=="metric") | .step' "${runs[1]}/metrics.jsonl" | tr '\n' ' ') == "2 3 4 6 8 " ]] ||
    fail "resume's records: $(jq -c 'select(.type=="metric") | .step' "${runs[1]}/metrics.jsonl")"

# --- an explicit --run-dir: a second fresh run is a real conflict.
"$GPTD" run job.json --run-dir mine >/dev/null 2>err4 || fail "--run-dir: $(cat err4)"
rc=0
"$GPTD" run job.json --run-dir mine >/dev/null 2>err5 || rc=$?
((rc == 1)) || fail "a second fresh run into --run-dir mine: rc $rc"
has 'snapshot.dir mine belongs to another `gptd run`.*--overwrite' err5 || fail "refusal: $(cat err5)"
echo keep >mine/notes.txt
"$GPTD" run job.json --run-dir mine --overwrite trainer.max_steps=4 >/dev/null 2>err6 ||
    fail "--overwrite: $(cat err6)"
[[ -e mine/snap-000000000004.gpts && ! -e mine/snap-000000000006.gpts && -e mine/notes.txt ]] ||
    fail "--overwrite left: $(ls -A mine)"
(($(jq -c 'select(.type=="event" and .kind=="start")' mine/metrics.jsonl | wc -l) == 1)) ||
    fail "--overwrite kept the old records: $(cat mine/metrics.jsonl)"
rc=0
"$GPTD" run job.json --overwrite >/dev/null 2>err7 || rc=$?
((rc == 2)) && has 'overwrite reuses a --run-dir' err7 || fail "--overwrite alone: rc $rc $(cat err7)"

# --- gptctl plot draws run folders (no gptd needed).
GPTD_SOCKET=$T/none.sock "$GPTCTL" plot "${runs[0]}" mine -o runs.svg >plot.out ||
    fail "plot of run folders: $(cat plot.out)"
has ">${runs[0]##*/} lr=2e-3<" runs.svg || fail "plot legend: $(grep -o '>[^<]*<' runs.svg | head)"
has ">mine max_steps=4<" runs.svg || fail "plot legend of mine: $(grep -o '>[^<]*<' runs.svg | head)"
(($(grep -c '<polyline' runs.svg) >= 2)) || fail "plot drew no curves"

# --- gptd run -m: the runs, then the table ranked by best validation loss.
"$GPTD" run job.json -m optimizer.lr=1e-3,3e-3 model.n_embd=32,48 >sweep.out 2>sweep.err ||
    fail "gptd run -m: $(cat sweep.err)"
table=$(sed -n '/^sweep of 4 runs in gptd-snapshots\/tiny\/run-[0-9-]*, best validation loss first:$/,$p' sweep.out)
[[ -n $table ]] || fail "no sweep summary: $(tail -8 sweep.out)"
sed -n 2p <<<"$table" | has -E '^RANK +RUN +OVERRIDES +BEST VAL +FINAL LOSS +STEPS +TOKENS +TIME S$' ||
    fail "summary header: $table"
rows=$(tail -n +3 <<<"$table")
(($(wc -l <<<"$rows") == 4)) || fail "want 4 rows: $table"
vals=$(awk '{ print $5 }' <<<"$rows")
[[ $vals == "$(sort -g <<<"$vals")" ]] || fail "not sorted by best val loss: $table"
while read -r rank run lr embd best final steps tokens time; do
    [[ $run =~ ^m[0-3]$ && $lr == lr=* && $embd == n_embd=* && $steps == 6 && $tokens == 288 &&
       $time =~ ^[0-9]+\.[0-9]$ ]] || fail "summary row: $rank $run $lr $embd $best $final $steps $tokens $time"
done <<<"$rows"
# --- the resolved spec prints numbers as written: 0.9, not 0.90000000000000002.
"$GPTD" run job.json --print-spec >spec.out
has '"weight_decay": 0.1,' spec.out && has '^      0.9,$' spec.out || fail "--print-spec: $(cat spec.out)"
has '"weight_decay": 0.1,' "${runs[0]}/spec.json" || fail "spec.json: $(cat "${runs[0]}/spec.json")"
has '0000000' spec.out "${runs[0]}/spec.json" && fail "long floats: $(grep 0000000 spec.out)"
echo "run_dir ok"
