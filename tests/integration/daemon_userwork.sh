#!/usr/bin/env bash
# Work users ask for is bounded, owned and cancellable (issue 36, cases 2-4).
# A test user samples a 4-layer, 256-wide model (block 128: each
# `sample --tokens 2048` runs for minutes here) while root runs jobs:
#  - case 2: the user's six samples do not keep root's 5-step job from
#    starting and completing, nor root's own sample from running (gptd's
#    pool gives each user user_work_per_uid = 1 thread); of the six, one
#    runs, three wait (gptctl says "waiting for a slot") and two are
#    refused naming user_work_queue_per_uid; a sample or export whose
#    estimate passes user_work_max_memory is refused before it allocates;
#  - case 3: the samples' clients are killed: their work is cancelled (the
#    pool empties, gptd's CPU use falls to idle, the log says the running
#    one was cancelled);
#  - case 4: one SIGTERM while two samples, an export and a --resume-from
#    copy run on the pool (and a sample waits) and root's job trains: gptd exits 0
#    within EXIT_BOUND_S with the job's snapshot at the stop, the clients
#    are answered "gptd is stopping", the export leaves no file, and the
#    copy is recorded with its snapshot or not at all.
# And the user's snapshot crafted with valid checksums and a header whose
# model is smaller than its weights is refused by `sample`, gptd alive.
source "$(dirname "$0")/daemon_common.sh"

EXIT_BOUND_S=20
make_test_user gptduw
mkdir -p "$T/data" "$T/out"
chmod 0755 "$T/data"
words=(the quick brown fox jumps over a lazy dog and then sleeps)
for i in $(seq 1 4000); do printf '%s ' "${words[i % 12]}"; done >"$T/data/words.txt"
chmod 0644 "$T/data/words.txt"
cat >"$T/sampler.json" <<JOB
{"name": "sampler",
 "model": {"n_layer": 4, "n_head": 4, "n_embd": 256, "block_size": 128},
 "data": {"kind": "text", "path": "$T/data/words.txt"},
 "trainer": {"max_steps": 1, "micro_batch": 1, "global_batch": 1, "eval_every": 0,
             "eval_batches": 1, "threads": 1},
 "snapshot": {"every": 1}}
JOB
chmod 0644 "$T/sampler.json"
# A 12M-parameter model: its export and copy take a second or more here.
cat >"$T/wide.json" <<JOB
{"name": "wide",
 "model": {"n_layer": 4, "n_head": 4, "n_embd": 512, "block_size": 6, "vocab_size": 10},
 "data": {"kind": "synthetic", "task": "addition", "digits": 2},
 "trainer": {"max_steps": 1, "micro_batch": 1, "global_batch": 1, "log_every": 1,
             "eval_every": 0, "eval_batches": 1, "threads": 1},
 "snapshot": {"every": 1}}
JOB
tiny_job "$T/tiny.json" 5 1 5

# as_user_bg ARGS... &: gptctl as the user, exec'd in the background
# subshell, so that $! is gptctl itself.
as_user_bg() {
    exec setpriv --reuid="$U" --regid="$U" --clear-groups env GPTD_SOCKET="$SOCK" "$T/bin/gptctl" "$@"
}
gptd_log() { cat "$T"/gptd.*.log; }
# user_work RUNNING WAITING: `gptctl status` shows the pool so.
user_work() {
    "$GPTCTL" --json status | has "\"user_work\":{\"running\":$1,\"waiting\":$2}"
}
# cpu_ticks PID: the process's user + system time, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
connected() { (($(gptd_log | grep -c "uid $(id -u "$U") connected") >= $1)); }

start_gptd --socket-mode 0666 --data-roots "$T/data" --user-work-queue-per-uid 3
a=$(as_user submit "$T/sampler.json")
wait_for 120 job_is "$a" completed
w=$("$GPTCTL" submit "$T/wide.json")
wait_for 240 job_is "$w" completed

# --- case 2: six long samples of one user.
declare -a spid
for i in 1 2 3 4 5 6; do
    as_user_bg sample "$a" --prompt "the" --tokens 2048 >"$T/a$i.out" 2>"$T/a$i.err" &
    spid[$i]=$!
    PIDS+=("${spid[$i]}")
done
wait_for 20 connected 6
t0=$SECONDS
b=$("$GPTCTL" submit "$T/tiny.json")
wait_for 60 job_is "$b" completed
echo "case 2: root's job completed $((SECONDS - t0)) s after the user's six samples"
t0=$SECONDS
timeout 60 "$GPTCTL" sample "$b" --prompt 1 --tokens 16 >"$T/root.out" 2>"$T/root.err" ||
    fail "root's sample did not run beside the user's: $(cat "$T/root.err")"
echo "case 2: root's sample answered in $((SECONDS - t0)) s"
wait_for 10 user_work 1 3
refused=0 waiting=0
for i in 1 2 3 4 5 6; do
    if grep -q "limit: .*(user_work_queue_per_uid)" "$T/a$i.err"; then
        refused=$((refused + 1))
    fi
    if grep -q "waiting for a slot: [0-9]* requests\? ahead, 1 of yours running" "$T/a$i.err"; then
        waiting=$((waiting + 1))
    fi
done
((refused == 2 && waiting == 3)) ||
    fail "of six samples, $refused refused and $waiting told to wait, want 2 and 3: $(cat "$T"/a?.err)"

# --- case 3: the clients go; so does their work.
for i in 1 2 3 4 5 6; do kill -9 "${spid[$i]}" 2>/dev/null || true; done
wait_for 10 user_work 0 0
# The running one's line (between tokens, or during its set-up), not a
# waiting one's "cancelled before it started".
cancelled_logged() {
    gptd_log | grep "sample for uid [0-9]*: " | grep -v "cancelled before it started" | has .
}
wait_for 10 cancelled_logged
c0=$(cpu_ticks "$GPTD_PID")
sleep 2 # a measured interval, not a wait for an event
c1=$(cpu_ticks "$GPTD_PID")
hz=$(getconf CLK_TCK)
((c1 - c0 < hz / 5)) || fail "gptd used $(((c1 - c0) * 100 / hz))% CPU for 2 s after the clients went"
echo "case 3: work cancelled; gptd used $(((c1 - c0) * 1000 / hz)) ms of CPU in the next 2 s"

# --- the user's own snapshot crafted with valid checksums and a header
# whose model is smaller than the weights it carries (gptd used to read
# them past the model's buffer and die): refused, naming both counts.
snap=$T/state/jobs/$a/snapshots/snap-000000000001.gpts
cp -p "$snap" "$T/snap.orig"
python3 - "$snap" <<'PY'
import struct, sys, zlib
path = sys.argv[1]
b = bytearray(open(path, "rb").read())
hlen = struct.unpack_from("<I", b, 12)[0]
struct.pack_into("<i", b, 16, 1)  # n_layer 4 -> 1; n_params and the file stay
struct.pack_into("<I", b, hlen - 4, zlib.crc32(bytes(b[:hlen - 4])))
struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])))
open(path, "wb").write(b)
PY
out=$(as_user sample "$a" --prompt "the" --tokens 4 2>&1) && fail "a crafted snapshot was sampled: $out"
has "corrupt: .*its header's model (n_layer 1, .*) has [0-9]* parameters, the file [0-9]*" <<<"$out" ||
    fail "the crafted snapshot's refusal: $out"
"$GPTCTL" status >/dev/null || fail "gptd died sampling a crafted snapshot"
echo "crafted snapshot: $out"
cp -p "$T/snap.orig" "$snap"

# --- a request whose memory passes the user's bound is refused before it allocates.
kill -TERM "$GPTD_PID"
wait "$GPTD_PID"
start_gptd --socket-mode 0666 --data-roots "$T/data" --user-work-max-memory 1M
out=$(as_user sample "$a" --prompt "the" --tokens 4 2>&1) && fail "a sample over the bound ran: $out"
has "limit: sampling this model needs about .* MiB.*at most 1.0 MiB (user_work_max_memory)" <<<"$out" ||
    fail "the sample's refusal: $out"
out=$("$GPTCTL" export "$w" --format llmc -o "$T/out/w.bin" 2>&1) && fail "an export over the bound ran"
has "limit: exporting this model needs about .*(user_work_max_memory)" <<<"$out" ||
    fail "the export's refusal: $out"
[[ ! -e $T/out/w.bin ]] || fail "the refused export wrote a file"
kill -TERM "$GPTD_PID"
wait "$GPTD_PID"

# --- case 4: one SIGTERM while user work of every kind runs.
start_gptd --socket-mode 0666 --data-roots "$T/data" --user-work-threads 4 --user-work-per-uid 2
tiny_job "$T/long.json" 1000000 5 0 # snapshots only at the stop
l=$("$GPTCTL" submit "$T/long.json")
wait_for 60 job_step_at_least "$l" 5
for i in 1 2 3; do
    as_user_bg sample "$a" --prompt "the" --tokens 2048 >"$T/s$i.out" 2>"$T/s$i.err" &
    spid[$i]=$!
    PIDS+=("${spid[$i]}")
done
wait_for 20 user_work 2 1
"$GPTCTL" submit "$T/wide.json" --resume-from "$w" trainer.max_steps=2 >"$T/copy.out" 2>&1 &
copy_pid=$!
PIDS+=("$copy_pid")
"$GPTCTL" export "$w" --format hf -o "$T/out/hf" >"$T/export.out" 2>&1 &
export_pid=$!
PIDS+=("$export_pid")
# All four run (the export reads or writes, the copy reads or writes; a
# cancelled export removes what it wrote either way).
wait_for 60 user_work 4 1
t0=$SECONDS
kill -TERM "$GPTD_PID"
deadline=$((SECONDS + EXIT_BOUND_S))
while kill -0 "$GPTD_PID" 2>/dev/null; do
    ((SECONDS < deadline)) || fail "gptd still alive ${EXIT_BOUND_S} s after SIGTERM with user work running"
    sleep 0.05
done
set +e
wait "$GPTD_PID"
rc=$?
set -e
((rc == 0)) || fail "gptd exited $rc after SIGTERM"
echo "case 4: gptd exited $((SECONDS - t0)) s after SIGTERM"
for i in 1 2 3; do wait "${spid[$i]}" 2>/dev/null || true; done
wait "$export_pid" 2>/dev/null || true
wait "$copy_pid" 2>/dev/null || true
for i in 1 2 3; do
    has "gptd is stopping" "$T/s$i.err" || fail "sample $i was not told: $(cat "$T/s$i.err")"
done
# The waiting one never started; the two running ones stopped where they
# were (between tokens, or in their model's set-up).
(($(grep -l "gptd is stopping (cancelled before it started)" "$T"/s?.err | wc -l) == 1 &&
    $(grep -L "cancelled before it started" "$T"/s?.err | wc -l) == 2)) ||
    fail "want one sample never started and two cancelled while running: $(cat "$T"/s?.err)"
has "gptd is stopping (the export .*was cancelled)" "$T/export.out" ||
    fail "the export was not cancelled: $(cat "$T/export.out")"
[[ ! -e $T/out/hf ]] && ! compgen -G "$T/out/.hf.gptd-export-*" >/dev/null ||
    fail "the cancelled export left files: $(ls -a "$T/out")"
state=$("$ITEST" sql "$T/state/gptd.db" "SELECT state || ' ' || resume FROM jobs WHERE id = $l")
[[ $state == "queued 1" ]] || fail "the running job is \"$state\", want queued to resume"
snap=$("$ITEST" sql "$T/state/gptd.db" \
    "SELECT count(*) FROM events WHERE job_id = $l AND kind = 'snapshot'")
((snap >= 1)) || fail "no snapshot of the running job at the stop"
# The copy: answered queued with its snapshot recorded, or refused with
# nothing recorded.
copies=$("$ITEST" sql "$T/state/gptd.db" "SELECT id FROM jobs WHERE id > $l")
if has "gptd is stopping" "$T/copy.out"; then
    [[ -z $copies ]] || fail "a refused copy recorded job $copies"
else
    has "continues job $w from its snapshot" "$T/copy.out" || fail "the copy said: $(cat "$T/copy.out")"
    [[ $("$ITEST" sql "$T/state/gptd.db" "SELECT count(*) FROM snapshots WHERE job_id = $copies") \
        -ge 1 ]] || fail "the copy's job $copies has no snapshot"
fi
echo "case 4: copy: $(cat "$T/copy.out"); export: $(cat "$T/export.out")"
echo "daemon_userwork: ok"
