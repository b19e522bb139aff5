#!/usr/bin/env bash
# Idle and greedy control clients (issue 14: 64 idle connections used to
# lock every other client out, with no idle timeout):
#  - a second user (created here) opening 80 idle connections gets
#    max_clients_per_uid of them, the rest are refused with an error naming
#    the option, and root's gptctl is served meanwhile;
#  - with client_idle_timeout_s = 2, idle connections are closed with an
#    error naming the option, and so is a writer too slow to finish its
#    request line; a follower (`logs -f`) of a running job is not idle and
#    stays, receiving records, well past the timeout.
# Arguments: the four of daemon_common.sh, then tests/integration/itest_conns.
source "$(dirname "$0")/daemon_common.sh"
CONNS=$5

HOG=gptdt$$
HOG=${HOG:0:30}
trap 'rc=$?; set +e; userdel -f "$HOG" 2>/dev/null; (exit $rc); cleanup' EXIT
useradd -M -N -s /usr/sbin/nologin "$HOG" || fail "useradd $HOG"
chmod 755 "$T"
as_hog() { setpriv --reuid="$HOG" --regid=nogroup --clear-groups "$@"; }

# --- one user cannot take every connection.
start_gptd --socket-mode 0666 --max-clients 64 --max-clients-per-uid 16 --client-idle-timeout-s 0
as_hog "$CONNS" hold "$SOCK" 80 6 >"$T/hog.out" &
HOG_PID=$!
PIDS+=("$HOG_PID")
wait_for 10 grep -q "open=" "$T/hog.out"
read -r counts <"$T/hog.out"
[[ $counts == "open=16 refused=64" ]] || fail "80 connections of one user: \"$counts\", want 16 open"
sed -n 2p "$T/hog.out" | has "max_clients_per_uid = 16" ||
    fail "the refusal does not name max_clients_per_uid: $(sed -n 2p "$T/hog.out")"
for i in 1 2 3; do
    "$GPTCTL" status >/dev/null || fail "root's gptctl is locked out by another user's connections"
done
as_hog "$GPTCTL" status >/dev/null 2>&1 && fail "the user's 17th connection was served"
wait "$HOG_PID"
grep -q "closed=0" "$T/hog.out" || fail "idle connections closed with the timeout off: $(cat "$T/hog.out")"
kill -TERM "$GPTD_PID"
wait "$GPTD_PID"

# --- idle and slow clients time out; a follower does not.
start_gptd --client-idle-timeout-s 2
tiny_job "$T/job.json" 1000000 5 0
id=$("$GPTCTL" submit "$T/job.json")
wait_for 60 job_step_at_least "$id" 5
"$GPTCTL" logs -f "$id" >"$T/follow.out" 2>&1 &
FOLLOW_PID=$!
PIDS+=("$FOLLOW_PID")
"$CONNS" hold "$SOCK" 5 5 >"$T/idle.out"
grep -q "open=5 refused=0" "$T/idle.out" || fail "idle clients: $(cat "$T/idle.out")"
grep -q "closed=5" "$T/idle.out" || fail "idle clients were not closed: $(cat "$T/idle.out")"
grep -q "client_idle_timeout_s" "$T/idle.out" || fail "the close does not name client_idle_timeout_s"
"$CONNS" slow "$SOCK" 10 >"$T/slow.out" || fail "a slow writer was not closed: $(cat "$T/slow.out")"
kill -0 "$FOLLOW_PID" 2>/dev/null || fail "the follower was closed as idle: $(tail -n 3 "$T/follow.out")"
lines=$(wc -l <"$T/follow.out")
follow_grew() { (($(wc -l <"$T/follow.out") > lines)); }
wait_for 10 follow_grew
"$GPTCTL" cancel "$id" >/dev/null
wait_for 20 job_is "$id" cancelled
wait "$FOLLOW_PID" || true
kill -TERM "$GPTD_PID"
wait "$GPTD_PID"
echo "daemon_clients: ok ($(head -n1 "$T/slow.out"))"
