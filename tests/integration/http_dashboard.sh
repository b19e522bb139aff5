#!/usr/bin/env bash
# The dashboard at / in a real browser: gptd --http on loopback trains a
# small CPU job with a hostile name; headless chromium (driven over the
# DevTools protocol by dashboard_cdp.js) loads the page with the job
# selected and the test asserts from the DOM that the chart's series grow
# between two reads, that the job row shows the step `gptctl --json status`
# reports (within the page's poll interval while it trains, exactly once it
# was cancelled), and that the name is text, not markup. The screenshot is
# saved as ARTIFACTS/http_dashboard.png. Then the JSON documents' refusals
# (bad ids, bad since: 400; unknown job: 404) and their headers (CSP,
# nosniff, JSON with "</" escaped).
#   http_dashboard.sh GPTD GPTCTL ITEST SRC ARTIFACTS
source "$(dirname "$0")/daemon_common.sh"
ART=$5

command -v chromium >/dev/null || fail "chromium is not installed (packaging/install-deps.sh)"
command -v node >/dev/null || fail "nodejs is not installed (packaging/install-deps.sh)"
command -v curl >/dev/null || fail "curl is not installed (packaging/install-deps.sh)"

# Chromium runs in its own process group (dashboard_cdp.js writes its id):
# killed with the daemons, whatever way the test ends.
CHROME_PGID=$T/chrome.pgid
kill_chrome() {
    if [[ -s $CHROME_PGID ]]; then
        kill -9 -- "-$(cat "$CHROME_PGID")" 2>/dev/null || true
    fi
}
trap 'kill_chrome; cleanup' EXIT

start_gptd --http 127.0.0.1:0
wait_for 10 grep -q 'http: serving /metrics' "$T/gptd.0.log"
PORT=$(grep -o 'http: serving /metrics on 127.0.0.1:[0-9]*' "$T/gptd.0.log" | tail -n1 | cut -d: -f3)
[[ -n $PORT ]] || fail "no http port in the log"
URL=http://127.0.0.1:$PORT

NAME='<img src=x onerror="window.pwned=1"></script><b>x</b>'
python3 - "$T/job.json" "$NAME" <<'PY'
import json, sys
json.dump({"name": sys.argv[2],
           "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 6, "vocab_size": 10},
           "data": {"kind": "synthetic", "task": "addition", "digits": 2},
           "trainer": {"max_steps": 10000000, "micro_batch": 16, "global_batch": 16,
                       "log_every": 5, "eval_every": 25, "eval_batches": 2, "threads": 1},
           "optimizer": {"lr": 1e-3, "warmup_steps": 0},
           "snapshot": {"every": 500}}, open(sys.argv[1], "w"))
PY
"$GPTCTL" submit "$T/job.json" >/dev/null
wait_for 30 job_step_at_least 1 30

mkdir -p "$ART"
rm -f "$ART/http_dashboard.png"
node "$(dirname "$0")/dashboard_cdp.js" chromium "$URL/" 1 "$GPTCTL" "$NAME" "$CHROME_PGID" \
    "$ART/http_dashboard.png" "$T/chrome-profile" || fail "the dashboard checks failed"
kill_chrome
[[ $(head -c 8 "$ART/http_dashboard.png" | od -An -tx1 | tr -d ' ') == 89504e470d0a1a0a ]] ||
    fail "no PNG screenshot at $ART/http_dashboard.png"
echo "screenshot: $ART/http_dashboard.png"

# --- the JSON documents' refusals and headers.
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[[ $(code "$URL/api/jobs/0/events") == 400 ]] || fail "job 0 not refused"
[[ $(code "$URL/api/jobs/01/events") == 400 ]] || fail "a leading zero not refused"
[[ $(code "$URL/api/jobs/-1/events") == 400 ]] || fail "a negative id not refused"
[[ $(code "$URL/api/jobs/1234567890123456789/events") == 400 ]] || fail "a 19-digit id not refused"
[[ $(code "$URL/api/jobs/1/metrics?since=x") == 400 ]] || fail "since=x not refused"
[[ $(code "$URL/api/jobs/1/metrics?since=") == 400 ]] || fail "an empty since not refused"
[[ $(code "$URL/api/jobs/1/events?since=1") == 400 ]] || fail "since on /events not refused"
[[ $(code "$URL/api/jobs/99/events") == 404 ]] || fail "an unknown job not 404"
[[ $(code "$URL/api/jobs/1/nothing") == 404 ]] || fail "an unknown document not 404"
[[ $(code -X POST "$URL/api/jobs") == 405 ]] || fail "POST /api/jobs not refused"
curl -s -D "$T/h.txt" -o "$T/jobs.json" "$URL/api/jobs"
grep -qi "^Content-Security-Policy: default-src 'none'; script-src 'self'" "$T/h.txt" || fail "no CSP"
grep -qi '^X-Content-Type-Options: nosniff' "$T/h.txt" || fail "no nosniff"
grep -qi '^Content-Type: application/json' "$T/h.txt" || fail "not served as JSON"
grep -q '</' "$T/jobs.json" && fail "a raw </ in /api/jobs"
curl -sf "$URL/api/jobs/1/metrics?since=0" >"$T/m.json"
"$GPTCTL" --json logs 1 >"$T/logs.json"
python3 - "$T/jobs.json" "$NAME" "$T/m.json" "$T/logs.json" <<'PY' || fail "/api/jobs or /api/jobs/1/metrics differ from gptctl"
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
if jobs[0]["name"] != sys.argv[2] or jobs[0]["state"] != "cancelled":
    sys.exit(f"/api/jobs: {jobs}")
doc = json.load(open(sys.argv[3]))
ref = {}
for line in open(sys.argv[4]):
    o = json.loads(line)
    if o.get("type") == "metric":
        ref[o["step"]] = o
ms = doc["metrics"]
if not ms or [m["step"] for m in ms] != sorted(ref)[:len(ms)]:
    sys.exit("/api/jobs/1/metrics: not the steps of gptctl logs")
for m in ms:
    if float(f"{m['loss']:.15g}") != ref[m["step"]]["loss"]:
        sys.exit(f"step {m['step']}: {m['loss']} != {ref[m['step']]['loss']}")
if doc["last"] != ms[-1]["step"] or doc["more"] != (len(ms) == 1000):
    sys.exit(f"last/more: {doc['last']} {doc['more']}")
print(f"{len(ms)} metric records equal to gptctl logs")
PY
echo "http_dashboard: ok"
