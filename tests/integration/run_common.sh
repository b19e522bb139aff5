# Shared helpers of the `gptd run` integration tests (sourced).
# Every test gets its own temporary directory, removed on exit with every
# process the test started.
set -euo pipefail
T=$(mktemp -d -t gptd-test.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$T"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# losses FILE: the "step loss" pairs of the metric lines of a --json log.
losses() { jq -r 'select(.type=="metric") | "\(.step) \(.loss)"' "$1"; }
# last_metric FILE KEY
last_metric() { jq -r "select(.type==\"metric\") | .$2" "$1" | tail -n 1; }
