#!/usr/bin/env bash
# Data files that change under a running job (issue 36, case 1). A user
# created by this test trains on files of her own and changes them while
# the job trains:
#  - a text file truncated to nothing, and a token shard truncated to a
#    few pages: each job fails with a data error naming the file (the old
#    gptd mapped the files and died of SIGBUS at the next read, taking
#    every job with it);
#  - a text file grown in place, then replaced by rename: the job reads
#    the file it opened and trains on;
# after each, the same gptd (no restart) still serves, and root's job that
# follows completes.
source "$(dirname "$0")/daemon_common.sh"

make_test_user gptdds

mkdir -p "$T/data"
chown "$U" "$T/data"
chmod 0755 "$T/data"
# as_owner CMD...: runs CMD as the test user (she changes her own files).
as_owner() { runuser -u "$U" -- "$@"; }
as_owner python3 - "$T/data" <<'PY'
import os, struct, sys, random
d = sys.argv[1]
rng = random.Random(7)
line = b"the quick brown fox jumps over the lazy dog\n"
for name in ("shrink.txt", "grow.txt"):
    with open(os.path.join(d, name), "wb") as f:
        f.write(line * (1 << 15))  # 1.4 MB: many pages
n = 200000  # tokens: 400 kB of shard
with open(os.path.join(d, "shrink.bin"), "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *(rng.randrange(50257) for _ in range(n))))
PY

start_gptd --data-roots "$T/data" --socket-mode 0666
pid=$GPTD_PID

job() { # FILE KIND MAX_STEPS
    cat <<JOB
{"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16},
 "data": {"kind": "$2", "path": "$1"},
 "trainer": {"max_steps": $3, "micro_batch": 2, "global_batch": 2, "log_every": 1,
             "eval_every": 0, "eval_batches": 1, "threads": 1},
 "snapshot": {"every": 0}}
JOB
}
job "$T/data/shrink.txt" text 1000000 >"$T/text.json"
job "$T/data/shrink.bin" shards 1000000 >"$T/shard.json"
job "$T/data/grow.txt" text 1000000 >"$T/grow.json"
chmod 0644 "$T"/*.json

# gptd_alive: the gptd started above still runs (the old one died of
# SIGBUS, exit 135, at the first read past a truncated file's end).
gptd_alive() {
    kill -0 "$pid" 2>/dev/null && return 0
    local rc=0
    wait "$pid" || rc=$?
    fail "gptd died (exit $rc)"
}
# ended JOB: the job reached a final state, or gptd is gone (checked next).
ended() {
    kill -0 "$pid" 2>/dev/null || return 0
    [[ $(job_state "$1") =~ ^(completed|failed|cancelled)$ ]]
}
job_error() { "$GPTCTL" --json status "$1" | grep -o '"error":"[^"]*"' | cut -d'"' -f4 || true; }

# shrinks FILE SPEC SIZE: the user's job on FILE fails, naming it, once
# she truncates FILE to SIZE bytes while it trains.
shrinks() {
    local file=$1 spec=$2 size=$3 id
    id=$(as_user submit "$spec")
    wait_for 60 job_step_at_least "$id" 2
    as_owner truncate -s "$size" "$file"
    wait_for 60 ended "$id"
    gptd_alive
    job_is "$id" failed || fail "job $id on a truncated $file: $(job_state "$id"), expected failed"
    local e
    e=$(job_error "$id")
    grep -qF "$file" <<<"$e" || fail "job $id: the error does not name $file: $e"
    grep -q "shrank" <<<"$e" || fail "job $id: the error does not say the file shrank: $e"
    echo "job $id failed as expected: $e"
}
shrinks "$T/data/shrink.txt" "$T/text.json" 0
shrinks "$T/data/shrink.bin" "$T/shard.json" 4096

# Grown, then replaced: the job goes on reading the file it opened.
id=$(as_user submit "$T/grow.json")
wait_for 60 job_step_at_least "$id" 2
as_owner sh -c "head -c 1000000 /dev/urandom >>'$T/data/grow.txt'"
step=$(job_field "$id" step)
wait_for 60 job_step_at_least "$id" $((step + 2))
as_owner sh -c "printf 'other text\n%.0s' \$(seq 100) >'$T/data/grow.new' &&
    mv '$T/data/grow.new' '$T/data/grow.txt'"
step=$(job_field "$id" step)
wait_for 60 job_step_at_least "$id" $((step + 20))
gptd_alive
job_is "$id" running || fail "job $id on a grown and replaced file: $(job_state "$id"): \
$(job_error "$id")"
"$GPTCTL" cancel "$id" >/dev/null
wait_for 60 ended "$id"

# Another user's job still runs on the same gptd.
tiny_job "$T/tiny.json" 10
other=$("$GPTCTL" submit "$T/tiny.json")
wait_for 60 ended "$other"
gptd_alive
job_is "$other" completed || fail "root's job $other: $(job_state "$other")"
echo "daemon_data_shrink: ok"
