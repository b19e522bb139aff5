#!/usr/bin/env bash
# A snapshot of a full-sharded world of 3 resumes into world 1 without
# sharding and into world 2 with optimizer sharding (re-sharding on load),
# and both continue the uninterrupted run step for step.
# usage: shard_resume.sh GPTD SNAPDIFF JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 SNAPDIFF=$2 JOB=$3
over=(trainer.max_steps=20 snapshot.every=0)

"$GPTD" run "$JOB" --json --snapshot-dir "$T/ref" --workers 3 distributed.sharding=full \
    "${over[@]}" > "$T/ref.log"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/base" --workers 3 distributed.sharding=full \
    --stop-after 10 "${over[@]}" > /dev/null
for target in "1 none" "2 optimizer"; do
    set -- $target
    d="$T/w$1$2"
    cp -r "$T/base" "$d"
    "$GPTD" run "$JOB" --json --snapshot-dir "$d" --workers "$1" distributed.sharding="$2" \
        --resume "${over[@]}" > "$d.log"
    jq -r 'select(.type=="event" and .kind=="resume") | .message' "$d.log" \
        | grep -q "world size 3, now $1" || fail "world $1 $2 did not resume the world-3 snapshot"
    paste <(losses "$T/ref.log" | tail -n 10) <(losses "$d.log") | awk '
        { n++; d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > max) max = r;
          if ($1 != $3) bad = 1 }
        END { printf "full/3 -> %s: steps 11-20, max relative loss difference %.3g\n", t, max;
              exit (bad || n != 10 || max > 1e-4) }' t="$2/$1" || fail "world $1 $2 diverged"
    "$SNAPDIFF" "$(ls "$T"/ref/*.gpts | tail -n1)" "$(ls "$d"/*.gpts | tail -n1)" 1e-4 \
        || fail "world $1 $2 final parameters differ"
done
echo "sharded resume ok"
