#!/usr/bin/env bash
# Every man page renders without a warning: the hand-written pages in
# packaging/man and the generated gptd-job.5 in the build's man/ directory.
# groff with all warnings on (-ww) is the check; man(1) and mandoc's linter
# run too when present.
#
# With GPTD, also checks that gptd.conf(5) documents every option of gptd's
# option table (`gptd --print-default-config`), and that gptd(8)'s section
# of each command (run, tokenize, export) names every option that
# command's --help lists (tokenize's and export's help come from their
# option tables, daemon/cli/cli_opt.h). Its self-test drops one option
# from a copy of the page and must see it missed.
#
#   man_lint.sh PACKAGING_MAN_DIR BUILD_MAN_DIR [GPTD]
set -euo pipefail

SRC_MAN=$1
BUILD_MAN=$2
GPTD=${3:-}
command -v groff >/dev/null || { echo "SKIP: no groff"; exit 77; }
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

pages=("$SRC_MAN/gptd.8" "$SRC_MAN/gptctl.1" "$SRC_MAN/gptd.conf.5" "$SRC_MAN/gptd-snapshot.5"
       "$BUILD_MAN/gptd-job.5")
for p in "${pages[@]}"; do
    [[ -s $p ]] || fail "$p is missing or empty"
    name=$(basename "$p")
    # The page declares itself under its own name and section.
    want=$(tr '[:lower:]' '[:upper:]' <<<"${name%.*}")
    th=$(grep -m1 '^\.TH ' "$p" | tr -d '\\"')
    [[ $th == ".TH $want ${name##*.} "* ]] || fail "$name: .TH does not say $want ${name##*.}: $th"
    out=$(groff -man -Tutf8 -ww -z "$p" 2>&1) || fail "$name: groff failed: $out"
    [[ -z $out ]] || fail "$name: groff warnings:"$'\n'"$out"
    if command -v man >/dev/null; then
        out=$(MANWIDTH=80 man --warnings=w -l "$p" 2>&1 >/dev/null) || fail "$name: man -l failed"
        [[ -z $out ]] || fail "$name: man warnings:"$'\n'"$out"
    fi
    if command -v mandoc >/dev/null; then
        out=$(mandoc -Tlint -Wwarning "$p" 2>&1) || fail "$name: mandoc:"$'\n'"$out"
    fi
    echo "$name: ok"
done

if [[ -n $GPTD ]]; then
    keys=$("$GPTD" --print-default-config | sed -n 's/^#\([a-z_0-9]*\) = .*/\1/p')
    [[ -n $keys ]] || fail "gptd --print-default-config listed no options"
    for k in $keys; do
        grep -q "^\.BI $k " "$SRC_MAN/gptd.conf.5" || fail "gptd.conf.5 does not document $k"
    done
    echo "gptd.conf.5 documents all $(wc -w <<<"$keys") options"

    # man_tags PAGE CMD: the tags (the line after each .TP) of PAGE's
    # ".SS gptd CMD" section: where an option gets its entry.
    man_tags() {
        awk -v want="gptd $2" '/^\.S[SH] / { on = (substr($0, 5) == want); next }
                               on && tp { print } { tp = on && $0 == ".TP" }' "$1"
    }
    # undocumented PAGE CMD: the options `gptd CMD --help` names that have
    # no entry in PAGE's section of CMD (-h and --help aside).
    undocumented() {
        local opts sec o
        opts=$("$GPTD" "$2" --help | grep -oE -- '(^|[][ ,|])(--[a-z][a-z0-9-]*|-[a-zA-Z]\b)' |
            sed 's/^[][ ,|]//' | sort -u | grep -vxE -- '-h|--help')
        [[ -n $opts ]] || { echo "(gptd $2 --help lists no option)"; return; }
        sec=$(man_tags "$1" "$2" | sed 's/\\-/-/g')
        for o in $opts; do
            grep -qE -- "(^|[^a-z-])$o([^a-z-]|$)" <<<"$sec" || echo "$o"
        done
    }
    sed '/^\.BI \\-\\-seed /d' "$SRC_MAN/gptd.8" >"${TMPDIR:-/tmp}/man_lint.$$.8"
    miss=$(undocumented "${TMPDIR:-/tmp}/man_lint.$$.8" tokenize)
    rm -f "${TMPDIR:-/tmp}/man_lint.$$.8"
    grep -qx -- --seed <<<"$miss" || fail "self-test: a page without tokenize's --seed passed ($miss)"
    for cmd in run tokenize export; do
        miss=$(undocumented "$SRC_MAN/gptd.8" "$cmd")
        [[ -z $miss ]] || fail "gptd.8's section 'gptd $cmd' does not name:" $miss
    done
    echo "gptd.8 documents every option of gptd run, tokenize and export"
fi
