#!/usr/bin/env bash
# gptd's state is gptd's (issue 36, case 7): as root with a second user,
#  - gptd.db and its -wal and -shm files are 0600, also when a gptd killed
#    with -9 left them 0644 (fixed at the next start);
#  - the state folder gives group and others no read or write bit (a 0755
#    one is fixed at start), so the user can neither list it nor read the
#    database;
#  - a job's ownership token appears in nothing the user can read: every
#    gptctl reply about root's job, the HTTP documents (/api/*, /metrics)
#    and gptd's log.
#   daemon_private_state.sh GPTD GPTCTL ITEST SRC
source "$(dirname "$0")/daemon_common.sh"
command -v curl >/dev/null || fail "curl is not installed (packaging/install-deps.sh)"
make_test_user gptdpriv
S=$T/state
mode() { stat -c '%a' "$1"; }

start_gptd --socket-mode 0666
tiny_job "$T/job.json" 40 5 20
id=$("$GPTCTL" submit "$T/job.json")
wait_for 60 job_is "$id" completed
[[ $(mode "$S/gptd.db") == 600 ]] || fail "a new gptd.db is $(mode "$S/gptd.db")"
for f in "$S/gptd.db-wal" "$S/gptd.db-shm"; do
    [[ -e $f ]] || fail "$f is missing while gptd runs"
    [[ $(mode "$f") == 600 ]] || fail "$f is $(mode "$f")"
done
(($(stat -c '%#a' "$S") & 066)) && fail "the state folder is $(mode "$S")"

# A gptd killed with -9 leaves -wal and -shm; an older gptd made them 0644.
kill -9 "$GPTD_PID"
wait "$GPTD_PID" 2>/dev/null || true
chmod 0644 "$S/gptd.db" "$S/gptd.db-wal" "$S/gptd.db-shm"
chmod 0755 "$S"
start_gptd --socket-mode 0666 --http 127.0.0.1:0
for f in "$S/gptd.db" "$S/gptd.db-wal" "$S/gptd.db-shm"; do
    [[ ! -e $f || $(mode "$f") == 600 ]] || fail "$f is still $(mode "$f") after a start"
done
[[ $(mode "$S") == 711 ]] || fail "the state folder is $(mode "$S") after a start, not 711"
runuser -u "$U" -- ls "$S" >/dev/null 2>&1 && fail "user $U lists the state folder"
runuser -u "$U" -- cat "$S/gptd.db" >/dev/null 2>&1 && fail "user $U reads gptd.db"

# --- the token in nothing the user reads.
wait_for 10 grep -q 'http: serving /metrics' "$T/gptd.1.log"
PORT=$(grep -o 'http: serving /metrics on 127.0.0.1:[0-9]*' "$T/gptd.1.log" | tail -n1 | cut -d: -f3)
URL=http://127.0.0.1:$PORT
# A finished job and a running one (whose round carries its token).
tiny_job "$T/long.json" 10000000 5 0
run=$("$GPTCTL" submit "$T/long.json")
wait_for 60 job_step_at_least "$run" 5
out=$T/seen
: >"$out"
for j in "$id" "$run"; do
    for args in "list" "status" "status $j" "logs $j" "snapshots $j" "nodes"; do
        # shellcheck disable=SC2086
        { as_user --json $args; as_user $args; } >>"$out" 2>&1 || true
    done
    for doc in /api/jobs /api/nodes "/api/jobs/$j/metrics?since=0" "/api/jobs/$j/events" \
        "/api/jobs/$j/snapshots" /metrics /; do
        runuser -u "$U" -- curl -sf "$URL$doc" >>"$out" || fail "$doc"
    done
done
for j in "$id" "$run"; do
    grep -q "\"id\":$j" "$out" || fail "the replies do not show job $j at all"
    tok=$(python3 -c 'import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("select token from jobs where id = ?",
      (int(sys.argv[2]),)).fetchone()[0])' "$S/gptd.db" "$j")
    [[ $tok =~ ^[0-9a-f]{16}$ ]] || fail "job $j's token: \"$tok\""
    dec=$(python3 -c "print(int('$tok', 16))")
    grep -qiF -e "$tok" -e "$dec" "$out" &&
        fail "job $j's token $tok is in what user $U reads: $(grep -iF -e "$tok" -e "$dec" "$out" | head -n3)"
    grep -qiF -e "$tok" -e "$dec" "$T"/gptd.*.log && fail "job $j's token is in gptd's log"
    echo "job $j: token $tok not shown to $U"
done
# A job's own snapshot folder that others may list: its owner marker (which
# holds the token) and its snapshots are the owner's alone.
"$GPTCTL" cancel "$run" >/dev/null
mkdir -m 0755 "$T/pub"
tiny_job "$T/pub.json" 20 5 20
sed -i "s|\"snapshot\": {\"every\": 20}|\"snapshot\": {\"every\": 20, \"dir\": \"$T/pub\"}|" "$T/pub.json"
pub=$("$GPTCTL" submit "$T/pub.json")
wait_for 60 job_is "$pub" completed
[[ -f $T/pub/.gptd-owner ]] || fail "no owner marker in $T/pub"
tok=$("$ITEST" sql "$S/gptd.db" "SELECT token FROM jobs WHERE id = $pub")
for f in "$T/pub"/.gptd-owner "$T/pub"/*; do
    if runuser -u "$U" -- cat "$f" >"$T/pubread" 2>/dev/null; then
        grep -qiF "$tok" "$T/pubread" && fail "user $U reads job $pub's token in $f"
    fi
done
echo "job $pub: its folder's marker and snapshots are not readable by $U"
kill -0 "$GPTD_PID" || fail "gptd died: $(tail -n 5 "$T/gptd.1.log")"
echo "daemon_private_state: ok"
