#!/usr/bin/env bash
# Exact resume: 2N steps straight vs N steps, snapshot, a new process with
# --resume, N more steps: identical per-step losses and bit-identical final
# parameters (and the whole snapshot file but the owner fields and the
# checksums over them: each run has its own identity).
# usage: run_resume.sh GPTD SNAPDIFF JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 SNAPDIFF=$2 JOB=$3

"$GPTD" run "$JOB" --json --snapshot-dir "$T/a" trainer.max_steps=40 > "$T/a.log"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/b" trainer.max_steps=40 --stop-after 20 > "$T/b1.log"
ls "$T/b" | has 'snap-0*20\.gpts' || fail "no snapshot at step 20 after --stop-after 20"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/b" trainer.max_steps=40 --resume > "$T/b2.log"
jq -r 'select(.type=="event") | .kind' "$T/b2.log" | has -x resume \
    || fail "second run did not report a resume"

losses "$T/a.log" > "$T/a.losses"
{ losses "$T/b1.log"; losses "$T/b2.log"; } > "$T/b.losses"
[[ $(wc -l < "$T/a.losses") -eq 40 ]] || fail "expected 40 metric lines, got $(wc -l < "$T/a.losses")"
diff "$T/a.losses" "$T/b.losses" || fail "per-step losses differ after resume"

final_a=$(ls "$T"/a/snap-*.gpts | tail -n 1)
final_b=$(ls "$T"/b/snap-*.gpts | tail -n 1)
"$SNAPDIFF" "$final_a" "$final_b" 0 || fail "final parameters are not bit-identical"
cmp -n 392 "$final_a" "$final_b" || fail "final snapshot headers differ"
cmp <(tail -c +513 "$final_a" | head -c -4) <(tail -c +513 "$final_b" | head -c -4) ||
    fail "final snapshot payloads differ"
[[ $(od -An -tx1 -j 392 -N 8 "$final_a") != $(od -An -tx1 -j 392 -N 8 "$final_b") ]] ||
    fail "two fresh runs recorded the same owner token"
echo "exact resume ok: 40 identical losses, identical final snapshot"
