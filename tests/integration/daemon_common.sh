# Shared by the daemon integration tests (sourced). Arguments of every
# test: GPTD GPTCTL ITEST_CLIENT SOURCE_DIR.
#
# Each test gets its own temporary directory (state, socket, logs); every
# gptd started here is killed by the EXIT trap. Waits poll with a deadline;
# nothing sleeps to synchronise.
set -euo pipefail

GPTD=$1
GPTCTL=$2
ITEST=$3
SRC=$4
T=$(mktemp -d /tmp/gptd-itest.XXXXXX)
SOCK=$T/gptd.sock
export GPTD_SOCKET=$SOCK
PIDS=()

cleanup() {
    local rc=$?
    for p in "${PIDS[@]}"; do
        { kill -9 "$p" && wait "$p"; } 2>/dev/null || true
    done
    if [[ $rc -ne 0 ]]; then
        echo "--- FAILED (rc $rc); gptd logs:" >&2
        tail -n 40 "$T"/gptd*.log >&2 2>/dev/null || true
    fi
    rm -rf "$T"
    exit $rc
}
trap cleanup EXIT

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# make_test_user PREFIX: creates a login-less user PREFIX<pid> (with its own
# group) as $U, removed by the EXIT trap once no process of the test is
# left (userdel refuses while one runs). Exits 77 when not root.
make_test_user() {
    [[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root to create a test user"; exit 77; }
    U=$1$$
    useradd -M -U -s /usr/sbin/nologin "$U" || fail "useradd $U"
    # set +e: `(exit $rc)` must hand the status to cleanup, not end the trap.
    trap 'rc=$?; set +e; drop_test_user; (exit $rc); cleanup' EXIT
    # The user reaches gptd's socket, the job files and a copy of gptctl
    # (the build tree may be closed to it) through $T.
    chmod 0711 "$T"
    mkdir -p "$T/bin"
    cp "$GPTCTL" "$T/bin/gptctl"
    chmod 0755 "$T/bin" "$T/bin/gptctl"
}
# big_job FILE [N_EMBD]: a one-step job of ~50M parameters (its snapshot is
# 600 MB, so reading and copying it takes seconds: a window tests can act
# in); N_EMBD 512 gives ~13M (150 MB).
big_job() {
    cat >"$1" <<EOF
{"name": "big",
 "model": {"n_layer": 4, "n_head": 4, "n_embd": ${2:-1024}, "block_size": 6, "vocab_size": 10},
 "data": {"kind": "synthetic", "task": "addition", "digits": 2},
 "trainer": {"max_steps": 1, "micro_batch": 1, "global_batch": 1, "log_every": 1,
             "eval_every": 0, "eval_batches": 1, "threads": 1},
 "optimizer": {"lr": 1e-3, "warmup_steps": 0},
 "snapshot": {"every": 1}}
EOF
}
# as_user ARGS...: gptctl as the test user, on gptd's socket.
as_user() { runuser -u "$U" -- env GPTD_SOCKET="$SOCK" "$T/bin/gptctl" "$@"; }
drop_test_user() {
    for p in "${PIDS[@]}"; do
        { kill -9 "$p" && wait "$p"; } 2>/dev/null || true
    done
    userdel "$U" 2>/dev/null || true
    groupdel "$U" 2>/dev/null || true
}


# start_gptd [flags...]: starts gptd on $SOCK/$T/state, sets GPTD_PID.
start_gptd() {
    local n=${#PIDS[@]}
    "$GPTD" --state-dir "$T/state" --socket "$SOCK" --log-level debug "$@" \
        2>>"$T/gptd.$n.log" &
    GPTD_PID=$!
    PIDS+=("$GPTD_PID")
    wait_for 20 "$GPTCTL" status
}

# The tiny job: a 2-layer model learning 2-digit addition in seconds.
# tiny_job FILE MAX_STEPS [LOG_EVERY] [SNAP_EVERY]
tiny_job() {
    cat >"$1" <<EOF
{"name": "tiny",
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 6, "vocab_size": 10},
 "data": {"kind": "synthetic", "task": "addition", "digits": 2},
 "trainer": {"max_steps": $2, "micro_batch": 16, "global_batch": 16, "log_every": ${3:-5},
             "eval_every": 0, "eval_batches": 2, "threads": 1},
 "optimizer": {"lr": 1e-3, "warmup_steps": 0},
 "snapshot": {"every": ${4:-20}}}
EOF
}

# job_field JOB KEY: a field of `gptctl --json status JOB`'s job object.
job_field() {
    "$GPTCTL" --json status "$1" | grep -o "\"$2\":[^,}]*" | head -n1 | cut -d: -f2- | tr -d '"'
}

job_state() { job_field "$1" state; }
job_is() { [[ $(job_state "$1") == "$2" ]]; }
job_step_at_least() { (($(job_field "$1" step) >= $2)); }

# metric_steps FILE: the step of every metric line in a `logs --json` dump.
metric_steps() {
    grep '"type":"metric"' "$1" | grep -o '"step":[0-9]*' | cut -d: -f2
}

# held_ids: the jobs `gptctl list` shows held during their --resume-from copy.
held_ids() {
    "$GPTCTL" --json list | python3 -c 'import json, sys
print(*[j["id"] for j in json.load(sys.stdin)["jobs"] if j["state"] == "copying"])'
}
