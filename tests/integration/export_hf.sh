#!/usr/bin/env bash
# Models out and in, end to end: a user trains a tiny character model
# through gptd, then
#  - `gptctl export --format hf` writes a Hugging Face folder (config.json,
#    model.safetensors) as the job's owner, from a relative -o path, and
#    `gptd export` of the same snapshot writes the same bytes;
#  - --snapshot picks an older snapshot (other weights);
#  - the reference GPT-2 (tests/reference/hf_logits.py: the safetensors file
#    read by hand, Conv1D weights [in, out]) computes gptd's logits within
#    1e-4;
#  - export refuses an existing target, a symlink at the final name (its
#    target is not created), a folder the owner cannot write, another
#    user's job and an unknown format; llmc/gguf say "not built" until
#    their writers are;
#  - model.init_from of the export starts a job from the same weights (one
#    step at lr 1e-30 changes nothing: exported again, the bytes are
#    equal), and a model key that contradicts the checkpoint names both
#    values, at submit (a job file without model keys takes the
#    checkpoint's shape) and in `gptd run`;
#  - `gptctl submit --init-from JOB` sets model.init_from to that job's
#    newest snapshot, and refuses another user's job.
# Arguments: GPTD GPTCTL ITEST_CLIENT SOURCE_DIR LOGITS_TOOL
source "$(dirname "$0")/daemon_common.sh"
LOGITS=$5

make_test_user gptdex

mkdir -p "$T/data" "$T/out" "$T/rootonly"
chmod 0755 "$T/data" "$T/rootonly"
chown "$U" "$T/out"
printf 'the quick brown fox jumps over the lazy dog; pack my box with five dozen jugs.\n%.0s' \
    {1..40} >"$T/data/text.txt"
chmod 0644 "$T/data/text.txt"
cat >"$T/job.json" <<JOB
{"model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16},
 "data": {"kind": "text", "path": "$T/data/text.txt"},
 "trainer": {"max_steps": 6, "micro_batch": 4, "global_batch": 4, "eval_every": 0,
             "eval_batches": 1, "log_every": 1, "threads": 1},
 "optimizer": {"lr": 0.01, "warmup_steps": 0},
 "snapshot": {"every": 3, "keep": 0}}
JOB
chmod 0644 "$T/job.json"

start_gptd --data-roots "$T/data" --socket-mode 0666
id=$(as_user submit "$T/job.json")
wait_for 60 job_is "$id" completed

# --- export through the daemon, as the owner, from the user's directory ----
out=$(cd "$T/out" && runuser -u "$U" -- env GPTD_SOCKET="$SOCK" "$T/bin/gptctl" export "$id" \
    --format hf -o model) || fail "gptctl export: $out"
[[ $out == "$T/out/model" ]] || fail "export printed $out"
for f in config.json model.safetensors; do
    [[ -f $T/out/model/$f ]] || fail "no $f in the export"
    [[ $(stat -c %U "$T/out/model/$f") == "$U" ]] || fail "$f is not the owner's"
done
[[ $(stat -c %U "$T/out/model") == "$U" ]] || fail "the folder is not the owner's"
jq -e '.architectures == ["GPT2LMHeadModel"] and .model_type == "gpt2" and .n_layer == 2 and
       .n_head == 2 and .n_embd == 32 and .n_positions == 16 and .n_ctx == 16 and
       .activation_function == "gelu_new" and .layer_norm_epsilon == 1e-5 and
       .tie_word_embeddings == true' "$T/out/model/config.json" >/dev/null ||
    fail "config.json: $(cat "$T/out/model/config.json")"
ls "$T/out" | has tmp && fail "a temporary was left: $(ls "$T/out")"

# --- offline: the same bytes ---------------------------------------------------
snaps=$("$GPTCTL" --json snapshots "$id")
newest=$(jq -r '.snapshots[0].path' <<<"$snaps")
oldest_id=$(jq -r '.snapshots[-1].id' <<<"$snaps")
[[ $(jq -r '.snapshots[0].step' <<<"$snaps") == 6 ]] || fail "newest snapshot: $snaps"
"$GPTD" export "$newest" --format hf -o "$T/off" >/dev/null || fail "gptd export"
cmp "$T/off/model.safetensors" "$T/out/model/model.safetensors" || fail "gptctl and gptd differ"
cmp "$T/off/config.json" "$T/out/model/config.json" || fail "config.json differs"
# --vocab ships GPT-2's tokenizer files (as Hugging Face names them)
mkdir -p "$T/voc"
echo '{"!": 0, "<|endoftext|>": 50256}' >"$T/voc/encoder.json"
printf '#version: 0.2\n\xc4\xa0 t\n' >"$T/voc/vocab.bpe"
"$GPTD" export "$newest" --format hf --vocab "$T/voc" -o "$T/offv" >/dev/null || fail "--vocab"
cmp "$T/voc/encoder.json" "$T/offv/vocab.json" && cmp "$T/voc/vocab.bpe" "$T/offv/merges.txt" ||
    fail "--vocab did not ship the tokenizer files"
jq -e '.eos_token_id == 50256' "$T/offv/config.json" >/dev/null || fail "no eos_token_id"
as_user export "$id" --snapshot "$oldest_id" --format hf -o "$T/out/old" >/dev/null ||
    fail "export --snapshot"
cmp -s "$T/out/old/model.safetensors" "$T/off/model.safetensors" &&
    fail "--snapshot $oldest_id exported the newest weights"

# --- the reference model computes gptd's logits ----------------------------
ids=1,5,7,3,2,8,9,10,11,4,6,1,0,12,13,2
"$LOGITS" "$newest" "$T/logits.bin" "$ids" || fail "logits tool"
python3 "$SRC/tests/reference/hf_logits.py" "$T/off" "$T/logits.bin" "$ids" ||
    fail "the Hugging Face export does not compute gptd's logits"

# --- refusals ------------------------------------------------------------------
refused() { # refused PATTERN ARGS...: as the user, exit 1 saying PATTERN
    local want=$1 o rc=0
    shift
    o=$(as_user "$@" 2>&1) || rc=$?
    [[ $rc -eq 1 ]] || fail "$*: exit $rc ($o)"
    grep -q -- "$want" <<<"$o" || fail "$*: does not say '$want': $o"
    echo "refused as expected: $o"
}
# The command-line checks gptd export and gptctl export share
# (proto/export_args.c): the same words, exit 2, nothing contacted or written.
usage_refused() { # usage_refused PATTERN CMD ARGS...
    local want=$1 o rc=0
    shift
    o=$("$@" 2>&1) || rc=$?
    [[ $rc -eq 2 ]] || fail "$*: exit $rc ($o)"
    grep -q -- "$want" <<<"$o" || fail "$*: does not say '$want': $o"
}
usage_refused "-o PATH is required" "$GPTD" export "$newest" --format hf
usage_refused "-o PATH is required" "$GPTCTL" export "$id" --format hf
usage_refused "--format is required" "$GPTD" export "$newest" -o "$T/out/y"
usage_refused "--format is required" "$GPTCTL" export "$id" -o "$T/out/y"
usage_refused "give exactly one SNAPSHOT" "$GPTD" export --format hf -o "$T/out/y"
usage_refused "give exactly one JOB" "$GPTCTL" export --format hf -o "$T/out/y"
usage_refused "format must be hf, llmc or gguf" "$GPTD" export "$newest" --format gpts -o "$T/out/y"
usage_refused "dtype must be" "$GPTD" export "$newest" --format gguf --dtype f8 -o "$T/out/y"
[[ -e $T/out/y ]] && fail "a refused export wrote $T/out/y"
refused "exists" export "$id" --format hf -o "$T/out/model"
runuser -u "$U" -- ln -s "$T/out/victim" "$T/out/link"
refused "symbolic link" export "$id" --format hf -o "$T/out/link"
[[ -e $T/out/victim ]] && fail "the symlink's target was created"
refused "Permission denied" export "$id" --format hf -o "$T/rootonly/model"
[[ -z $(ls "$T/rootonly") ]] || fail "something was written into a root-only folder"
refused "format must be hf, llmc or gguf" export "$id" --format onnx -o "$T/out/x"
# llm.c and GGUF through the daemon too; gguf takes --dtype, the others
# refuse it.
for f in llmc gguf; do
    as_user export "$id" --format $f -o "$T/out/m.$f" >/dev/null || fail "export --format $f"
    [[ -s $T/out/m.$f ]] || fail "export --format $f wrote nothing"
done
as_user export "$id" --format gguf --dtype bf16 -o "$T/out/m16.gguf" >/dev/null ||
    fail "export gguf --dtype bf16"
(($(stat -c %s "$T/out/m16.gguf") < $(stat -c %s "$T/out/m.gguf"))) || fail "bf16 gguf is not smaller"
refused "f32 only" export "$id" --format llmc --dtype f16 -o "$T/out/x.llmc"
refused "dtype must be" export "$id" --format gguf --dtype f8 -o "$T/out/x.gguf"
rootjob=$("$GPTCTL" submit "$T/job.json" trainer.max_steps=1)
refused "belongs to uid 0" export "$rootjob" --format hf -o "$T/out/root"
refused "belongs to uid 0" submit "$T/job.json" --init-from "$rootjob"

# --- model.init_from: the same weights in --------------------------------------
cd "$T"
"$GPTD" run "$T/job.json" model.init_from="$T/off" trainer.max_steps=1 optimizer.lr=1e-30 \
    optimizer.min_lr=0 optimizer.weight_decay=0 snapshot.every=1 --snapshot-dir "$T/ft" \
    --json >"$T/ft.log" 2>&1 || fail "gptd run init_from: $(tail -3 "$T/ft.log")"
grep -q '"kind":"init_from"' "$T/ft.log" || fail "no init_from event: $(head -3 "$T/ft.log")"
"$GPTD" export "$T/ft/snap-000000000001.gpts" --format hf -o "$T/again" >/dev/null
cmp "$T/again/model.safetensors" "$T/off/model.safetensors" || fail "init_from changed the weights"
o=$("$GPTD" run "$T/job.json" model.init_from="$T/off" model.n_embd=64 \
    --snapshot-dir "$T/ft2" 2>&1) && fail "a contradicting model.n_embd was accepted"
grep -q "model.n_embd is 64 but model.init_from ($T/off) has 32" <<<"$o" || fail "conflict: $o"
o=$("$GPTD" run "$T/job.json" model.init_from="$T/nothing" --snapshot-dir "$T/ft3" 2>&1) &&
    fail "a missing init_from was accepted"
grep -q "model.init_from" <<<"$o" || fail "missing init_from: $o"

# --- gptctl submit --init-from JOB ---------------------------------------------
id2=$(as_user submit "$T/job.json" --init-from "$id" trainer.max_steps=1)
[[ $("$GPTCTL" --json status "$id2" | jq -r '.spec.model.init_from // .job.spec.model.init_from') \
    == "$newest" ]] || fail "init_from of job $id2: $("$GPTCTL" --json status "$id2")"
wait_for 60 job_is "$id2" completed
# The job's last records are stored on a later loop turn than its end.
init_from_logged() { "$GPTCTL" --json logs "$id2" | has '"kind":"init_from"'; }
wait_for 10 init_from_logged || fail "job $id2 did not init_from"
# submit resolves the shape from the checkpoint (as the user): a job file
# without model keys gets the source's, a contradicting key is refused
jq 'del(.model)' "$T/job.json" >"$T/nomodel.json"
chmod 0644 "$T/nomodel.json"
o=$(as_user --json validate "$T/nomodel.json" model.init_from="$T/off")
jq -e '.spec.model | .n_layer == 2 and .n_head == 2 and .n_embd == 32 and .block_size == 16' \
    <<<"$o" >/dev/null || fail "validate did not take the shape from the checkpoint: $o"
refused "model.n_embd is 64 but model.init_from ($T/off) has 32" \
    submit "$T/nomodel.json" model.init_from="$T/off" model.n_embd=64
# weights only: the fine-tune counts its own steps from 0 (the source had 6)
[[ $(job_field "$id2" step) == 1 ]] || fail "job $id2 did not start at step 0: $(job_field "$id2" step)"
"$GPTCTL" cancel "$rootjob" >/dev/null 2>&1 || true
echo "export_hf: ok"
