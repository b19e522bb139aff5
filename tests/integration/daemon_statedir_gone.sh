#!/usr/bin/env bash
# The state directory is watched: once it (or the database in it) is
# unlinked or replaced under a running gptd, nothing more is acknowledged
# that a restart would not find.
#  - rm -rf STATE_DIR: a submit is refused with "state directory gone"
#    naming the folder, `gptctl status` says so, and systemd's STATUS= line
#    (NOTIFY_SOCKET, tests/tools/notify_listen) carries it;
#  - the database file replaced by a copy (another inode): a submit is
#    refused naming the file, and after a restart only the jobs acknowledged
#    before are there.
# Arguments: GPTD GPTCTL ITEST_CLIENT SOURCE_DIR NOTIFY_LISTEN.
source "$(dirname "$0")/daemon_common.sh"
LISTEN=$5

"$LISTEN" "$T/notify.sock" "$SOCK" >"$T/notify.log" &
PIDS+=($!)
wait_for 10 test -S "$T/notify.sock"
export NOTIFY_SOCKET=$T/notify.sock
start_gptd
unset NOTIFY_SOCKET
tiny_job "$T/job.json" 10
# submit_refused TEXT WHAT: a submit fails with TEXT in its error.
submit_refused() {
    local out rc=0
    out=$("$GPTCTL" submit "$T/job.json" 2>&1) || rc=$?
    [[ $rc -ne 0 && $out == *"$1"* ]] || fail "a submit after $2: rc $rc: $out"
}
id=$("$GPTCTL" submit "$T/job.json")
wait_for 60 job_is "$id" completed

# --- the whole folder removed.
rm -rf "$T/state"
submit_refused "state directory gone: $T/state was removed or replaced" "the folder's removal"
"$GPTCTL" status | has "state dir error: *state directory gone: $T/state" ||
    fail "status does not say the state directory is gone: $("$GPTCTL" status)"
wait_for 10 grep -q "^STATUS=.*state directory gone: $T/state was removed" "$T/notify.log"
log=$(ls "$T"/gptd.*.log)
wait_for 10 grep -q "gptd error: state directory gone" "$log"
[[ $(grep -c "gptd error: state directory gone" "$log") == 1 ]] ||
    fail "the loss is not logged once: $(grep "gptd error: state directory gone" "$log")"

# --- a fresh gptd (a new folder), then its database replaced by a copy.
kill -9 "$GPTD_PID"
wait "$GPTD_PID" 2>/dev/null || true
start_gptd
id1=$("$GPTCTL" submit "$T/job.json")
cp "$T/state/gptd.db" "$T/copy.db"
mv "$T/copy.db" "$T/state/gptd.db"
submit_refused "state directory gone: $T/state/gptd.db was removed or replaced" \
    "the database's replacement"
kill -9 "$GPTD_PID"
wait "$GPTD_PID" 2>/dev/null || true
rm -f "$T/state/gptd.db-wal" "$T/state/gptd.db-shm" # the copy's, as a restore leaves them
start_gptd
ids=$("$GPTCTL" --json list | grep -o '"id":[0-9]*' | cut -d: -f2 | tr '\n' ' ')
[[ $ids == "$id1 " ]] || fail "after the restart the jobs are \"$ids\", not \"$id1 \""
echo "daemon_statedir_gone: ok"
