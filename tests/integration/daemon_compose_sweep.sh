#!/usr/bin/env bash
# Config composition and sweeps as a Hydra user expects them: a three-file
# include chain submitted with gptctl (the daemon stores the merged spec);
# `gptctl validate` and `gptd run --print-spec` without a daemon; a 2x2
# sweep with `gptctl submit -m` makes four jobs under one sweep id, each
# with its combination, listed by `gptctl list --sweep`; `gptd run -m`
# runs the combinations one after another, each in its own folder.
source "$(dirname "$0")/daemon_common.sh"

mkdir -p "$T/conf/model"
cat >"$T/conf/base.yaml" <<'YAML'
data: {kind: synthetic, task: addition, digits: 2}
trainer:
  max_steps: 10
  micro_batch: 16
  global_batch: 16
  log_every: 5
  eval_every: 0
  eval_batches: 2
  threads: 1
optimizer: {lr: 0.001, warmup_steps: 0}
YAML
cat >"$T/conf/model/tiny.yaml" <<'YAML'
model: {n_layer: 2, n_head: 2, n_embd: 32, block_size: 6, vocab_size: 10}
YAML
cat >"$T/conf/job.yaml" <<'YAML'
include: [base.yaml, model/tiny.yaml]
name: composed
trainer:
  max_steps: 12
YAML

# --- offline: validate and print-spec need no daemon.
out=$("$GPTCTL" --socket "$T/none.sock" validate "$T/conf/job.yaml")
# The whole line: "valid" alone would also match "invalid".
[[ $out == "$T/conf/job.yaml: valid (no gptd running: data paths are checked at submit)" ]] ||
    fail "offline validate: $out"
set +e
out=$("$GPTCTL" --socket "$T/none.sock" validate "$T/conf/job.yaml" trainer.max_step=3 2>&1); rc=$?
set -e
[[ $rc -eq 1 && $out == *"the command line: unknown key"* ]] || fail "offline bad key: $rc $out"
# print-spec only prints: run in an empty folder, it leaves it empty (no
# ./gptd-snapshots, the default snapshot folder of `gptd run`).
mkdir "$T/printspec"
spec=$(cd "$T/printspec" && "$GPTD" run "$T/conf/job.yaml" --print-spec)
grep -q '"max_steps": 12' <<<"$spec" || fail "print-spec: the file's own key lost: $spec"
grep -q '"n_embd": 32' <<<"$spec" || fail "print-spec: the included model is missing: $spec"
[[ -z $(ls -A "$T/printspec") ]] || fail "print-spec wrote into its folder: $(ls -A "$T/printspec")"

start_gptd
db() { "$ITEST" sql "$T/state/gptd.db" "$1"; }

# --- the chain, submitted: the stored spec is the merged one.
id=$("$GPTCTL" submit "$T/conf/job.yaml")
wait_for 60 job_is "$id" completed
[[ $(db "SELECT json_extract(spec_json, '\$.trainer.max_steps') || ' ' || json_extract(spec_json, '\$.model.n_layer') FROM jobs WHERE id = $id") == "12 2" ]] ||
    fail "merged spec: $(db "SELECT spec_json FROM jobs WHERE id = $id")"

# --- a 2x2 sweep.
out=$("$GPTCTL" submit "$T/conf/job.yaml" -m optimizer.lr=1e-3,3e-4 trainer.max_steps=6,8)
sweep=$(grep -o 'sweep sw-[0-9a-f]*' <<<"$out" | head -n1 | cut -d' ' -f2)
[[ -n $sweep ]] || fail "no sweep id: $out"
(($(grep -c '^[0-9]' <<<"$out") == 4)) || fail "want 4 jobs: $out"
listed=$("$GPTCTL" --json list --sweep "$sweep" | grep -o "\"sweep\":\"$sweep\"" | wc -l)
((listed == 4)) || fail "list --sweep shows $listed jobs"
combos=$(db "SELECT json_extract(spec_json, '\$.optimizer.lr') || '/' || json_extract(spec_json, '\$.trainer.max_steps') FROM jobs WHERE sweep = '$sweep' ORDER BY id" | tr '\n' ' ')
[[ $combos == "0.001/6 0.001/8 0.0003/6 0.0003/8 " ]] || fail "sweep combinations: $combos"
for j in $(db "SELECT id FROM jobs WHERE sweep = '$sweep'"); do
    wait_for 60 job_is "$j" completed
done
"$GPTCTL" --json list | has "\"sweep\":\"$sweep\"" || fail "list does not show the sweep"
set +e
out=$("$GPTCTL" list --sweep 'bad id' 2>&1); rc=$?
set -e
((rc == 2)) || fail "a bad sweep id: rc $rc: $out"

# --- plot overlays the sweep's jobs, labelled by their overrides, with an lr panel;
# a .png name is refused and nothing is written.
ids=$(db "SELECT id FROM jobs WHERE sweep = '$sweep' ORDER BY id" | tr '\n' ' ')
"$GPTCTL" plot $ids -o "$T/sweep.svg" --lr >/dev/null
(($(grep -c '<polyline' "$T/sweep.svg") >= 8)) || fail "plot: want train and lr curves of 4 jobs"
for j in $ids; do
    grep -q ">#$j lr=[0-9e-]* max_steps=[68]<" "$T/sweep.svg" || fail "plot: no legend for job $j"
done
grep -q ">learning rate<" "$T/sweep.svg" || fail "plot: no lr panel"
set +e
out=$("$GPTCTL" plot $ids -o "$T/sweep.png" 2>&1); rc=$?
set -e
((rc == 2)) && [[ $out == *"only SVG"* && ! -e $T/sweep.png ]] || fail "plot .png: rc $rc: $out"

# --- gptd run -m: one after another, each in its own folder.
(cd "$T" && "$GPTD" run "$T/conf/job.yaml" -m trainer.max_steps=4,6 --snapshot-dir "$T/runs" \
    >"$T/run.out" 2>&1) || fail "gptd run -m: $(cat "$T/run.out")"
[[ -e $T/runs/m0/snap-000000000004.gpts && -e $T/runs/m1/snap-000000000006.gpts ]] ||
    fail "gptd run -m folders: $(ls -R "$T/runs")"
grep -q "sweep run 2 of 2: trainer.max_steps=6" "$T/run.out" || fail "sweep progress: $(cat "$T/run.out")"
echo "daemon_compose_sweep: ok (sweep $sweep)"
