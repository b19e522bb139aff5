#!/usr/bin/env bash
# Sanitizer runs of the test suite (gcc):
#
#   packaging/sanitize.sh [asan|asan-ci|tsan|all] [extra ctest args]
#
# asan: the whole suite built with -fsanitize=address,undefined in
#       build-asan/, then `ctest -L 'unit|integration'` there (the package
#       test ops_deb excluded: it would install an instrumented gptd). Every
#       ASan, LeakSanitizer or UBSan report fails the run.
# asan-ci: the same build and checks for the part of the suite that covers
#       the daemon's threads and the communicators (asan_ci_units and
#       asan_ci_scripts below); only the targets those tests run are built.
#       packaging/test.sh runs it, so CI stays inside its time budget.
# tsan: the suite built with -fsanitize=thread in build-tsan/, then the
#       tests of the threaded parts: the store (test_store), the TCP ring
#       (test_comm), the user work pool (test_userwork), the workers and
#       their mailbox (daemon_*, run_*, ddp_*).
#       packaging/tsan.supp holds the suppressions, with the reasons.
#
# Reports go to files under BUILD/sanitizer-reports (log_path), so that a
# gptd a test started in the background, whose stderr the test may throw
# away, cannot hide one: any report file fails the run and is printed.
#
# CUDA is off in both builds (the CUDA runtime does not run under ASan or
# TSan). OpenMP and OpenBLAS run one thread: neither library is built with
# TSan, so their own synchronisation would be reported as races, and the
# tests use one BLAS thread per worker anyway. Exit status: 0 when every
# selected run passed.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-all}
[[ $# -gt 0 ]] && shift
jobs=$(nproc)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
status=0

configure_build() { # DIR SANITIZERS EXTRA_C_FLAGS [TARGET...]: no target builds all
    local dir=$1 san=$2 flags=$3
    shift 3
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPTD_CUDA=OFF \
        -DGPTD_SANITIZE="$san" -DCMAKE_C_FLAGS="$flags" >/dev/null
    cmake --build "$dir" -j"$jobs" ${1:+--target "$@"}
}

# What asan-ci runs: the worker threads and their abort racing their end
# (test_workers), the TCP and shared-memory rings (test_comm), the
# host-staged communicator and its fallback agreement (test_comm_staged),
# and a stop during their set-up (test_trainer_stop), the loop's mailbox,
# the store and the rendezvous; and the daemons that run them: a job's life
# (daemon_flow), signals during jobs (daemon_signals), a data file
# truncated under a job (daemon_data_shrink), a killed coordinator and
# member (elastic_kill, elastic_member), `gptd run` with two workers
# stopped by a signal (run_signal). The scripts need gptd, gptctl and
# itest_client only.
asan_ci_units=(test_workers test_comm test_comm_staged test_trainer_stop test_mailbox test_store
    test_rdzv)
asan_ci_scripts=(daemon_flow daemon_signals daemon_data_shrink elastic_kill elastic_member
    run_signal)

# run_asan [TARGET...] -- [ctest args]: builds the targets (all when none)
# and runs the ctest selection.
run_asan() {
    local targets=()
    while [[ $1 != -- ]]; do
        targets+=("$1")
        shift
    done
    shift
    # Recoverable ASan: one bad access is reported and the program goes on,
    # so a single bug early in training does not hide the ones behind it
    # (the report files still fail the run).
    configure_build build-asan address,undefined -fsanitize-recover=address "${targets[@]}"
    local rep=$PWD/build-asan/sanitizer-reports rc=0
    rm -rf "$rep" && mkdir -p "$rep"
    GPTD_SANITIZED=1 ASAN_OPTIONS=log_path=$rep/asan:halt_on_error=0:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
        UBSAN_OPTIONS=log_path=$rep/ubsan:print_stacktrace=1 \
        ctest --test-dir build-asan --output-on-failure -j"$jobs" "$@" || rc=$?
    check_reports "$rep" || rc=1
    return $rc
}

run_asan_all() {
    run_asan -- -L 'unit|integration' -E '^ops_deb$' "$@"
}

run_asan_ci() {
    local names=("${asan_ci_units[@]}" "${asan_ci_scripts[@]}")
    local re
    re="^($(IFS='|' && echo "${names[*]}"))\$"
    run_asan gptd gptctl itest_client "${asan_ci_units[@]}" -- -R "$re" "$@"
}

# check_reports DIR: prints every sanitizer report file; fails if any.
check_reports() {
    local files
    files=$(find "$1" -type f | sort)
    [[ -z $files ]] && return 0
    echo "=== sanitizer reports in $1:" >&2
    for f in $files; do
        echo "--- $f" >&2
        cat "$f" >&2
    done
    return 1
}

run_tsan() {
    configure_build build-tsan thread ""
    # The kernel's mmap randomisation can put mappings where gcc 12's TSan
    # keeps its shadow memory ("unexpected memory mapping"); setarch -R
    # runs the tests without address-space randomisation.
    local pre=()
    if setarch "$(uname -m)" -R true 2>/dev/null; then
        pre=(setarch "$(uname -m)" -R)
    fi
    local rep=$PWD/build-tsan/sanitizer-reports rc=0
    rm -rf "$rep" && mkdir -p "$rep"
    GPTD_SANITIZED=1 \
        TSAN_OPTIONS="log_path=$rep/tsan:suppressions=$PWD/packaging/tsan.supp:second_deadlock_stack=1:history_size=4" \
        "${pre[@]}" ctest --test-dir build-tsan --output-on-failure -j"$jobs" \
        -R '^(test_store|test_comm|test_userwork|daemon_|run_|ddp_)' "$@" || rc=$?
    check_reports "$rep" || rc=1
    return $rc
}

case $what in
asan) run_asan_all "$@" || status=$? ;;
asan-ci) run_asan_ci "$@" || status=$? ;;
tsan) run_tsan "$@" || status=$? ;;
all)
    run_asan_all "$@" || status=$?
    run_tsan "$@" || status=$?
    ;;
*)
    echo "usage: packaging/sanitize.sh [asan|asan-ci|tsan|all] [ctest args]" >&2
    exit 2
    ;;
esac
exit $status
