#!/usr/bin/env bash
# distributed.grad_reduce on the CPU transports (issue 34). From the same
# start, 12 steps of the tiny adder at world 2 (threads: shared memory)
# and world 3 (processes over the TCP ring, distributed.comm_shm=off):
#  - fp32, and the default (auto is fp32 on CPUs), give the same bits:
#    identical loss lines and snapshots (snapdiff tolerance 0);
#  - bf16 follows the fp32 loss curve within the bf16 tolerance (relative
#    2e-2 per step) and differs from it (the gradients really were rounded);
#  - bf16 is the same bits on the ring and through shared memory (world 3
#    as threads against world 3 as processes on the ring).
# distributed.comm_shm picks the transport of world 2 (off: the ring, the
# same bits; on: shared memory; GPTD_COMM_SHM=0 in the environment, once a
# developer override, no longer has a say). distributed.backend
# staged (the host-staged communicator NCCL falls back to; on CPUs it has
# nothing to stage) gives the same bits and says so in the start event.
# Then a spec with an unknown value is refused, naming the key.
# usage: grad_reduce.sh GPTD SNAPDIFF JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 SNAPDIFF=$2 JOB=$3
over=(trainer.max_steps=12 snapshot.every=0 trainer.global_batch=12 trainer.micro_batch=2)

run_threads() { # NAME WORKERS OVERRIDE...
    local name=$1 w=$2
    shift 2
    "$GPTD" run "$JOB" --json --snapshot-dir "$T/$name" --workers "$w" "${over[@]}" "$@" \
        >"$T/$name.log" || fail "$name failed"
}
run_ring3() { # NAME OVERRIDE...: world 3 as processes over the TCP ring
    local name=$1 port pids=()
    shift
    port=$(free_port)
    for r in 1 2; do
        "$GPTD" run "$JOB" --json --snapshot-dir "$T/$name.r$r" --world 3 \
            --rank $r --rdzv 127.0.0.1:$port "${over[@]}" distributed.comm_shm=off "$@" \
            >/dev/null &
        pids+=($!) PIDS+=($!)
    done
    "$GPTD" run "$JOB" --json --snapshot-dir "$T/$name" --world 3 --rank 0 \
        --rdzv 127.0.0.1:$port "${over[@]}" distributed.comm_shm=off "$@" >"$T/$name.log" ||
        fail "$name rank 0 failed"
    for p in "${pids[@]}"; do wait "$p" || fail "$name: a rank failed"; done
}
snap() { ls "$T/$1"/*.gpts | tail -n1; }
same_bits() { # A B
    cmp -s <(losses "$T/$1.log") <(losses "$T/$2.log") || fail "$2: losses differ from $1"
    "$SNAPDIFF" "$(snap "$1")" "$(snap "$2")" 0 || fail "$2: parameters differ from $1"
}
# near A B: bf16 B within 2e-2 of fp32 A at every step, not identical.
near() {
    paste <(losses "$T/$1.log") <(losses "$T/$2.log") | awk '
        { n++; d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > max) max = r;
          if ($1 != $3) bad = 1 }
        END { printf "%d steps, max relative loss difference %.3g\n", n, max;
              exit (bad || n != 12 || max > 2e-2 || max == 0) }' \
        || fail "$2: bf16 losses not within 2e-2 of $1 (or identical to it)"
}

for w in 2 3; do
    echo "world $w (threads): fp32, default, bf16"
    run_threads "f$w" $w distributed.grad_reduce=fp32
    run_threads "d$w" $w
    same_bits "f$w" "d$w"
    run_threads "b$w" $w distributed.grad_reduce=bf16
    near "f$w" "b$w"
done
start() { jq -r 'select(.type=="event" and .kind=="start") | .message' "$T/$1.log"; }
start b2 | has "gradients in bf16 over comm shm" || fail "world 2 bf16: not bf16 over shm"
start d2 | has "gradients in fp32 over comm shm" || fail "world 2 default: not fp32 over shm"

echo "world 2 (threads): distributed.comm_shm off takes the ring; GPTD_COMM_SHM is not read"
run_threads s2off 2 distributed.comm_shm=off
start s2off | has "over comm tcp" || fail "comm_shm off: not over tcp"
same_bits d2 s2off
run_threads s2on 2 distributed.comm_shm=on
start s2on | has "over comm shm" || fail "comm_shm on: not over shm"
GPTD_COMM_SHM=0 run_threads s2env 2
start s2env | has "over comm shm" || fail "GPTD_COMM_SHM=0 under auto: not over shm (read?)"

echo "world 2 (threads): distributed.backend staged, the host-staged communicator by request"
run_threads st2 2 distributed.backend=staged
start st2 | has "over comm staged/shm (distributed.backend is staged)" \
    || fail "backend staged: the start event does not name the staged communicator"
same_bits d2 st2

echo "world 3 (processes, TCP ring): fp32 and bf16"
run_ring3 rf3 distributed.grad_reduce=fp32
same_bits f3 rf3
run_ring3 rb3 distributed.grad_reduce=bf16
same_bits b3 rb3
start rb3 | has "gradients in bf16 over comm tcp" || fail "world 3 processes: not bf16 over tcp"

if "$GPTD" run "$JOB" --json --snapshot-dir "$T/bad" distributed.grad_reduce=fp16 \
    >"$T/bad.log" 2>&1; then
    fail "grad_reduce fp16 was accepted"
fi
has distributed.grad_reduce "$T/bad.log" || fail "the refusal does not name distributed.grad_reduce"
echo "ok"
