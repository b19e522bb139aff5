#!/usr/bin/env bash
# Exports are the user's files, and leave nothing behind (issue 36, cases 9
# and 11), as root with a second user who owns the job:
#  - `gptctl export` honours the client's umask (077: 0600 files and 0700
#    folders, 022: 0644/0755, 027: 0640/0750), hf and gguf alike; a request
#    without a umask (an older gptctl) gets the snapshot's 0600/0700;
#    `gptd export` run by the user honours the user's umask;
#  - an export that fails while writing (a full file system) leaves no
#    temporary and no record;
#  - gptd killed with -9 while it writes an export leaves the temporary;
#    the next start removes it, and removes the hf folder and the link that
#    other records name, while a root-owned file with the recorded prefix,
#    the user's own look-alike (another id) and the link's target stay.
#   export_private.sh GPTD GPTCTL ITEST SRC RENAME_KILL
source "$(dirname "$0")/daemon_common.sh"
RENAME_KILL=${5:?usage: export_private.sh GPTD GPTCTL ITEST SRC RENAME_KILL}
make_test_user gptdexp
S=$T/state
O=$T/out
mkdir -p "$O"
chown "$U" "$O"
chmod 0755 "$O"
cp "$ITEST" "$T/bin/itest_client"
cp "$GPTD" "$T/bin/gptd"
chmod 0755 "$T/bin/itest_client" "$T/bin/gptd"
mode() { stat -c '%a' "$1"; }
ex() { # ex UMASK ARGS...: gptctl export as the user under UMASK
    local m=$1
    shift
    runuser -u "$U" -- sh -c "umask $m; exec env GPTD_SOCKET='$SOCK' '$T/bin/gptctl' export \"\$@\"" \
        sh "$@"
}

start_gptd --socket-mode 0666
tiny_job "$T/job.json" 20 5 20
chmod 0644 "$T/job.json"
id=$(as_user submit "$T/job.json")
wait_for 60 job_is "$id" completed

# --- case 9: the client's umask.
for m in 077:600:700 022:644:755 027:640:750; do
    IFS=: read -r um fm dm <<<"$m"
    ex "$um" "$id" --format gguf -o "$O/m$um.gguf" >/dev/null || fail "export under umask $um"
    [[ $(mode "$O/m$um.gguf") == "$fm" ]] || fail "umask $um: the gguf file is $(mode "$O/m$um.gguf"), not $fm"
    ex "$um" "$id" --format hf -o "$O/hf$um" >/dev/null || fail "hf export under umask $um"
    [[ $(mode "$O/hf$um") == "$dm" ]] || fail "umask $um: the hf folder is $(mode "$O/hf$um"), not $dm"
    for f in config.json model.safetensors; do
        [[ $(mode "$O/hf$um/$f") == "$fm" ]] || fail "umask $um: hf $f is $(mode "$O/hf$um/$f"), not $fm"
        [[ $(stat -c %U "$O/hf$um/$f") == "$U" ]] || fail "hf $f is not the user's"
    done
done
# A request without a umask: the snapshot's modes.
echo "{\"id\":1,\"op\":\"export\",\"job\":$id,\"format\":\"llmc\",\"output\":\"$O/old.bin\"}" |
    runuser -u "$U" -- "$T/bin/itest_client" send "$SOCK" >"$T/old.out"
grep -q '"ok":true' "$T/old.out" || fail "an export without umask: $(cat "$T/old.out")"
[[ $(mode "$O/old.bin") == 600 ]] || fail "no umask sent: $(mode "$O/old.bin"), not 600"
echo "{\"id\":1,\"op\":\"export\",\"job\":$id,\"format\":\"hf\",\"output\":\"$O/oldhf\"}" |
    runuser -u "$U" -- "$T/bin/itest_client" send "$SOCK" >"$T/old.out"
[[ $(mode "$O/oldhf") == 700 && $(mode "$O/oldhf/config.json") == 600 ]] ||
    fail "no umask sent, hf: $(mode "$O/oldhf") $(mode "$O/oldhf/config.json")"
# gptd export, offline, as the user.
snap=$(ls "$S/jobs/$id/snapshots/"*.gpts | tail -n1)
runuser -u "$U" -- sh -c "umask 077; exec '$T/bin/gptd' export '$snap' --format llmc -o '$O/off.bin'" \
    >/dev/null || fail "gptd export as the user"
[[ $(mode "$O/off.bin") == 600 ]] || fail "gptd export under umask 077: $(mode "$O/off.bin")"
echo "umask: ok"

# --- case 11: a failed export leaves nothing.
mkdir -p "$T/small"
mount -t tmpfs -o size=48k,mode=0755 tmpfs "$T/small" || fail "cannot mount a small tmpfs"
trap 'rc=$?; set +e; umount "$T/small" 2>/dev/null; drop_test_user; (exit $rc); cleanup' EXIT
chown "$U" "$T/small"
for f in gguf hf; do
    ex 022 "$id" --format $f -o "$T/small/full.$f" >"$T/full.out" 2>&1 &&
        fail "an export into a full file system succeeded"
    grep -qi "space" "$T/full.out" || fail "the $f failure does not say why: $(cat "$T/full.out")"
    [[ -z $(ls -A "$T/small") ]] || fail "a failed $f export left: $(ls -A "$T/small")"
done
[[ -z $(ls -A "$S/exports") ]] || fail "a failed export left its record: $(ls -A "$S/exports")"
umount "$T/small"
echo "failed exports leave nothing: ok"

# --- case 11: kill -9 while an export writes (a ~50 MB model), and records
# naming a folder and a link.
big_job "$T/mid.json" 512
chmod 0644 "$T/mid.json"
mid=$(as_user submit "$T/mid.json")
wait_for 120 job_is "$mid" completed
# gptd runs under tests/tools/rename_kill, which kills it (as kill -9 would)
# just before the export renames its finished temporary into place: the
# temporary is left exactly as a kill at that moment leaves it, whatever
# the machine's speed.
kill "$GPTD_PID"
wait "$GPTD_PID" 2>/dev/null || true
caught=mid1.gguf
LD_PRELOAD=$RENAME_KILL GPTD_TEST_KILL_BEFORE_RENAME=/$caught start_gptd --socket-mode 0666
ex 022 "$mid" --format gguf -o "$O/$caught" >"$T/mid.out" 2>&1 &
expid=$!
wait "$GPTD_PID" 2>/dev/null || true
wait "$expid" 2>/dev/null || true
tmp=$(ls -A "$O" | grep "^\.$caught\.gptd-export-" || true)
[[ -n $tmp ]] || fail "no temporary left by the killed export: $(ls -A "$O")"
[[ ! -e $O/$caught ]] || fail "the killed export finished anyway"
[[ -n $(ls -A "$S/exports") ]] || fail "no record of the killed export"
echo "killed during the export: $tmp left"
# Beside it: a root-owned file with the recorded prefix, and the user's own
# look-alike under another id: neither is gptd's temporary.
prefix=${tmp%??????}
echo root >"$O/${prefix}zzzzzz"
echo mine >"$O/.mid.gguf.gptd-export-0123456789abcdef-aaaaaa"
chown "$U" "$O/.mid.gguf.gptd-export-0123456789abcdef-aaaaaa"
# Two more records, as a killed gptd leaves them: an hf folder, and a name
# the user made a link to root's file.
mkdir -p "$O/.hf.gptd-export-00000000000000aa-bbbbbb"
touch "$O/.hf.gptd-export-00000000000000aa-bbbbbb/config.json" \
    "$O/.hf.gptd-export-00000000000000aa-bbbbbb/.model.safetensors.tmp-cccccc"
chown -R "$U" "$O/.hf.gptd-export-00000000000000aa-bbbbbb"
printf 'uid %s\nprefix .hf.gptd-export-00000000000000aa-\npath %s/hf' "$(id -u "$U")" "$O" \
    >"$S/exports/00000000000000aa"
echo secret >"$T/rootfile"
ln -s "$T/rootfile" "$O/.ln.gptd-export-00000000000000bb-dddddd"
chown -h "$U" "$O/.ln.gptd-export-00000000000000bb-dddddd"
printf 'uid %s\nprefix .ln.gptd-export-00000000000000bb-\npath %s/ln' "$(id -u "$U")" "$O" \
    >"$S/exports/00000000000000bb"

start_gptd --socket-mode 0666
[[ ! -e $O/$tmp ]] || fail "the killed export's temporary $tmp is still there"
[[ ! -e $O/.hf.gptd-export-00000000000000aa-bbbbbb ]] || fail "the recorded hf folder is still there"
[[ ! -L $O/.ln.gptd-export-00000000000000bb-dddddd ]] || fail "the recorded link is still there"
[[ $(cat "$T/rootfile") == secret ]] || fail "the link's target was touched"
[[ $(cat "$O/${prefix}zzzzzz") == root ]] || fail "root's file with the prefix was removed"
[[ -f $O/.mid.gguf.gptd-export-0123456789abcdef-aaaaaa ]] || fail "the user's look-alike was removed"
[[ -z $(ls -A "$S/exports") ]] || fail "records left: $(ls -A "$S/exports")"
cat "$T"/gptd.*.log | grep -q "removed $O/$tmp, the temporary of an export" ||
    fail "the removal is not logged"
# And the export works again.
ex 022 "$mid" --format gguf -o "$O/mid.gguf" >/dev/null || fail "the export after the restart"
[[ -z $(ls -A "$S/exports") ]] || fail "a finished export left its record"
echo "export_private: ok"
