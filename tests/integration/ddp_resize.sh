#!/usr/bin/env bash
# World-size change: snapshot at world 2, resume at world 1 and at world 3.
# The resumed runs consume the same samples next (the data cursor carries
# over and the global batch is fixed), so their losses track the
# uninterrupted world-2 run step for step, and training continues to the end.
# usage: ddp_resize.sh GPTD SNAPDIFF JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 SNAPDIFF=$2 JOB=$3
over=(trainer.max_steps=20 snapshot.every=0)

"$GPTD" run "$JOB" --json --snapshot-dir "$T/ref" --workers 2 "${over[@]}" > "$T/ref.log"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/base" --workers 2 --stop-after 10 "${over[@]}" \
    > /dev/null
for w in 1 3; do
    cp -r "$T/base" "$T/w$w"
    "$GPTD" run "$JOB" --json --snapshot-dir "$T/w$w" --workers $w --resume "${over[@]}" \
        > "$T/w$w.log"
    jq -r 'select(.type=="event" and .kind=="resume") | .message' "$T/w$w.log" \
        | has "world size 2, now $w" || fail "world $w: no resume from the world-2 snapshot"
    paste <(losses "$T/ref.log" | tail -n 10) <(losses "$T/w$w.log") | awk '
        { n++; d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > max) max = r;
          if ($1 != $3) bad = 1 }
        END { printf "world 2 -> %s: steps 11-20, max relative loss difference %.3g\n", w, max;
              exit (bad || n != 10 || max > 1e-4) }' w=$w || fail "world $w diverged"
    "$SNAPDIFF" "$(ls "$T"/ref/*.gpts | tail -n1)" "$(ls "$T"/w$w/*.gpts | tail -n1)" 1e-4 \
        || fail "world $w final parameters differ"
done
echo "world-size change ok"
