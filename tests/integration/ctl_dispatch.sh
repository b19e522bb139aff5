#!/usr/bin/env bash
# The one dispatcher of control ops (daemon/handlers.c) applies the op tables:
# a configuration limit (sample's tokens against sample_max_tokens, given
# or defaulted) is refused before the op runs, naming the field and the
# option; an owner-only op on a job that does not exist is not_found; ops
# with no job (status, ping, nodes) answer locally. Every reply keeps the
# request's id.
source "$(dirname "$0")/daemon_common.sh"

printf 'sample_max_tokens = 8\n' >"$T/gptd.conf"
start_gptd --config "$T/gptd.conf"

reply() { "$ITEST" send "$SOCK"; }

out=$(printf '%s\n' \
    '{"id":1,"op":"sample","job":1,"prompt":"1","tokens":9}' \
    '{"id":2,"op":"sample","job":1,"prompt":"1"}' \
    '{"id":3,"op":"sample","job":1,"prompt":"1","tokens":8}' \
    '{"id":4,"op":"cancel","job":999}' \
    '{"id":5,"op":"resume","job":999}' \
    '{"id":6,"op":"ping"}' \
    '{"id":7,"op":"status"}' | reply)
(($(grep -c '' <<<"$out") == 7)) || fail "want 7 replies: $out"
grep '"id":1,' <<<"$out" | has '"code":"limit".*"message":"at most 8 tokens (sample_max_tokens)","path":"tokens"' ||
    fail "tokens over the limit not refused by name: $out"
grep '"id":2,' <<<"$out" | has '"code":"limit".*"path":"tokens"' ||
    fail "the default token count (64) over the limit not refused: $out"
# Within the limit the op itself runs and finds no job.
grep '"id":3,' <<<"$out" | has '"code":"not_found"' || fail "a legal sample did not reach the op: $out"
grep '"id":4,' <<<"$out" | has '"code":"not_found"' || fail "cancel of no job: $out"
grep '"id":5,' <<<"$out" | has '"code":"not_found"' || fail "resume of no job: $out"
grep '"id":6,' <<<"$out" | has '"ok":true.*"uid":'"$(id -u)" || fail "ping: $out"
grep '"id":7,' <<<"$out" | has '"ok":true.*"version"' || fail "status: $out"

# gptctl shows the same refusal, exit status 1.
rc=0
"$GPTCTL" sample 1 --prompt 1 --tokens 9 2>"$T/err" || rc=$?
((rc == 1)) || fail "gptctl sample over the limit: exit $rc"
grep -q 'limit at tokens: at most 8 tokens (sample_max_tokens)' "$T/err" || fail "gptctl: $(cat "$T/err")"
# One stream per connection: a second `logs` while the first follows is
# refused, and the first still ends with the job.
tiny_job "$T/job.json" 300 5 1000
job=$("$GPTCTL" submit "$T/job.json")
wait_for 30 job_is "$job" running
out=$(printf '%s\n' "{\"id\":1,\"op\":\"logs\",\"job\":$job,\"follow\":true}" \
    "{\"id\":2,\"op\":\"logs\",\"job\":$job}" | reply)
grep '"id":2,' <<<"$out" | has '"code":"busy".*already streams logs' ||
    fail "a second stream on one connection was not refused: $(tail -n 3 <<<"$out")"
grep '"id":1,' <<<"$out" | has '"type":"end",.*"state":"completed"' ||
    fail "the first stream did not end with the job: $(tail -n 3 <<<"$out")"
echo "ok"
