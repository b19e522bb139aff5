#!/usr/bin/env bash
# etc/slurm/gptd.sbatch under a real Slurm (Debian slurm-wlm): munged,
# slurmctld and two slurmd emulating nodes n1 and n2 on this host. sbatch
# the script on 2 nodes; the job completes with world size 2 and sbatch
# returns the job's exit status.
# usage: slurm.sh GPTD GPTCTL JOB
set -euo pipefail
GPTD=$1 GPTCTL=$2 JOB=$3
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
trap 'scancel --full -u root >/dev/null 2>&1 || true; slurm_down; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; tail -n 30 "$T"/slurm/log/* "$T"/out 2>/dev/null >&2; exit 1; }

slurm_up "$T/slurm" || fail "could not start Slurm"
sinfo

rc=0
timeout 300 sbatch --wait --nodes=2 -o "$T/out" \
    --export=ALL,GPTD="$GPTD",GPTCTL="$GPTCTL",GPTD_RUN_DIR="$T/run" \
    "$here/../../etc/slurm/gptd.sbatch" "$JOB" trainer.max_steps=60 snapshot.every=20 || rc=$?
cat "$T/out"
[[ $rc -eq 0 ]] || fail "sbatch returned $rc"
grep -q "all 2 nodes joined" "$T/out" || fail "the world never had 2 nodes"
grep -qE "world size 2|world_size[^0-9]*2" "$T/out" || fail "no world of size 2 in the job's logs"
grep -q "completed" "$T/out" || fail "the job did not complete"
echo "slurm ok: the job completed with world size 2"
