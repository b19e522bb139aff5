#!/usr/bin/env bash
# The option table drives everything: etc/gptd.conf is exactly what gptd
# generates from it; a config file and flags are applied (flags win); bad
# options are exit 2; SIGHUP reloads reloadable options and only warns
# about the others.
source "$(dirname "$0")/daemon_common.sh"

"$GPTD" --print-default-config | diff -u "$SRC/etc/gptd.conf" - ||
    fail "etc/gptd.conf differs from gptd --print-default-config (regenerate it)"
"$GPTD" --config "$SRC/etc/gptd.conf" --check-config || fail "etc/gptd.conf does not parse"

cat >"$T/a.conf" <<EOF
# comment
workers = 3          # trailing comment
max-clients = 7
log_level = info
EOF
out=$("$GPTD" --config "$T/a.conf" --max-clients 9 --state-dir "$T/s" --print-config)
grep -qx "workers = 3" <<<"$out" || fail "the file's value was not applied: $out"
grep -qx "max_clients = 9" <<<"$out" || fail "the flag did not win: $out"

set +e
"$GPTD" --no-such-option 1 >/dev/null 2>&1; rc1=$?
"$GPTD" --workers 0 --check-config >/dev/null 2>&1; rc2=$?
echo "bogus line" >"$T/bad.conf"
out=$("$GPTD" --config "$T/bad.conf" --check-config 2>&1); rc3=$?
set -e
[[ $rc1 -eq 2 && $rc2 -eq 2 && $rc3 -eq 2 ]] || fail "bad options: rc $rc1 $rc2 $rc3, want 2"
[[ $out == *"bad.conf:1"* ]] || fail "the error does not name file:line: $out"

# SIGHUP: workers (reloadable) changes; socket_mode (not reloadable) warns.
cp "$T/a.conf" "$T/live.conf"
start_gptd --config "$T/live.conf"
"$GPTCTL" nodes | has " 3 " || fail "workers = 3 not in effect"
sed -i 's/workers = 3/workers = 2/' "$T/live.conf"
echo "socket_mode = 0600" >>"$T/live.conf"
kill -HUP "$GPTD_PID"
wait_for 20 bash -c "\"$GPTCTL\" nodes | grep -q ' 2 '"
grep -q "socket_mode changed in the configuration but needs a restart" "$T"/gptd.0.log ||
    fail "no warning for a non-reloadable option"
echo "daemon_config: ok"
