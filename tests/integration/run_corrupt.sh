#!/usr/bin/env bash
# Corrupt newest snapshot: truncated, bit-flipped, wrong magic, wrong
# version. Each is reported (naming the file) and the older valid snapshot
# is used to resume.
# usage: run_corrupt.sh GPTD JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 JOB=$2

"$GPTD" run "$JOB" --json --snapshot-dir "$T/base" trainer.max_steps=40 --stop-after 20 > /dev/null
newest=$(basename "$(ls "$T"/base/snap-*.gpts | tail -n 1)")
older=$(basename "$(ls "$T"/base/snap-*.gpts | tail -n 2 | head -n 1)")
[[ "$newest" == *20.gpts && "$older" == *10.gpts ]] || fail "unexpected snapshots: $(ls "$T/base")"

corrupt() { # KIND FILE
    local size; size=$(stat -c %s "$2")
    case $1 in
    truncated) truncate -s $((size / 2)) "$2" ;;
    bitflip) # flip one bit in the middle of the parameters
        local off=$((size / 2)) byte
        byte=$(od -An -tu1 -j "$off" -N1 "$2" | tr -d ' ')
        printf "$(printf '\\%03o' $((byte ^ 16)))" | dd of="$2" bs=1 seek="$off" conv=notrunc status=none ;;
    magic) printf 'XXXXXXXX' | dd of="$2" bs=1 seek=0 conv=notrunc status=none ;;
    version) printf '\x63\x00\x00\x00' | dd of="$2" bs=1 seek=8 conv=notrunc status=none ;;
    esac
}

for kind in truncated bitflip magic version; do
    rm -rf "$T/s"; cp -r "$T/base" "$T/s"
    corrupt "$kind" "$T/s/$newest"
    "$GPTD" run "$JOB" --json --snapshot-dir "$T/s" trainer.max_steps=40 --resume \
        > "$T/$kind.log" 2> "$T/$kind.err" || fail "$kind: resume failed: $(cat "$T/$kind.err")"
    jq -r 'select(.type=="event" and .kind=="snapshot_invalid") | .message' "$T/$kind.log" \
        | has "$newest" || fail "$kind: corrupt $newest not reported"
    jq -r 'select(.type=="event" and .kind=="resume") | .message' "$T/$kind.log" \
        | has "$older" || fail "$kind: did not resume from $older"
    msg=$(jq -r 'select(.type=="event" and .kind=="snapshot_invalid") | .message' "$T/$kind.log")
    echo "$kind: $msg"
done
echo "corruption ok"
