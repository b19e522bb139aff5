#!/usr/bin/env bash
# `gptd run` and its snapshot folder (issue 14, "Nothing acknowledged is
# lost" and "Snapshots belong to their job"; issue 18, "Snapshot folders
# are never shared by accident"):
#  - every snapshot corrupt: --resume quarantines each (NAME.corrupt, an
#    event naming the file and the reason) and fails loudly, again on a
#    second try; --resume --start-over starts from step 0, and pruning keeps
#    the new valid snapshots, never counting the quarantined ones; the job
#    key snapshot.on_invalid=restart with --resume does the same;
#  - a dead writer's temporary file in the folder is removed before the
#    run writes, other files are left alone;
#  - a fresh run (no --resume) into a folder another run owns is refused,
#    naming the folder and how to continue, and touches nothing there.
# usage: run_snapshot_safety.sh GPTD JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 JOB=$2
S=$T/s

"$GPTD" run "$JOB" --json --snapshot-dir "$S" trainer.max_steps=40 snapshot.keep=2 \
    --stop-after 20 >"$T/first.log"
[[ -f $S/.gptd-owner ]] || fail "no owner marker in $S"
grep -q "^job 0$" "$S/.gptd-owner" && grep -q "^uid $(id -u)$" "$S/.gptd-owner" ||
    fail "owner marker: $(cat "$S/.gptd-owner")"
s10=$S/snap-000000000010.gpts s20=$S/snap-000000000020.gpts
[[ -f $s10 && -f $s20 ]] || fail "expected snapshots 10 and 20: $(ls -a "$S")"

# Every snapshot corrupt: one truncated, one with a flipped payload bit.
truncate -s 1000 "$s20"
size=$(stat -c %s "$s10") off=$(($(stat -c %s "$s10") / 2))
byte=$(od -An -tu1 -j "$off" -N1 "$s10" | tr -d ' ')
printf "$(printf '\\%03o' $((byte ^ 16)))" | dd of="$s10" bs=1 seek="$off" conv=notrunc status=none

set +e
"$GPTD" run "$JOB" --json --snapshot-dir "$S" trainer.max_steps=40 snapshot.keep=2 --resume \
    >"$T/resume1.log" 2>"$T/resume1.err"
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "resume with only corrupt snapshots succeeded (it must fail loudly)"
grep -q "no valid snapshot to resume from in $S" "$T/resume1.err" ||
    fail "resume failure does not say why: $(cat "$T/resume1.err")"
grep -q -- "--start-over" "$T/resume1.err" || fail "resume failure does not say how to start over"
[[ -z $(jq -r 'select(.type=="metric") | .step' "$T/resume1.log") ]] || fail "a failed resume trained"
for f in "$s10" "$s20"; do
    [[ ! -e $f && -f $f.corrupt ]] || fail "$f was not quarantined: $(ls -a "$S")"
    jq -r 'select(.type=="event" and .kind=="snapshot_invalid") | .message' "$T/resume1.log" |
        grep "$f.*quarantined as $f.corrupt" >/dev/null || fail "quarantine of $f not reported"
done
jq -r 'select(.type=="event" and .kind=="snapshot_invalid") | .message' "$T/resume1.log" |
    grep "checksum" >/dev/null || fail "the reason (checksum) is not reported"

# A second resume still fails: the quarantined files are remembered.
set +e
"$GPTD" run "$JOB" --json --snapshot-dir "$S" trainer.max_steps=40 --resume \
    >"$T/resume2.log" 2>"$T/resume2.err"
rc=$?
set -e
[[ $rc -ne 0 ]] && grep -q "2 quarantined" "$T/resume2.err" ||
    fail "second resume: rc $rc, $(cat "$T/resume2.err")"

# The job key snapshot.on_invalid=restart is a standing --start-over.
cp -a "$S" "$T/keyed"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/keyed" trainer.max_steps=40 snapshot.keep=2 \
    snapshot.on_invalid=restart --resume >"$T/keyed.log" 2>"$T/keyed.err" ||
    fail "snapshot.on_invalid=restart failed: $(cat "$T/keyed.err")"
jq -r 'select(.type=="event") | .kind' "$T/keyed.log" | grep -x start_over >/dev/null ||
    fail "snapshot.on_invalid=restart: no start_over event"
[[ $(jq -r 'select(.type=="metric") | .step' "$T/keyed.log" | head -n1) -eq 1 ]] ||
    fail "snapshot.on_invalid=restart did not start at step 1"

# A dead writer's temporary, and files that only look like one.
stale=$S/.snap-000000000015.gpts.Ab12Cd
echo junk >"$stale"
echo keep >"$S/.snap-notes.txt"
ln -s /etc/passwd "$S/.snap-000000000016.gpts.Ln12Ab"

# Starting over is explicit.
"$GPTD" run "$JOB" --json --snapshot-dir "$S" trainer.max_steps=40 snapshot.keep=2 --resume \
    --start-over >"$T/over.log" 2>"$T/over.err" || fail "--start-over failed: $(cat "$T/over.err")"
jq -r 'select(.type=="event") | .kind' "$T/over.log" | grep -x start_over >/dev/null ||
    fail "no start_over event"
[[ $(jq -r 'select(.type=="metric") | .step' "$T/over.log" | head -n1) -eq 1 ]] ||
    fail "--start-over did not start at step 1"
[[ ! -e $stale ]] || fail "the stale temporary $stale was not removed"
[[ -f $S/.snap-notes.txt && -L $S/.snap-000000000016.gpts.Ln12Ab ]] ||
    fail "cleaning removed what is not ours: $(ls -a "$S")"
jq -r 'select(.type=="event" and .kind=="snapshot_tmp") | .message' "$T/over.log" |
    grep "removed 1 stale" >/dev/null || fail "the cleaning was not reported"
snaps=$(cd "$S" && ls snap-*.gpts | tr '\n' ' ')
[[ $snaps == "snap-000000000030.gpts snap-000000000040.gpts " ]] ||
    fail "pruning kept \"$snaps\", want the new 30 and 40"
[[ -f $s10.corrupt && -f $s20.corrupt ]] || fail "quarantined files were deleted"

# A fresh run into a folder another run owns is refused; nothing changes.
before=$(cd "$S" && ls -lA --time-style=full-iso | md5sum)
set +e
"$GPTD" run "$JOB" --json --snapshot-dir "$S" trainer.max_steps=40 >"$T/fresh.log" 2>"$T/fresh.err"
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "a fresh run took over another run's snapshot folder"
grep -q "snapshot.dir $S belongs to another \`gptd run\` (uid $(id -u))" "$T/fresh.err" &&
    grep -q -- "--resume" "$T/fresh.err" || fail "refusal does not explain: $(cat "$T/fresh.err")"
[[ $(cd "$S" && ls -lA --time-style=full-iso | md5sum) == "$before" ]] ||
    fail "the refused run changed the folder"
# The same holds for a folder with snapshots but no marker (written before owners existed).
mkdir "$T/old" && cp "$S/snap-000000000040.gpts" "$T/old/"
set +e
"$GPTD" run "$JOB" --json --snapshot-dir "$T/old" trainer.max_steps=40 >/dev/null 2>"$T/old.err"
rc=$?
set -e
[[ $rc -ne 0 ]] && grep -q "no owner recorded" "$T/old.err" || fail "old folder: $(cat "$T/old.err")"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/old" trainer.max_steps=50 --resume >"$T/old.log" ||
    fail "--resume did not adopt a folder without a marker"
echo "run_snapshot_safety: ok"
