#!/usr/bin/env bash
# A model.init_from GGUF file truncated while gptd reads it (issue 36,
# "mappings that shrink"). gptd runs under tests/tools/pread_pause, which
# holds the worker's first read of the file's tensors (past its 64 KB
# header prefix) until the test has truncated the file: the job fails with
# an error naming the file and saying it shrank, gptd keeps running, and
# a job from the restored file that follows completes.
#   daemon_init_shrink.sh GPTD GPTCTL ITEST SRC PREAD_PAUSE
source "$(dirname "$0")/daemon_common.sh"
PAUSE_LIB=$5

# A model of ~100k parameters: its f32 GGUF (~400 KB) is read in pieces
# past the header prefix, so the truncation falls between two reads.
tiny_job "$T/job.json" 2 1 2
sed -i 's/"n_embd": 32/"n_embd": 64/' "$T/job.json"
mkdir -p "$T/pause"
export GPTD_TEST_PAUSE_FILE=$T/init.gguf GPTD_TEST_PAUSE_DIR=$T/pause GPTD_TEST_PAUSE_AT=65536
LD_PRELOAD=$PAUSE_LIB start_gptd
pid=$GPTD_PID

a=$("$GPTCTL" submit "$T/job.json")
wait_for 60 job_is "$a" completed
snap=$(ls "$T"/state/jobs/"$a"/snapshots/snap-*.gpts | tail -n1)
"$GPTD" export "$snap" --format gguf -o "$T/init.gguf" >/dev/null
size=$(stat -c %s "$T/init.gguf")
((size > 200000)) || fail "the GGUF is only $size bytes: its tensors would come from the prefix"
cp "$T/init.gguf" "$T/init.keep"

b=$("$GPTCTL" submit "$T/job.json" model.init_from="$T/init.gguf" trainer.max_steps=4)
wait_for 60 test -e "$T/pause/paused"
truncate -s 70000 "$T/init.gguf"
touch "$T/pause/go"

ended() { [[ $(job_state "$1") =~ ^(completed|failed|cancelled)$ ]]; }
wait_for 60 ended "$b"
kill -0 "$pid" || fail "gptd died while job $b read a truncated $T/init.gguf"
job_is "$b" failed || fail "job $b on a truncated GGUF: $(job_state "$b"), expected failed"
e=$("$GPTCTL" --json status "$b" | jq -r '.job.error // ""')
[[ $e == *"$T/init.gguf"* && $e == *shrank* ]] ||
    fail "job $b: the error does not name $T/init.gguf and say it shrank: $e"
echo "job $b failed: $e"

# The same gptd goes on: the restored file starts a job that completes.
cp "$T/init.keep" "$T/init.gguf"
c=$("$GPTCTL" submit "$T/job.json" model.init_from="$T/init.gguf" trainer.max_steps=4)
wait_for 60 job_is "$c" completed
kill -0 "$pid" || fail "gptd died"
echo "daemon_init_shrink: ok"
