#!/usr/bin/env bash
# Every man page renders without a warning: the hand-written pages in
# packaging/man and the generated gptd-job.5 in the build's man/ directory.
# groff with all warnings on (-ww) is the check; man(1) and mandoc's linter
# run too when present.
#
# With GPTD, also checks that gptd.conf(5) documents every option of gptd's
# option table (`gptd --print-default-config`).
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
fi
