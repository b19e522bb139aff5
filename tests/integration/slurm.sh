#!/usr/bin/env bash
# etc/slurm/gptd.sbatch under a real Slurm (Debian slurm-wlm): munged,
# slurmctld and two slurmd emulating nodes n1 and n2 on this host.
#  1. sbatch the script on 2 nodes with GPTD_SLURM_HOME and GPTD_ARGS. Once
#     the job trains, `scontrol requeue` it (Slurm signals every process);
#     later send TERM to the batch shell alone, as --signal=B:TERM@120 does
#     near the time limit (the script then requeues the Slurm job itself).
#     Each time gptd snapshots and stops, Slurm runs the script again, and
#     the same gptd job resumes from its newest snapshot: the resume event's
#     snapshot is the newest recorded before it and lies at or past the
#     step reached before the signal (no step lost beyond it), every step
#     1..max has a metric, no second job is submitted, and the job
#     completes with world size 2.
#  2. The state directory, database and snapshots outlive the allocations;
#     the node-local transient files (sockets, secret, pid files) do not.
#  3. sbatch again with --resume ID trainer.max_steps=N: the job continues
#     from the kept state to the new end, without printing the history again.
# KEEP=1 keeps the test's folder for a post-mortem.
# usage: slurm.sh GPTD GPTCTL ITEST_CLIENT JOB
set -euo pipefail
GPTD=$1 GPTCTL=$2 ITEST=$3 JOB=$4
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    echo "SKIP: Slurm (slurm-wlm, munge) is not installed and could not be"
    exit 77
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "SKIP: a private Slurm cluster needs root (slurmd runs jobs as their user)"
    exit 77
fi
source "$here/slurm_common.sh"
T=$(mktemp -d -t gptd-slurm.XXXXXX)
chmod 0755 "$T" # munged (user munge) must reach its directory below
trap 'scancel --full -u root >/dev/null 2>&1 || true; slurm_down; [[ -n ${KEEP:-} ]] ||
      rm -rf "$T"' EXIT
fail() {
    echo "FAIL: $*" >&2
    tail -n 40 "$T"/slurm/log/* "$T"/out* >&2 || true
    exit 1
}
# wait_until SECONDS COMMAND...: polls COMMAND every 0.1 s until it succeeds.
wait_until() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail "timed out waiting for: $*"
        sleep 0.1
    done
}
sql() { "$ITEST" sql "$home/coordinator/gptd.db" "$1"; }
slurm_state() { scontrol show job -o "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
slurm_is() { [[ $(slurm_state "$1") == "$2" ]]; }
job_step() { # SOCKET JOB: the job's step in `gptctl status`
    "$GPTCTL" --socket "$1" --json status "$2" | grep -o '"step":[0-9]*' | head -n1 | cut -d: -f2
}
step_at_least() { local s; s=$(job_step "$1" "$2") && ((s >= $3)); }

slurm_up "$T/slurm" || fail "could not start Slurm"
sinfo

home=$T/home
# 48 examples a step: about 4 ms a step here, so the interruptions come
# long before the end.
max=2500
# sbatch passes its whole environment (--export=ALL,VAR=... would cost
# seconds a launch: slurmd then loads the user's login environment).
sb() {
    GPTD=$GPTD GPTCTL=$GPTCTL GPTD_RUN_DIR=$T/run GPTD_SLURM_HOME=$home \
        GPTD_ARGS="--log-level debug" sbatch --parsable --nodes=2 "$@"
}
# --time=5: at most 5 minutes left, so a TERM to the batch shell alone is
# the time limit's warning and the script requeues the job itself.
sid=$(sb --time=5 -o "$T/out" "$here/../../etc/slurm/gptd.sbatch" "$JOB" \
    trainer.max_steps=$max trainer.global_batch=48 snapshot.every=250)
sid=${sid%%;*}
wait_until 60 grep -q "submitted job" "$T/out"
id=$(sed -n 's/.*submitted job \([0-9]*\).*/\1/p' "$T/out")
[[ $(cat "$home/slurm-$sid.job") == "$id" ]] || fail "slurm-$sid.job does not name gptd job $id"
continued() { (($(grep -c "job $id continues" "$T/out" || true) >= $1)); }
sock_of() { sed -n 's/.*control socket \(.*\) on .*/\1/p' "$T/out" | tail -n1; }

# interrupt HOW: once the job is past a step, interrupt the allocation (HOW:
# requeue = `scontrol requeue`, every process gets TERM; warn = TERM to the
# batch shell alone, as --signal=B:TERM@120 sends it), let the requeued job
# start at once (Slurm delays a requeued job's start by two minutes), wait
# for the next allocation to continue the job. Sets before (the step seen
# before the signal).
interrupt() {
    local n=$(($(grep -c "job $id continues" "$T/out" || true) + 1)) sock
    sock=$(sock_of)
    wait_until 60 step_at_least "$sock" "$id" $((before + 50))
    before=$(job_step "$sock" "$id")
    case $1 in
    requeue) scontrol requeue "$sid" ;;
    warn) scancel --batch --signal=TERM "$sid" ;;
    esac
    wait_until 60 slurm_is "$sid" PENDING
    scontrol update JobId="$sid" StartTime=now
    wait_until 90 continued "$n"
    echo "slurm: $(date +%T) $1 after step $before, the job continues"
}
# resumed_ok N: the job's Nth resume event names the newest snapshot recorded
# before it, and that snapshot is at or past the step reached before the
# signal (the stop snapshot: no step lost beyond it).
resumed_ok() {
    local ev msg newest
    IFS='|' read -r ev _ msg <<<"$(sql "SELECT id || '|' || step || '|' || message FROM events
        WHERE job_id = $id AND kind = 'resume' ORDER BY id LIMIT 1 OFFSET $(($1 - 1))")"
    [[ -n $ev ]] || fail "no resume event number $1 for job $id"
    newest=$(sql "SELECT max(step) FROM events WHERE job_id = $id AND kind = 'snapshot'
                  AND id < $ev")
    [[ -n $newest ]] && ((newest >= ${2:?})) ||
        fail "resume $1: the newest snapshot before it is at step \"$newest\"; step $2 was reached"
    [[ $msg == *"$(printf 'snap-%012d' "$newest")"*" at step $newest "* ]] ||
        fail "resume $1: \"$msg\", want the newest snapshot, step $newest"
    echo "slurm: resume $1 from the newest snapshot, step $newest (reached $2 before the signal)"
}

# --- 1. interrupted twice, resumed each time, completed.
before=0
interrupt requeue
before1=$before
interrupt warn
before2=$before
# Only the time limit's TERM makes the script requeue the job: not the TERM
# of a job that Slurm ends (requeue here; scancel takes the same path).
[[ $(grep -c "requeueing Slurm job $sid" "$T/out") -eq 1 ]] ||
    fail "the script requeued the job $(grep -c "requeueing Slurm job $sid" "$T/out") times, want 1"
wait_until 120 slurm_is "$sid" COMPLETED
cat "$T/out" | grep -v '^step '
restarts=$(scontrol show job -o "$sid" | grep -o 'Restarts=[0-9]*' | cut -d= -f2)
[[ $restarts -eq 2 ]] || fail "Slurm job $sid restarted $restarts times, want 2"
for r in 0 1 2; do grep -q "(restart $r)" "$T/out" || fail "no allocation with restart $r"; done
grep -q "all 2 nodes joined" "$T/out" || fail "the world never had 2 nodes"
grep -qE "world size 2|world_size[^0-9]*2" "$T/out" || fail "no world of size 2 in the job's logs"
[[ $(sql "SELECT state FROM jobs WHERE id = $id") == completed ]] ||
    fail "gptd job $id is $(sql "SELECT state FROM jobs WHERE id = $id"), want completed"
[[ $(sql "SELECT count(*) FROM jobs") -eq 1 ]] || fail "a requeued script submitted a second job"
resumed_ok 1 "$before1"
resumed_ok 2 "$before2"
# No step lost: every step 1..max has a metric.
missing=$(sql "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < $max)
               SELECT count(*) FROM s WHERE n NOT IN
               (SELECT step FROM metrics WHERE job_id = $id)")
[[ $missing -eq 0 ]] || fail "$missing of steps 1..$max have no metric"
[[ $(sql "SELECT max(step) FROM metrics WHERE job_id = $id") -eq $max ]] ||
    fail "the job did not reach step $max"

# --- 2. what outlives the allocation.
[[ -s $home/coordinator/gptd.db ]] || fail "the database did not outlive the allocation"
snaps() { find "$1" -maxdepth 1 -name 'snap-*.gpts' 2>/dev/null | wc -l; }
n=$(snaps "$home/coordinator/jobs/$id/snapshots")
((n >= 4)) || fail "the coordinator's snapshots did not outlive the allocations ($n left)"
n=$(snaps "$home/nodes/n2/jobs/$id/snapshots")
((n >= 4)) || fail "the member n2's snapshot copies did not outlive the allocations ($n left)"
left=$(find "$T/run" -mindepth 1 2>/dev/null | head -n 5)
[[ -z $left ]] || fail "transient files left behind: $left"

# --- 3. sbatch again with more steps against the kept state.
more=$((max + 20))
sid2=$(sb -o "$T/out2" "$here/../../etc/slurm/gptd.sbatch" --resume "$id" trainer.max_steps=$more)
sid2=${sid2%%;*}
wait_until 120 slurm_is "$sid2" COMPLETED
cat "$T/out2"
[[ $(scontrol show job -o "$sid2" | grep -o ' ExitCode=[0-9:]*') == " ExitCode=0:0" ]] ||
    fail "sbatch --resume: $(scontrol show job -o "$sid2" | grep -o ' ExitCode=[0-9:]*')"
grep -q "resumed job $id" "$T/out2" || fail "the second sbatch did not resume job $id"
grep -q "^step $max/$more" "$T/out2" && fail "the second allocation printed the history again"
[[ $(sql "SELECT state || ' ' || (SELECT max(step) FROM metrics WHERE job_id = $id)
          FROM jobs WHERE id = $id") == "completed $more" ]] ||
    fail "job $id did not complete at step $more after sbatch --resume"
[[ $(sql "SELECT count(*) FROM jobs") -eq 1 ]] || fail "sbatch --resume submitted a new job"
echo "slurm ok: job $id resumed after scontrol requeue and the time-limit TERM;" \
    "sbatch --resume took it to $more"
