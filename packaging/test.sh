#!/usr/bin/env bash
# The README's test command: installs what the build needs, builds gptd,
# runs the whole test suite (unit, integration, reference), then builds the
# libFuzzer targets with clang in build-fuzz/ and runs them over their
# committed corpora, and last runs the tests of the daemon's threads and
# the communicators under AddressSanitizer and UBSan in build-asan/
# (packaging/sanitize.sh asan-ci; any report fails).
# Usage: packaging/test.sh [extra ctest args for the main suite]
set -euo pipefail
cd "$(dirname "$0")/.."
packaging/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPTD_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" "$@"

CC=clang-14 cmake -S . -B build-fuzz -DGPTD_FUZZ=ON -DGPTD_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_all
ctest --test-dir build-fuzz --output-on-failure -j"$jobs"

packaging/sanitize.sh asan-ci
