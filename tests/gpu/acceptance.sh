#!/bin/sh
# acceptance.sh: the GPU acceptance run of the CUDA backend, for a machine
# with (at least) one H200. Builds with CUDA in its own build directory,
# runs every ctest labelled gpu (ops vs CPU, 20-step training vs CPU, NCCL
# collectives and failure handling), then benchmarks GPT-2 124M training
# (B=16, T=1024) in bf16 with the fused flash attention (and TF32 for
# comparison) and prints the benchmark's table last: tokens/s, ms/step,
# peak memory and MFU against the H200's dense bf16 rate (989 TFLOP/s). Bounded to 8
# minutes in all: every phase's limit is its own cap or what is left of the
# 8 minutes, whichever is smaller.
#
#   tests/gpu/acceptance.sh [BUILD_DIR]      (default: build-gpu)
#
# Exit status: 0 all passed, 1 a phase failed, 77 no GPU on this host.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)
START=$(date +%s)

DEADLINE=$((START + 470)) # 8 minutes, less a margin for the last lines
phase() { echo "== $* ($(($(date +%s) - START)) s)"; }
# budget CAP: seconds a phase may take (at least 1).
budget() {
    left=$((DEADLINE - $(date +%s)))
    [ "$left" -lt "$1" ] && set -- "$left"
    [ "$1" -lt 1 ] && set -- 1
    echo "$1"
}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "acceptance: no GPU (nvidia-smi finds none): skipped"
    exit 77
fi
nvidia-smi -L

phase "configure + build"
timeout "$(budget 60)" cmake -S "$ROOT" -B "$BUILD" -DGPTD_CUDA=ON -DGPTD_WERROR=ON \
    -DCMAKE_BUILD_TYPE=Release >"$BUILD.cmake.log" 2>&1 || { cat "$BUILD.cmake.log"; exit 1; }
timeout "$(budget 200)" cmake --build "$BUILD" -j"$JOBS" --target test_gpu_ops test_gpu_train \
    test_gpu_nccl bench_gpu_train >"$BUILD.build.log" 2>&1 || { tail -50 "$BUILD.build.log"; exit 1; }

phase "ctest -L gpu"
status=0
timeout "$(budget 120)" ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 100 || status=1

phase "bench GPT-2 124M"
timeout "$(budget 150)" "$BUILD/bench_gpu_train" 16 10 0 bf16,tf32 || status=1

phase "done, status $status"
exit $status
