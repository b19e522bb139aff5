#!/usr/bin/env bash
# Resource limits before allocation (issue 14):
#  - a model too large for the node (model.n_embd=16384 model.n_layer=1
#    model.n_head=256 used to allocate until the machine ran out of memory)
#    is refused at validate and at submit, with the estimate, the limit and
#    the keys that drive it, against max_job_memory and against the node's
#    physical memory; nothing is queued;
#  - each spec that used to pass validate and fail at run time is refused
#    at validate and submit with its job key named: model.n_layer 256
#    (limit 42), model.vocab_size 1, model.block_size 65536 against a short
#    file, a 1-byte data file;
#  - a cancel during a slow set-up (allocation, initial weights) takes
#    effect during the set-up: the job is cancelled within seconds, before
#    any step, with a "stop" event saying so.
source "$(dirname "$0")/daemon_common.sh"

tiny_job "$T/job.json" 100
head -c 1 /dev/urandom >"$T/one.txt"
head -c 5000 /dev/urandom >"$T/five_k.txt"

# refused WHAT EXPECT... : validate and submit both fail, the output holding
# every EXPECT; the queue stays empty.
refused() {
    local what=$1
    shift
    local args=()
    while [[ $# -gt 0 && $1 != -- ]]; do args+=("$1"); shift; done
    shift
    for op in validate submit; do
        if "$GPTCTL" "$op" "$T/job.json" "${args[@]}" >"$T/out" 2>&1; then
            fail "$what: $op accepted it: $(cat "$T/out")"
        fi
        for want in "$@"; do
            grep -qF -- "$want" "$T/out" || fail "$what: $op's error lacks \"$want\": $(cat "$T/out")"
        done
    done
    echo "$what: $(cat "$T/out")"
}

start_gptd --max-job-memory 256M
"$GPTCTL" validate "$T/job.json" >/dev/null || fail "the tiny job is refused"

BIG=(model.n_embd=16384 model.n_layer=1 model.n_head=256)
refused "16384-wide model, capped" "${BIG[@]}" -- "limit" "model.n_embd" "estimated" \
    "more than 256.0 MiB (max_job_memory)" "n_embd=16384" "AdamW"
# More than any machine has: the node's physical memory refuses it too.
HUGE=(model.n_embd=16384 model.n_layer=42 model.n_head=256)
kill -TERM "$GPTD_PID"
wait "$GPTD_PID"
start_gptd
refused "16384-wide 42-layer model" "${HUGE[@]}" -- "estimated" "physical memory" "n_layer=42"
refused "256 layers" model.n_layer=256 -- "model.n_layer" "1..42" "256"
refused "vocab_size 1" data.kind=text "data.path=$T/five_k.txt" data.task= model.vocab_size=1 -- \
    "model.vocab_size" "at least 2"
refused "block_size 65536" data.kind=text "data.path=$T/five_k.txt" data.task= \
    model.block_size=65536 -- "data.path" "fewer than model.block_size + 1 = 65537"
refused "1-byte data file" data.kind=text "data.path=$T/one.txt" data.task= -- \
    "data.path" "holds 0 tokens"
refused "shards below their vocabulary" data.kind=shards "data.path=$T/one.txt" data.task= \
    model.vocab_size=1000 -- "model.vocab_size" "50257"
"$GPTCTL" --json list | has -F '"jobs":[]' || fail "a refused job was queued: $("$GPTCTL" list)"

# --- a data error at run time (the file shrank after submit) fails the job
# at once instead of restarting it distributed.max_restarts times.
tiny_job "$T/long.json" 1000000
blocker=$("$GPTCTL" submit "$T/long.json")
wait_for 30 job_is "$blocker" running
cat >"$T/text.json" <<EOT
{"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 64},
 "data": {"kind": "text", "path": "$T/text.txt"},
 "trainer": {"max_steps": 50, "micro_batch": 2, "global_batch": 2, "threads": 1},
 "distributed": {"max_restarts": 3}}
EOT
head -c 5000 /dev/urandom >"$T/text.txt"
shrunk=$("$GPTCTL" submit "$T/text.json")
head -c 1 /dev/urandom >"$T/text.txt"
"$GPTCTL" cancel "$blocker" >/dev/null
wait_for 60 job_is "$shrunk" failed
"$GPTCTL" --json logs "$shrunk" >"$T/shrunk.json"
grep -q "not restarted" "$T/shrunk.json" || fail "no final failure event: $(cat "$T/shrunk.json")"
grep -q "restart 1 of" "$T/shrunk.json" && fail "a data error was retried: $(cat "$T/shrunk.json")"
echo "data error at run time: $(job_field "$shrunk" error)"

# --- cancel during a slow set-up (~0.5 GB model: seconds of zeroing and
# drawing initial weights before the first step).
id=$("$GPTCTL" submit "$T/job.json" model.n_embd=768 model.n_layer=4 model.n_head=8 \
    trainer.micro_batch=1 trainer.global_batch=1 trainer.max_steps=1000 snapshot.every=0)
# The set-up starts when this node's agent starts its workers for the
# world (its log line "ranks 0-0 of 1"), not yet when the world is formed.
workers_started() { grep -Eq "round [0-9]+ of job $1: ranks 0-0 of 1" "$T"/gptd.*.log; }
wait_for 30 workers_started "$id"
t0=$SECONDS
"$GPTCTL" cancel "$id" >/dev/null
wait_for 10 job_is "$id" cancelled
"$GPTCTL" --json logs "$id" >"$T/logs.json"
grep -q '"type":"metric"' "$T/logs.json" && fail "the cancelled job trained: $(head -c 400 "$T/logs.json")"
grep -q "stopped on request during set-up" "$T/logs.json" ||
    fail "the cancel did not stop the set-up: $(cat "$T/logs.json")"
echo "cancel during set-up: cancelled in $((SECONDS - t0)) s"
kill -TERM "$GPTD_PID"
wait "$GPTD_PID"
echo "daemon_limits: ok"
