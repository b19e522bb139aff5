# A private Slurm cluster for tests (sourced): munged on its own socket,
# slurmctld and two slurmd emulating nodes n1 and n2 on this host
# (NodeAddr 127.0.0.1, ports from the test's range), all started by hand
# and killed by PID on exit. Needs root (slurmd runs jobs as their user).
# After slurm_up: SLURM_CONF is exported and `sinfo` shows n1, n2 idle.
slurm_up() { # DIR
    local d=$1 port=$((17000 + RANDOM % 15000)) # below the ephemeral range (lib.sh free_port)
    mkdir -p "$d/munge" "$d/spool" "$d/state" "$d/log"
    chmod 0755 "$d" # munged runs as munge and must reach its directory
    chown munge:munge "$d/munge" 2>/dev/null || true
    chmod 0755 "$d/munge" # munged insists clients can reach its socket
    runuser -u munge -- /usr/sbin/munged --socket="$d/munge/munge.sock" \
        --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" \
        --seed-file="$d/munge/munged.seed" || return 1
    SLURM_PIDS+=("$(cat "$d/munge/munged.pid")")
    cat > "$d/slurm.conf" <<CONF
ClusterName=gptdtest
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$d/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=n1 NodeAddr=127.0.0.1 Port=$((port + 2)) CPUs=1 State=UNKNOWN
NodeName=n2 NodeAddr=127.0.0.1 Port=$((port + 3)) CPUs=1 State=UNKNOWN
PartitionName=test Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
CONF
    export SLURM_CONF="$d/slurm.conf"
    /usr/sbin/slurmctld -D -f "$SLURM_CONF" > "$d/log/slurmctld.out" 2>&1 &
    SLURM_PIDS+=($!)
    for n in n1 n2; do
        /usr/sbin/slurmd -D -N $n -f "$SLURM_CONF" > "$d/log/slurmd.$n.out" 2>&1 &
        SLURM_PIDS+=($!)
    done
    local deadline=$((SECONDS + 60))
    until [[ $(sinfo -h -N -o '%N %t' 2>/dev/null | grep -c idle) -eq 2 ]]; do
        ((SECONDS < deadline)) || { echo "slurm did not come up:"; tail -n 20 "$d"/log/*; return 1; }
        sleep 0.2
    done
}

slurm_down() {
    local p
    for p in "${SLURM_PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done
    for p in "${SLURM_PIDS[@]:-}"; do
        [[ -n "$p" ]] || continue
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
    done
    # What a job left running (its slurmstepd, script, srun or gptd outlive
    # a killed slurmd when a test fails mid-job), found by this cluster's
    # SLURM_CONF in its environment, by PID; never this shell.
    local e
    [[ -n ${SLURM_CONF:-} ]] || return 0
    for e in /proc/[0-9]*/environ; do
        p=${e#/proc/}
        p=${p%/environ}
        [[ $p != "$$" ]] || continue
        grep -qzx "SLURM_CONF=$SLURM_CONF" "$e" 2>/dev/null && kill -9 "$p" 2>/dev/null || true
    done
}
SLURM_PIDS=()
