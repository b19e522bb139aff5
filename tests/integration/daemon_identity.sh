#!/usr/bin/env bash
# A job acts only with its submitting user's rights, at the time of use.
# gptd runs as root here; a second user, created by this test, submits
# jobs through the socket (SO_PEERCRED gives gptd its uid). Checked:
#  - a root-only 0600 data.path fails with data.path named, and its bytes
#    never come back through `gptctl sample`;
#  - a snapshot.dir the user cannot create is refused and not created;
#  - the submit-time check of a snapshot.dir reads its owner marker as the
#    user: a root-only folder's marker is not revealed (Permission denied);
#  - a data file swapped, after submit, for a symlink to a root-only file
#    is not read; one swapped for a symlink out of the data roots (to a
#    file the user may read) is refused by the roots check on the opened
#    descriptor;
#  - a snapshot.dir swapped for a symlink out of the snapshot roots after
#    submit is not written;
#  - a shard glob over a folder the user cannot list reveals no name;
#  - validate with a deep glob does not hold up another client;
#  - snapshots of the user's job belong to the user, 0600 in a 0700
#    folder, in the default folder and in a snapshot.dir; the owner may
#    sample the job, another user may not (sample reads as the client);
#  - a gptd run as a system user with the unit's capabilities trains on the
#    user's own 0600 file (which gptd's user cannot read) and the snapshots
#    are the user's; restarted, it removes a killed writer's temporary
#    from the user's 0700 snapshot folder (as the owner: no DAC override);
#  - a gptd without CAP_SETUID/CAP_SETGID, run as the user, runs that
#    user's job and refuses root's at submit;
#  - a FIFO as data.path fails the job with a clear error while gptd stays
#    responsive, and gptd still stops on SIGTERM.
source "$(dirname "$0")/daemon_common.sh"

[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root to create a test user"; exit 77; }
U=gptdid$$
G=gptdsv$$ # a gptd of its own, as under systemd: not root, CAP_SETUID/SETGID/CHOWN
useradd -M -U -s /usr/sbin/nologin "$U" || fail "useradd $U"
useradd -M -U -s /usr/sbin/nologin "$G" || { userdel "$U"; fail "useradd $G"; }
# The user goes once no process of it is left (userdel refuses otherwise).
drop_user() {
    for p in "${PIDS[@]}"; do
        { kill -9 "$p" && wait "$p"; } 2>/dev/null || true
    done
    for u in "$U" "$G"; do
        userdel "$u" 2>/dev/null || true
        groupdel "$u" 2>/dev/null || true
    done
}
# set +e: `(exit $rc)` must hand the status to cleanup, not end the trap.
trap 'rc=$?; set +e; drop_user; (exit $rc); cleanup' EXIT
UID_U=$(id -u "$U")

# The user reaches the socket and the data through $T (search only) and
# runs a copy of gptctl (the build tree may be closed to it).
chmod 0711 "$T"
mkdir -p "$T/bin" "$T/data/hidden" "$T/data/deep" "$T/snaps/user" "$T/outside"
cp "$GPTCTL" "$T/bin/gptctl"
chmod 0755 "$T/bin" "$T/bin/gptctl" "$T/data" "$T/snaps"
chown "$U" "$T/snaps/user" "$T/outside"
as_user() { runuser -u "$U" -- env GPTD_SOCKET="$SOCK" "$T/bin/gptctl" "$@"; }

text() { printf 'the quick brown fox jumps over the lazy dog\n%.0s' {1..40}; }
text >"$T/data/good.txt"
text >"$T/data/swap.txt"
text >"$T/data/swap2.txt"
text >"$T/data/swap3.txt"
text >"$T/outside/other.txt"
printf 'ZQXJ%.0s' {1..400} >"$T/data/secret.txt"
chmod 0644 "$T/data/"*.txt "$T/outside/other.txt"
chmod 0600 "$T/data/secret.txt"
mkfifo "$T/data/fifo"
chmod 0666 "$T/data/fifo"
: >"$T/data/hidden/hidden-name-4242.bin"
chmod 0711 "$T/data/hidden"
mkdir -p "$T"/data/deep/{a,b,c,d,e,f}/{a,b,c,d,e,f}/{a,b,c,d,e,f}
chmod -R a+rX "$T/data/deep"

start_gptd --data-roots "$T/data" --snapshot-roots "$T/snaps" --socket-mode 0666

cat >"$T/job.json" <<JOB
{"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16},
 "data": {"kind": "text", "path": "$T/data/good.txt"},
 "trainer": {"max_steps": 4, "micro_batch": 2, "global_batch": 2, "eval_every": 0,
             "eval_batches": 1, "threads": 1},
 "distributed": {"max_restarts": 0},
 "snapshot": {"every": 2}}
JOB
chmod 0644 "$T/job.json"
tiny_job "$T/block.json" 1000000 5 0
$GPTCTL status >/dev/null

job_json() { "$GPTCTL" --json status "$1"; }
job_error() { job_json "$1" | grep -o '"error":"[^"]*"' || true; }
job_done() { [[ $(job_state "$1") =~ ^(completed|failed|cancelled)$ ]]; }
# expect_failed JOB PATTERN...: the job failed and its error matches each.
expect_failed() {
    local id=$1 e
    shift
    wait_for 60 job_done "$id"
    job_is "$id" failed || fail "job $id: $(job_state "$id"), expected failed"
    e=$(job_error "$id")
    for p in "$@"; do
        grep -q -- "$p" <<<"$e" || fail "job $id: error does not say '$p': $e"
    done
    echo "job $id failed as expected: $e"
}
# A root job that holds the queue while a path is swapped.
hold() { BLOCK=$("$GPTCTL" submit "$T/block.json"); wait_for 30 job_is "$BLOCK" running; }
release() { "$GPTCTL" cancel "$BLOCK" >/dev/null; wait_for 60 job_done "$BLOCK"; }

# refused_submit PATTERN OVERRIDE...: submit as the user fails, saying PATTERN.
refused_submit() {
    local want=$1 out rc=0
    shift
    out=$(as_user submit "$T/job.json" "$@" 2>&1) || rc=$?
    [[ $rc -eq 1 ]] || fail "submit $*: exit $rc, expected 1 ($out)"
    grep -q -- "$want" <<<"$out" || fail "submit $*: error does not say '$want': $out"
    echo "submit refused as expected: $out"
}

# --- a root-only data file: refused at submit, checked as the user ------------
refused_submit "data.path.*Permission denied" data.path="$T/data/secret.txt"
out=$(as_user validate "$T/job.json" data.path="$T/data/secret.txt" 2>&1) &&
    fail "validate accepted a root-only file: $out"

# --- a snapshot folder the user cannot create ------------------------------
id=$(as_user submit "$T/job.json" snapshot.dir="$T/snaps/rootonly")
expect_failed "$id" snapshot.dir "Permission denied"
[[ -e $T/snaps/rootonly ]] && fail "gptd created $T/snaps/rootonly for uid $UID_U"

# --- a folder of root's the user cannot read: the submit-time check reads
# its owner marker as the user, so the refusal reveals no job or uid.
install -d -m 0700 "$T/snaps/rootjob"
printf 'gptd-snapshot-owner 1\ntoken %016x\njob 4711\nuid 0\n' 12345 >"$T/snaps/rootjob/.gptd-owner"
out=$(refused_submit "snapshot.dir.*Permission denied" snapshot.dir="$T/snaps/rootjob")
echo "$out"
! grep -q 4711 <<<"$out" || fail "the refusal names root's job: $out"
out=$("$GPTCTL" submit "$T/job.json" snapshot.dir="$T/snaps/rootjob" 2>&1) &&
    fail "root's submit into job 4711's folder was accepted: $out"
grep -q "belongs to job 4711 (uid 0)" <<<"$out" || fail "the marker was not read for root: $out"

# --- swaps after submit ----------------------------------------------------
mkdir -p "$T/data/hsw"
cp "$T/data/good.txt" "$T/data/hsw/hidden-name-4343.bin"
chmod 0755 "$T/data/hsw"
hold
a=$(as_user submit "$T/job.json" data.path="$T/data/swap.txt")
f=$(as_user submit "$T/job.json" data.path="$T/data/swap3.txt")
h=$(as_user submit "$T/job.json" data.kind=shards data.path="$T/data/hsw/*.bin")
b=$(as_user submit "$T/job.json" data.path="$T/data/swap2.txt")
c=$(as_user submit "$T/job.json" snapshot.dir="$T/snaps/user/run")
ln -sfn "$T/data/secret.txt" "$T/data/swap.txt"
ln -sfn "$T/outside/other.txt" "$T/data/swap2.txt"
runuser -u "$U" -- ln -sfn "$T/outside" "$T/snaps/user/run"
rm "$T/data/swap3.txt"
mkfifo -m 0666 "$T/data/swap3.txt"
chmod 0711 "$T/data/hsw"
release
expect_failed "$a" data.path "Permission denied"
expect_failed "$b" data.path "outside the allowed roots"
expect_failed "$c" snapshot.dir "outside the state directory and the snapshot roots"
expect_failed "$f" data.path "is a FIFO, not a regular file"
expect_failed "$h" data.path "cannot read a directory"
job_json "$h" | has hidden-name-4343 && fail "the job's error revealed a hidden name"
timeout 5 "$GPTCTL" status >/dev/null || fail "gptd stopped answering after the FIFO job"
ls "$T/outside" | has '\.gpts' && fail "a snapshot was written outside the roots"
out=$(as_user sample "$a" --prompt the --tokens 64 --temperature 0.01 2>&1 || true)
grep -q ZQXJ <<<"$out" && fail "the swapped root-only file came back through sample: $out"

# --- a glob over a folder the user cannot list -----------------------------
out=$(as_user validate "$T/job.json" data.kind=shards data.path="$T/data/hidden/*.bin" 2>&1 || true)
grep -q hidden-name-4242 <<<"$out" && fail "validate revealed a hidden name: $out"
out=$(as_user submit "$T/job.json" data.kind=shards data.path="$T/data/hidden/*.bin" 2>&1) &&
    fail "a glob over a folder the user cannot list was accepted: $out"
grep -q "Permission denied" <<<"$out" || fail "unclear refusal of the hidden glob: $out"
grep -q hidden-name-4242 <<<"$out" && fail "submit revealed a hidden name: $out"
grep -q -e hidden-name-4242 -e hidden-name-4343 "$T"/gptd*.log && fail "gptd's log revealed a hidden name"

# --- validate with a deep glob does not block the loop ----------------------
pat="$T/data/deep/*/*/*/*/*/*/*.bin"
as_user validate "$T/job.json" data.kind=shards data.path="$pat" >/dev/null 2>&1 &
vpid=$!
start=$SECONDS
timeout 5 "$GPTCTL" status >/dev/null || fail "status did not answer while validate ran"
wait "$vpid" || true
((SECONDS - start <= 5)) || fail "validate with a deep glob took $((SECONDS - start)) s"

# --- snapshots belong to the user ------------------------------------------
check_owned() { # DIR
    local d=$1 f
    [[ $(stat -c %u "$d") == "$UID_U" ]] || fail "$d is owned by uid $(stat -c %u "$d")"
    [[ $(stat -c %a "$d") == 700 ]] || fail "$d has mode $(stat -c %a "$d"), expected 700"
    ls "$d" | has '\.gpts$' || fail "no snapshot in $d"
    for f in "$d"/*.gpts; do
        [[ $(stat -c %u "$f") == "$UID_U" ]] || fail "$f is owned by uid $(stat -c %u "$f")"
        [[ $(stat -c %a "$f") == 600 ]] || fail "$f has mode $(stat -c %a "$f"), expected 600"
    done
    runuser -u nobody -- ls "$d" >/dev/null 2>&1 && fail "another user can list $d"
    echo "$d: owned by uid $UID_U, 0700, snapshots 0600"
}
id=$(as_user submit "$T/job.json")
wait_for 60 job_is "$id" completed
check_owned "$T/state/jobs/$id/snapshots"
as_user sample "$id" --prompt the --tokens 8 >/dev/null || fail "the owner cannot sample its own job"
out=$(runuser -u nobody -- env GPTD_SOCKET="$SOCK" "$T/bin/gptctl" sample "$id" --prompt the \
    --tokens 8 2>&1) && fail "another user sampled uid $UID_U's job: $out"
grep -q "Permission denied" <<<"$out" || fail "another user's sample: unclear error: $out"
id=$(as_user submit "$T/job.json" snapshot.dir="$T/snaps/user/ok")
wait_for 60 job_is "$id" completed
check_owned "$T/snaps/user/ok"

# --- a gptd without the privilege (as under Slurm) ----------------------------
# It runs as the user: the user's own jobs work unchanged, anyone else's are
# refused at submit with the reason.
mkdir -p "$T/ustate"
chown "$U" "$T/ustate"
USOCK=$T/ustate/gptd.sock
cp "$GPTD" "$T/bin/gptd"
chmod 0755 "$T/bin/gptd"
setpriv --reuid "$U" --regid "$U" --init-groups -- "$T/bin/gptd" --state-dir "$T/ustate" --socket "$USOCK" --socket-mode 0666 \
    --data-roots "$T/data" --snapshot-roots "$T/snaps" 2>>"$T/gptd.user.log" &
PIDS+=($!)
wait_for 20 "$GPTCTL" --socket "$USOCK" status
out=$("$GPTCTL" --socket "$USOCK" submit "$T/job.json" 2>&1) &&
    fail "an unprivileged gptd of uid $UID_U took root's job: $out"
grep -q "without CAP_SETUID" <<<"$out" || fail "unclear refusal: $out"
id=$(runuser -u "$U" -- "$T/bin/gptctl" --socket "$USOCK" submit "$T/job.json")
ok_user_job() {
    runuser -u "$U" -- "$T/bin/gptctl" --socket "$USOCK" --json status "$id" |
        grep -q '"state":"completed"'
}
wait_for 60 ok_user_job
kill -TERM "${PIDS[-1]}"
wait "${PIDS[-1]}" || fail "the unprivileged gptd did not stop cleanly on SIGTERM"
echo "an unprivileged gptd ran its own user's job and refused root's"

# --- a gptd that is not root, with the unit's capabilities --------------------
# The user's own 0600 file, which gptd's user cannot read, trains; the
# snapshots are the user's and the user can sample them.
install -d -o "$G" -g "$G" -m 0750 "$T/gstate" # as StateDirectory=, before the o+x
install -d -o "$G" -g "$G" -m 0755 "$T/grun"   # as RuntimeDirectory=
GSOCK=$T/grun/gptd.sock
text >"$T/data/mine.txt"
chown "$U" "$T/data/mine.txt"
chmod 0600 "$T/data/mine.txt"
caps=+setuid,+setgid,+chown
setpriv --reuid "$G" --regid "$G" --init-groups --bounding-set=-all,$caps --inh-caps=$caps \
    --ambient-caps=$caps -- "$T/bin/gptd" --state-dir "$T/gstate" --socket "$GSOCK" \
    --socket-mode 0666 --data-roots "$T/data" --snapshot-roots "$T/snaps" \
    2>>"$T/gptd.sys.log" &
PIDS+=($!)
wait_for 20 "$GPTCTL" --socket "$GSOCK" status
gctl() { runuser -u "$U" -- "$T/bin/gptctl" --socket "$GSOCK" "$@"; }
id=$(gctl submit "$T/job.json" data.path="$T/data/mine.txt")
g_done() { gctl --json status "$id" | has '"state":"\(completed\|failed\)"'; }
wait_for 60 g_done
gctl --json status "$id" | has '"state":"completed"' ||
    fail "the user's job on a non-root gptd: $(gctl --json status "$id")"
check_owned "$T/gstate/jobs/$id/snapshots"
gctl sample "$id" --prompt the --tokens 8 >/dev/null || fail "the owner cannot sample on a non-root gptd"
kill -TERM "${PIDS[-1]}"
wait "${PIDS[-1]}" || fail "the non-root gptd did not stop cleanly on SIGTERM"
echo "a non-root gptd with CAP_SETUID/SETGID/CHOWN ran the user's job on the user's own file"

# --- the same gptd, restarted: a killed writer's temporary in the user's
# 0700 folder (which gptd's user cannot list) is removed at start, as the owner.
stale="$T/gstate/jobs/$id/snapshots/.snap-000000000003.gpts.Ab12Cd"
echo junk >"$stale"
chown "$U" "$stale"
setpriv --reuid "$G" --regid "$G" --init-groups --bounding-set=-all,$caps --inh-caps=$caps \
    --ambient-caps=$caps -- "$T/bin/gptd" --state-dir "$T/gstate" --socket "$GSOCK" \
    --socket-mode 0666 --data-roots "$T/data" --snapshot-roots "$T/snaps" \
    2>>"$T/gptd.sys2.log" &
PIDS+=($!)
wait_for 20 "$GPTCTL" --socket "$GSOCK" status
[[ ! -e $stale ]] || fail "the non-root gptd left the stale temporary $stale: $(cat "$T/gptd.sys2.log")"
grep -q "removed 1 stale temporary snapshot file" "$T/gptd.sys2.log" ||
    fail "the cleaning was not logged: $(cat "$T/gptd.sys2.log")"
check_owned "$T/gstate/jobs/$id/snapshots"
kill -TERM "${PIDS[-1]}"
wait "${PIDS[-1]}" || fail "the restarted non-root gptd did not stop cleanly on SIGTERM"
echo "a non-root gptd removed a killed writer's temporary from the user's 0700 folder"

# --- a FIFO as data.path: refused at submit (swapped in later: see above) ----
refused_submit "is a FIFO, not a regular file" data.path="$T/data/fifo"
timeout 5 "$GPTCTL" status >/dev/null || fail "gptd stopped answering after the FIFO submit"
# Releasing a node id (gptctl nodes --forget) is root's: the next gptd to
# join under it writes as that node. Another user is refused, naming why.
out=$(as_user nodes --forget somenode 2>&1) && fail "a user forgot a node: $out"
[[ $out == *"only root may forget a node"* ]] || fail "nodes --forget as a user said: $out"
kill -TERM "$GPTD_PID"
deadline=$((SECONDS + 20))
while kill -0 "$GPTD_PID" 2>/dev/null; do
    ((SECONDS < deadline)) || fail "gptd did not stop on SIGTERM"
    sleep 0.05
done
echo "daemon_identity: ok"
