#!/usr/bin/env bash
# The map stays true to the tree (issue 37, item 6):
#  - every source file of daemon/ and engine/ (.c, .cu, .cuh) is named, as
#    `NAME`, in a row of the module table whose heading names its folder
#    in docs/architecture.md ("### engine/ops, engine/ops/cpu, ...");
#  - every command gptctl's --help lists has its entry in gptctl(1)'s
#    COMMANDS section and is in the bash completion's command list.
# It checks itself first on a scratch tree with one file left out of the
# tables and one command left out of the page and the completion.
#
#   doc_lint.sh SOURCE_DIR GPTCTL
set -u
top=${1:?usage: doc_lint.sh SOURCE_DIR GPTCTL}
gptctl=${2:?usage: doc_lint.sh SOURCE_DIR GPTCTL}

status=0
fail() {
    echo "doc_lint: $*"
    status=1
}

# folder_tables MAP: "FOLDER FILE" for each file a module table names, one
# line per folder its heading lists.
folder_tables() {
    awk '
        /^### / { n = split(substr($0, 5), w, /[ ,()]+/); nf = 0
                  for (i = 1; i <= n; i++) if (w[i] ~ /^(daemon|engine)(\/|$)/) {
                      f = w[i]; sub(/\/$/, "", f); folders[++nf] = f } next }
        /^## / { nf = 0; next }
        /^\|/ && nf > 0 { line = $0
                  while (match(line, /`[^`]+\.(c|cu|cuh)`/)) {
                      name = substr(line, RSTART + 1, RLENGTH - 2)
                      for (i = 1; i <= nf; i++) print folders[i], name
                      line = substr(line, RSTART + RLENGTH) } }
    ' "$1"
}

map="$top/docs/architecture.md"
[[ -f $map ]] || fail "no $map"
named=$(folder_tables "$map" | sort -u)
while IFS= read -r f; do
    dir=${f%/*}
    if ! grep -qxF "$dir ${f##*/}" <<<"$named"; then
        fail "$f is named in no module table of docs/architecture.md (a table under a heading naming $dir)"
    fi
done < <(cd "$top" && find daemon engine \( -name '*.c' -o -name '*.cu' -o -name '*.cuh' \) | sort)

commands=$("$gptctl" --help 2>&1 | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }')
[[ -n $commands ]] || fail "gptctl --help lists no commands"
man="$top/packaging/man/gptctl.1"
completion="$top/packaging/gptctl.bash-completion"
man_cmds=$(awk '/^\.SH COMMANDS/ { on = 1; next } /^\.SH/ { on = 0 }
                on && prev == ".TP" { print $2 } { prev = $0 }' "$man" | tr -d '"')
comp_cmds=$(sed -n 's/^[[:space:]]*local commands="\([^"]*\)".*/\1/p' "$completion")
for c in $commands; do
    grep -qxF "$c" <<<"$man_cmds" || fail "gptctl $c is missing from gptctl(1)'s COMMANDS"
    [[ " $comp_cmds " == *" $c "* ]] || fail "gptctl $c is missing from the bash completion"
done

# The lint lints itself: a scratch tree whose map leaves out engine/b.c and
# whose page and completion leave out `two` must fail naming both, and the
# same tree with them named must pass.
if [[ -z "${DOC_LINT_SELFTEST:-}" ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/docs" "$tmp/engine/ops" "$tmp/daemon/jobs" "$tmp/packaging/man"
    : > "$tmp/engine/a.c"
    : > "$tmp/engine/b.c"
    : > "$tmp/engine/ops/k.cu"
    : > "$tmp/daemon/jobs/jobs.c"
    printf '#!/bin/sh\nprintf "usage\\n\\ncommands:\\n  one JOB   x\\n  two       y\\n\\nmore\\n"\n' \
        > "$tmp/gptctl"
    chmod +x "$tmp/gptctl"
    printf '### engine/ (x)\n\n| file | what |\n|---|---|\n| `a.c` | a |\n\n### engine/ops\n\n| `k.cu` | k |\n\n### daemon/jobs (y)\n\n| `jobs.c` | j |\n' \
        > "$tmp/docs/architecture.md"
    printf '.SH COMMANDS\n.TP\n.BI one " job"\n.SH EXIT STATUS\n' > "$tmp/packaging/man/gptctl.1"
    printf '    local commands="one"\n' > "$tmp/packaging/gptctl.bash-completion"
    out=$(DOC_LINT_SELFTEST=1 "$0" "$tmp" "$tmp/gptctl") && {
        echo "doc_lint passed a tree with an unnamed file and an undocumented command"
        status=1
    }
    for want in "engine/b.c is named in no module table" "gptctl two is missing from gptctl(1)" \
                "gptctl two is missing from the bash completion"; do
        grep -qF "$want" <<<"$out" || { echo "doc_lint missed: $want"; status=1; }
    done
    grep -qF "engine/a.c" <<<"$out" && { echo "doc_lint refused a named file: $out"; status=1; }
    sed -i 's/^| `a.c` | a |$/| `a.c`, `b.c` | a, b |/' "$tmp/docs/architecture.md"
    printf '.SH COMMANDS\n.TP\n.BI one " job"\n.TP\n.B two\n.SH EXIT STATUS\n' \
        > "$tmp/packaging/man/gptctl.1"
    printf '    local commands="one two help"\n' > "$tmp/packaging/gptctl.bash-completion"
    if ! out=$(DOC_LINT_SELFTEST=1 "$0" "$tmp" "$tmp/gptctl"); then
        echo "doc_lint refused a clean scratch tree:"
        echo "$out"
        status=1
    fi
fi
[[ $status -eq 0 ]] && echo "doc_lint ok"
exit $status
