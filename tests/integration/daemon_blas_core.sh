#!/usr/bin/env bash
# CPU jobs at the machine's speed: where OpenBLAS falls back to its generic
# SSE3 core (Prescott) on a CPU that runs a better one, gptd re-executes
# itself with OPENBLAS_CORETYPE set and says so. The test forces the
# fallback with gptd's test hook (GPTD_TEST_OPENBLAS_FALLBACK, which acts
# only where OPENBLAS_CORETYPE is unset, as OpenBLAS's own pick would), so
# it runs on any x86-64 CPU with AVX or more, and checks:
#  - the start line names the core that runs, gptd's choice and why; the
#    process keeps its PID through the exec and runs with the variable set;
#  - `gptctl nodes` shows the core, --json its details;
#  - a job's "peak" event names the core its MFU is measured over, in the
#    daemon and in `gptd run`;
#  - an OPENBLAS_CORETYPE the operator set is kept, with a word that the
#    CPU runs a faster core.
# The gptd processes started here get OPENBLAS_CORETYPE unset or set as
# each case needs; the test's own environment is left as it is.
source "$(dirname "$0")/daemon_common.sh"

flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
want=
if [[ $flags == *" avx512f "* && $flags == *" avx512cd "* && $flags == *" avx512bw "* &&
      $flags == *" avx512dq "* && $flags == *" avx512vl "* ]]; then
    want=SkylakeX isa=AVX-512
elif [[ $flags == *" avx2 "* && $flags == *" fma "* ]]; then
    want=Haswell isa=AVX2
    grep -q AuthenticAMD /proc/cpuinfo && want=Zen
elif [[ $flags == *" avx "* ]]; then
    want=Sandybridge isa=AVX
fi
[[ -n $want ]] || { echo "SKIP: no AVX on this CPU, no better core than the generic one"; exit 77; }

# gptd under an environment: GPTD_ENV (env(1) arguments) applies to it.
cat >"$T/gptd-env" <<EOS
#!/bin/sh
exec env -u OPENBLAS_CORETYPE -u GPTD_OPENBLAS_PICKED -u GPTD_OPENBLAS_FALLBACK \$GPTD_ENV "$GPTD" "\$@"
EOS
chmod +x "$T/gptd-env"
REAL_GPTD=$GPTD
GPTD=$T/gptd-env

# --- OpenBLAS "falls back" to Prescott: gptd corrects it.
export GPTD_ENV="GPTD_TEST_OPENBLAS_FALLBACK=Prescott"
start_gptd
log=$T/gptd.0.log
has_line() { grep -F "$1" "$log"; }
wait_for 10 has_line "state in"
start_line=$(grep -F "state in" "$log")
[[ $start_line == *"OpenBLAS core $want (chosen by gptd: OpenBLAS picked Prescott, a generic core, on a CPU with $isa)"* ]] ||
    fail "start line: $start_line"
env_of() { tr '\0' '\n' <"/proc/$1/environ"; }
env_of "$GPTD_PID" | has -x "OPENBLAS_CORETYPE=$want" || fail "gptd runs without OPENBLAS_CORETYPE=$want"
[[ $(readlink "/proc/$GPTD_PID/exe") == "$(readlink -f "$REAL_GPTD")" ]] ||
    fail "PID $GPTD_PID is not gptd after the re-exec"

"$GPTCTL" nodes >"$T/nodes.txt"
has -F "cpu, OpenBLAS $want by gptd" <"$T/nodes.txt" || fail "nodes: $(cat "$T/nodes.txt")"
"$GPTCTL" --json nodes | python3 -c '
import json, sys
b = json.load(sys.stdin)["nodes"][0]["hardware"]["blas"]
want = {"core": sys.argv[1], "chosen_by": "gptd", "openblas_picked": "Prescott", "cpu_isa": sys.argv[2]}
bad = {k: b.get(k) for k in want if b.get(k) != want[k]}
sys.exit("nodes --json blas: %s" % bad if bad or "DYNAMIC_ARCH" not in b["config"] else 0)' \
    "$want" "$isa" || fail "nodes --json"

tiny_job "$T/job.json" 3 1
"$GPTCTL" submit "$T/job.json" >/dev/null
wait_for 60 job_is 1 completed
"$GPTCTL" logs 1 >"$T/logs.txt"
has -E "MFU over this CPU's sgemm, [0-9.]+ GFLOP/s with OpenBLAS core $want" <"$T/logs.txt" ||
    fail "the job's peak event does not name $want: $(grep -i peak "$T/logs.txt")"

# The foreground trainer makes the same correction.
(cd "$T" && GPTD_ENV="GPTD_TEST_OPENBLAS_FALLBACK=Prescott" "$GPTD" run "$T/job.json" \
    --snapshot-dir "$T/run-snaps" >"$T/run.txt" 2>&1) || fail "gptd run: $(cat "$T/run.txt")"
has -F "with OpenBLAS core $want" <"$T/run.txt" || fail "gptd run: $(cat "$T/run.txt")"

kill -TERM "$GPTD_PID"
wait "$GPTD_PID" || fail "gptd did not stop cleanly"

# --- the operator's OPENBLAS_CORETYPE stands, hook or not.
export GPTD_ENV="OPENBLAS_CORETYPE=Prescott GPTD_TEST_OPENBLAS_FALLBACK=Core2"
start_gptd
log=$T/gptd.1.log
wait_for 10 has_line "state in"
start_line=$(grep -F "state in" "$log")
[[ $start_line == *"OpenBLAS core Prescott (set by OPENBLAS_CORETYPE; this CPU has $isa, where $want runs faster)"* ]] ||
    fail "operator's core: $start_line"
env_of "$GPTD_PID" | has -x "OPENBLAS_CORETYPE=Prescott" || fail "the operator's setting changed"
"$GPTCTL" nodes | has -F "cpu, OpenBLAS Prescott generic" || fail "nodes: $("$GPTCTL" nodes)"
echo "daemon_blas_core: ok"
