#!/usr/bin/env bash
# Longer fuzz runs of every parser (control lines, job specs, store frames,
# snapshot headers) than ctest's 10 s: builds the libFuzzer targets with
# clang in build-fuzz/ and runs each for SECONDS (default 300), new inputs
# going to a scratch directory. Prints one JSON line per target.
#
#   bench/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-300}
CC=clang-14 cmake -S . -B build-fuzz -DGPTD_FUZZ=ON -DGPTD_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_all >/dev/null
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for bin in build-fuzz/tests/fuzz_*; do
    name=$(basename "$bin")
    corpus=tests/fuzz/corpus/${name#fuzz_}
    mkdir -p "$scratch/$name"
    rc=0
    "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=5 \
        -artifact_prefix="$scratch/$name/" "$scratch/$name" "$corpus" > "$scratch/$name.log" 2>&1 || rc=$?
    runs=$(grep -o 'Done [0-9]* runs' "$scratch/$name.log" | grep -o '[0-9]*' || echo 0)
    crashes=$(ls "$scratch/$name" | grep -c '^crash-\|^leak-\|^timeout-\|^oom-' || true)
    echo "{\"bench\":\"fuzz\",\"target\":\"$name\",\"seconds\":$secs,\"runs\":${runs:-0},\"exit\":$rc,\"findings\":$crashes}"
done
