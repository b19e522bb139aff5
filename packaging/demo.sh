#!/usr/bin/env bash
# The README's main command: installs what gptd needs, builds it, starts a
# gptd with a private state directory and two data-parallel workers,
# submits the default job (etc/jobs/default.json: a character-level model
# on the fortune cookies of Debian's `fortunes` package), follows its logs
# live to the end, prints a sample of generated text and stops gptd.
# Extra arguments are job overrides, e.g. packaging/demo.sh trainer.max_steps=100
set -euo pipefail
cd "$(dirname "$0")/.."
packaging/install-deps.sh
# A build folder configured before keeps its settings (cmake --build
# reconfigures it when a CMakeLists.txt changed).
if [[ ! -e build/CMakeCache.txt ]]; then
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build build -j"$(nproc)" --target gptd gptctl

state=$(mktemp -d -t gptd-demo.XXXXXX)
export GPTD_SOCKET="$state/gptd.sock"
build/gptd --state-dir "$state/state" --socket "$GPTD_SOCKET" --workers 2 \
    > "$state/gptd.log" 2>&1 &
gptd_pid=$!
cleanup() {
    kill -TERM "$gptd_pid" 2>/dev/null && wait "$gptd_pid" 2>/dev/null || true
    rm -rf "$state"
}
trap cleanup EXIT

# Wait (bounded) until gptd answers on its socket.
for _ in $(seq 200); do
    build/gptctl list >/dev/null 2>&1 && break
    kill -0 "$gptd_pid" 2>/dev/null || { cat "$state/gptd.log"; exit 1; }
    sleep 0.05
done

id=$(build/gptctl submit etc/jobs/default.json "$@")
echo "submitted job $id; following its logs"
build/gptctl logs -f "$id"
echo
echo "--- a sample from the trained model ---"
build/gptctl sample "$id" --prompt "The " --tokens 400 --temperature 0.8
