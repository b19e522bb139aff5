#!/usr/bin/env bash
# Exact resume: 2N steps straight vs N steps, snapshot, a new process with
# --resume, N more steps: identical per-step losses and bit-identical final
# parameters (and the whole snapshot file).
# usage: run_resume.sh GPTD SNAPDIFF JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 SNAPDIFF=$2 JOB=$3

"$GPTD" run "$JOB" --json --snapshot-dir "$T/a" trainer.max_steps=40 > "$T/a.log"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/b" trainer.max_steps=40 --stop-after 20 > "$T/b1.log"
ls "$T/b" | grep -q 'snap-0*20\.gpts' || fail "no snapshot at step 20 after --stop-after 20"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/b" trainer.max_steps=40 --resume > "$T/b2.log"
jq -r 'select(.type=="event") | .kind' "$T/b2.log" | grep -qx resume \
    || fail "second run did not report a resume"

losses "$T/a.log" > "$T/a.losses"
{ losses "$T/b1.log"; losses "$T/b2.log"; } > "$T/b.losses"
[[ $(wc -l < "$T/a.losses") -eq 40 ]] || fail "expected 40 metric lines, got $(wc -l < "$T/a.losses")"
diff "$T/a.losses" "$T/b.losses" || fail "per-step losses differ after resume"

final_a=$(ls "$T"/a/snap-*.gpts | tail -n 1)
final_b=$(ls "$T"/b/snap-*.gpts | tail -n 1)
"$SNAPDIFF" "$final_a" "$final_b" 0 || fail "final parameters are not bit-identical"
cmp "$final_a" "$final_b" || fail "final snapshot files differ"
echo "exact resume ok: 40 identical losses, identical final snapshot"
