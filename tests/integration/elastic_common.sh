# Shared by the elastic (multi-node) integration tests (sourced). Arguments
# of every test: GPTD GPTCTL ITEST_CLIENT SOURCE_DIR.
#
# A cluster is several gptd processes on this host, each with its own state
# directory, control socket and node id, meeting at a store on loopback (or
# on namespace addresses, see elastic_partition.sh). Every gptd started here
# is killed by the EXIT trap; waits poll with a deadline.
set -euo pipefail

GPTD=$1
GPTCTL=$2
ITEST=$3
SRC=$4
T=$(mktemp -d /tmp/gptd-elastic.XXXXXX)
declare -A NODE_PID=()
NODE_N=0
EXTRA_CLEANUP=:

cleanup() {
    local rc=$?
    for n in "${!NODE_PID[@]}"; do
        { kill -9 "${NODE_PID[$n]}" && wait "${NODE_PID[$n]}"; } 2>/dev/null || true
    done
    $EXTRA_CLEANUP || true
    if [[ $rc -ne 0 && $rc -ne 77 ]]; then
        echo "--- FAILED (rc $rc); gptd logs:" >&2
        for f in "$T"/*.log; do
            echo "=== $f" >&2
            tail -n 25 "$f" >&2 || true
        done
    fi
    # GPTD_TEST_KEEP=DIR keeps a failed test's state (logs, databases) there.
    if [[ $rc -ne 0 && $rc -ne 77 && -n ${GPTD_TEST_KEEP:-} ]]; then
        mkdir -p "$GPTD_TEST_KEEP" && cp -a "$T" "$GPTD_TEST_KEEP/" || true
    fi
    rm -rf "$T"
    exit $rc
}
trap cleanup EXIT

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"



PORT=$(free_port)
RDZV=${RDZV:-127.0.0.1:$PORT}
printf 'elastic-test-secret-%s\n' "$RANDOM$RANDOM" >"$T/secret"
chmod 600 "$T/secret"

# start_node NAME [flags...]: starts gptd as node NAME (state $T/NAME,
# socket $T/NAME.sock). Set NODE_WRAP (an array) to run it under a wrapper,
# e.g. (ip netns exec ns1).
NODE_WRAP=()
start_node() {
    local name=$1
    shift
    NODE_N=$((NODE_N + 1))
    "${NODE_WRAP[@]}" "$GPTD" --state-dir "$T/$name" --socket "$T/$name.sock" --node-id "$name" \
        --rdzv "$RDZV" --secret-file "$T/secret" --log-level debug "$@" \
        >>"$T/$name.log" 2>&1 &
    NODE_PID[$name]=$!
    wait_for 20 ctl "$name" status
}

# start_coordinator NAME [flags...]: starts gptd as node NAME with its own
# store (a coordinator that makes its own secret), then points RDZV and
# $T/secret at them for the members start_node starts.
start_coordinator() {
    local name=$1
    shift
    "$GPTD" --state-dir "$T/$name" --socket "$T/$name.sock" --node-name "$name" \
        --log-level debug "$@" >>"$T/$name.log" 2>&1 &
    NODE_PID[$name]=$!
    wait_for 20 ctl "$name" status
    RDZV=$(ctl "$name" --json status | grep -o '"rdzv":"[^"]*"' | cut -d'"' -f4)
    cp "$T/$name/cluster.secret" "$T/secret"
}

# kill_node NAME: kill -9, reaped.
kill_node() {
    local p=${NODE_PID[$1]}
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
    unset "NODE_PID[$1]"
}

# ctl NAME ARGS...: gptctl against node NAME.
ctl() {
    local name=$1
    shift
    GPTD_SOCKET=$T/$name.sock "$GPTCTL" "$@"
}

# The tiny elastic job: 2 layers, 32 wide, 2-digit addition; a global batch
# of 12 sequences splits evenly over 1, 2, 3 or 6 ranks.
# elastic_job FILE MAX_STEPS NODES [SNAP_EVERY] [LOG_EVERY] [EXTRA_DIST]
elastic_job() {
    cat >"$1" <<EOF
{"name": "elastic",
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 6, "vocab_size": 10},
 "data": {"kind": "synthetic", "task": "addition", "digits": 2},
 "trainer": {"max_steps": $2, "micro_batch": 2, "global_batch": 12, "log_every": ${5:-5},
             "eval_every": 0, "eval_batches": 2, "threads": 1, "seed": 3},
 "optimizer": {"lr": 1e-3, "warmup_steps": 0},
 "distributed": {"nodes": "$3", "max_restarts": 100${6:+, $6}},
 "snapshot": {"every": ${4:-10}}}
EOF
}

# job_field NODE JOB KEY: a field of the job's status on NODE.
job_field() {
    ctl "$1" --json status "$2" | grep -o "\"$3\":[^,}]*" | head -n1 | cut -d: -f2- | tr -d '"'
}
job_is() { [[ $(job_field "$1" "$2" state) == "$3" ]]; }
job_step_at_least() { (($(job_field "$1" "$2" step) >= $3)); }

# The coordinator's database.
db() { "$ITEST" sql "$T/$COORD/gptd.db" "$1"; }

# world_size_is JOB N: the newest metric of JOB came from a world of N ranks.
world_size_is() {
    [[ $(db "SELECT world_size FROM metrics WHERE job_id = $1 ORDER BY step DESC LIMIT 1") == "$2" ]]
}
# world_size_is_after JOB N STEP: ... and that metric is newer than STEP.
world_size_is_after() {
    [[ $(db "SELECT world_size FROM metrics WHERE job_id = $1 AND step > $3 ORDER BY step DESC
             LIMIT 1") == "$2" ]]
}
# node_state NODE_ASKED NODE: the state of NODE in `gptctl nodes` on NODE_ASKED.
node_state() {
    ctl "$1" --json nodes | /usr/bin/python3 -c '
import json, sys
for n in json.load(sys.stdin)["nodes"]:
    if n["node"] == sys.argv[1]:
        print(n["state"])' "$2"
}
node_is() { [[ $(node_state "$1" "$2") == "$3" ]]; }

# check_history JOB: metric steps strictly increase without duplicates, and
# every metric names its run and world size.
check_history() {
    ctl "$COORD" --json logs "$1" >"$T/logs.$1.json"
    grep '"type":"metric"' "$T/logs.$1.json" | grep -o '"step":[0-9]*' | cut -d: -f2 >"$T/steps.$1"
    awk 'NR > 1 && $1 <= prev { print "step " $1 " after " prev; exit 1 } { prev = $1 }' \
        "$T/steps.$1" || fail "job $1: metric steps are not strictly increasing"
    local bad
    bad=$(db "SELECT count(*) FROM metrics WHERE job_id = $1 AND (run_id <= 0 OR world_size <= 0)")
    [[ $bad == 0 ]] || fail "job $1: $bad metrics without a run id or world size"
}

now_ms() { date +%s%3N; }
