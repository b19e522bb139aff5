#!/usr/bin/env bash
# world2.sh: the multi-rank GPU phase of the acceptance run (issue 34):
# gptd's NCCL path at world 2 on a machine with one GPU. Two gptd daemons,
# one worker each, each with its own NCCL_HOSTID (so NCCL takes them for
# two hosts and runs its socket transport over loopback:
# NCCL_SOCKET_IFNAME=lo), form a cluster through the normal rendezvous
# (the first serves it, the second joins with the secret). Then:
#  - a tiny and a small model, 20 steps each, at world 1 (one node) and at
#    world 2 with distributed.sharding none, optimizer and full: every
#    step's loss within the bf16 tolerance (relative 2e-2) of world 1's;
#    with distributed.grad_reduce fp32 and sharding none within 1e-5
#    (global_batch is twice micro_batch, so both worlds run the same
#    micro-batch shapes and only the order of fp32 sums differs);
#  - the small model at world 2 with distributed.backend staged (GPU
#    buffers through host memory over shared memory: what a world falls
#    back to when NCCL does not form; the only run of the CUDA stager,
#    engine/ops/cuda/comm_stager.c) within 2e-2 of world 1, or SKIP when
#    less than 40 s of the cap are left (w2_kill's);
#  - an elastic job ("1:2") at world 2, the joining daemon SIGKILLed mid-
#    step: the survivor's world re-forms and trains on (a metric of world
#    size 1 after the kill) within comm_timeout_s (20 s here).
# Each check is one row "NAME STATUS SECONDS NOTE" in OUT/world2_rows.txt;
# OUT/world2_nccl.txt gets one line: "pass", or the first failure. When
# NCCL refuses the world (two ranks on one GPU may be refused), gptd falls
# back to the host-staged communicator by itself: the rows still check
# training at world 2 with device buffers, each note says what NCCL said
# (the start event quotes it), and world2_nccl.txt reads "nccl refused:
# WHAT; host-staged fallback: pass" (or its first failure), never "pass".
#
#   tests/gpu/world2.sh GPTD GPTCTL OUT [CAP_SECONDS=180]
#
# W2_COMM (default nccl) is the transport the world-2 start events must
# name; a CPU build (the fake check of this script) runs with W2_COMM=shm.
# Exit status 0 (pass), 1 (a check failed), 2 (usage).
set -u
GPTD=${1:?usage: world2.sh GPTD GPTCTL OUT [CAP_SECONDS]}
GPTCTL=${2:?usage}
OUT=${3:?usage}
CAP=${4:-180}
W2_COMM=${W2_COMM:-nccl}
mkdir -p "$OUT" || exit 2
ROWS=$OUT/world2_rows.txt
LOG=$OUT/world2.log
: >"$ROWS"
: >"$LOG"
T=$(mktemp -d /tmp/gptd-world2.XXXXXX) || exit 2
START=$(date +%s)
DEADLINE=$((START + CAP))
FIRST_FAIL=""
REFUSED="" # what NCCL said when gptd fell back to the host-staged communicator
declare -A PID=()

cleanup() {
    for n in "${!PID[@]}"; do kill -9 "${PID[$n]}" 2>/dev/null; done
    wait 2>/dev/null
    cp "$T"/*.log "$OUT/" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

say() { echo "$*" | tee -a "$LOG"; }
row() { # NAME STATUS SECONDS NOTE
    printf '%-16s %-5s %5ss  %s\n' "$1" "$2" "$3" "$4" >>"$ROWS"
    say "   $1 $2: $4"
    [ "$2" = PASS ] || [ "$2" = SKIP ] || [ -n "$FIRST_FAIL" ] || FIRST_FAIL="$1: $4"
}
left() { echo $((DEADLINE - $(date +%s))); }
ctl() { local n=$1; shift; GPTD_SOCKET=$T/$n.sock "$GPTCTL" "$@"; }
# wait_until SECONDS CMD...: polls CMD every 0.2 s, bounded by the phase's cap too.
wait_until() {
    local s=$1 end
    shift
    [ "$s" -gt "$(left)" ] && s=$(left)
    end=$(($(date +%s) + s))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -ge "$end" ] && return 1
        sleep 0.2
    done
}

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 29471)
printf 'world2-acceptance-secret-%s\n' "$RANDOM$RANDOM$RANDOM" >"$T/secret"
chmod 600 "$T/secret"
# start NAME [flags]: one gptd, one worker, its own NCCL host id.
start() {
    local n=$1
    shift
    NCCL_HOSTID=gptd-world2-$n NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} GPTD_CONFIG=/dev/null \
        "$GPTD" --state-dir "$T/$n" --socket "$T/$n.sock" --node-id "$n" \
        --rdzv "127.0.0.1:$port" --secret-file "$T/secret" --workers 1 --comm-timeout-s 20 \
        --dead-after-s 3 "$@" >>"$T/$n.log" 2>&1 &
    PID[$n]=$!
    wait_until 30 ctl "$n" status
}
both_alive() { [ "$(ctl n1 --json nodes | grep -o '"state":"idle"' | wc -l)" -ge 2 ]; }

# job FILE NAME N_LAYER N_EMBD NODES MAX_STEPS SHARDING GRAD_REDUCE [MAX_RESTARTS=0]
#     [BACKEND=auto]
job() {
    cat >"$1" <<EOF
{"name": "$2",
 "model": {"n_layer": $3, "n_head": 4, "n_embd": $4, "block_size": 12},
 "data": {"kind": "synthetic", "task": "addition", "digits": 4},
 "trainer": {"max_steps": $6, "micro_batch": 8, "global_batch": 16, "log_every": 1,
             "eval_every": 0, "eval_batches": 1, "seed": 11},
 "optimizer": {"lr": 1e-3, "warmup_steps": 2},
 "distributed": {"nodes": "$5", "sharding": "$7", "grad_reduce": "$8", "max_restarts": ${9:-0},
                 "backend": "${10:-auto}"},
 "snapshot": {"every": 50, "keep": 2}}
EOF
}
state_is() { ctl n1 --json status "$1" | grep -q "\"state\":\"$2\""; }
# ended ID: completed, failed or cancelled.
ended() { ctl n1 --json status "$1" | grep -Eq '"state":"(completed|failed|cancelled)"'; }
# why ID: the job's state and error as gptd recorded them (NCCL's words
# when NCCL refused), one line.
why() {
    ctl n1 --json status "$1" | grep -o '"state":"[^"]*"\|"error":"\([^"\\]\|\\.\)*"' |
        tr '\n' ' ' | cut -c1-240
}
# losses ID: "step loss" per metric record.
losses() {
    ctl n1 --json logs "$1" | grep '"metric"' |
        sed -n 's/.*"step":\([0-9]*\).*"loss":\([-0-9.eE+]*\).*/\1 \2/p; s/.*"loss":\([-0-9.eE+]*\).*"step":\([0-9]*\).*/\2 \1/p' |
        sort -n -k1,1 -u
}
# run_job FILE: submits on n1, waits for the end; prints the id.
run_job() {
    local id
    id=$(ctl n1 submit "$1") || return 1
    echo "$id"
    wait_until 60 ended "$id" && state_is "$id" completed
}
# compare REF ID TOL: max relative loss difference over the same steps.
compare() {
    join <(losses "$1") <(losses "$2") | awk -v tol="$3" '
        { n++; d = $2 - $3; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > max) max = r }
        END { printf "%d steps, max relative %.3g", n, max; exit !(n >= 20 && max <= tol) }'
}

say "== world2: two gptd, one GPU, NCCL over loopback (cap ${CAP}s)"
t0=$(date +%s)
if ! start n1 --coordinator || ! start n2 || ! wait_until 30 both_alive; then
    row world2_form FAIL $(($(date +%s) - t0)) "the two daemons did not form a cluster ($OUT/n1.log, n2.log)"
    echo "${FIRST_FAIL}" >"$OUT/world2_nccl.txt"
    exit 1
fi
ctl n1 nodes >>"$LOG" 2>&1
row world2_form PASS $(($(date +%s) - t0)) "n1 and n2: $(ctl n1 --json nodes | grep -o '"devices":"[^"]*"' | head -1)"

for model in "tiny 2 64" "small 4 128"; do
    set -- $model
    name=$1 L=$2 C=$3
    t0=$(date +%s)
    job "$T/$name.ref.json" "$name-w1" "$L" "$C" 1 20 none bf16
    if ! ref=$(run_job "$T/$name.ref.json"); then
        row "w2_${name}_w1" FAIL $(($(date +%s) - t0)) "the world-1 run did not complete: $(why "$ref")"
        continue
    fi
    variants="none:bf16:2e-2:auto optimizer:bf16:2e-2:auto full:bf16:2e-2:auto none:fp32:1e-5:auto"
    # distributed.backend staged last: it is not owed, so it gives way
    # (SKIP) when the cap would leave w2_kill too little time
    [ "$name" = small ] && variants="$variants none:bf16:2e-2:staged"
    for v in $variants; do
        IFS=: read -r sh gr tol be <<<"$v"
        t0=$(date +%s) tag="w2_${name}_${sh}_$gr" want=$W2_COMM
        [ "$be" = staged ] && tag="w2_${name}_staged" want=staged/
        if [ "$be" = staged ] && [ "$(left)" -lt 40 ]; then
            row "$tag" SKIP 0 "$(left) s left, kept for w2_kill (cap ${CAP}s)"
            continue
        fi
        if [ "$(left)" -lt 10 ]; then
            row "$tag" FAIL 0 "out of time (cap ${CAP}s)"
            continue
        fi
        job "$T/$tag.json" "$tag" "$L" "$C" 2 20 "$sh" "$gr" 0 "$be"
        if ! id=$(run_job "$T/$tag.json"); then
            row "$tag" FAIL $(($(date +%s) - t0)) "job $id did not complete: $(why "$id")"
            continue
        fi
        startmsg=$(ctl n1 --json logs "$id" | grep '"start"' | head -1)
        comm=$(printf '%s' "$startmsg" | sed -n 's/.*world size 2.* over comm \([^ ",]*\).*/\1/p')
        via="over $comm"
        if [ "$be" = auto ] && [ "$want" = nccl ] && [ "${comm#staged/}" != "$comm" ]; then
            # NCCL refused and gptd fell back: what NCCL said, once.
            refused=$(printf '%s' "$startmsg" | sed -n 's/.* over comm staged\/[a-z]* (\(.*\))".*/\1/p' | cut -c1-200)
            [ -n "$REFUSED" ] || REFUSED=${refused:-"(the start event does not say why)"}
            via="over $comm, NCCL refused: ${refused:-?}"
        elif [ "${comm#"$want"}" = "$comm" ]; then
            row "$tag" FAIL $(($(date +%s) - t0)) "not a world of 2 over $want: $(printf '%s' "$startmsg" | cut -c1-160)"
            continue
        fi
        if note=$(compare "$ref" "$id" "$tol"); then
            row "$tag" PASS $(($(date +%s) - t0)) "$note (tolerance $tol) vs world 1, $via"
        else
            row "$tag" FAIL $(($(date +%s) - t0)) "$note (tolerance $tol) vs world 1, $via"
        fi
    done
done

# --- a rank killed mid-step: the survivor re-forms within the comm timeout.
world_after() { # ID STEP: a metric of world size 1 after STEP
    ctl n1 --json logs "$1" | grep '"metric"' | grep '"world_size":1[,}]' |
        sed -n 's/.*"step":\([0-9]*\).*/\1/p' | awk -v s="$2" '$1 > s { ok = 1 } END { exit !ok }'
}
world2_running() { ctl n1 --json logs "$1" | grep '"metric"' | grep -q '"world_size":2[,}]'; }
t0=$(date +%s)
job "$T/kill.json" w2_kill 4 128 "1:2" 100000 none bf16 5
id=$(ctl n1 submit "$T/kill.json")
if [ -z "$id" ] || ! wait_until 60 world2_running "$id"; then
    row w2_kill FAIL $(($(date +%s) - t0)) "the elastic job never trained at world 2: $(why "$id")"
else
    sleep 1
    step=$(ctl n1 --json status "$id" | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | head -1)
    tk=$(date +%s%N)
    kill -9 "${PID[n2]}"
    unset 'PID[n2]'
    if wait_until 40 world_after "$id" "${step:-0}"; then
        ms=$((($(date +%s%N) - tk) / 1000000))
        if [ "$ms" -le 20000 ]; then
            row w2_kill PASS $(($(date +%s) - t0)) "n2 SIGKILLed at step ${step:-?}; world 1 training ${ms} ms later (comm_timeout_s 20)"
        else
            row w2_kill FAIL $(($(date +%s) - t0)) "world 1 trained only ${ms} ms after the kill (> comm_timeout_s 20 s)"
        fi
    else
        row w2_kill FAIL $(($(date +%s) - t0)) "no world-1 step within 40 s of the kill ($OUT/n1.log)"
    fi
    ctl n1 cancel "$id" >/dev/null 2>&1
fi

if [ -n "$REFUSED" ]; then
    line="nccl refused: $REFUSED; host-staged fallback: ${FIRST_FAIL:-pass}"
    printf '%s\n' "$line" | head -c 300 | tr '\n' ' ' >"$OUT/world2_nccl.txt"
    echo >>"$OUT/world2_nccl.txt"
    say "world2: $line"
    exit 1
fi
if [ -z "$FIRST_FAIL" ]; then
    echo pass >"$OUT/world2_nccl.txt"
    say "world2: pass"
    exit 0
fi
echo "$FIRST_FAIL" | head -c 300 | tr '\n' ' ' >"$OUT/world2_nccl.txt"
echo >>"$OUT/world2_nccl.txt"
say "world2: FAIL: $FIRST_FAIL"
exit 1
