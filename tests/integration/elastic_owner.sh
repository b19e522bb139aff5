#!/usr/bin/env bash
# Snapshot folders on every node belong to their job (issue 14, "Snapshots
# belong to their job"), with two real gptd (coordinator n1, member n2):
#  - the round carries the job's token: the member's own folder (its state
#    directory's jobs/N/snapshots) gets an owner marker with the same token
#    and job as the coordinator's, and every snapshot the member writes
#    records that token (header offset 392);
#  - with a snapshot.dir, the coordinator writes into DIR and each member
#    claims its subfolder DIR/NODE the same way;
#  - a member subfolder that another job's marker owns is neither read nor
#    written: the job fails naming snapshot.dir and the owner, and the
#    folder is left exactly as it was.
source "$(dirname "$0")/elastic_common.sh"

COORD=n1
start_node n1 --coordinator
start_node n2

tok() { sed -n 's/^token //p' "$1/.gptd-owner"; }
# snap_tokens DIR: the owner token (hex) of every snapshot file in DIR.
snap_tokens() {
    /usr/bin/python3 - "$1" <<'PY'
import glob, struct, sys
for f in sorted(glob.glob(sys.argv[1] + "/snap-*.gpts")):
    with open(f, "rb") as h:
        print("%016x" % struct.unpack_from("<Q", h.read(400), 392)[0])
PY
}
# owned_by DIR TOKEN JOB: DIR's marker names TOKEN and JOB, and DIR holds
# snapshots, each recording TOKEN.
owned_by() {
    [[ $(tok "$1") == "$2" ]] || fail "$1: marker token '$(tok "$1")', want '$2'"
    grep -qx "job $3" "$1/.gptd-owner" || fail "$1: marker does not name job $3"
    local t n=0
    while read -r t; do
        [[ $t == "$2" ]] || fail "$1: a snapshot records token $t, want $2"
        n=$((n + 1))
    done < <(snap_tokens "$1")
    ((n > 0)) || fail "$1 holds no snapshot: $(ls -a "$1")"
}

# --- the default folders: the member's state directory.
elastic_job "$T/job.json" 40 "2:2" 10
id=$(ctl n1 submit "$T/job.json")
wait_for 120 job_is n1 "$id" completed
c=$(tok "$T/n1/jobs/$id/snapshots")
[[ $c =~ ^[0-9a-f]{16}$ && $c != 0000000000000000 ]] || fail "coordinator marker token '$c'"
owned_by "$T/n2/jobs/$id/snapshots" "$c" "$id"
echo "member n2's default folder is job $id's (token $c)"

# --- a snapshot.dir: one subfolder per node, each claimed.
mkdir -p "$T/snaps"
sed 's|"snapshot": {|"snapshot": {"dir": "'"$T"'/snaps/two", |' "$T/job.json" >"$T/two.json"
two=$(ctl n1 submit "$T/two.json")
wait_for 120 job_is n1 "$two" completed
c2=$(tok "$T/snaps/two")
[[ -n $c2 && $c2 != "$c" ]] || fail "job $two's folder token '$c2'"
owned_by "$T/snaps/two" "$c2" "$two"
owned_by "$T/snaps/two/n2" "$c2" "$two"
echo "snapshot.dir: the coordinator's DIR and member n2's DIR/n2 are job $two's"

# --- the member's subfolder is another job's: refused at use.
mkdir -p "$T/snaps/three/n2"
printf 'gptd-snapshot-owner 1\ntoken %016x\njob 999\nuid 0\n' 4242 >"$T/snaps/three/n2/.gptd-owner"
before=$(cd "$T/snaps/three/n2" && find . -printf "%p %s %m %T@\\n" | sort | md5sum)
sed -e 's|"snapshot": {|"snapshot": {"dir": "'"$T"'/snaps/three", |' \
    -e 's|"max_restarts": 100|"max_restarts": 0|' "$T/job.json" >"$T/three.json"
three=$(ctl n1 submit "$T/three.json")
wait_for 120 job_is n1 "$three" failed
err=$(job_field n1 "$three" error)
[[ $err == *"belongs to job 999"* ]] || fail "job $three failed for another reason: $err"
[[ $(cd "$T/snaps/three/n2" && find . -printf "%p %s %m %T@\\n" | sort | md5sum) == "$before" ]] ||
    fail "job $three touched job 999's folder: $(ls -la "$T/snaps/three/n2")"
echo "a member's folder of another job is refused: $err"
echo "elastic_owner: ok"
