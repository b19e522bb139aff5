#!/usr/bin/env bash
# GPU telemetry and per-rank step time in gptctl, on a CPU host:
# - with a stand-in NVML library (GPTD_NVML_LIBRARY, tests/unit/fake_nvml.c:
#   two GPUs, 38%/39% busy, 1 of 80 GiB used) the node's heartbeat carries
#   its readings: `gptctl nodes` shows GPU UTIL and GPU MEM per GPU and
#   --json carries "gpus" [{index, util_ratio, mem_used_bytes,
#   mem_total_bytes}];
# - a 2-worker job's `gptctl --json status` carries "rank_step_ms" with one
#   positive time per rank, and `gptctl status JOB` prints them with the
#   slowest rank named;
# - without NVML (a CPU host) the GPU columns read "-" and "gpus" is [].
#   gpu_telemetry.sh GPTD GPTCTL ITEST SRC FAKE_NVML
source "$(dirname "$0")/daemon_common.sh"
FAKE=$5

export GPTD_NVML_LIBRARY=$FAKE
start_gptd --workers 2
unset GPTD_NVML_LIBRARY
has_gpus() { "$GPTCTL" --json nodes | has '"util_ratio"'; }
wait_for 10 has_gpus
"$GPTCTL" nodes >"$T/nodes.txt"
head -n1 "$T/nodes.txt" | has 'GPU UTIL  GPU MEM' || fail "no GPU columns: $(cat "$T/nodes.txt")"
grep -q ' 38% 39% .*1\.0/80\.0G 1\.0/80\.0G ' "$T/nodes.txt" ||
    fail "GPU columns do not show the two GPUs: $(cat "$T/nodes.txt")"
"$GPTCTL" --json nodes >"$T/nodes.json"
python3 - "$T/nodes.json" <<'PY' || fail "nodes --json: no gpus array of the expected shape"
import json, sys
n = json.load(open(sys.argv[1]))["nodes"][0]
g = n["gpus"]
assert [x["index"] for x in g] == [0, 1], g
assert abs(g[0]["util_ratio"] - 0.38) < 1e-9 and abs(g[1]["util_ratio"] - 0.39) < 1e-9, g
assert all(x["mem_used_bytes"] == 1 << 30 and x["mem_total_bytes"] == 80 << 30 for x in g), g
PY

# --- per-rank step time of a 2-worker job.
cat >"$T/job.json" <<'JOB'
{"name": "two-ranks",
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 6, "vocab_size": 10},
 "data": {"kind": "synthetic", "task": "addition", "digits": 2},
 "trainer": {"max_steps": 1000000, "micro_batch": 8, "global_batch": 16, "log_every": 5,
             "eval_every": 0, "eval_batches": 2, "threads": 1},
 "optimizer": {"lr": 1e-3, "warmup_steps": 0}, "snapshot": {"every": 0}}
JOB
"$GPTCTL" submit "$T/job.json" >/dev/null
has_ranks() { "$GPTCTL" --json status 1 | has '"rank_step_ms"'; }
wait_for 30 has_ranks
"$GPTCTL" --json status 1 >"$T/status.json"
python3 - "$T/status.json" <<'PY' || fail "status --json: rank_step_ms is not one positive time per rank"
import json, sys
j = json.load(open(sys.argv[1]))["job"]
ms = j["rank_step_ms"]
assert len(ms) == 2 and all(x > 0 for x in ms), ms
PY
"$GPTCTL" status 1 >"$T/status.txt"
grep -Eq '^rank ms/step: +0: [0-9.e+-]+  1: [0-9.e+-]+  \(slowest: rank [01], [0-9.]+x the fastest\)$' \
    "$T/status.txt" || fail "status: no per-rank step time line: $(cat "$T/status.txt")"
"$GPTCTL" cancel 1 >/dev/null
wait_for 30 job_is 1 cancelled
# Once the job has ended there is no live rank time to show.
"$GPTCTL" --json status 1 | has '"rank_step_ms"' && fail "rank_step_ms of an ended job"

# --- a CPU host: no NVML, "-" and [].
kill -TERM "$GPTD_PID"
wait "$GPTD_PID" || fail "gptd did not stop cleanly"
start_gptd
has_node() { "$GPTCTL" --json nodes | has '"gpus"'; }
wait_for 10 has_node
"$GPTCTL" nodes >"$T/nodes.txt"
# DEVICES is "cpu, OpenBLAS CORE[ by gptd]": the GPU columns follow it.
awk 'NR == 2 { exit !($0 ~ / cpu, OpenBLAS [A-Za-z0-9]+( by gptd| generic)? +- +- +[0-9]/) }' \
    "$T/nodes.txt" ||
    fail "GPU columns on a CPU host are not \"-\": $(cat "$T/nodes.txt")"
"$GPTCTL" --json nodes | python3 -c '
import json, sys
n = json.load(sys.stdin)["nodes"][0]
sys.exit(0 if n["gpus"] == [] else n)' || fail "nodes --json on a CPU host: gpus is not []"
echo "gpu_telemetry: ok"
