# Helpers every integration test shares (sourced after the test sets its
# own cleanup trap): failing with a message, bounded polling, free ports.

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# has ARGS...: grep ARGS over stdin, reading all of it. grep -q stops at
# the first match, and under pipefail a writer that still writes (gptctl
# --json flushes line by line) then fails the pipeline with SIGPIPE.
has() { grep "$@" >/dev/null; }

# wait_for SECONDS COMMAND...: polls COMMAND every 50 ms until it succeeds,
# failing the test when SECONDS pass first (never a bare sleep).
wait_for() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail "timed out waiting for: $*"
        sleep 0.05
    done
}

# free_port: a TCP port nobody listens on now (for endpoints that must be
# fixed before a process starts, such as --rdzv).
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 30000))
        ss -Htln "sport = :$p" | has . || { echo "$p"; return; }
    done
}
