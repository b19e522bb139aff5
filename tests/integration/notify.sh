#!/usr/bin/env bash
# Type=notify without systemd: gptd runs with NOTIFY_SOCKET pointing at a
# datagram socket this test owns (tests/tools/notify_listen), as systemd
# would start it.
#
#   notify.sh GPTD GPTCTL NOTIFY_LISTEN [basic|watchdog]
#
# basic:    READY=1 arrives once, and only when the control socket already
#           accepts connections (notify_listen connects the moment it reads
#           READY=1); SIGHUP gives RELOADING=1 then READY=1 again; SIGTERM
#           gives STOPPING=1 and gptd exits 0.
# watchdog: with WATCHDOG_USEC set (what WatchdogSec= does), WATCHDOG=1
#           pings keep coming, and a STATUS= line is sent.
#
# Every process started here is killed by the EXIT trap; waits poll with
# deadlines.
set -euo pipefail

GPTD=$1
GPTCTL=$2
LISTEN=$3
MODE=${4:-basic}

T=$(mktemp -d /tmp/gptd-notify.XXXXXX)
SOCK=$T/gptd.sock
NSOCK=$T/notify.sock
NLOG=$T/notify.log
PIDS=()

cleanup() {
    local rc=$?
    for p in "${PIDS[@]}"; do
        { kill -9 "$p" && wait "$p"; } 2>/dev/null || true
    done
    if [[ $rc -ne 0 ]]; then
        echo "--- FAILED (rc $rc); notifications:" >&2
        cat "$NLOG" >&2 2>/dev/null || true
        echo "--- gptd log:" >&2
        tail -n 30 "$T/gptd.log" >&2 2>/dev/null || true
    fi
    rm -rf "$T"
    exit $rc
}
trap cleanup EXIT

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"


count() { grep -c -x "$1" "$NLOG" || true; }
at_least() { (($(count "$1") >= $2)); }
gone() { ! kill -0 "$1" 2>/dev/null; }

"$LISTEN" "$NSOCK" "$SOCK" >"$NLOG" &
PIDS+=($!)
wait_for 10 test -S "$NSOCK"

env_extra=()
if [[ $MODE == watchdog ]]; then
    env_extra=(WATCHDOG_USEC=400000) # a ping every 200 ms
fi
env NOTIFY_SOCKET="$NSOCK" "${env_extra[@]}" "$GPTD" --state-dir "$T/state" --socket "$SOCK" \
    --log-level debug 2>"$T/gptd.log" &
GPTD_PID=$!
PIDS+=("$GPTD_PID")

wait_for 30 at_least READY=1 1
case $MODE in
basic)
    # The line after READY=1 is the listener's connect check.
    conn=$(grep -x -A1 READY=1 "$NLOG" | sed -n 2p)
    [[ $conn == CONNECT=ok ]] || fail "READY=1 came before the control socket accepted: $conn"
    GPTD_SOCKET=$SOCK "$GPTCTL" status >/dev/null || fail "gptctl status after READY=1"
    [[ $(count READY=1) -eq 1 ]] || fail "READY=1 sent more than once before any reload"
    (($(count STOPPING=1) == 0)) || fail "STOPPING=1 before SIGTERM"

    kill -HUP "$GPTD_PID"
    wait_for 30 at_least READY=1 2
    at_least RELOADING=1 1 || fail "SIGHUP: no RELOADING=1"
    # RELOADING=1 must precede the second READY=1.
    order=$(grep -x -n -e RELOADING=1 -e READY=1 "$NLOG" | cut -d: -f2 | tr '\n' ' ')
    [[ $order == "READY=1 RELOADING=1 READY=1 " ]] || fail "reload order: $order"

    kill -TERM "$GPTD_PID"
    wait_for 30 at_least STOPPING=1 1
    wait_for 60 gone "$GPTD_PID"
    rc=0
    wait "$GPTD_PID" || rc=$?
    [[ $rc -eq 0 ]] || fail "gptd exited $rc after SIGTERM"
    last=$(grep -x -e READY=1 -e STOPPING=1 "$NLOG" | tail -n1)
    [[ $last == STOPPING=1 ]] || fail "STOPPING=1 was not the last state sent"
    ;;
watchdog)
    # At 200 ms per ping, 3 pings arrive in well under the deadline even on a
    # loaded machine; a loop that never pings fails.
    wait_for 30 at_least WATCHDOG=1 3
    grep -q '^STATUS=.' "$NLOG" || fail "no STATUS= line"
    kill -TERM "$GPTD_PID"
    wait_for 60 gone "$GPTD_PID"
    ;;
*)
    fail "unknown mode $MODE"
    ;;
esac
echo "notify ($MODE): ok"
