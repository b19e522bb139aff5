#!/usr/bin/env bash
# Three nodes, each in its own network namespace (separate hosts), joined by
# a bridge in a fourth namespace. Mid-training n3's link goes down: it is
# declared dead and the world re-forms on n1 and n2; n3 notices that the
# store stopped answering and leaves its world. When the link comes back n3
# reconnects by itself and the world takes it in again. Everything created
# here (namespaces, veth pairs, the bridge) is deleted on exit.
# Needs root and network namespaces; exits 77 (skipped) without them.
source "$(dirname "$0")/elastic_common.sh"

tag=$((RANDOM % 50000 + 10000))
NS=(gptd${tag}h gptd${tag}a gptd${tag}b gptd${tag}c)
NET=10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))
netns_cleanup() {
    for ns in "${NS[@]}"; do
        ip netns del "$ns" 2>/dev/null || true
    done
}
EXTRA_CLEANUP=netns_cleanup

if ! ip netns add "${NS[0]}" 2>/dev/null; then
    echo "SKIP: cannot create network namespaces (needs root and ip netns)"
    exit 77
fi
ip -n "${NS[0]}" link add br0 type bridge
ip -n "${NS[0]}" link set br0 up
for i in 1 2 3; do
    ns=${NS[$i]}
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "g${tag}n$i" netns "$ns" type veth peer name "g${tag}h$i" netns "${NS[0]}"
    ip -n "$ns" link set "g${tag}n$i" name eth0
    ip -n "$ns" addr add "$NET.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "${NS[0]}" link set "g${tag}h$i" master br0
    ip -n "${NS[0]}" link set "g${tag}h$i" up
done

RDZV=$NET.1:29400
COORD=n1
NODE_WRAP=(ip netns exec "${NS[1]}")
start_node n1 --coordinator --bind-host "$NET.1"
NODE_WRAP=(ip netns exec "${NS[2]}")
start_node n2 --bind-host "$NET.2"
NODE_WRAP=(ip netns exec "${NS[3]}")
start_node n3 --bind-host "$NET.3"
NODE_WRAP=()

elastic_job "$T/job.json" 6000 "2:3" 50
id=$(ctl n1 submit "$T/job.json")
wait_for 60 world_size_is "$id" 3
wait_for 60 job_step_at_least n1 "$id" 300

# --- cut n3 off.
step0=$(job_field n1 "$id" step)
t0=$(now_ms)
ip -n "${NS[3]}" link set eth0 down
wait_for 20 node_is n1 n3 dead
wait_for 20 world_size_is_after "$id" 2 "$step0"
echo "world re-formed without n3 $(($(now_ms) - t0)) ms after its link went down"
wait_for 10 grep -q "lost the store" "$T/n3.log"

# --- the link returns: n3 rejoins by itself.
step1=$(job_field n1 "$id" step)
t1=$(now_ms)
ip -n "${NS[3]}" link set eth0 up
wait_for 30 world_size_is_after "$id" 3 "$step1"
echo "n3 was a member again $(($(now_ms) - t1)) ms after its link came back"

wait_for 120 job_is n1 "$id" completed
check_history "$id"
echo "elastic_partition: ok"
