#!/usr/bin/env bash
# The wall clock stepped under a running cluster changes nothing but the
# timestamps: every timeout (heartbeats and dead nodes, the store's
# requests, the communicator, idle clients) runs on the monotonic clock.
# Both gptd run under tests/tools/realtime_shift.c (LD_PRELOAD), whose
# CLOCK_REALTIME is shifted by the seconds in a file this test rewrites:
# an hour back, then a day forward, then back to the truth, while a job of
# two nodes trains and a `logs -f` follows it. The job completes with no
# restart, no node declared dead, no store lost, one world of two ranks.
# Arguments: GPTD GPTCTL ITEST_CLIENT SOURCE_DIR REALTIME_SHIFT_LIB.
source "$(dirname "$0")/elastic_common.sh"
LIB=$5

echo 0 >"$T/shift"
NODE_WRAP=(env LD_PRELOAD="$LIB" GPTD_TEST_REALTIME_SHIFT="$T/shift")
COORD=n1
start_node n1 --coordinator
start_node n2
wait_for 20 node_is n1 n2 idle
wait_for 20 node_is n1 n1 idle

elastic_job "$T/job.json" 1500 "2" 500 50
# shifted: the wall clock gptd reads is a day ahead (the shim works)
echo 86400 >"$T/shift"
wait_for 5 bash -c "[[ \$(cat $T/shift) == 86400 ]]"
id=$(ctl n1 submit "$T/job.json")
created=$(ctl n1 --json status "$id" | grep -o '"created":[0-9.]*' | cut -d: -f2)
((${created%.*} > $(date +%s) + 80000)) ||
    fail "gptd's wall clock is not shifted (created $created, now $(date +%s))"
ctl n1 --json logs -f "$id" >"$T/follow.json" &
follower=$!
wait_for 60 job_step_at_least n1 "$id" 100
echo -3600 >"$T/shift" # a day and an hour back
wait_for 120 job_step_at_least n1 "$id" 500
echo 86400 >"$T/shift" # a day and an hour forward
wait_for 120 job_step_at_least n1 "$id" 900
echo 0 >"$T/shift"
wait_for 120 job_is n1 "$id" completed
wait_for 20 bash -c "! kill -0 $follower 2>/dev/null"
wait "$follower" || fail "logs -f across the clock steps failed"
grep -q '"type":"end".*"state":"completed"' "$T/follow.json" ||
    fail "the follower did not see the end: $(tail -n 2 "$T/follow.json")"

[[ $(db "SELECT restarts FROM jobs WHERE id = $id") == 0 ]] ||
    fail "the clock steps cost $(db "SELECT restarts FROM jobs WHERE id = $id") restarts"
[[ $(db "SELECT count(*) FROM runs WHERE job_id = $id") == 1 ]] ||
    fail "the world re-formed: $(db "SELECT count(*) FROM runs WHERE job_id = $id") runs"
! grep -q "declared dead\|lost the store\|timed out" "$T"/n1.log "$T"/n2.log ||
    fail "a timeout fired: $(grep -h "declared dead\|lost the store\|timed out" "$T"/n*.log)"
world_size_is "$id" 2 || fail "the last metric is not from a world of 2"
check_history "$id"
echo "elastic_clock: ok"
