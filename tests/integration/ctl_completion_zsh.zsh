# The driver of ctl_completion_zsh.sh: an interactive `zsh -f` on a
# pseudo-terminal (zsh/zpty) with compinit and the completion under test,
# typed into as a user would: a command line, TAB, then ^Xd, bound to a
# widget that writes the line's buffer to a file (the event each step
# waits for, with a deadline) and clears it. What TAB offered is the
# listing zsh printed between the typed line and the redrawn prompt, or,
# where one match was inserted, the buffer.
#   zsh -f ctl_completion_zsh.zsh DIR CHECKS
# DIR holds bin/ (first on PATH), fpath/ and work/ (the current folder).
# CHECKS has one check a line, fields separated by '|':
#   want|LINE|WORD...    TAB after LINE offers every WORD
#   refuse|LINE|WORD...  TAB after LINE offers something, but no WORD
#   buffer|LINE|TEXT     TAB after LINE leaves TEXT on the line
# Prints each failure, and any error the completion raised; exits 1 if any
# check failed.
zmodload zsh/zpty zsh/datetime || { print -u2 "FAIL: zsh has no zpty module"; exit 1 }
T=$1 checks=$2
cd $T/work || exit 1

zpty comp env -i PATH=$T/bin:/usr/bin:/bin HOME=$T TERM=dumb zsh -f -i
zpty -w comp "stty cols 250 rows 200; PS1='ZP> '; fpath=($T/fpath \$fpath)
autoload -Uz compinit && compinit -u -D
unsetopt listambiguous; LISTMAX=10000; t_n=0
t_dump() { zle -R; print -r -- \"\$BUFFER\" >$T/buf.tmp && mv $T/buf.tmp $T/buf.\$((t_n++)); BUFFER=; }
zle -N t_dump; bindkey '^Xd' t_dump"

out= step=0 failed=0 listing= buffer=
drain() { local c; while zpty -rt comp c; do out+=$c; done }

# press LINE: types LINE, TAB and ^Xd; sets $listing (the words offered
# in a list) and $buffer (the line after TAB).
press() {
    drain
    out=
    zpty -w -n comp "$1"$'\t\x18d'
    local deadline=$((EPOCHREALTIME + 20))
    until [[ -e $T/buf.$step ]]; do
        if ((EPOCHREALTIME > deadline)); then
            print -u2 "FAIL: no answer to '$1'<TAB> in 20 s: ${(q+)out}"
            exit 1
        fi
        drain
        sleep 0.05
    done
    drain
    buffer=$(<$T/buf.$step)
    ((step++))
    # an error inside the completion ("_gptd_ctl:12: bad substitution")
    if [[ $out == *_gptd[a-z_]#:[0-9]##:* ]]; then
        print -u2 "FAIL: '$1'<TAB> raised an error: ${(q+)out}"
        failed=1
    fi
    # Lines after the echoed input, up to the redrawn prompt; terminal
    # control sequences and bells removed.
    local clean=${out//$'\r'/}
    clean=${clean//$'\e'\[[0-9;?]#[a-zA-Z]/}
    clean=${clean//$'\a'/}
    local -a lines=("${(@f)clean}") body
    local l
    for l in "${(@)lines[2,-1]}"; do
        [[ $l == ZP\>* ]] && break
        body+=("$l")
    done
    listing=" ${(j: :)${=body}} "
}

# offered WORD: whether the last TAB offered WORD (listed, or the one match
# inserted as the buffer's last word).
offered() {
    [[ $listing == *" $1 "* || ${${=buffer}[-1]} == "$1" ]]
}

setopt extendedglob
press ""  # the set-up above has run once this answers
local kind line rest
while IFS='|' read -r kind line rest; do
    [[ -z $kind || $kind == \#* ]] && continue
    press "$line"
    case $kind in
    want)
        for w in ${=rest}; do
            offered "$w" || { print -u2 "FAIL: '$line'<TAB> does not offer $w:$listing| line: $buffer"; failed=1; }
        done
        ;;
    refuse)
        if [[ -z ${listing// /} && $buffer == "$line" ]]; then
            print -u2 "FAIL: '$line'<TAB> offers nothing at all"
            failed=1
        fi
        for w in ${=rest}; do
            offered "$w" && { print -u2 "FAIL: '$line'<TAB> offers $w:$listing"; failed=1; }
        done
        ;;
    buffer)
        [[ $buffer == "$rest" ]] || { print -u2 "FAIL: '$line'<TAB> leaves '$buffer', not '$rest'"; failed=1; }
        ;;
    esac
done <$checks
zpty -d comp
print "$step completions typed"
exit $failed
