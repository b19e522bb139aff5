#!/usr/bin/env bash
# Help on every command (issue 35, item 3), played as a user types it:
# `gptctl CMD --help`, `gptctl CMD -h` and `gptctl help CMD` print that
# command's usage, its options and one example, exit 0, without a gptd
# running; an unknown command or option is refused with the closest one
# ("did you mean"), exit 2; `gptd --help` lists run, tokenize and export
# and gives each option a one-line description; gptd and `gptd run`
# correct a mistyped option too.
source "$(dirname "$0")/daemon_common.sh"
export GPTD_SOCKET=$T/nobody.sock # no gptd: help needs none

commands=$("$GPTCTL" --help | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }')
(($(wc -w <<<"$commands") >= 13)) || fail "gptctl --help lists too few commands: $commands"
for c in $commands; do
    for form in "$c --help" "$c -h" "help $c"; do
        # shellcheck disable=SC2086 # the form is words
        out=$("$GPTCTL" $form) || fail "gptctl $form: exit $?"
        head -1 <<<"$out" | has -x "usage: gptctl $c.*" || fail "gptctl $form: no usage line: $out"
        has -x 'options:' <<<"$out" || fail "gptctl $form: no options: $out"
        has -x -- '  -h, --help *this text' <<<"$out" || fail "gptctl $form: no --help line: $out"
        grep -A1 -x 'example:' <<<"$out" | has -x "  gptctl $c.*" ||
            fail "gptctl $form: no example: $out"
    done
done
# The command's own options, each with a description.
out=$("$GPTCTL" submit --help)
for o in '-f, --follow' '-p, --priority N' '-m, --multirun' '--init-from JOB\[:SNAPSHOT\]' \
         '--resume-from JOB\[:SNAPSHOT\]'; do
    # The description follows on the line, or on the next when the option is long.
    grep -A1 -- "^  .*$o" <<<"$out" | tr '\n' ' ' | has -- "$o  *[a-z]" ||
        fail "submit --help lacks $o with its description: $out"
done
# --help wins wherever it stands, but not as an option's value.
"$GPTCTL" submit job.yaml a.b=1 --help | head -1 | has -x 'usage: gptctl submit.*' ||
    fail "submit FILE ... --help did not print help"
rc=0
"$GPTCTL" sample 1 --prompt --help >"$T/out" 2>"$T/err" || rc=$?
((rc == 3)) || fail "sample --prompt --help: the prompt \"--help\" should reach gptd (exit 3), got $rc"

# Unknown commands and options: exit 2, the closest name suggested.
rc=0
"$GPTCTL" sumbit job.yaml 2>"$T/err" || rc=$?
((rc == 2)) || fail "unknown command: exit $rc"
has 'unknown command "sumbit" (did you mean submit?)' "$T/err" || fail "sumbit: $(cat "$T/err")"
rc=0
"$GPTCTL" help plto 2>"$T/err" || rc=$?
((rc == 2)) && has 'did you mean plot?' "$T/err" || fail "help plto: exit $rc, $(cat "$T/err")"
rc=0
"$GPTCTL" submit job.yaml --folow 2>"$T/err" || rc=$?
((rc == 2)) || fail "unknown option: exit $rc"
has 'submit: unknown option "--folow" (did you mean --follow?) (see gptctl submit --help)' "$T/err" ||
    fail "--folow: $(cat "$T/err")"
rc=0
"$GPTCTL" export 1 --dtpye f16 -o x --format hf 2>"$T/err" || rc=$?
((rc == 2)) && has 'did you mean --dtype?' "$T/err" || fail "--dtpye: exit $rc, $(cat "$T/err")"
rc=0
"$GPTCTL" logs -x 1 2>"$T/err" || rc=$?
((rc == 2)) && has 'logs: unknown option "-x"' "$T/err" || fail "logs -x: exit $rc, $(cat "$T/err")"

# gptd --help: the commands, and one described line per option.
out=$("$GPTD" --help) || fail "gptd --help: exit $?"
for c in run tokenize export; do
    has -x "  $c  *[a-z].*" <<<"$out" || fail "gptd --help does not list $c: $out"
    head -5 <<<"$out" | has "gptd $c " || fail "gptd --help's usage omits $c"
done
opts=$(grep -c -- '^  --[a-z]' <<<"$out")
((opts >= 30)) || fail "gptd --help lists only $opts options"
bare=$(grep -- '^  --[a-z]' <<<"$out" | grep -v -- '^  --[a-z-]*  *[A-Za-z$(].*[a-z]' || true)
[[ -z $bare ]] || fail "gptd --help options without a description: $bare"
has -- '^  --state-dir  *Directory of the SQLite database' <<<"$out" ||
    fail "--state-dir's description: $out"
rc=0
"$GPTD" --state-dri /tmp/x 2>"$T/err" || rc=$?
((rc == 2)) && has 'did you mean --state-dir?' "$T/err" || fail "gptd --state-dri: exit $rc, $(cat "$T/err")"
rc=0
"$GPTD" tokenise 2>"$T/err" || rc=$?
((rc == 2)) && has 'did you mean gptd tokenize?' "$T/err" || fail "gptd tokenise: exit $rc, $(cat "$T/err")"
tiny_job "$T/job.json" 1
rc=0
"$GPTD" run "$T/job.json" --stop-aftr 1 2>"$T/err" || rc=$?
((rc == 2)) && has 'did you mean --stop-after?' "$T/err" || fail "gptd run --stop-aftr: exit $rc, $(cat "$T/err")"
echo "ctl_help ok"
