#!/usr/bin/env bash
# The README's main command: installs what gptd needs, builds it, trains
# the default job (etc/jobs/default.json) with two data-parallel workers,
# showing the live loss, and prints a sample of generated text at the end.
# Snapshots go to a private temporary directory that is removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
packaging/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target gptd
state=$(mktemp -d -t gptd-demo.XXXXXX)
trap 'rm -rf "$state"' EXIT
build/gptd run etc/jobs/default.json --workers 2 --snapshot-dir "$state/snapshots" \
    --sample 400 --prompt "The "
