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
fail() { echo "FAIL: $*" >&2; exit 1; }
# losses FILE: the "step loss" pairs of the metric lines of a --json log.
losses() { jq -r 'select(.type=="metric") | "\(.step) \(.loss)"' "$1"; }
# last_metric FILE KEY
last_metric() { jq -r "select(.type==\"metric\") | .$2" "$1" | tail -n 1; }
# A TCP port nobody listens on now (for --rdzv, which needs a fixed port).
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 30000))
        ss -Htln "sport = :$p" | grep -q . || { echo "$p"; return; }
    done
}
