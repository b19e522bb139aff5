#!/usr/bin/env bash
# bench_elastic: elastic recovery times of a three-node gptd cluster on
# loopback (default heartbeat_s 1, dead_after_s 3), one JSON line each:
#   {"bench":"elastic_kill",...}  SIGKILL of a non-coordinator node -> the
#       first completed step of the re-formed world (the time of its first
#       metric, logged every step), median and max over TRIALS;
#   {"bench":"elastic_join",...}  start of a new node -> its first step as a
#       member (the first metric of the world that includes it).
# Then bench_rdzv (rendezvous time against 8..2048 simulated nodes).
#
# Usage: bench/bench_elastic.sh BUILD_DIR [TRIALS]   (default 5 trials)
set -euo pipefail
B=$(cd "${1:?usage: bench_elastic.sh BUILD_DIR [TRIALS]}" && pwd)
TRIALS=${2:-5}
SRC=$(cd "$(dirname "$0")/.." && pwd)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# Reuse the integration helpers (nodes, waits, cleanup).
set -- "$B/gptd" "$B/gptctl" "$B/tests/itest_client" "$SRC"
source "$SRC/tests/integration/elastic_common.sh"

COORD=n1
start_node n1 --coordinator
start_node n2
start_node n3
elastic_job "$T/job.json" 100000000 "2:3" 200 1
id=$(ctl n1 submit "$T/job.json")
wait_for 60 world_size_is "$id" 3

# first_metric_after WORLD STEP: unix time of the first metric of a world of
# WORLD ranks after STEP (empty until there is one).
first_metric_after() {
    db "SELECT min(time) FROM metrics WHERE job_id = $id AND world_size = $1 AND step > $2"
}
have_metric_after() { [[ -n $(first_metric_after "$1" "$2") ]]; }

kills=()
joins=()
for ((i = 1; i <= TRIALS; i++)); do
    wait_for 60 world_size_is "$id" 3
    sleep 1 # train a little in the full world
    s0=$(db "SELECT max(step) FROM metrics WHERE job_id = $id")
    t0=$(date +%s.%N)
    kill_node n3
    wait_for 60 have_metric_after 2 "$s0"
    kills+=("$(echo "$(first_metric_after 2 "$s0") - $t0" | bc -l)")
    sleep 1
    s1=$(db "SELECT max(step) FROM metrics WHERE job_id = $id")
    t1=$(date +%s.%N)
    start_node n3
    wait_for 60 have_metric_after 3 "$s1"
    joins+=("$(echo "$(first_metric_after 3 "$s1") - $t1" | bc -l)")
    echo "trial $i: kill -> step ${kills[-1]} s, start -> member step ${joins[-1]} s" >&2
done
ctl n1 cancel "$id" >/dev/null

stats() { # NAME GOAL VALUES...
    local name=$1 goal=$2
    shift 2
    printf '%s\n' "$@" | sort -g | awk -v name="$name" -v goal="$goal" -v n="$#" '
        { v[NR] = $1 }
        END {
            med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
            printf "{\"bench\":\"%s\",\"trials\":%d,\"median_s\":%.3f,\"max_s\":%.3f,\"min_s\":%.3f,", name, n, med, v[n], v[1]
            printf "\"goal_s\":%s,\"heartbeat_s\":1,\"dead_after_s\":3}\n", goal
        }'
}
stats elastic_kill 10 "${kills[@]}"
stats elastic_join 10 "${joins[@]}"
"$B/bench/bench_rdzv" 8 64 512 2048 2>/dev/null
