#!/usr/bin/env bash
# The dashboard at / in a real browser: gptd --http on loopback trains small
# CPU jobs with hostile names: a sweep of two (jobs 1 and 2, learning rates
# 2e-3 and 3e-3) to their end, job 3 (a character model of hostile markup,
# sampled once with a hostile prompt) to its end, then job 4 until
# cancelled; headless chromium (driven over the DevTools protocol by
# dashboard_cdp.js) loads the page comparing jobs 4 and 1 and the test
# asserts from the charts' data that every panel (loss and val loss,
# learning rate, tokens/s, grad norm, MFU, memory) holds both jobs' series,
# that job 4's grow between two reads, that both loss curves are on the
# canvas, that the config marks the keys whose values differ, that job 4's
# row shows the step `gptctl --json status` reports (within the page's poll
# interval while it trains, exactly once it was cancelled), that the names
# (with job 1's overrides) are text, not markup, that the sweep's button
# selects jobs 1 and 2, and that job 3's samples panel shows its sample's
# hostile prompt and text as text (what `gptctl samples` reads), inert.
# The screenshot is saved as ARTIFACTS/http_dashboard.png. Then the
# charting library as embedded (Debian's libjs-dygraphs, byte for byte),
# /api/jobs/ID/config, the JSON documents' refusals (bad ids, bad since:
# 400; unknown job: 404) and their headers (CSP, nosniff, JSON with "</"
# escaped).
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
# cleanup exits with the status it finds in $?: the test's, not kill_chrome's.
trap 'rc=$?; set +e; kill_chrome; (exit $rc); cleanup' EXIT

start_gptd --http 127.0.0.1:0
wait_for 10 grep -q 'http: serving /metrics' "$T/gptd.0.log"
PORT=$(grep -o 'http: serving /metrics on 127.0.0.1:[0-9]*' "$T/gptd.0.log" | tail -n1 | cut -d: -f3)
[[ -n $PORT ]] || fail "no http port in the log"
URL=http://127.0.0.1:$PORT

NAME='<img src=x onerror="window.pwned=1"></script><b>x</b>'
OTHER='<svg onload="window.pwned=2">&amp; lr2'
job_spec() { # job_spec FILE NAME MAX_STEPS LR
    python3 - "$@" <<'PY'
import json, sys
json.dump({"name": sys.argv[2],
           "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 6, "vocab_size": 10},
           "data": {"kind": "synthetic", "task": "addition", "digits": 2},
           "trainer": {"max_steps": int(sys.argv[3]), "micro_batch": 16, "global_batch": 16,
                       "log_every": 5, "eval_every": 25, "eval_batches": 2, "threads": 1},
           "optimizer": {"lr": float(sys.argv[4]), "warmup_steps": 0},
           "snapshot": {"every": 500}}, open(sys.argv[1], "w"))
PY
}
# The sweep ends before job 4 starts (one worker): the page compares an
# ended job with one that trains.
job_spec "$T/other.json" "$OTHER" 60 2e-3
job_spec "$T/job.json" "$NAME" 10000000 1e-3
"$GPTCTL" submit -m "$T/other.json" optimizer.lr=2e-3,3e-3 >/dev/null
wait_for 60 job_is 1 completed
wait_for 60 job_is 2 completed
# Job 3: a character model of a text that is markup, so that its prompt
# and what it writes are markup too; one sample of it is kept.
PROMPT='<img src=x onerror="window.pwned=3">'
for i in $(seq 40); do printf '%s<script>window.pwned=4</script><b>&amp;</b>\n' "$PROMPT"; done \
    >"$T/markup.txt"
python3 - "$T/markup.json" "$T/markup.txt" <<'PY'
import json, sys
json.dump({"name": "markup",
           "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8},
           "data": {"kind": "text", "path": sys.argv[2], "tokenizer": "char"},
           "trainer": {"max_steps": 5, "micro_batch": 4, "global_batch": 4, "log_every": 5,
                       "eval_every": 0, "threads": 1},
           "optimizer": {"lr": 1e-3, "warmup_steps": 0}, "snapshot": {"every": 5}},
          open(sys.argv[1], "w"))
PY
"$GPTCTL" submit "$T/markup.json" >/dev/null
wait_for 60 job_is 3 completed
"$GPTCTL" sample 3 --prompt "$PROMPT" --tokens 40 >/dev/null || fail "sample job 3"
"$GPTCTL" submit "$T/job.json" >/dev/null
wait_for 30 job_step_at_least 4 30

mkdir -p "$ART"
rm -f "$ART/http_dashboard.png"
node "$(dirname "$0")/dashboard_cdp.js" chromium "$URL/" 4 1 1,2 "$GPTCTL" "$NAME" \
    "$OTHER lr=2e-3" "$CHROME_PGID" "$ART/http_dashboard.png" "$T/chrome-profile" 3 ||
    fail "the dashboard checks failed"
kill_chrome
[[ $(head -c 8 "$ART/http_dashboard.png" | od -An -tx1 | tr -d ' ') == 89504e470d0a1a0a ]] ||
    fail "no PNG screenshot at $ART/http_dashboard.png"
echo "screenshot: $ART/http_dashboard.png"

# --- the charting library, embedded: Debian's file byte for byte, as script.
curl -s -D "$T/lib.h" -o "$T/dygraph.js" "$URL/lib/dygraph.min.js"
cmp -s "$T/dygraph.js" /usr/share/javascript/dygraphs/dygraph.min.js ||
    fail "/lib/dygraph.min.js is not libjs-dygraphs' dygraph.min.js"
grep -qi '^Content-Type: text/javascript' "$T/lib.h" || fail "/lib/dygraph.min.js not served as script"

# --- a job's resolved config and overrides.
curl -sf "$URL/api/jobs/1/config" >"$T/config.json" || fail "no /api/jobs/1/config"
python3 - "$T/config.json" "$OTHER" <<'PY' || fail "/api/jobs/1/config: $(cat "$T/config.json")"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["job"] == 1 and c["name"] == sys.argv[2], c
assert c["spec"]["optimizer"]["lr"] == 2e-3 and c["spec"]["trainer"]["max_steps"] == 60, c
# Resolved: keys the file left out carry their defaults.
assert "weight_decay" in c["spec"]["optimizer"] and "precision" in c["spec"]["trainer"], c
assert c["overrides"] == {"optimizer.lr": "2e-3"} and c["sweep"] != "", c
PY

# --- the JSON documents' refusals and headers.
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[[ $(code "$URL/api/jobs/0/events") == 400 ]] || fail "job 0 not refused"
[[ $(code "$URL/api/jobs/01/events") == 400 ]] || fail "a leading zero not refused"
[[ $(code "$URL/api/jobs/-1/events") == 400 ]] || fail "a negative id not refused"
[[ $(code "$URL/api/jobs/1234567890123456789/events") == 400 ]] || fail "a 19-digit id not refused"
[[ $(code "$URL/api/jobs/1/metrics?since=x") == 400 ]] || fail "since=x not refused"
[[ $(code "$URL/api/jobs/1/metrics?since=") == 400 ]] || fail "an empty since not refused"
[[ $(code "$URL/api/jobs/1/events?since=1") == 400 ]] || fail "since on /events not refused"
[[ $(code "$URL/api/jobs/01/config") == 400 ]] || fail "a leading zero on /config not refused"
[[ $(code "$URL/api/jobs/99/events") == 404 ]] || fail "an unknown job not 404"
[[ $(code "$URL/api/jobs/99/config") == 404 ]] || fail "the config of an unknown job is not 404"
[[ $(code "$URL/api/jobs/1/nothing") == 404 ]] || fail "an unknown document not 404"
[[ $(code -X POST "$URL/api/jobs") == 405 ]] || fail "POST /api/jobs not refused"
curl -s -D "$T/h.txt" -o "$T/jobs.json" "$URL/api/jobs"
grep -qi "^Content-Security-Policy: default-src 'none'; script-src 'self'" "$T/h.txt" || fail "no CSP"
grep -qi '^X-Content-Type-Options: nosniff' "$T/h.txt" || fail "no nosniff"
grep -qi '^Content-Type: application/json' "$T/h.txt" || fail "not served as JSON"
grep -q '</' "$T/jobs.json" && fail "a raw </ in /api/jobs"
curl -sf "$URL/api/jobs/4/metrics?since=0" >"$T/m.json"
"$GPTCTL" --json logs 4 >"$T/logs.json"
python3 - "$T/jobs.json" "$NAME" "$T/m.json" "$T/logs.json" <<'PY' || fail "/api/jobs or /api/jobs/4/metrics differ from gptctl"
import json, sys
jobs = {j["id"]: j for j in json.load(open(sys.argv[1]))["jobs"]}
if jobs[4]["name"] != sys.argv[2] or jobs[4]["state"] != "cancelled":
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
    r = ref[m["step"]]
    for k in ("loss", "grad_norm", "tokens_per_s", "mfu"):
        if m[k] is not None and float(f"{m[k]:.15g}") != r[k]:
            sys.exit(f"step {m['step']}: {k} {m[k]} != {r[k]}")
    mem = sum(r[k] for k in ("mem_params_bytes", "mem_grads_bytes", "mem_optim_bytes", "mem_acts_bytes"))
    if m["tokens"] != r["tokens"] or m["mem_bytes"] != mem:
        sys.exit(f"step {m['step']}: tokens/mem_bytes {m['tokens']} {m['mem_bytes']} != {r['tokens']} {mem}")
if doc["last"] != ms[-1]["step"] or doc["more"] != (len(ms) == 1000):
    sys.exit(f"last/more: {doc['last']} {doc['more']}")
print(f"{len(ms)} metric records equal to gptctl logs")
PY
echo "http_dashboard: ok"
