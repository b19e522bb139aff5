#!/usr/bin/env bash
# systemd/gptd.service as systemd reads it: `systemd-analyze verify` on a
# copy whose ExecStart names the built gptd (verify checks the binary
# exists) must print nothing at all (unknown keys are only warnings, exit
# 0); its offline security exposure must stay low. The sysusers and
# tmpfiles snippets are applied to a scratch root.
#
#   unit_verify.sh GPTD SOURCE_DIR
set -euo pipefail

GPTD=$(realpath "$1")
SRC=$2
command -v systemd-analyze >/dev/null || { echo "SKIP: no systemd-analyze"; exit 77; }

T=$(mktemp -d /tmp/gptd-unit.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

unit=$SRC/systemd/gptd.service
grep -q '^ExecStart=/usr/sbin/gptd$' "$unit" || fail "ExecStart is not /usr/sbin/gptd (the package path)"
sed "s|^ExecStart=/usr/sbin/gptd|ExecStart=$GPTD|" "$unit" >"$T/gptd.service"

out=$(cd "$T" && systemd-analyze verify --man=no ./gptd.service 2>&1) || fail "verify: $out"
[[ -z $out ]] || fail "verify printed warnings: $out"

sec=$(cd "$T" && systemd-analyze security --offline=yes ./gptd.service 2>&1) || true
score=$(grep -o 'Overall exposure level for gptd.service: [0-9.]*' <<<"$sec" | awk '{print $NF}')
[[ -n $score ]] || fail "no exposure score: $sec"
echo "systemd-analyze security --offline=yes: exposure $score"
awk -v s="$score" 'BEGIN { exit !(s <= 2.5) }' || fail "exposure $score is above 2.5"

# sysusers into a scratch root, then tmpfiles resolving the new user there.
mkdir -p "$T/root/etc"
systemd-sysusers --root="$T/root" "$SRC/systemd/gptd.sysusers" 2>"$T/sysusers.err" ||
    fail "systemd-sysusers: $(cat "$T/sysusers.err")"
grep -q '^gptd:x:[0-9]*:[0-9]*:.*:/var/lib/gptd:' "$T/root/etc/passwd" || fail "no gptd user"
grep -q '^gptd:x:' "$T/root/etc/group" || fail "no gptd group"
systemd-tmpfiles --root="$T/root" --create "$SRC/systemd/gptd.tmpfiles" 2>"$T/tmpfiles.err" ||
    fail "systemd-tmpfiles: $(cat "$T/tmpfiles.err")"
[[ -d $T/root/var/lib/gptd && -d $T/root/run/gptd ]] || fail "tmpfiles created no directories"
echo "unit_verify: ok"
