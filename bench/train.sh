#!/usr/bin/env bash
# Training throughput, gptd vs PyTorch (Debian python3-torch), measured side
# by side in one run with the same OpenBLAS kernel and thread count, plus
# GPT-2 124M at B4 T64 on two threads, against llm.c's train_gpt2.c (its
# own B4 T64) run on the same two threads in the same run when LLMC_DIR
# names an llm.c checkout where train_gpt2 is built and its gpt2_124M.bin,
# tokenizer and data are prepared (llm.c's README); without it no llm.c
# figure is printed.
#
#   [LLMC_DIR=DIR] bench/train.sh [BUILD_DIR] [--native]
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

# llm.c prints "step N: train loss L (took MS ms)" per step: step 0 is
# warm-up; the best of steps 1-3 is kept and the run is stopped there (its
# 40 steps would take minutes).
llmc_bench() {
    local dir=$1 best
    [[ -x "$dir/train_gpt2" ]] || { echo "bench/train.sh: no $dir/train_gpt2: build llm.c" >&2; return 1; }
    best=$(cd "$dir" && "${envcmd[@]}" OMP_NUM_THREADS=2 timeout 300 ./train_gpt2 2>&1 |
        awk '/^step [0-9]+: train loss .* \(took [0-9.]+ ms\)/ {
                 n++; ms = $(NF - 1) + 0
                 if (n > 1 && (best == "" || ms < best)) best = ms
                 if (n == 4) { print best; exit } }') || true # awk's exit stops llm.c (SIGPIPE)
    [[ -n "$best" ]] || { echo "bench/train.sh: llm.c in $dir printed no step times" >&2; return 1; }
    printf '{"impl":"llm.c","config":"gpt2","B":4,"T":64,"threads":2,"ms_per_step":%s}\n' "$best" |
        tee -a "$out"
}
if [[ -n "${LLMC_DIR:-}" ]]; then
    llmc_bench "$LLMC_DIR"
fi

jq -rs '
  def get(impl; cfg): map(select(.impl == impl and .config == cfg)) | max_by(.tokens_per_s);
  (get("gptd"; "tiny")) as $gt | (get("pytorch"; "tiny")) as $pt |
  (get("gptd"; "small")) as $gs | (get("pytorch"; "small")) as $ps |
  (get("gptd"; "gpt2")) as $g2 |
  {summary: "train", openblas_core: $gt.openblas_core,
   tiny_speedup_vs_torch: ($gt.tokens_per_s / $pt.tokens_per_s), tiny_goal: 1.4,
   small_speedup_vs_torch: ($gs.tokens_per_s / $ps.tokens_per_s), small_goal: 1.2,
   small_fraction_of_sgemm_ceiling: $gs.mfu, small_ceiling_goal: 0.8,
   gpt2_s_per_step: ($g2.ms_per_step / 1000)}
  + (get("llm.c"; "gpt2") as $lc | if $lc then
       {llmc_s_per_step: ($lc.ms_per_step / 1000),
        gpt2_speedup_vs_llmc: ($lc.ms_per_step / $g2.ms_per_step), gpt2_goal: 3}
     else {} end)' "$out"
