#!/usr/bin/env bash
# Learning: a tiny model on synthetic 2-digit addition reaches at least 95%
# exact-match accuracy on held-out problems.
# usage: run_learn.sh GPTD JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 JOB=$2
"$GPTD" run "$JOB" --json --snapshot-dir "$T/s" > "$T/log"
acc=$(last_metric "$T/log" accuracy)
steps=$(last_metric "$T/log" step)
echo "held-out exact-match accuracy after $steps steps: $acc"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.95) }' || fail "accuracy $acc < 0.95"
