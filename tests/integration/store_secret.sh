#!/usr/bin/env bash
# A cluster always has a secret (issue 14):
#  - `gptd run --world 2 --rdzv` without --secret-file still works: both
#    ranks use the per-user ~/.cache/gptd/run.secret, made once (mode 0600,
#    64 hex digits) and reused by the next run;
#  - a secret file shorter than 16 bytes is refused at start with an error
#    naming the file and the minimum, by `gptd run` and by the daemon;
#  - a coordinator started with --rdzv and no secret file makes
#    STATE_DIR/cluster.secret (0600); a member without the secret is refused,
#    a member with a copy joins.
# usage: store_secret.sh GPTD GPTCTL JOB
source "$(dirname "$0")/run_common.sh"
GPTD=$1 GPTCTL=$2 JOB=$3
export HOME=$T/home # the per-user secret goes here, not in the real home
mkdir -p "$HOME"
over=(trainer.max_steps=3 snapshot.every=0)

# --- gptd run, two ranks, no --secret-file.
port=$(free_port)
"$GPTD" run "$JOB" --json --snapshot-dir "$T/r0" --world 2 --rank 0 --rdzv 127.0.0.1:$port \
    "${over[@]}" >"$T/r0.log" 2>"$T/r0.err" &
PIDS+=($!)
"$GPTD" run "$JOB" --json --snapshot-dir "$T/r1" --world 2 --rank 1 --rdzv 127.0.0.1:$port \
    "${over[@]}" >"$T/r1.log" 2>"$T/r1.err" || fail "rank 1 failed: $(tail -n3 "$T/r1.err")"
wait "${PIDS[0]}" || fail "rank 0 failed: $(tail -n3 "$T/r0.err")"
[[ $(last_metric "$T/r0.log" step) == 3 && $(last_metric "$T/r0.log" world_size) == 2 ]] ||
    fail "the world of 2 did not reach step 3"
sec=$HOME/.cache/gptd/run.secret
[[ -f $sec && $(stat -c %a "$sec") == 600 && $(stat -c %a "$HOME/.cache/gptd") == 700 ]] ||
    fail "no private per-user secret: $(ls -la "$HOME/.cache/gptd" 2>&1)"
grep -qxE '[0-9a-f]{64}' "$sec" || fail "the per-user secret is not 64 hex digits"
before=$(cat "$sec")
port=$(free_port)
"$GPTD" run "$JOB" --json --snapshot-dir "$T/s0" --world 1 --rank 0 --rdzv 127.0.0.1:$port \
    "${over[@]}" >"$T/s0.log" 2>"$T/s0.err" || fail "world 1 failed: $(tail -n3 "$T/s0.err")"
[[ $(cat "$sec") == "$before" ]] || fail "the per-user secret was not reused"

# --- a short secret file is refused, naming the file and the minimum.
printf 'abc\n' >"$T/short"
chmod 600 "$T/short"
set +e
"$GPTD" run "$JOB" --snapshot-dir "$T/short-run" --world 1 --rank 0 --rdzv 127.0.0.1:$port \
    --secret-file "$T/short" \
    "${over[@]}" >/dev/null 2>"$T/short.err"
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "gptd run with a 3-byte secret: rc $rc"
grep -q "$T/short.*3 bytes, shorter than the minimum of 16 bytes" "$T/short.err" ||
    fail "unclear error for a short secret: $(cat "$T/short.err")"
set +e
timeout 20 "$GPTD" --state-dir "$T/d0" --socket "$T/d0.sock" --coordinator \
    --rdzv 127.0.0.1:$(free_port) --secret-file "$T/short" >"$T/d0.log" 2>&1
rc=$?
set -e
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "gptd with a 3-byte secret: rc $rc"
grep -q "$T/short.*shorter than the minimum of 16 bytes" "$T/d0.log" ||
    fail "the daemon's error does not name the short secret: $(tail -n3 "$T/d0.log")"

# --- a coordinator with an endpoint and no secret file makes one.
rdzv=127.0.0.1:$(free_port)
"$GPTD" --state-dir "$T/c" --socket "$T/c.sock" --node-id c --coordinator --rdzv "$rdzv" \
    --log-level debug >>"$T/c.log" 2>&1 &
PIDS+=($!)
wait_for 20 env GPTD_SOCKET="$T/c.sock" "$GPTCTL" status
[[ -f $T/c/cluster.secret && $(stat -c %a "$T/c/cluster.secret") == 600 ]] ||
    fail "the coordinator made no private cluster.secret"
"$GPTD" --state-dir "$T/m1" --socket "$T/m1.sock" --node-id m1 --rdzv "$rdzv" \
    --log-level debug >>"$T/m1.log" 2>&1 &
PIDS+=($!)
wait_for 20 grep -q "refused this node: it has no cluster secret" "$T/m1.log"
kill "${PIDS[-1]}"
cp "$T/c/cluster.secret" "$T/copy"
"$GPTD" --state-dir "$T/m2" --socket "$T/m2.sock" --node-id m2 --rdzv "$rdzv" \
    --secret-file "$T/copy" --log-level debug >>"$T/m2.log" 2>&1 &
PIDS+=($!)
wait_for 20 bash -c "GPTD_SOCKET='$T/c.sock' '$GPTCTL' --json nodes | grep -q '\"node\":\"m2\"'"
if GPTD_SOCKET="$T/c.sock" "$GPTCTL" --json nodes | has '"node":"m1"'; then
    fail "the member without the secret is listed"
fi
grep -q "wrong or missing cluster secret" "$T/c.log" ||
    fail "the coordinator did not log the refused member"
echo "store_secret: ok"
