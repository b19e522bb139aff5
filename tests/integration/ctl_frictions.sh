#!/usr/bin/env bash
# Smaller frictions of issue 35 (item 6), played as a user types them:
# `gptctl cancel --wait` returns once the job has stopped, so a `resume`
# right after it works; `snapshots` prints sizes for people; `sample`
# separates the prompt from what the model wrote and ends with a newline;
# validate, submit and gptd run warn of a warmup that never ends and of an
# eval interval beyond max_steps; a GGUF export is named after its job;
# `list --state` and `--user` filter the jobs.
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
# GGUF general.name is the job's name ("tiny"), not "gptd".
"$GPTCTL" export "$id" --format gguf -o "$T/m.gguf" >/dev/null || fail "export gguf"
python3 - "$T/m.gguf" <<'PY' || fail "GGUF general.name is not the job's name"
import struct, sys
b = open(sys.argv[1], "rb").read()
i = b.index(b"general.name") + len(b"general.name")
vtype, n = struct.unpack_from("<IQ", b, i)
name = b[i + 12:i + 12 + n].decode()
print("general.name:", name)
sys.exit(0 if vtype == 8 and name == "tiny" else 1)
PY

# Warnings: said, and the job still valid (exit 0).
tiny_job "$T/w.json" 6 1 100
"$GPTCTL" validate "$T/w.json" optimizer.warmup_steps=6 trainer.eval_every=10 >/dev/null 2>"$T/warn" ||
    fail "validate with warnings failed"
has -x 'gptctl: warning: optimizer.warmup_steps: 6 is not below trainer.max_steps (6): the learning rate never leaves its warmup' "$T/warn" ||
    fail "no warmup warning: $(cat "$T/warn")"
has -x 'gptctl: warning: trainer.eval_every: 10 is beyond trainer.max_steps (6): validation runs only once, at the last step' "$T/warn" ||
    fail "no eval warning: $(cat "$T/warn")"
w=$("$GPTCTL" submit "$T/w.json" optimizer.warmup_steps=8 2>"$T/warn") || fail "submit with a warning failed"
has 'warning: optimizer.warmup_steps: 8 is not below' "$T/warn" || fail "submit did not warn: $(cat "$T/warn")"
"$GPTCTL" validate "$T/w.json" 2>"$T/warn" >/dev/null
[[ ! -s $T/warn ]] || fail "a plain job warned: $(cat "$T/warn")"
(cd "$T" && "$GPTD" run "$T/w.json" trainer.eval_every=7 --run-dir "$T/wr" >/dev/null 2>"$T/warn") ||
    fail "gptd run with a warning: $(cat "$T/warn")"
has 'gptd run: warning: trainer.eval_every: 7 is beyond' "$T/warn" || fail "gptd run did not warn: $(cat "$T/warn")"
# list --state and --user.
wait_for 60 job_is "$w" completed
out=$("$GPTCTL" list --state cancelled)
has -E "^ *$id +tiny +cancelled" <<<"$out" && ! has -E "^ *$w " <<<"$out" || fail "list --state cancelled: $out"
out=$("$GPTCTL" list --state completed --user "$(id -un)")
has -E "^ *$w +tiny +completed" <<<"$out" && ! has -E "^ *$id " <<<"$out" || fail "list --state completed --user: $out"
(($("$GPTCTL" list --user 4242 | wc -l) == 1)) || fail "list --user 4242 lists jobs: $("$GPTCTL" list --user 4242)"
(($("$GPTCTL" list --user "$(id -u)" | wc -l) == 3)) || fail "list --user $(id -u): $("$GPTCTL" list --user "$(id -u)")"
rc=0
"$GPTCTL" list --state done >/dev/null 2>"$T/err" || rc=$?
((rc == 1)) && has '"done" is no job state' "$T/err" || fail "list --state done: rc $rc $(cat "$T/err")"
echo "ctl_frictions ok"
