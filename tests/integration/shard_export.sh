#!/usr/bin/env bash
# The readers of snapshots accept a sharded one (slices + manifest):
# `gptd export` of a full-sharded world-3 snapshot gives the llm.c file of
# the same training run unsharded at world 1 (parameters within 1e-5,
# only the fp32 reduction order differs); model.init_from takes the
# manifest and starts from its weights (not the seed's); `snapdiff` reads
# it; with snapshot.keep=2 only two manifests and their slices remain.
# usage: shard_export.sh GPTD FMT_CONVERT JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 FMT=$2 JOB=$3
over=(trainer.max_steps=6 snapshot.every=2)

"$GPTD" run "$JOB" --json --snapshot-dir "$T/s" --workers 3 distributed.sharding=full \
    "${over[@]}" snapshot.keep=2 > "$T/s.log"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/p" "${over[@]}" > "$T/p.log"
[[ $(ls "$T/s" | grep -c '\.gpts$') == 2 ]] || fail "keep=2 left $(ls "$T/s" | grep -c '\.gpts$') manifests"
[[ $(ls "$T/s" | grep -c '^snap-00000000000[46]\..*\.gptslice$') == 6 ]] \
    || fail "keep=2: expected the slices of steps 4 and 6 only: $(ls "$T/s")"
[[ $(ls "$T/s" | grep -c '\.gptslice$') == 6 ]] || fail "pruned snapshots left slices: $(ls "$T/s")"

snap=$T/s/snap-000000000006.gpts
"$GPTD" export "$snap" --format llmc -o "$T/s.bin" || fail "export of a sharded snapshot failed"
"$GPTD" export "$T/p/snap-000000000006.gpts" --format llmc -o "$T/p.bin"
"$FMT" import llmc "$T/s.bin" "$T/s.raw" > /dev/null
"$FMT" import llmc "$T/p.bin" "$T/p.raw" > /dev/null
[[ $(stat -c %s "$T/s.raw") == $(stat -c %s "$T/p.raw") ]] || fail "exports differ in size"
paste <(od -An -v -f -w4 "$T/s.raw") <(od -An -v -f -w4 "$T/p.raw") | awk '
    { n++; d = $1 - $2; if (d < 0) d = -d; if (d > max) max = d }
    END { printf "%d parameters exported, max abs difference %.3g\n", n, max;
          exit (n < 20000 || max > 1e-5) }' || fail "the sharded export differs"

# init_from a manifest: the first loss is the trained model's, not the seed's.
"$GPTD" run "$JOB" --json --snapshot-dir "$T/i" trainer.max_steps=1 model.init_from="$snap" \
    > "$T/i.log"
grep -q '"init_from"' "$T/i.log" || fail "init_from did not load the sharded snapshot"
first() { jq -r 'select(.type=="metric") | .loss' "$1" | head -n 1; }
awk -v a="$(first "$T/i.log")" -v b="$(first "$T/p.log")" 'BEGIN { exit !(a < b - 0.01) }' \
    || fail "init_from a sharded snapshot: first loss $(first "$T/i.log") is not below a fresh start's $(first "$T/p.log")"
echo "sharded export ok"
