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

# free_port: a TCP port no socket uses now (for endpoints that must be
# fixed before a process starts, such as --rdzv), below the kernel's
# ephemeral range: a port in that range can be taken at any moment as the
# local end of some outgoing connection (a concurrent test's client), and
# the listen then fails with "address already in use" (seen in CI).
free_port() {
    local p lo
    read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
    ((lo > 12000)) || lo=32768 # an unusual range: keep to the old span's low end
    while :; do
        p=$((10000 + RANDOM % (lo - 10000)))
        ss -Htan "sport = :$p" | has . || { echo "$p"; return; }
    done
}
