#!/usr/bin/env bash
# The Debian package end to end: cpack the .deb from this build, install it
# with apt-get, check what it installed (user, conffile, unit, man pages),
# run the installed /usr/sbin/gptd the way the unit's ExecStart does (as the
# user gptd, the socket in $RUNTIME_DIRECTORY) but on a private state
# directory, train a tiny job with the installed /usr/bin/gptctl, then
# remove and purge the package and check that its files are gone.
#
#   deb.sh BUILD_DIR SOURCE_DIR
#
# Needs root and changes the host while it runs: skipped (77) when not
# root, when no dpkg/apt-get, or when a gptd package is already installed
# (it would be replaced). A gptd user or /var/lib/gptd the test created is
# removed again. Runs under a lock so two runs do not race for the package.
set -euo pipefail

BUILD=$1
SRC=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # has, fail: before the checks that use them
skip() {
    echo "SKIP: $*"
    exit 77
}
[[ $(id -u) -eq 0 ]] || skip "needs root"
command -v dpkg >/dev/null && command -v apt-get >/dev/null && command -v cpack >/dev/null ||
    skip "needs dpkg, apt-get and cpack"

exec 9>/var/lock/gptd-deb-test.lock
flock -w 600 9 || skip "another package test holds /var/lock/gptd-deb-test.lock"
if dpkg-query -W -f='${Status}' gptd 2>/dev/null | has "installed"; then
    skip "a gptd package is installed already"
fi

T=$(mktemp -d /tmp/gptd-deb.XXXXXX)
chmod 755 "$T" # the user gptd must reach its state directory and socket in here
PIDS=()
had_user=0
had_state=0
getent passwd gptd >/dev/null && had_user=1
[[ -e /var/lib/gptd ]] && had_state=1
apt_opts=(-o DPkg::Lock::Timeout=600 -y -q --no-install-recommends)

cleanup() {
    local rc=$?
    for p in "${PIDS[@]}"; do
        { kill -9 "$p" && wait "$p"; } 2>/dev/null || true
    done
    if [[ $rc -ne 0 ]]; then
        echo "--- FAILED (rc $rc)" >&2
        tail -n 30 "$T"/*.log >&2 2>/dev/null || true
    fi
    if dpkg-query -W -f='${Status}' gptd 2>/dev/null | has "installed\|config-files"; then
        DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" purge gptd >/dev/null 2>&1 ||
            dpkg --purge gptd >/dev/null 2>&1 || true
    fi
    if [[ $had_user -eq 0 ]] && getent passwd gptd >/dev/null; then
        userdel gptd 2>/dev/null || true
        getent group gptd >/dev/null && groupdel gptd 2>/dev/null || true
    fi
    [[ $had_state -eq 1 ]] || rm -rf /var/lib/gptd
    rm -rf "$T"
    exit $rc
}
trap cleanup EXIT

# --- build the package from this build directory.
cpack -G DEB -B "$T/pkg" --config "$BUILD/CPackConfig.cmake" >"$T/cpack.log" 2>&1 ||
    fail "cpack: $(tail -n 20 "$T/cpack.log")"
deb=$(ls "$T"/pkg/gptd_*.deb)
dpkg-deb --info "$deb" >"$T/info.txt"
grep -q '^ Depends:.*libuv1' "$T/info.txt" || fail "no libuv1 in Depends"
if grep -q '^ Depends:.*\(cuda\|cublas\|nccl\|nvidia\)' "$T/info.txt"; then
    fail "the package depends on CUDA; it must install on CPU hosts"
fi
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | has -x /etc/gptd/gptd.conf ||
    fail "/etc/gptd/gptd.conf is not a conffile"

# --- install: every dependency must resolve from what this host has.
DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install "$deb" >"$T/install.log" 2>&1 ||
    fail "apt-get install: $(tail -n 20 "$T/install.log")"
for f in /usr/sbin/gptd /usr/bin/gptctl /usr/lib/systemd/system/gptd.service \
    /usr/lib/sysusers.d/gptd.conf /usr/lib/tmpfiles.d/gptd.conf /etc/gptd/gptd.conf \
    /usr/share/gptd/jobs/adder.json /usr/share/bash-completion/completions/gptctl \
    /usr/share/bash-completion/completions/gptd \
    /usr/share/zsh/vendor-completions/_gptd \
    /usr/share/man/man8/gptd.8.gz /usr/share/man/man1/gptctl.1.gz \
    /usr/share/man/man5/gptd.conf.5.gz /usr/share/man/man5/gptd-job.5.gz \
    /usr/share/man/man5/gptd-snapshot.5.gz; do
    [[ -e $f ]] || fail "$f was not installed"
done
getent passwd gptd >/dev/null || fail "postinst did not create the user gptd"
[[ -d /var/lib/gptd ]] || fail "postinst did not create /var/lib/gptd"
[[ $(stat -c %U /var/lib/gptd) == gptd ]] || fail "/var/lib/gptd is not owned by gptd"
grep -qx 'ExecStart=/usr/sbin/gptd' /usr/lib/systemd/system/gptd.service ||
    fail "the installed unit does not start /usr/sbin/gptd"
if command -v systemd-analyze >/dev/null; then
    out=$(systemd-analyze verify --man=no /usr/lib/systemd/system/gptd.service 2>&1) ||
        fail "verify the installed unit: $out"
    [[ -z $out ]] || fail "verify the installed unit: $out"
fi
/usr/sbin/gptd --check-config || fail "the shipped /etc/gptd/gptd.conf does not load"
MANWIDTH=80 man -P cat gptd-job 2>/dev/null | has "model.n_layer" || fail "man gptd-job"
for c in gptctl gptd; do
    bash -n /usr/share/bash-completion/completions/$c || fail "the $c completion script does not parse"
done
if command -v zsh >/dev/null; then
    zsh -n /usr/share/zsh/vendor-completions/_gptd || fail "the zsh completion does not parse"
    # found by zsh's default fpath, for both programs
    zsh -fc 'autoload -Uz compinit && compinit -u -D && [[ $_comps[gptctl] == _gptd && $_comps[gptd] == _gptd ]]' ||
        fail "zsh's compinit does not bind _gptd to gptd and gptctl"
fi

# --- run it as the unit would: user gptd, socket from $RUNTIME_DIRECTORY,
# /etc/gptd/gptd.conf read; only the state directory is private.
install -d -o gptd -g gptd -m 0750 "$T/run" "$T/state"
# setpriv execs gptd itself (runuser would stay as its parent), so the
# signals below reach gptd as systemd's would; the capabilities are the
# unit's (CapabilityBoundingSet=, AmbientCapabilities=): root's job below is
# run with root's file-system identity.
caps=+setuid,+setgid,+chown
setpriv --reuid=gptd --regid=gptd --init-groups --bounding-set=-all,$caps --inh-caps=$caps \
    --ambient-caps=$caps -- env RUNTIME_DIRECTORY="$T/run" \
    /usr/sbin/gptd --state-dir "$T/state" --log-level debug 2>"$T/gptd.log" &
GPTD_PID=$!
PIDS+=("$GPTD_PID")
export GPTD_SOCKET=$T/run/gptd.sock
wait_for 30 /usr/bin/gptctl status

cat >"$T/job.json" <<EOF
{"name": "deb-adder",
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 6, "vocab_size": 10},
 "data": {"kind": "synthetic", "task": "addition", "digits": 2},
 "trainer": {"max_steps": 20, "micro_batch": 8, "global_batch": 8, "log_every": 5,
             "eval_every": 0, "eval_batches": 1, "threads": 1},
 "optimizer": {"lr": 1e-3, "warmup_steps": 0},
 "snapshot": {"every": 10}}
EOF
id=$(/usr/bin/gptctl submit "$T/job.json")
[[ $id =~ ^[0-9]+$ ]] || fail "submit printed \"$id\""
job_done() { /usr/bin/gptctl --json status "$id" | has '"state":"completed"'; }
wait_for 120 job_done
/usr/bin/gptctl --json logs "$id" >"$T/logs.json"
grep -q '"type":"metric"' "$T/logs.json" || fail "no metrics logged"
/usr/bin/gptctl snapshots "$id" | has "snap-" || fail "no snapshot"
[[ $(stat -c %U "$T/state/gptd.db") == gptd ]] || fail "the database is not owned by gptd"

kill -TERM "$GPTD_PID"
gone() { ! kill -0 "$GPTD_PID" 2>/dev/null; }
wait_for 60 gone
rc=0
wait "$GPTD_PID" || rc=$?
[[ $rc -eq 0 ]] || fail "the installed gptd exited $rc on SIGTERM"

# --- remove (conffile kept), then purge (conffile gone).
DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" remove gptd >"$T/remove.log" 2>&1 ||
    fail "apt-get remove: $(tail -n 20 "$T/remove.log")"
for f in /usr/sbin/gptd /usr/bin/gptctl /usr/lib/systemd/system/gptd.service \
    /usr/share/man/man8/gptd.8.gz /usr/share/gptd/jobs/adder.json; do
    [[ ! -e $f ]] || fail "$f is still there after remove"
done
[[ -e /etc/gptd/gptd.conf ]] || fail "remove deleted the conffile (only purge should)"
dpkg --purge gptd >"$T/purge.log" 2>&1 || fail "dpkg --purge: $(cat "$T/purge.log")"
[[ ! -e /etc/gptd/gptd.conf ]] || fail "/etc/gptd/gptd.conf is still there after purge"
echo "deb: ok ($(basename "$deb"))"
