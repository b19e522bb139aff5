#!/usr/bin/env bash
# Training throughput, gptd vs PyTorch (Debian python3-torch), measured side
# by side in one run with the same OpenBLAS kernel and thread count, plus
# GPT-2 124M at B4 T64 on two threads (compare with llm.c's train_gpt2.c,
# 4.8-5.3 s/step on this machine class).
#
#   bench/train.sh [BUILD_DIR] [--native]
#
# By default the environment's OpenBLAS kernel is used (OPENBLAS_CORETYPE as
# set, Haswell in CI); --native unsets OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE
# for the benchmark processes only, so OpenBLAS picks its own kernel
# (Cooperlake/SkylakeX on AVX-512 machines). Output: JSON lines, then one
# summary line per goal with the measured ratio.
set -euo pipefail
build=${1:-build}
# OMP_WAIT_POLICY=PASSIVE is what gptd sets for itself (daemon/main.c).
envcmd=(env OMP_WAIT_POLICY=PASSIVE)
if [[ "${2:-}" == "--native" ]]; then
    envcmd=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE)
fi
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "bench/train.sh: Debian's PyTorch is missing (python3-torch);" \
        "packaging/install-deps.sh --reference installs it" >&2
    exit 2
fi
[[ -x "$build/bench/bench_train" ]] ||
    { echo "bench/train.sh: no $build/bench/bench_train: build gptd first" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
gptd_bench() { "${envcmd[@]}" OMP_NUM_THREADS="$3" "$build/bench/bench_train" "$1" "$2" "$3" | tee -a "$out"; }
torch_bench() { "${envcmd[@]}" OMP_NUM_THREADS="$3" /usr/bin/python3 bench/torch_train.py "$1" "$2" "$3" | tee -a "$out"; }

# The machine is shared and noisy: alternate the two implementations and
# keep each one's best run, so a burst of load hurts neither side alone.
for rep in 1 2 3; do
    gptd_bench tiny 6 1
    torch_bench tiny 6 1
    gptd_bench small 3 1
    torch_bench small 3 1
done
gptd_bench gpt2 3 2

jq -rs '
  def get(impl; cfg): map(select(.impl == impl and .config == cfg)) | max_by(.tokens_per_s);
  (get("gptd"; "tiny")) as $gt | (get("pytorch"; "tiny")) as $pt |
  (get("gptd"; "small")) as $gs | (get("pytorch"; "small")) as $ps |
  (get("gptd"; "gpt2")) as $g2 |
  {summary: "train", openblas_core: $gt.openblas_core,
   tiny_speedup_vs_torch: ($gt.tokens_per_s / $pt.tokens_per_s), tiny_goal: 1.4,
   small_speedup_vs_torch: ($gs.tokens_per_s / $ps.tokens_per_s), small_goal: 1.2,
   small_fraction_of_sgemm_ceiling: $gs.mfu, small_ceiling_goal: 0.8,
   gpt2_s_per_step: ($g2.ms_per_step / 1000), gpt2_speedup_vs_llmc_4_8s: (4.8 / ($g2.ms_per_step / 1000)),
   gpt2_goal: 3}' "$out"
