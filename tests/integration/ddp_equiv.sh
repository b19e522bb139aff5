#!/usr/bin/env bash
# DDP equivalence: 20 steps with the same global batch at world 1, world 2
# as two processes (static rendezvous over loopback) and world 2 as two
# threads: per-step losses and final parameters agree within fp32
# tolerance. The tolerance is relative 1e-4 on parameters and 1e-4 on
# losses: the runs differ only in the order fp32 gradients are summed
# (one rank accumulating 3 micro-batches vs two ranks averaging their
# halves in the ring), an O(1e-7) relative difference per step that Adam's
# normalisation can amplify by a few orders over 20 steps, but not beyond.
# usage: ddp_equiv.sh GPTD SNAPDIFF JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 SNAPDIFF=$2 JOB=$3
over=(trainer.max_steps=20 snapshot.every=0)

"$GPTD" run "$JOB" --json --snapshot-dir "$T/w1" "${over[@]}" > "$T/w1.log"
"$GPTD" run "$JOB" --json --snapshot-dir "$T/t2" --workers 2 "${over[@]}" > "$T/t2.log"
port=$(free_port)
"$GPTD" run "$JOB" --json --snapshot-dir "$T/p2" --world 2 --rank 0 --rdzv 127.0.0.1:$port \
    "${over[@]}" > "$T/p2.log" &
PIDS+=($!)
"$GPTD" run "$JOB" --json --snapshot-dir "$T/p2b" --world 2 --rank 1 --rdzv 127.0.0.1:$port \
    "${over[@]}" > "$T/p2b.log"
wait "${PIDS[0]}" || fail "rank 0 of the two-process world failed"

compare_losses() { # A B
    paste <(losses "$1") <(losses "$2") | awk -v tol=1e-4 '
        { n++; d = $2 - $4; if (d < 0) d = -d; r = d / ($2 > 0 ? $2 : -$2);
          if (r > max) max = r; if ($1 != $3) bad = 1 }
        END { printf "%d steps, max relative loss difference %.3g\n", n, max;
              exit (bad || n != 20 || max > tol) }'
}
for w in t2 p2; do
    echo "world 1 vs $w:"
    compare_losses "$T/w1.log" "$T/$w.log" || fail "losses of $w differ from world 1"
    "$SNAPDIFF" "$(ls "$T"/w1/*.gpts | tail -n1)" "$(ls "$T"/$w/*.gpts | tail -n1)" 1e-4 \
        || fail "parameters of $w differ from world 1"
done
[[ -z "$(ls "$T/p2b" 2>/dev/null)" ]] || fail "rank 1 wrote snapshots"
echo "ddp equivalence ok"
