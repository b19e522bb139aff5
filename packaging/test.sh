#!/usr/bin/env bash
# The README's test command: installs what the build needs, builds gptd and
# runs the whole test suite (unit, integration, reference, fuzz corpora).
# Usage: packaging/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
packaging/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPTD_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" "$@"
