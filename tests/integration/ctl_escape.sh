#!/usr/bin/env bash
# Output that cannot be forged: a job whose name carries terminal escapes
# (clear screen, colour), a newline followed by a fake table row, a CR, a
# C1 control (CSI) and a bidi override is submitted; `gptctl list`,
# `gptctl status JOB`, error messages that quote a user's key, and gptd's
# own log lines show all of it escaped, each record on one line, while
# `--json` returns the exact name.
source "$(dirname "$0")/daemon_common.sh"

ESC=$'\x1b'
CR=$'\r'
CSI=$'\xc2\x9b'     # U+009B, a C1 control
RLO=$'\xe2\x80\xae' # U+202E, right-to-left override
# The name in JSON (what gptctl reads from the job file).
json_name='evil\u001b[2J\u001b[31mRED\nFAKE 99 completed\rX\u009b1m\u202eZ'
# How it must print: one line, every control visible.
shown='evil\e[2J\e[31mRED\nFAKE 99 completed\rX\u009b1m\u202eZ'

printf '%s\n' "{\"name\": \"$json_name\"," \
    ' "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 6, "vocab_size": 10},' \
    ' "data": {"kind": "synthetic", "task": "addition", "digits": 2},' \
    ' "trainer": {"max_steps": 100000, "micro_batch": 8, "global_batch": 8, "log_every": 5,' \
    '             "eval_every": 0, "eval_batches": 1, "threads": 1},' \
    ' "snapshot": {"every": 100000}}' >"$T/job.json"

start_gptd
job=$("$GPTCTL" submit "$T/job.json")
[[ $job =~ ^[0-9]+$ ]] || fail "submit printed \"$job\""

# clean FILE WHAT: no raw control bytes a terminal would act on, and no
# line the name started.
clean() {
    ! grep -q "$ESC" "$1" || fail "$2: a raw ESC reached the output"
    ! grep -q "$CR" "$1" || fail "$2: a raw CR reached the output"
    ! grep -qF "$CSI" "$1" || fail "$2: a raw C1 control reached the output"
    ! grep -qF "$RLO" "$1" || fail "$2: a raw bidi override reached the output"
    ! grep -q '^FAKE' "$1" || fail "$2: the name started a line of its own"
}

"$GPTCTL" list >"$T/list.out"
clean "$T/list.out" "gptctl list"
grep -F "$shown" "$T/list.out" | has "^ *$job " ||
    fail "list: no escaped name on job $job's row: $(cat -v "$T/list.out")"
(($(grep -c '' "$T/list.out") == 2)) ||
    fail "list: want a header and one row: $(cat -v "$T/list.out")"

"$GPTCTL" status "$job" >"$T/status.out"
clean "$T/status.out" "gptctl status"
grep -F "$shown" "$T/status.out" | has '^name:' ||
    fail "status: no escaped name line: $(cat -v "$T/status.out")"

# --json is the exact JSON gptd sent: the name's C0 controls as JSON
# escapes (C1 and U+202E are legal raw UTF-8 in JSON), nothing else changed.
"$GPTCTL" --json list >"$T/list.json"
want_json="\"name\":\"evil\\u001B[2J\\u001B[31mRED\\nFAKE 99 completed\\rX${CSI}1m${RLO}Z\""
grep -qF "$want_json" "$T/list.json" || fail "--json list changed the name: $(cat -v "$T/list.json")"
"$GPTCTL" --json status "$job" >"$T/status.json"
grep -qF "$want_json" "$T/status.json" || fail "--json status changed the name"

# An error that quotes what the user wrote (an unknown key with an ESC in
# it) is escaped too.
printf '%s\n' '{"trainer": {"max_st\u001b[2Jeps": 5}}' >"$T/badkey.json"
rc=0
"$GPTCTL" validate "$T/badkey.json" 2>"$T/badkey.err" || rc=$?
((rc == 1)) || fail "validate of a bad key: exit $rc, want 1"
clean "$T/badkey.err" "validate error"
grep -qF 'max_st\e[2Jeps' "$T/badkey.err" ||
    fail "the error does not name the key escaped: $(cat -v "$T/badkey.err")"

# gptd's log: the line about the job names it escaped, on one line.
wait_for 20 grep -q "queued by uid" "$T/gptd.0.log"
clean "$T/gptd.0.log" "gptd log"
grep -F "$shown" "$T/gptd.0.log" | has "job $job (" ||
    fail "log: no escaped name: $(grep -a "job $job" "$T/gptd.0.log" | cat -v)"

"$GPTCTL" cancel "$job" >/dev/null
echo "ok"
