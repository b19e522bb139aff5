#!/usr/bin/env bash
# The bash completion (packaging/gptctl.bash-completion) as a user meets it
# (issue 35, item 6): after --format it offers the formats, not job ids;
# it offers --lr, -m, --dtype, --wait; after a job file it offers a.b= job
# keys (from `gptd run --help-spec`); job ids come from `gptctl list`.
# The gptd completion (packaging/gptd.bash-completion) offers run, tokenize
# and export, and for gptd and each of them every option its --help names
# (the one source of its options), and the values of --format, --dtype and
# --val-split.
# bash-completion's helpers are stubbed so the test needs only bash.
#   ctl_completion.sh SOURCE_DIR GPTD
set -euo pipefail
src=${1:?usage: ctl_completion.sh SOURCE_DIR GPTD}
gptd=${2:?usage: ctl_completion.sh SOURCE_DIR GPTD}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
source "$(dirname "$0")/lib.sh"
mkdir "$T/bin"
# gptctl list prints two jobs; gptd is the real one (for --help-spec).
printf '#!/bin/sh\n[ "$1" = list ] && printf "ID NAME\\n7 a\\n9 b\\n"\n' >"$T/bin/gptctl"
ln -s "$(realpath "$gptd")" "$T/bin/gptd"
chmod +x "$T/bin/gptctl"

# complete WORDS...: the candidates for the last word (may be ""), from
# the completion of the command WORDS starts with.
complete_words() {
    PATH="$T/bin:$PATH" bash -c '
        _init_completion() { words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
            cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; }
        _filedir() { COMPREPLY=(FILES); }
        compopt() { :; }
        complete() { :; }
        source "$1"; shift
        COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
        "_$1"
        printf "%s\n" "${COMPREPLY[@]}"' _ "$src/packaging/$1.bash-completion" "$@"
}
want() { # want "WORDS" CANDIDATE...: each candidate is offered
    local words=$1 out
    shift
    out=$(eval "complete_words $words")
    for c in "$@"; do
        grep -qxF -- "$c" <<<"$out" || fail "'$words' does not offer $c: $(tr '\n' ' ' <<<"$out")"
    done
}
refuse() { # refuse "WORDS" CANDIDATE...: none of them is offered
    local words=$1 out
    shift
    out=$(eval "complete_words $words")
    [[ -n $out ]] || fail "'$words' offers nothing at all"
    for c in "$@"; do
        grep -qxF -- "$c" <<<"$out" && fail "'$words' offers $c: $(tr '\n' ' ' <<<"$out")"
    done
    return 0
}

want "gptctl export 7 --format ''" hf llmc gguf
refuse "gptctl export 7 --format ''" 7 9
want "gptctl export 7 --dtype ''" f32 f16 bf16
want "gptctl export 7 --d" --dtype
want "gptctl plot 7 --" --lr --output
want "gptctl submit job.yaml -" -m --multirun --follow
want "gptctl cancel --" --wait
want "gptctl list --state ''" running cancelled
want "gptctl logs ''" 7 9
want "gptctl submit job.yaml optimizer.l" optimizer.lr=
want "gptctl submit job.yaml ''" trainer.max_steps= model.n_embd=
want "gptctl submit ''" FILES
want "gptctl resume 7 trainer.max_s" trainer.max_steps=
want "gptctl help pl" plot
want "gptctl sw" sweep

want "gptd ''" run tokenize export
want "gptd tokenize --val-split ''" head random
want "gptd export x.gpts --format ''" hf llmc gguf
want "gptd export x.gpts --dtype ''" f32 f16 bf16
want "gptd run job.json ''" trainer.max_steps=
for cmd in "" run tokenize export; do
    # every option its own --help lists (the leading words of its option
    # lines: "  -o, --output PATH  ...")
    opts=$("$gptd" $cmd --help | grep -E '^ +-' | sed -E 's/^ +//; s/ +[^-].*//; s/, / /g' |
        tr ' ' '\n' | sed 's/=.*//' | grep -E '^-' | sort -u)
    [[ $(wc -l <<<"$opts") -ge 3 ]] || fail "gptd $cmd --help names too few options: $opts"
    want "gptd $cmd -" $opts
done
want "gptd tokenize -" --val-split --seed --vocab -o
want "gptd -" --state-dir --http --print-config
refuse "gptd export x.gpts -" --val-split
# Neither another command's options (the usage lines name export's
# --format) nor gptctl's options that a description quotes.
refuse "gptd -" --format --priority --resume-from
echo "ctl_completion ok"
