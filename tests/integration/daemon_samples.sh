#!/usr/bin/env bash
# A job's last samples (issue 35, item 2): every `gptctl sample` reply is
# kept with the job, its newest sample_history of them (2 here), and read
# back the same through `gptctl samples` (text and --json) and GET
# /api/jobs/ID/samples: prompt (or token ids), what the model wrote after
# it, the snapshot id and step it came from, tokens, temperature, top-k,
# seed, time and the uid that asked. A job with none says so; the HTTP
# document refuses a bad id (400) and an unknown job (404); a restart
# keeps them.
source "$(dirname "$0")/daemon_common.sh"

command -v curl >/dev/null || fail "curl is not installed (packaging/install-deps.sh)"
printf 'sample_history = 2\n' >"$T/gptd.conf"
start_gptd --config "$T/gptd.conf" --http 127.0.0.1:0
port() {
    grep -o 'http: serving /metrics on 127.0.0.1:[0-9]*' "$T/gptd.$1.log" | tail -n1 | cut -d: -f3
}
wait_for 10 grep -q 'http: serving /metrics' "$T/gptd.0.log"
URL=http://127.0.0.1:$(port 0)

tiny_job "$T/job.json" 20 5 10
id=$("$GPTCTL" submit "$T/job.json")
wait_for 60 job_is "$id" completed
out=$("$GPTCTL" samples "$id")
[[ $out == "job $id has no samples kept (gptctl sample keeps its replies)" ]] ||
    fail "samples of a job never sampled: $out"

# Three samples; the first from snapshot step 10 (by id), the others from
# the newest (step 20). Only the newest two are kept.
snap10=$("$GPTCTL" --json snapshots "$id" | jq '.snapshots[] | select(.step == 10) | .id')
[[ -n $snap10 ]] || fail "no snapshot at step 10"
"$GPTCTL" --json sample "$id" --prompt 1 --tokens 4 --snapshot "$snap10" >"$T/s1.json"
"$GPTCTL" --json sample "$id" --prompt 12 --tokens 5 --temperature 0.5 --top-k 3 >"$T/s2.json"
"$GPTCTL" --json sample "$id" --prompt-ids 3,4 --tokens 6 >"$T/s3.json"
"$GPTCTL" --json samples "$id" >"$T/ctl.json"
curl -sf "$URL/api/jobs/$id/samples" >"$T/http.json" || fail "no /api/jobs/$id/samples"
python3 - "$T" "$id" "$(id -u)" "$snap10" <<'PY' || fail "the kept samples: $(cat "$T/ctl.json")"
import json, sys
t, job, uid, snap10 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ctl = json.load(open(t + "/ctl.json"))
http = json.load(open(t + "/http.json"))
s2 = json.load(open(t + "/s2.json"))
s3 = json.load(open(t + "/s3.json"))
assert ctl["job"] == job and ctl["kept"] == 2, ctl
got = ctl["samples"]
assert len(got) == 2, f"sample_history = 2 kept {len(got)}"
# The same records (the control protocol sends times with fewer digits).
strip = lambda ss: [{k: v for k, v in x.items() if k != "time"} for x in ss]
assert http["job"] == job and strip(http["samples"]) == strip(got), f"HTTP {http} != {got}"
assert all(abs(a["time"] - b["time"]) < 1e-3 for a, b in zip(http["samples"], got)), (http, got)
new, old = got
assert new["id"] > old["id"], got
for s in got:
    assert s["job"] == job and s["uid"] == uid and s["step"] == 20, s
    assert s["snapshot_id"] > 0 and s["snapshot_id"] != snap10, s
    assert s["truncated"] is False and s["seed"] > 0 and s["time"] > 1.7e9, s
# The newest: prompt ids, the whole text; the settings' defaults.
assert new["prompt"] == "" and new["prompt_ids"] == "3,4", new
assert new["completion"] == s3["text"] and new["snapshot"] == s3["snapshot"], (new, s3)
assert new["tokens"] == 6 and new["temperature"] == 0.8 and new["top_k"] == 0, new
# The one before: the text after the prompt, its settings.
assert old["prompt"] == "12" and "prompt_ids" not in old, old
assert s2["text"].startswith("12") and old["completion"] == s2["text"][2:], (old, s2)
assert old["tokens"] == 5 and old["temperature"] == 0.5 and old["top_k"] == 3, old
PY

# The text view: oldest first, each with its header, prompt and text.
"$GPTCTL" samples "$id" >"$T/samples.out"
hdr=$(grep -c '^sample [0-9]* at .* by uid [0-9]* from snapshot [0-9]* (step 20): tokens' "$T/samples.out")
((hdr == 2)) || fail "samples: $(cat "$T/samples.out")"
sed -n 1p "$T/samples.out" | has 'tokens 5, temperature 0.5, top-k 3, seed [0-9]' ||
    fail "samples: the oldest first: $(cat "$T/samples.out")"
[[ $(sed -n 2,3p "$T/samples.out") == $'12\n--- generated ---' ]] ||
    fail "samples: prompt and separator: $(cat -A "$T/samples.out")"
has -x 'prompt ids: 3,4' "$T/samples.out" || fail "samples: no prompt ids: $(cat "$T/samples.out")"

# The sample taken from snapshot step 10 is no longer kept: one more
# replaces the oldest, and a sample by id records that id.
"$GPTCTL" --json sample "$id" --prompt 2 --tokens 2 --snapshot "$snap10" >/dev/null
"$GPTCTL" --json samples "$id" | jq -e --argjson s "$snap10" \
    '[.samples[] | .prompt] == ["2", ""] and .samples[0].snapshot_id == $s and .samples[0].step == 10' \
    >/dev/null || fail "the third sample: $("$GPTCTL" --json samples "$id")"

# HTTP refusals, as for the other per-job documents.
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[[ $(code "$URL/api/jobs/0$id/samples") == 400 ]] || fail "a leading zero not refused"
[[ $(code "$URL/api/jobs/99/samples") == 404 ]] || fail "an unknown job's samples not 404"
rc=0
out=$("$GPTCTL" samples 99 2>&1) || rc=$?
((rc == 1)) && [[ $out == *"not_found at job: no job 99"* ]] || fail "gptctl samples 99: exit $rc: $out"

# Kept across a restart of gptd.
kill "$GPTD_PID" && wait "$GPTD_PID" 2>/dev/null || true
start_gptd --config "$T/gptd.conf"
n=$("$GPTCTL" --json samples "$id" | jq '.samples | length')
((n == 2)) || fail "after a restart: $n samples"
echo "daemon_samples: ok"
