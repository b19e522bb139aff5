#!/usr/bin/env bash
# bench/torch_gpt2.py is gptd's model: from gptd's initial weights (a
# snapshot after one step at lr 1e-30, which changes no weight, exported
# as an llm.c checkpoint) and the same tokens (an llm.c shard),
# PyTorch's first-step loss equals gptd's within 1e-4. This is what makes
# the GPU benchmark's comparison one of one model. Then its training is
# gptd's: 8 steps at lr 1e-3 after 2 of warm-up (optimizer.schedule
# constant), the shard's 10 windows read in gptd's shuffled order
# (torch_gpt2.py --gptd-order: 32 samples, so the shuffle of three
# epochs), every step's loss within 1e-4 of gptd's: what makes the
# acceptance run's loss curves (gptd against PyTorch) one of one run.
# Skips (77) where python3 has no torch (Debian's python3-torch).
# Arguments: GPTD SOURCE_DIR
set -u
GPTD=$1 SRC=$2
# Debian's python3-torch is /usr/bin/python3's; a python3 first on PATH
# (a virtual environment) may have its own torch
PY=""
for p in python3 /usr/bin/python3; do
    "$p" -c 'import torch' 2>/dev/null && { PY=$p; break; }
done
[ -n "$PY" ] || { echo "no python3 with torch: skipped"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
B=4 SEQ=16
# train: 10 windows of SEQ + 1 tokens at stride SEQ (10 SEQ + 1 tokens), val:
# 4 rows more; tokens spread over GPT-2's vocabulary
python3 - "$T" "$B" "$SEQ" <<'PY'
import struct, sys
out, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def shard(path, n, seed):
    toks = [(seed + 7919 * i * i + 104729 * i) % 50257 for i in range(n)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *toks))
shard(out + "/train.bin", 10 * T + 1, 11)
shard(out + "/val.bin", 4 * T + 1, 13)
PY
cat >"$T/job.json" <<JOB
{"model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": $SEQ},
 "data": {"kind": "shards", "path": "$T/train.bin", "val_path": "$T/val.bin"},
 "trainer": {"max_steps": 1, "micro_batch": $B, "global_batch": $B, "eval_every": 0,
             "eval_batches": 1, "log_every": 1, "threads": 1, "precision": "fp32", "seed": 1337},
 "optimizer": {"lr": 1e-30, "warmup_steps": 0}}
JOB
"$GPTD" run "$T/job.json" --json --snapshot-dir "$T/snap" >"$T/run.jsonl" 2>"$T/run.err" ||
    { cat "$T/run.err"; echo "FAIL: gptd run"; exit 1; }
gloss=$(grep '"type":"metric"' "$T/run.jsonl" | grep '"step":1,' |
    sed -n 's/.*"loss":\([0-9.eE+-]*\).*/\1/p' | head -1)
snap=$(ls "$T/snap"/*.gpts 2>/dev/null | tail -1)
[ -n "$gloss" ] && [ -n "$snap" ] || { cat "$T/run.jsonl"; echo "FAIL: no step-1 loss or snapshot"; exit 1; }
"$GPTD" export "$snap" --format llmc -o "$T/init.bin" >"$T/export.log" 2>&1 ||
    { cat "$T/export.log"; echo "FAIL: gptd export --format llmc"; exit 1; }
"$PY" "$SRC/bench/torch_gpt2.py" --init "$T/init.bin" --shard "$T/train.bin" --batch "$B" \
    --seq "$SEQ" --steps 1 --device cpu --dtype fp32 --gptd-order 1337 >"$T/torch.json" 2>"$T/torch.err" ||
    { cat "$T/torch.err"; echo "FAIL: torch_gpt2.py"; exit 1; }
python3 - "$gloss" "$T/torch.json" <<'PY'
import json, sys
g = float(sys.argv[1])
row = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
t = row["losses"][0]
print("first-step loss: gptd %.7f, torch %.7f, difference %.2e (bound 1e-4)" % (g, t, abs(g - t)))
sys.exit(0 if abs(g - t) <= 1e-4 else 1)
PY
[ $? = 0 ] || exit 1

# 8 steps of real training on both sides, from the same seed's weights.
sed -e 's/"max_steps": 1,/"max_steps": 8,/' \
    -e 's/"lr": 1e-30, "warmup_steps": 0/"lr": 1e-3, "warmup_steps": 2, "schedule": "constant"/' \
    "$T/job.json" >"$T/curve.json"
"$GPTD" run "$T/curve.json" --json --snapshot-dir "$T/snap8" >"$T/run8.jsonl" 2>"$T/run8.err" ||
    { cat "$T/run8.err"; echo "FAIL: gptd run (8 steps)"; exit 1; }
"$PY" "$SRC/bench/torch_gpt2.py" --init "$T/init.bin" --shard "$T/train.bin" --batch "$B" \
    --seq "$SEQ" --steps 8 --device cpu --dtype fp32 --lr 1e-3 --warmup 2 --gptd-order 1337 \
    >"$T/torch8.json" 2>"$T/torch8.err" || { cat "$T/torch8.err"; echo "FAIL: torch_gpt2.py"; exit 1; }
python3 - "$T/run8.jsonl" "$T/torch8.json" <<'PY'
import json, sys
g = {}
for line in open(sys.argv[1]):
    if '"type":"metric"' in line:
        r = json.loads(line)
        g[r["step"]] = r["loss"]
t = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])["losses"]
worst = max(abs(g.get(s + 1, float("inf")) - t[s]) for s in range(8))
print("8 steps: gptd", [round(g.get(s + 1, -1), 5) for s in range(8)])
print("        torch", [round(x, 5) for x in t])
print("largest difference %.2e (bound 1e-4)" % worst)
sys.exit(0 if len(t) == 8 and worst <= 1e-4 else 1)
PY
