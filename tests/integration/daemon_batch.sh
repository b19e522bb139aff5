#!/usr/bin/env bash
# Batch geometry at submit (issues 18 and 19): a global batch that cannot
# give every worker of the job's largest world one sequence is refused
# before anything is queued, naming trainer.global_batch and the node
# range. Offline `gptctl validate` counts the spec's workers per node
# ("auto" as one); a running gptd counts what "auto" resolves to there
# (its --workers), so the same file passes offline and is refused by a
# gptd with two workers. A global batch that is no multiple of micro_batch
# x world (7 with micro_batch 4 at world 2) now trains to the end.
source "$(dirname "$0")/daemon_common.sh"

tiny_job "$T/job.json" 6 1

# Offline (no gptd on the socket): the spec's own count.
if "$GPTCTL" validate "$T/job.json" distributed.nodes=1:4 trainer.global_batch=3 >"$T/out" 2>&1; then
    fail "offline validate accepted global_batch 3 for 4 nodes"
fi
for want in trainer.global_batch "(3) is smaller than the largest world of this job, 4 workers" \
    'distributed.nodes "1:4" x 1 worker per node'; do
    grep -qF -- "$want" "$T/out" || fail "offline validate's error lacks \"$want\": $(cat "$T/out")"
done
"$GPTCTL" validate "$T/job.json" distributed.nodes=1:2 trainer.global_batch=3 >/dev/null \
    || fail "offline validate refused 3 sequences for 2 workers"

start_gptd --workers 2
for op in validate submit; do
    if "$GPTCTL" "$op" "$T/job.json" distributed.nodes=1:2 trainer.global_batch=3 \
        >"$T/out" 2>&1; then
        fail "$op accepted global_batch 3 for 2 nodes x 2 workers: $(cat "$T/out")"
    fi
    for want in trainer.global_batch "(3) is smaller than the largest world of this job, 4 workers" \
        'distributed.nodes "1:2" x 2 workers per node'; do
        grep -qF -- "$want" "$T/out" || fail "$op's error lacks \"$want\": $(cat "$T/out")"
    done
    echo "$op: $(cat "$T/out")"
done
"$GPTCTL" --json list | has -F '"jobs":[]' || fail "a refused job was queued: $("$GPTCTL" list)"

# 7 sequences, micro_batch 4, two workers: 4 + 3, trained to the end.
job=$("$GPTCTL" submit "$T/job.json" trainer.global_batch=7 trainer.micro_batch=4)
wait_for 60 job_is "$job" completed
"$GPTCTL" --json logs "$job" >"$T/logs.json"
grep -qF "world size 2, 1 micro-batch(es) of up to 4 x" "$T/logs.json" \
    || fail "no world-2 start of one micro-batch: $(cat "$T/logs.json")"
[[ $(metric_steps "$T/logs.json" | tail -n 1) == 6 ]] || fail "did not reach step 6"
echo "batch geometry at submit ok"
