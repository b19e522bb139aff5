#!/usr/bin/env bash
# Learning: a tiny model on synthetic 2-digit addition reaches at least 95%
# exact-match accuracy on held-out problems, and greedy sampling (top-k 1)
# from the final snapshot answers 12 + 34: "1234" then 46 reversed as
# three digits, "640".
# usage: run_learn.sh GPTD JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 JOB=$2
"$GPTD" run "$JOB" --json --snapshot-dir "$T/s" --sample 3 --prompt 1234 --top-k 1 > "$T/log"
acc=$(last_metric "$T/log" accuracy)
steps=$(last_metric "$T/log" step)
echo "held-out exact-match accuracy after $steps steps: $acc"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.95) }' || fail "accuracy $acc < 0.95"
text=$(jq -r 'select(.type=="sample") | .text' "$T/log")
echo "greedy sample for 12+34: $text"
[[ "$text" == "1234640" ]] || fail "the model answered '$text' to 12+34, expected 1234640"
