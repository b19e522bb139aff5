#!/usr/bin/env bash
# The zsh completion (packaging/gptd.zsh-completion, installed as _gptd for
# gptd and gptctl) typed into a real interactive zsh (compinit, zsh/zpty;
# ctl_completion_zsh.zsh drives it): `gptctl sub<TAB>` gives submit;
# `gptctl submit --<TAB>` its options; after every gptctl command every
# option its --help lists (the command table, the one source doc_lint holds
# gptctl(1) and the bash completion to), and every command of `gptctl
# --help`; the formats after --format, not job ids; job ids from `gptctl
# list`; job files, then a.b= keys from `gptd run --help-spec`; and for
# gptd and each of run, tokenize and export every option its --help names,
# and the values of --format, --dtype and --val-split.
# Skips (77) only where zsh is not installed.
#   ctl_completion_zsh.sh SOURCE_DIR GPTD GPTCTL
set -euo pipefail
src=${1:?usage: ctl_completion_zsh.sh SOURCE_DIR GPTD GPTCTL}
gptd=${2:?usage: ctl_completion_zsh.sh SOURCE_DIR GPTD GPTCTL}
gptctl=${3:?usage: ctl_completion_zsh.sh SOURCE_DIR GPTD GPTCTL}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
if ! command -v zsh >/dev/null; then
    echo "zsh is not installed (packaging/install-deps.sh): skipped"
    exit 77
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir "$T/bin" "$T/fpath" "$T/work" "$T/work/runs"
cp "$src/packaging/gptd.zsh-completion" "$T/fpath/_gptd"
# gptctl: the real one, but `list` prints two jobs (no gptd to ask).
cat >"$T/bin/gptctl" <<EOF
#!/bin/sh
case " \$* " in
*" --help "*) ;;
*" list "*) printf 'ID  NAME   STATE\n 7  adder  running\n 9  fort   queued\n'; exit 0 ;;
esac
exec "$(realpath "$gptctl")" "\$@"
EOF
chmod +x "$T/bin/gptctl"
ln -s "$(realpath "$gptd")" "$T/bin/gptd"
touch "$T/work/job.yaml" "$T/work/notes.txt" "$T/work/loss.svg"

# The options `gptctl CMD --help` lists ("  -f, --follow", "      --wait").
ctl_opts() {
    "$gptctl" "$1" --help | awk '/^options:/ { on = 1; next } /^$/ { on = 0 } on' |
        sed -n 's/^ *\(-[a-zA-Z]\)\{0,1\}\(, \)\{0,1\}\(--[a-z][a-z-]*\).*/\1 \3/p'
}
# The options `gptd [CMD] --help` names, as ctl_completion reads them, but
# not those of other programs it quotes (`gptctl logs -f`).
gptd_opts() {
    "$gptd" $1 --help | sed 's/`[^`]*`/ /g' | grep -oE -- '(^|[][ ,|])(--[a-z][a-z0-9-]*|-[a-zA-Z]\b)' |
        sed 's/^[][ ,|]//' | sort -u
}
commands=$("$gptctl" --help | awk '/^commands:/ { on = 1; next } /^$/ { on = 0 }
                                   on && /^  [a-z]/ { print $1 }')
(($(wc -w <<<"$commands") >= 10)) || fail "too few commands in gptctl --help: $commands"
{
    echo "buffer|gptctl sub|gptctl submit "
    echo "want|gptctl submit --|--follow --priority --multirun --init-from --resume-from --json"
    echo "want|gptctl |$(echo $commands)"
    for c in $commands; do
        opts=$(ctl_opts "$c")
        (($(wc -w <<<"$opts") >= 4)) || fail "gptctl $c --help lists too few options: $opts"
        echo "want|gptctl $c -|$(echo $opts)"
    done
    echo "want|gptctl export 7 --format |hf llmc gguf"
    echo "refuse|gptctl export 7 --format |7 9"
    echo "want|gptctl export 7 --dtype |f32 f16 bf16"
    echo "want|gptctl list --state |running cancelled"
    echo "want|gptctl logs |7 9"
    echo "want|gptctl --socket /tmp/s cancel |7 9"
    echo "want|gptctl submit |job.yaml"
    echo "refuse|gptctl submit |notes.txt 7"
    echo "want|gptctl submit job.yaml trainer.max_s|trainer.max_steps="
    echo "want|gptctl submit job.yaml |model.n_embd= optimizer.lr="
    echo "want|gptctl resume 7 trainer.max_s|trainer.max_steps="
    echo "want|gptctl plot 7 -o |loss.svg"
    echo "want|gptctl plot |7 9 runs/"
    echo "buffer|gptctl help pl|gptctl help plot "
    echo "buffer|gptctl sw|gptctl sweep "
    echo "want|gptd |run tokenize export"
    echo "want|gptd tokenize --val-split |head random"
    echo "want|gptd export x.gpts --format |hf llmc gguf"
    echo "want|gptd export x.gpts --dtype |f32 f16 bf16"
    echo "want|gptd run job.yaml |trainer.max_steps="
    echo "refuse|gptd export x.gpts -|--val-split"
    for c in "" run tokenize export; do
        opts=$(gptd_opts "$c")
        (($(wc -w <<<"$opts") >= 3)) || fail "gptd $c --help names too few options: $opts"
        echo "want|gptd ${c:+$c }-|$(echo $opts)"
    done
} >"$T/checks"
zsh -f "$here/ctl_completion_zsh.zsh" "$T" "$T/checks" || fail "the zsh completion (above)"
echo "ctl_completion_zsh ok"
