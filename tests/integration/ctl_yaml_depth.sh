#!/usr/bin/env bash
# The cost of deeply nested YAML in gptctl is linear: job files nested
# 100,000 levels deep (flow sequences, flow mappings, and a block mapping
# as deep as the file size allows) are refused with an error naming the
# depth limit, each well within a generous hang guard (libyaml's loader
# alone took 30 s and more on the first two). No daemon is needed: gptctl
# checks the file before it connects.
source "$(dirname "$0")/daemon_common.sh"

n=100000
{ printf 'model: '; printf '[%.0s' $(seq $n); printf ']%.0s' $(seq $n); echo; } >"$T/seq.yaml"
{ printf 'model: '; printf '{a: %.0s' $(seq $n); printf '1'; printf '}%.0s' $(seq $n); echo; } >"$T/map.yaml"
# Block style: each level one more space of indent (about 500 KB).
awk 'BEGIN { for (i = 0; i < 1000; i++) { printf "%*sk%d:\n", i, "", i } printf "%*sv: 1\n", 1000, "" }' \
    >"$T/block.yaml"

for f in seq map block; do
    rc=0
    start=$SECONDS
    timeout 5 "$GPTCTL" --socket "$T/none.sock" validate "$T/$f.yaml" 2>"$T/$f.err" || rc=$?
    ((rc != 124)) || fail "$f: gptctl still parsing after 5 s"
    ((rc == 1)) || fail "$f: exit $rc, want 1: $(cat "$T/$f.err")"
    grep -q 'nested deeper than 16 levels (the limit)' "$T/$f.err" ||
        fail "$f: the error does not name the depth limit: $(cat "$T/$f.err")"
    echo "$f: refused in $((SECONDS - start)) s: $(cat "$T/$f.err")"
done

# Nesting within the limit still parses (and fails later for its own reason).
printf 'model: {n_layer: [[[1]]]}\n' >"$T/ok.yaml"
rc=0
"$GPTCTL" --socket "$T/none.sock" validate "$T/ok.yaml" 2>"$T/ok.err" || rc=$?
((rc == 1)) || fail "ok.yaml: exit $rc"
! grep -q 'nested deeper' "$T/ok.err" || fail "shallow nesting refused: $(cat "$T/ok.err")"
echo "ok"
