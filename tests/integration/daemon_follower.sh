#!/usr/bin/env bash
# A follower that stops reading is disconnected once its queued output has
# gone unread for client_idle_timeout_s (and never holds more than
# client_output_max_bytes); gptd's memory does not grow with it. A follower
# that reads, however slowly, is never cut off: once half the bound is
# queued it catches up from the database and rejoins the live stream,
# missing and repeating nothing. `logs --since` lets the cut-off one catch
# up from the database.
source "$(dirname "$0")/daemon_common.sh"

# Every step logged: about 500 bytes a step for the followers (3 MB in all,
# far beyond the 256 KiB bound plus socket buffers, so a stalled reader must
# hit the bound while a reading one keeps up).
tiny_job "$T/job.json" 6000 1 1000
# The followers attach while the job waits behind a blocker, so both are
# in the live stream from its first step. (One that attaches late replays
# history page by page, paced by its reading: a stalled one then never
# queues past the bound and is never cut off, which is bounded too but not
# what this test is about.)
tiny_job "$T/block.json" 1000000 1000 0
start_gptd --client-output-max-bytes 262144 --client-idle-timeout-s 5

block=$("$GPTCTL" submit "$T/block.json")
wait_for 60 job_is "$block" running
id=$("$GPTCTL" submit "$T/job.json")
rss0=$(ps -o rss= -p "$GPTD_PID" | tr -d ' ')
"$ITEST" stall "$SOCK" "$id" 600 >"$T/stalled.out" 2>"$T/stalled.err" &
stalled=$!
PIDS+=("$stalled")
# The reading follower takes its output slowly (about 200 KB/s, a
# fraction of what the job writes), so it falls behind the live stream.
mkfifo "$T/good.fifo"
"$GPTCTL" --json logs -f "$id" >"$T/good.fifo" &
good=$!
PIDS+=("$good")
python3 -c '
import sys, time
out = open(sys.argv[1], "wb")
while True:
    b = sys.stdin.buffer.read1(2048)
    if not b:
        break
    out.write(b)
    out.flush()
    time.sleep(0.01)
' "$T/good.json" <"$T/good.fifo" &
reader=$!
PIDS+=("$reader")
# Both follow requests are read once each follower has its replayed
# "queued" event (the stalled one says so before it stops reading).
wait_for 30 grep -q "itest_client: following" "$T/stalled.err"
wait_for 30 grep -q '"queued"' "$T/good.json"
"$GPTCTL" cancel "$block" >/dev/null
wait_for 60 job_is "$id" running
wait_for 120 grep -q "is not reading" "$T"/gptd.0.log
rss1=$(ps -o rss= -p "$GPTD_PID" | tr -d ' ')
wait_for 120 job_is "$id" completed
wait "$good" || fail "the reading follower failed"
wait "$reader"
grep -q '"type":"end"' "$T/good.json" || fail "the reading follower did not see the end"
# It fell behind and caught up from the database, and its stream is still
# every metric once, in order.
grep -q "falls behind job $id" "$T"/gptd.0.log || fail "the slow follower never fell behind"
good_steps=$(metric_steps "$T/good.json")
[[ $good_steps == "$(seq 1 6000)" ]] ||
    fail "the slow follower's metrics are not steps 1..6000 once each ($(wc -l <<<"$good_steps") lines)"
! grep -q "pid $good .*is not reading" "$T"/gptd.0.log || fail "the slow follower was cut off"
# The stalled client was cut off before the end of the stream.
kill "$stalled" 2>/dev/null || true
! grep -q '"type":"end"' "$T/stalled.out" || fail "the stalled follower got everything"
# Its queue was bounded: memory grew by far less than the stream it missed.
# (Under ASan, freed memory sits in its quarantine and RSS says little:
# packaging/sanitize.sh sets GPTD_SANITIZED and the bound widens.)
bound=$((${GPTD_SANITIZED:-0} ? 400000 : 50000))
((rss1 - rss0 < bound)) || fail "gptd grew from ${rss0} to ${rss1} KiB"

# Catching up: everything from step 5000 on is in the database.
"$GPTCTL" --json logs --since 5000 "$id" >"$T/catchup.json"
steps=$(metric_steps "$T/catchup.json")
[[ $(head -n1 <<<"$steps") -eq 5000 && $(tail -n1 <<<"$steps") -eq 6000 ]] ||
    fail "logs --since did not return steps 5000..6000"
[[ $(wc -l <<<"$steps") -eq 1001 ]] || fail "logs --since: $(wc -l <<<"$steps") metrics"
echo "daemon_follower: ok (rss ${rss0} -> ${rss1} KiB)"
