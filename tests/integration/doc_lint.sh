#!/usr/bin/env bash
# The map stays true to the tree (issue 37, item 6):
#  - docs/architecture.md is at most 2,500 words, and its arrows between
#    daemon folders are layering_guard.sh's "allow" lines;
#  - every source file of daemon/ and engine/ (.c, .cu, .cuh) is named, as
#    `NAME`, in a row of the module table whose heading names its folder
#    in docs/architecture.md ("### engine/ops, engine/ops/cpu, ...");
#  - every command gptctl's --help lists has its entry in gptctl(1)'s
#    COMMANDS section and is in the bash completion's command list;
#  - every option `gptctl CMD --help` lists, with a short form or not
#    ("  -f, --follow", "      --wait"; the command table in ctl/
#    gptctl.c, the one source of that text) is named in that command's
#    entry of gptctl(1) and offered by the completion after CMD.
# It checks itself first on a scratch tree with one file left out of the
# tables, one command left out of the page and the completion, and one
# option left out of both.
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

# The map stays a map, and its arrows between daemon folders are
# layering_guard's "allow" lines, folder by folder.
words=$(wc -w <"$map")
[[ $words -le 2500 ]] || fail "docs/architecture.md has $words words (a map: at most 2500)"
guard="$top/tests/integration/layering_guard.sh"
if [[ -f $guard ]]; then
    want=$(sed -n 's/^allow \([a-z]*\):[[:space:]]*\(.*\)$/\1: \2/p' "$guard" | sed 's/[[:space:]]*$//' | sort)
    have=$(awk '/^```/ { inblk = !inblk; next }
                inblk && / -> / && $1 ~ /^[a-z]+$/ { split($0, p, " -> "); t = p[2]
                    if (t ~ /^\(/) t = ""; print $1 ": " t }' "$map" | sed 's/[[:space:]]*$//' | sort)
    [[ "$want" == "$have" ]] || fail "docs/architecture.md's daemon arrows differ from layering_guard's allow lines:"$'\n'"$(diff <(echo "$want") <(echo "$have"))"
fi

commands=$("$gptctl" --help 2>&1 | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }')
[[ -n $commands ]] || fail "gptctl --help lists no commands"
man="$top/packaging/man/gptctl.1"
completion="$top/packaging/gptctl.bash-completion"
man_cmds=$(awk '/^\.SH COMMANDS/ { on = 1; next } /^\.SH/ { on = 0 }
                on && prev == ".TP" { print $2 } { prev = $0 }' "$man" | tr -d '"')
comp_cmds=$(sed -n 's/^[[:space:]]*local commands="\([^"]*\)".*/\1/p' "$completion")
# man_entry CMD: the text of CMD's entry in gptctl(1)'s COMMANDS section.
man_entry() {
    awk -v cmd="$1" -v all=" $(tr "\n" " " <<<"$commands") " '
        /^\.SH COMMANDS/ { on = 1; next } /^\.SH/ { on = 0 }
        on && prev == ".TP" { w = $2; gsub(/"/, "", w); if (index(all, " " w " ")) mine = (w == cmd) }
        on && mine { print } { prev = $0 }' "$man"
}
# comp_opts CMD: the options the completion offers after CMD.
comp_opts() {
    sed -n 's/^[[:space:]]*\([a-z|]*\)) opts="\([^"]*\)".*/\1 \2/p' "$completion" |
        awk -v cmd="$1" '{ n = split($1, w, "|"); for (i = 1; i <= n; i++) if (w[i] == cmd) { $1 = ""; print } }'
}
for c in $commands; do
    grep -qxF "$c" <<<"$man_cmds" || fail "gptctl $c is missing from gptctl(1)'s COMMANDS"
    [[ " $comp_cmds " == *" $c "* ]] || fail "gptctl $c is missing from the bash completion"
    opts=$("$gptctl" "$c" --help 2>&1 | awk '/^options:/ { on = 1; next } /^$/ { on = 0 } on' |
           sed -n 's/^ *\(-., \)\{0,1\}\(--[a-z][a-z-]*\).*/\2/p' |
           grep -vxE -- '--(json|socket|help)' || true)
    entry=$(man_entry "$c")
    offered=" $(comp_opts "$c") "
    for o in $opts; do
        grep -qF -- "${o//-/\\-}" <<<"$entry" || fail "gptctl $c $o is missing from gptctl(1)'s entry for $c"
        [[ $offered == *" $o "* ]] || fail "gptctl $c $o is not offered by the bash completion"
    done
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
    printf '#!/bin/sh\ncase "$1" in one) printf "usage: one\\n\\noptions:\\n  -x, --extra N  e\\n      --wide  w\\n      --json  j\\n\\nexample:\\n" ;;\n*) printf "usage\\n\\ncommands:\\n  one JOB   x\\n  two       y\\n\\nmore\\n" ;; esac\n' \
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
                "gptctl two is missing from the bash completion" \
                "gptctl one --extra is missing from gptctl(1)'s entry for one" \
                "gptctl one --extra is not offered by the bash completion" \
                "gptctl one --wide is missing from gptctl(1)'s entry for one" \
                "gptctl one --wide is not offered by the bash completion"; do
        grep -qF "$want" <<<"$out" || { echo "doc_lint missed: $want"; status=1; }
    done
    grep -qF "engine/a.c" <<<"$out" && { echo "doc_lint refused a named file: $out"; status=1; }
    sed -i 's/^| `a.c` | a |$/| `a.c`, `b.c` | a, b |/' "$tmp/docs/architecture.md"
    printf '.SH COMMANDS\n.TP\n.BI one " job"\nWith\n.BR \\-\\-extra " or " \\-\\-wide .\n.TP\n.B two\n.SH EXIT STATUS\n' \
        > "$tmp/packaging/man/gptctl.1"
    printf '    local commands="one two help"\n    one) opts="--extra --wide --json" ;;\n' \
        > "$tmp/packaging/gptctl.bash-completion"
    if ! out=$(DOC_LINT_SELFTEST=1 "$0" "$tmp" "$tmp/gptctl"); then
        echo "doc_lint refused a clean scratch tree:"
        echo "$out"
        status=1
    fi
fi
[[ $status -eq 0 ]] && echo "doc_lint ok"
exit $status
