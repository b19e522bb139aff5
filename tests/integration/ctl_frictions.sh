#!/usr/bin/env bash
# Smaller frictions of issue 35 (item 6), played as a user types them:
# `gptctl cancel --wait` returns once the job has stopped, so a `resume`
# right after it works; `snapshots` prints sizes for people; `sample`
# separates the prompt from what the model wrote and ends with a newline.
source "$(dirname "$0")/daemon_common.sh"
start_gptd

tiny_job "$T/job.json" 100000 1 100000
id=$("$GPTCTL" submit "$T/job.json")
wait_for 60 job_step_at_least "$id" 3
out=$("$GPTCTL" cancel --wait "$id") || fail "cancel --wait: exit $?: $out"
has -x "job $id stopped: cancelled" <<<"$out" || fail "cancel --wait: $out"
# It returned after the stop: the job is final and its snapshot listed.
job_is "$id" cancelled || fail "cancel --wait returned before the stop: $(job_state "$id")"
"$GPTCTL" resume "$id" >"$T/resume.out" 2>&1 || fail "resume right after cancel --wait: $(cat "$T/resume.out")"
"$GPTCTL" cancel --wait "$id" >/dev/null || fail "second cancel --wait"

# snapshots: sizes in KiB (the tiny model's snapshot is ~100 KB), --json in bytes.
out=$("$GPTCTL" snapshots "$id")
has -E '^ *[0-9]+ +[0-9]+ +[^ ]+ +[0-9]+\.[0-9] KiB +(yes|pruned) ' <<<"$out" || fail "snapshots: $out"
"$GPTCTL" --json snapshots "$id" | has '"size":[0-9]\{4,\}' || fail "snapshots --json lost the byte count"

# sample: prompt, a separator line, the continuation, a final newline.
"$GPTCTL" sample "$id" --prompt 12 --tokens 3 >"$T/sample.out" || fail "sample: exit $?"
[[ $(sed -n 1p "$T/sample.out") == 12 && $(sed -n 2p "$T/sample.out") == "--- generated ---" ]] ||
    fail "sample output: $(cat -A "$T/sample.out")"
(($(wc -l <"$T/sample.out") == 3)) && [[ -n $(sed -n 3p "$T/sample.out") ]] ||
    fail "sample continuation: $(cat -A "$T/sample.out")"
[[ $(tail -c1 "$T/sample.out" | od -An -c | tr -d ' ') == '\n' ]] || fail "sample has no final newline"
text=$("$GPTCTL" --json sample "$id" --prompt 12 --tokens 3 | jq -r .text)
[[ $text == 12?* ]] || fail "sample --json text: $text"
echo "ctl_frictions ok"
