#!/usr/bin/env bash
# Snapshots belong to their job (issue 14; issue 18 "Snapshot folders are
# never shared by accident"), with a real daemon:
#  - a job's folder carries an owner marker naming it;
#  - the same user submitting a second job into that folder is refused at
#    submit, naming snapshot.dir and the owning job;
#  - two jobs queued on one empty folder: the first to start owns it, the
#    second is refused when it starts (at use), and never reads, prunes or
#    writes the first one's snapshots;
#  - another user (made here with useradd) is refused the same way, and the
#    owner's folder is left exactly as it was;
#  - every snapshot of a job corrupt: its resume fails loudly, naming the
#    folder, and the files are quarantined (NAME.corrupt), not used;
#  - snapshot.on_invalid=restart: the same resume starts over from step 0
#    instead (event start_over), the bad files stay quarantined and pruning
#    keeps the new valid snapshots; a bad value is refused at submit naming
#    the key.
source "$(dirname "$0")/daemon_common.sh"
[[ $(id -u) -eq 0 ]] || { echo "daemon_snapshot_owner: needs root (useradd)"; exit 77; }

U=gptdown$$
useradd --no-create-home --shell /usr/sbin/nologin "$U"
# The user goes first, then daemon_common's cleanup (which reads $?).
trap 'rc=$?; set +e; userdel "$U" 2>/dev/null; (exit $rc); cleanup' EXIT
chmod 755 "$T"

# job FILE DIR STEPS: the tiny job writing its snapshots to DIR.
job() {
    tiny_job "$1" "$3" 5 20
    sed -i "s|\"snapshot\": {\"every\": 20}|\"snapshot\": {\"every\": 20, \"keep\": 2, \"dir\": \"$2\"}|" "$1"
    grep -q "\"dir\": \"$2\"" "$1" || fail "job file without snapshot.dir"
    chmod 644 "$1"
}
tree() { (cd "$1" && find . -type f -printf '%p %s %T@\n' | sort | md5sum); }

start_gptd --socket-mode 0666
job "$T/a.json" "$T/shared" 100
a=$("$GPTCTL" submit "$T/a.json")
wait_for 60 job_is "$a" completed
grep -q "^job $a$" "$T/shared/.gptd-owner" && grep -q "^uid 0$" "$T/shared/.gptd-owner" ||
    fail "owner marker: $(cat "$T/shared/.gptd-owner")"
before=$(tree "$T/shared")

# --- the same user, at submit.
set +e
out=$("$GPTCTL" submit "$T/a.json" 2>&1)
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "a second job was accepted into job $a's folder"
[[ $out == *"snapshot.dir $T/shared belongs to job $a (uid 0)"* ]] ||
    fail "the refusal does not name snapshot.dir and the owner: $out"

# --- the same user, at use: two jobs queued on one empty folder.
job "$T/long.json" "$T/long" 100000
job "$T/d.json" "$T/race" 60
long=$("$GPTCTL" submit "$T/long.json")
wait_for 60 job_is "$long" running
d=$("$GPTCTL" submit "$T/d.json")
e=$("$GPTCTL" submit "$T/d.json")
"$GPTCTL" cancel "$long" >/dev/null
wait_for 60 job_is "$d" completed
wait_for 60 job_is "$e" failed
err=$(job_field "$e" error)
[[ $err == *"snapshot.dir $T/race belongs to job $d (uid 0)"* ]] ||
    fail "job $e failed for another reason: $err"
"$GPTCTL" --json logs "$e" >"$T/e.json"
! grep -q '"kind":"resume"\|"type":"metric"' "$T/e.json" || fail "job $e ran in job $d's folder"
ls "$T/race" | grep 'snap-0*60\.gpts' >/dev/null || fail "job $d's final snapshot is gone: $(ls "$T/race")"

# --- another user.
cat "$T/a.json" >"$T/theirs.json"
set +e
out=$(setpriv --reuid="$U" --regid="$(id -g "$U")" --clear-groups "$GPTCTL" submit "$T/theirs.json" 2>&1)
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "user $U's job was accepted into root's snapshot folder"
[[ $out == *snapshot.dir* && $out == *"$T/shared"* ]] || fail "user $U's refusal: $out"
echo "user $U: $out"
[[ $(tree "$T/shared") == "$before" ]] || fail "job $a's folder changed"

# --- every snapshot corrupt: the resume fails loudly, nothing is used.
for f in "$T"/shared/snap-*.gpts; do truncate -s 600 "$f"; done
"$GPTCTL" resume "$a" trainer.max_steps=1000 >/dev/null
wait_for 60 job_is "$a" failed
err=$(job_field "$a" error)
[[ $err == *"no valid snapshot to resume from in $T/shared"* ]] || fail "resume error: $err"
ls "$T/shared" | grep '\.gpts\.corrupt$' >/dev/null || fail "nothing quarantined: $(ls "$T/shared")"
! ls "$T/shared" | grep '\.gpts$' >/dev/null || fail "a corrupt snapshot kept its name: $(ls "$T/shared")"
"$GPTCTL" --json logs "$a" >"$T/a.logs.json"
grep -q 'quarantined as' "$T/a.logs.json" || fail "quarantine not reported"

# --- snapshot.on_invalid: a bad value is refused at submit, naming the key.
job "$T/r.json" "$T/restart" 100000
sed -i 's|"keep": 2|"keep": 2, "on_invalid": "sometimes"|' "$T/r.json"
set +e
out=$("$GPTCTL" submit "$T/r.json" 2>&1)
rc=$?
set -e
[[ $rc -ne 0 && $out == *snapshot.on_invalid* ]] || fail "a bad snapshot.on_invalid: $out"
# --- restart: every snapshot corrupt, the resume starts over from step 0.
sed -i 's|"on_invalid": "sometimes"|"on_invalid": "restart"|' "$T/r.json"
r=$("$GPTCTL" submit "$T/r.json")
wait_for 60 job_step_at_least "$r" 45
"$GPTCTL" cancel "$r" >/dev/null
wait_for 60 job_is "$r" cancelled
ls "$T"/restart/snap-*.gpts >/dev/null || fail "job $r wrote no snapshot: $(ls "$T/restart")"
for f in "$T"/restart/snap-*.gpts; do truncate -s 600 "$f"; done
"$GPTCTL" resume "$r" >/dev/null
started_over() { "$GPTCTL" --json logs "$r" >"$T/r.logs.json" && grep -q '"kind":"start_over"' "$T/r.logs.json"; }
wait_for 60 started_over
! grep -q '"kind":"resume"' "$T/r.logs.json" || fail "job $r resumed from a corrupt snapshot"
ls "$T/restart" | grep '\.gpts\.corrupt$' >/dev/null || fail "nothing quarantined: $(ls "$T/restart")"
corrupt=$(ls "$T/restart" | grep -c '\.gpts\.corrupt$')
# Pruning (keep 2) counts only the new valid snapshots: once step 60 is
# written (and the job is stopped), two are kept, and no quarantined file
# is deleted.
newest_at_least() {
    local f
    f=$(ls "$T/restart" | grep '^snap-[0-9]*\.gpts$' | tail -n1)
    [[ -n $f ]] && ((10#$(tr -dc 0-9 <<<"$f") >= $1))
}
wait_for 60 newest_at_least 60
"$GPTCTL" cancel "$r" >/dev/null
wait_for 60 job_is "$r" cancelled
n=$(ls "$T/restart" | grep -c '^snap-[0-9]*\.gpts$')
[[ $n == 2 ]] || fail "pruning kept $n snapshots: $(ls "$T/restart")"
[[ $(ls "$T/restart" | grep -c '\.gpts\.corrupt$') == "$corrupt" ]] ||
    fail "pruning deleted quarantined files: $(ls "$T/restart")"
echo "daemon_snapshot_owner: ok"
