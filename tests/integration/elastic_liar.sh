#!/usr/bin/env bash
# A member that holds the cluster secret and lies (gptd(8), "Security"):
# what it writes to the coordinator's store is bounded to its own node.
#  - two gptd on this host: the coordinator "ac" and the member "zm";
#  - a job of one node runs on "ac" (first in the node table): a store
#    client with the cluster secret speaking as "zm" (what the member's gptd
#    could send) forges a metric and a `done` of that other job;
#  - a job of both nodes gives "ac" global rank 0 (ids sort so), "zm" rank
#    1: the client forges a metric and a `done` of it (records of rank 0,
#    which "zm" does not hold), a metric in the name of "ac", a heartbeat
#    for "ac" and for a node that is not there, the job's rank-0 worker key,
#    "ac"'s round key, and the feed head. Each forgery gets DENIED naming
#    the key and "zm"; the coordinator logs the refusal and counts every one
#    in gptd_store_refused_writes_total;
#  - what is its own still works: a read, the delete of its own reply key;
#  - the honest jobs keep exactly their own records: the job of both nodes
#    completes at its final step with one `done` event, neither has a
#    forged loss or event; the phantom node never shows in `gptctl nodes`;
#  - node keys: the secret alone does not let a client speak for a node id
#    the coordinator issued a key for: a client without "zm"'s key (or
#    with another node's) is refused naming "zm", and so for "ac", and for
#    "gz", a node that joined and is gone; "gz" restarted with its state
#    directory rejoins; with a wiped one it is refused until root runs
#    `gptctl nodes --forget gz` on the coordinator, then it joins; the
#    coordinator restarted from its state directory still holds every key.
source "$(dirname "$0")/elastic_common.sh"
ITEST_STORE=${ITEST_STORE:?ITEST_STORE names tests/integration/itest_store}

COORD=ac
start_coordinator ac --http 127.0.0.1:0
start_node zm
wait_for 20 node_is ac zm idle
wait_for 20 node_is ac ac idle
wait_for 10 grep -q 'http: serving /metrics' "$T/ac.log"
URL=http://127.0.0.1:$(grep -o 'http: serving /metrics on 127.0.0.1:[0-9]*' "$T/ac.log" |
    tail -n1 | cut -d: -f3)

# liar OP...: the operations on one connection speaking as "zm", with the
# node key the coordinator issued to the member's gptd (what it could send).
liar() { ITEST_STORE_NODE_KEY=$T/zm/node.key "$ITEST_STORE" "$RDZV" "$T/secret" zm "$@"; }

# refused_as NODE HOW [KEY_FILE]: a client with the secret that speaks for
# NODE without its key (or with KEY_FILE, another's) is refused, naming NODE.
refused_as() {
    local out rc=0
    out=$(ITEST_STORE_NODE_KEY=${3:-} "$ITEST_STORE" "$RDZV" "$T/secret" "$1" "get:rdzv/n/$1" \
        2>&1) || rc=$?
    ((rc == 4)) && [[ $out == "REFUSED node \"$1\" $2"* ]] ||
        fail "a client speaking for $1 without its key was not refused (exit $rc): $out"
}
for f in "$T/zm/node.key" "$T/ac/node.key" "$T/ac/node.keys"; do
    [[ $(stat -c %a "$f") == 600 ]] || fail "$f is not a private file: $(stat -c %a "$f")"
done
refused_as zm "did not prove its node key"
refused_as zm "proved a wrong node key" "$T/ac/node.key"
refused_as ac "did not prove its node key"
grep -q 'store: refused 127.0.0.1:[0-9]* speaking for node "zm": node "zm" did not prove its node key: node id "zm" is taken' \
    "$T/ac.log" || fail "the coordinator did not log the refused handshake"

STEPS=3000
FORGED_LOSS=4242.5
metric() { printf '{"t":"metric","job":%s,"node":"%s","m":{"step":%s,"loss":%s}}' "$@"; }
done_ev() {
    printf '{"t":"event","job":%s,"node":"zm","e":{"kind":"done","step":%s,"message":"forged"}}' \
        "$1" "$STEPS"
}
# denied ANSWER KEY: the store refused a write of KEY, naming it and "zm".
denied() { [[ $1 == "DENIED node \"zm\" may not "*" \"$2\": "* ]]; }

# --- another job: on "ac" alone.
elastic_job "$T/one.json" $STEPS 1 100000 100
other=$(ctl ac submit "$T/one.json")
wait_for 60 job_step_at_least ac "$other" 10
grep -q "agent: round [0-9]* of job $other: ranks 0-0 of 1" "$T/ac.log" ||
    fail "job $other does not run on ac alone: $(grep 'agent: round' "$T/ac.log")"
liar "append:c/inbox=$(metric "$other" zm 20 "$FORGED_LOSS")" \
    "append:c/inbox=$(done_ev "$other")" >"$T/liar1.out" ||
    fail "the store client failed: $(cat "$T/liar1.out")"
mapfile -t got <"$T/liar1.out"
for i in 0 1; do
    denied "${got[$i]}" c/inbox || fail "forgery $i of job $other was not refused: ${got[$i]}"
done
job_is ac "$other" running || fail "job $other ended before the forgeries were all tried"
ctl ac cancel "$other" >/dev/null
job_ended() { [[ $(job_field ac "$1" state) =~ ^(completed|failed|cancelled)$ ]]; }
wait_for 60 job_ended "$other"

# --- the job of both nodes.
elastic_job "$T/job.json" $STEPS 2 100000 100
id=$(ctl ac submit "$T/job.json")
wait_for 60 job_step_at_least ac "$id" 10
grep -q "agent: round [0-9]* of job $id: ranks 1-1 of 2" "$T/zm.log" ||
    fail "the member does not hold rank 1 of job $id: $(grep 'agent: round' "$T/zm.log")"

# Its own round: the job's worker key prefix.
round=$(liar "get:rdzv/n/zm")
prefix=$(grep -o '"prefix":"[^"]*"' <<<"$round" | cut -d'"' -f4)
[[ $prefix == j$id/* ]] || fail "no prefix for job $id in the member's round: $round"

hb() { printf '{"t":"hb","node":"%s","inc":"1","state":"idle","workers":8,"addr":"127.0.0.1"}' "$1"; }
liar "append:c/inbox=$(metric "$id" zm 20 "$FORGED_LOSS")" \
    "append:c/inbox=$(done_ev "$id")" \
    "append:c/inbox=$(metric "$id" ac 20 "$FORGED_LOSS")" \
    "heartbeat:ac=$(hb ac)" \
    "heartbeat:ghost=$(hb ghost)" \
    "set:${prefix}addr/0=127.0.0.1:1" \
    "set:rdzv/n/ac={}" \
    "set:c/feed/head=0:0" \
    "get:rdzv/n/zm" \
    "delete:c/reply/zm/1/1" >"$T/liar.out" || fail "the store client failed: $(cat "$T/liar.out")"
mapfile -t got <"$T/liar.out"
keys=(c/inbox c/inbox c/inbox ac ghost "${prefix}addr/0" rdzv/n/ac c/feed/head)
((${#got[@]} == 10)) || fail "expected 10 answers: $(cat "$T/liar.out")"
for i in "${!keys[@]}"; do
    denied "${got[$i]}" "${keys[$i]}" || fail "forgery $i (${keys[$i]}) was not refused: ${got[$i]}"
done
[[ ${got[8]} == VALUE* ]] || fail "a read of its own round failed: ${got[8]}"
[[ ${got[9]} == "OK" || ${got[9]} == VALUE* ]] || fail "its own reply key: ${got[9]}"
echo "refusals: ${got[1]}"
grep -q "store: refused a write from 127.0.0.1:[0-9]*: node \"zm\" may not APPEND \"c/inbox\"" \
    "$T/ac.log" || fail "the coordinator did not log the refusal"
job_is ac "$id" running || fail "job $id ended before the forgeries were all tried"
refused_total() {
    curl -sf "$URL/metrics" | grep '^gptd_store_refused_writes_total ' | cut -d' ' -f2
}
refused_at_least() { (($(refused_total) >= $1)); }
wait_for 20 refused_at_least 10

# The honest jobs end as if nothing happened, with their own records only.
wait_for 180 job_ended "$id"
job_is ac "$id" completed ||
    fail "job $id is $(job_field ac "$id" state): $(ctl ac --json status "$id" | grep -o '"error":"[^"]*"')"
[[ $(job_field ac "$id" step) == "$STEPS" ]] || fail "job $id ended at step $(job_field ac "$id" step)"
ctl ac --json logs "$id" >"$T/logs.json"
[[ $(grep -c '"kind":"done"' "$T/logs.json") == 1 ]] ||
    fail "job $id has $(grep -c '"kind":"done"' "$T/logs.json") done events"
grep -q 'forged' "$T/logs.json" && fail "a forged event reached job $id's history"
ctl ac --json logs "$other" | has 'forged' && fail "a forged event reached job $other's history"
[[ $(db "SELECT count(*) FROM metrics WHERE loss = $FORGED_LOSS") == 0 ]] ||
    fail "a forged metric reached the database"
check_history "$id"
ctl ac --json nodes | has '"node":"ghost"' && fail "the phantom node is in the node table"

# --- a node that is gone keeps its id; its own state directory takes it back.
start_node gz
wait_for 20 node_is ac gz idle
kill_node gz
refused_as gz "did not prove its node key"
start_node gz
wait_for 20 grep -q 'cluster: connected to the store at .* as gz' "$T/gz.log"
grep -q 'refused this node' "$T/gz.log" && fail "gz restarted with its state directory was refused"
kill_node gz
# A wiped state directory: refused, naming the id, until root forgets it.
rm -rf "$T/gz"
: >"$T/gz.log"
start_node gz
wait_for 20 grep -q 'the coordinator at .* refused this node: node "gz" did not prove its node key' \
    "$T/gz.log"
grep -q 'connected to the store' "$T/gz.log" && fail "gz with a wiped state directory joined"
out=$(ctl ac nodes --forget gz) || fail "gptctl nodes --forget gz failed: $out"
[[ $out == "forgot node gz"* ]] || fail "nodes --forget said: $out"
grep -q ' gz$' "$T/ac/node.keys" && fail "node.keys still holds gz after --forget"
wait_for 20 grep -q 'cluster: connected to the store at .* as gz' "$T/gz.log"
wait_for 20 grep -q ' gz$' "$T/ac/node.keys"
out=$(ctl ac nodes --forget nosuch 2>&1) && fail "forgetting an unknown node succeeded: $out"
[[ $out == *'no node key is kept for node "nosuch"'* ]] || fail "forget nosuch said: $out"

# --- the coordinator keeps the keys it issued across a restart.
kill_node ac
start_coordinator ac
refused_as zm "did not prove its node key"
refused_as gz "did not prove its node key"
liar "get:rdzv/n/zm" >/dev/null || fail "zm's own key was refused after the coordinator restarted"
echo "elastic_liar: ok"
