#!/usr/bin/env bash
# A snapshot of a full-sharded world of 3 is written as one slice file per
# rank plus a manifest (the ranks share the folder). It resumes into world
# 1 without sharding and into world 2 with optimizer sharding (re-sharding
# on load), and both continue the uninterrupted run step for step. A
# snapshot written by 2 processes (one rank each, full sharding, one
# shared folder) resumes into 3 threads with optimizer sharding the same
# way. A snapshot with one slice missing or corrupted is not used: resume
# reports it, takes the older one and still matches the reference.
# usage: shard_resume.sh GPTD SNAPDIFF JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 SNAPDIFF=$2 JOB=$3
over=(trainer.max_steps=20 snapshot.every=0)

# match LOG FIRST_STEP WHAT: the log's losses equal the reference's from FIRST_STEP on.
match() {
    paste <(losses "$T/ref.log" | awk -v f="$2" '$1 >= f') <(losses "$1") | awk '
        { n++; d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > max) max = r;
          if ($1 != $3) bad = 1 }
        END { printf "%s: steps %d-20, max relative loss difference %.3g\n", t, f, max;
              exit (bad || n != 21 - f || max > 1e-4) }' t="$3" f="$2" || fail "$3 diverged"
}

"$GPTD" run "$JOB" --json --snapshot-dir "$T/ref" --workers 3 distributed.sharding=full \
    "${over[@]}" > "$T/ref.log"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/base" --workers 3 distributed.sharding=full \
    --stop-after 10 "${over[@]}" snapshot.every=5 > "$T/base.log"
[[ $(ls "$T/base" | grep -c '^snap-000000000010\..*\.r0000[0-2]\.gptslice$') == 3 ]] \
    || fail "the world-3 snapshot is not three slice files: $(ls "$T/base")"
grep -q '3 slices' "$T/base.log" || fail "the snapshot event does not count the slices"
for target in "1 none" "2 optimizer"; do
    set -- $target
    d="$T/w$1$2"
    cp -r "$T/base" "$d"
    "$GPTD" run "$JOB" --json --snapshot-dir "$d" --workers "$1" distributed.sharding="$2" \
        --resume "${over[@]}" > "$d.log"
    jq -r 'select(.type=="event" and .kind=="resume") | .message' "$d.log" \
        | has "world size 3, now $1" || fail "world $1 $2 did not resume the world-3 snapshot"
    match "$d.log" 11 "full/3 -> $2/$1"
    "$SNAPDIFF" "$(ls "$T"/ref/*.gpts | tail -n1)" "$(ls "$d"/*.gpts | tail -n1)" 1e-4 \
        || fail "world $1 $2 final parameters differ"
done

# Two processes, one rank each, sharing one folder.
port=$(free_port)
"$GPTD" run "$JOB" --json --snapshot-dir "$T/procs" --world 2 --rank 1 --rdzv 127.0.0.1:$port \
    --stop-after 10 "${over[@]}" distributed.sharding=full > /dev/null &
PIDS+=($!)
"$GPTD" run "$JOB" --json --snapshot-dir "$T/procs" --world 2 --rank 0 --rdzv 127.0.0.1:$port \
    --stop-after 10 "${over[@]}" distributed.sharding=full > "$T/procs.log"
wait "${PIDS[-1]}" || fail "rank 1 of the process world failed"
[[ $(ls "$T/procs" | grep -c '\.gptslice$') == 2 ]] || fail "two processes did not write two slices"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/procs" --workers 3 distributed.sharding=optimizer \
    --resume "${over[@]}" > "$T/procs3.log"
grep -q 'world size 2, now 3' "$T/procs3.log" || fail "world 3 did not resume the 2-process snapshot"
match "$T/procs3.log" 11 "full/2 processes -> optimizer/3"

# One slice of the step-10 snapshot missing, or one flipped byte in one:
# that snapshot is skipped (quarantined) and the step-5 one is used.
for damage in missing corrupt; do
    d="$T/$damage"
    cp -r "$T/base" "$d"
    s=$(ls "$d"/snap-000000000010.*.r00001.gptslice)
    if [[ $damage == missing ]]; then
        rm "$s"
    else
        printf '\x5a' | dd of="$s" bs=1 seek=4000 conv=notrunc status=none
    fi
    "$GPTD" run "$JOB" --json --snapshot-dir "$d" --workers 2 distributed.sharding=full \
        --resume "${over[@]}" > "$d.log"
    jq -r 'select(.type=="event" and .kind=="snapshot_invalid") | .message' "$d.log" \
        | has "snap-000000000010.gpts.*slice" || fail "$damage slice: no snapshot_invalid event"
    jq -r 'select(.type=="event" and .kind=="resume") | .message' "$d.log" \
        | has "snap-000000000005.gpts at step 5" || fail "$damage slice: did not fall back to step 5"
    [[ -e "$d/snap-000000000010.gpts.corrupt" ]] || fail "$damage slice: manifest not quarantined"
    match "$d.log" 6 "$damage slice -> step 5, full/2"
done
echo "sharded resume ok"
