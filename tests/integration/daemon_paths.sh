#!/usr/bin/env bash
# Job paths: data and snapshot paths must lie under the roots gptd.conf
# lists (data_roots, snapshot_roots; the state directory is always a
# snapshot root). Others are refused at validate and submit with an error
# naming the job key, symbolic links are resolved first, and an allowed
# job still runs.
source "$(dirname "$0")/daemon_common.sh"

mkdir -p "$T/allowed" "$T/other" "$T/snaps"
printf 'the quick brown fox jumps over the lazy dog\n%.0s' {1..40} > "$T/allowed/data.txt"
cp "$T/allowed/data.txt" "$T/other/data.txt"
ln -s "$T/other/data.txt" "$T/allowed/escape.txt"
start_gptd --data-roots "$T/allowed" --snapshot-roots "$T/snaps"

cat > "$T/job.json" <<JOB
{"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16},
 "data": {"kind": "text", "path": "$T/allowed/data.txt"},
 "trainer": {"max_steps": 5, "micro_batch": 2, "global_batch": 2, "eval_every": 0,
             "eval_batches": 1, "threads": 1},
 "snapshot": {"every": 0}}
JOB

refused() { # KEY OVERRIDE...
    local key=$1 out rc=0
    shift
    out=$("$GPTCTL" submit "$T/job.json" "$@" 2>&1) || rc=$?
    [[ $rc -eq 1 ]] || fail "submit $*: exit $rc, expected 1 ($out)"
    grep -q "$key" <<<"$out" || fail "submit $*: error does not name $key: $out"
    echo "refused as expected: $out"
}
refused data.path data.path="$T/other/data.txt"
refused data.path data.path="$T/allowed/escape.txt"
refused data.path data.path="$T/allowed/../other/data.txt"
refused snapshot.dir snapshot.dir="$T/other/snapshots"
"$GPTCTL" validate "$T/job.json" data.path="$T/other/data.txt" >/dev/null 2>&1 &&
    fail "validate accepted a data path outside the roots"

id=$("$GPTCTL" submit "$T/job.json" snapshot.dir="$T/snaps/run1")
wait_for 60 job_is "$id" completed
ls "$T/snaps/run1" | has '\.gpts$' || fail "no snapshot under the allowed snapshot root"
echo "daemon_paths: ok"
