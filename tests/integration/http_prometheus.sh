#!/usr/bin/env bash
# gptd --http: a real Prometheus (Debian's `prometheus`, on loopback, 1 s
# scrapes, private storage) scrapes a gptd whose job trains, and the loss
# values it stored for job 1 are exactly what `gptctl --json logs` reports
# for the same steps; the hostile job name comes back intact as a label.
# Then the listener's refusals: POST/PUT/DELETE (405), a body (413),
# oversized headers and URLs (431/414), unknown paths (404); and the bearer
# token (401 without it or with a wrong one, 200 with it; a token file
# others may read stops gptd; a non-loopback address without a token is
# refused).
source "$(dirname "$0")/daemon_common.sh"

command -v prometheus >/dev/null || fail "prometheus is not installed (packaging/install-deps.sh)"
command -v curl >/dev/null || fail "curl is not installed (packaging/install-deps.sh)"

# http_port LOGFILE: the port gptd logged for its listener.
http_port() {
    grep -o 'http: serving /metrics on 127.0.0.1:[0-9]*' "$1" | tail -n1 | cut -d: -f3
}
# status CURL_ARGS...: the HTTP status code of one request.
status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }

start_gptd --http 127.0.0.1:0
wait_for 10 grep -q 'http: serving /metrics' "$T/gptd.0.log"
PORT=$(http_port "$T/gptd.0.log")
[[ -n $PORT ]] || fail "no http port in the log"
URL=http://127.0.0.1:$PORT

# A hostile job name: quotes, a backslash, a newline and a fake sample.
NAME='evil "job" \ x
gptd_fake 1'
python3 - "$T/job.json" "$NAME" <<'PY'
import json, sys
json.dump({"name": sys.argv[2],
           "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 6, "vocab_size": 10},
           "data": {"kind": "synthetic", "task": "addition", "digits": 2},
           "trainer": {"max_steps": 100000, "micro_batch": 16, "global_batch": 16,
                       "log_every": 5, "eval_every": 0, "eval_batches": 2, "threads": 1},
           "optimizer": {"lr": 1e-3, "warmup_steps": 0},
           "snapshot": {"every": 50}}, open(sys.argv[1], "w"))
PY
"$GPTCTL" submit "$T/job.json" >/dev/null
wait_for 30 job_step_at_least 1 10
has_loss() { curl -sf "$URL/metrics" >"$T/m" && grep -q '^gptd_job_loss{job_id="1"' "$T/m"; }
wait_for 10 has_loss
curl -sf "$URL/metrics" >"$T/metrics.txt"
grep -qF 'gptd_job_info{job_id="1",job_name="evil \"job\" \\ x\ngptd_fake 1",state="running"} 1' \
    "$T/metrics.txt" || fail "job_name label not escaped as the exposition format says"
grep -q '^gptd_fake' "$T/metrics.txt" && fail "the job name injected a sample"
grep -q '^# TYPE gptd_job_restarts_total counter$' "$T/metrics.txt" || fail "no restarts counter"
grep -q '^gptd_node_up{node=' "$T/metrics.txt" || fail "no node series"
grep -q '^gptd_store_requests_total [0-9]' "$T/metrics.txt" || fail "no store counter"
if [[ ! -e /dev/nvidiactl ]] && grep -q '^gptd_gpu_' "$T/metrics.txt"; then
    fail "GPU series on a host without a GPU driver"
fi

# --- a real Prometheus scrapes it.
PPORT=$(free_port)
mkdir -p "$T/prom"
printf '%s\n' "global:" "  scrape_interval: 1s" "  scrape_timeout: 1s" "scrape_configs:" \
    "  - job_name: gptd" "    static_configs:" "      - targets: ['127.0.0.1:$PORT']" \
    >"$T/prom/prometheus.yml"
prometheus --config.file="$T/prom/prometheus.yml" --storage.tsdb.path="$T/prom/data" \
    --web.listen-address="127.0.0.1:$PPORT" --log.level=warn 2>"$T/prometheus.log" &
PIDS+=($!)
PROM=http://127.0.0.1:$PPORT

# prom_samples METRIC: the raw samples of METRIC{job_id="1"} over the last
# 10 minutes as "TIMESTAMP VALUE" lines.
prom_samples() {
    curl -sf --get "$PROM/api/v1/query" --data-urlencode "query=$1{job_id=\"1\"}[10m]" |
        python3 -c '
import json, sys
for s in json.load(sys.stdin)["data"]["result"]:
    for t, v in s["values"]:
        print(t, v)'
}
# enough_scrapes: Prometheus holds at least 3 scrapes with different steps.
# (Polled every half second: scrapes come once a second, and the python
# and curl of each poll would compete with the training job for the CPU.)
enough_scrapes() {
    sleep 0.5
    (($(prom_samples gptd_job_step | cut -d' ' -f2 | sort -u | wc -l) >= 3))
}
wait_for 60 enough_scrapes
prom_samples gptd_job_loss >"$T/loss.txt"
prom_samples gptd_job_step >"$T/step.txt"
"$GPTCTL" --json logs 1 >"$T/logs.json"
python3 - "$T/loss.txt" "$T/step.txt" "$T/logs.json" <<'PY' || fail "Prometheus's losses differ from gptctl logs"
import json, sys
loss = dict(l.split() for l in open(sys.argv[1]))
step = dict(l.split() for l in open(sys.argv[2]))
logs = {}
for line in open(sys.argv[3]):
    o = json.loads(line)
    if o.get("type") == "metric":
        logs[o["step"]] = o["loss"]
checked = 0
for t, s in step.items():
    s = int(float(s))
    if t not in loss:
        continue
    if s not in logs:
        sys.exit(f"step {s} scraped but not in gptctl logs")
    # gptctl prints 15 significant digits (proto/ctl.c); /metrics every
    # digit of the stored double: equal at gptctl's precision.
    if float(f"{float(loss[t]):.15g}") != logs[s]:
        sys.exit(f"step {s}: prometheus {loss[t]} != gptctl logs {logs[s]!r}")
    checked += 1
if checked < 3:
    sys.exit(f"only {checked} scrapes to compare")
print(f"{checked} scrapes equal to gptctl logs")
PY
# The label Prometheus parsed is the job's name, byte for byte.
curl -sf --get "$PROM/api/v1/series" --data-urlencode 'match[]=gptd_job_loss{job_id="1"}' |
    python3 -c '
import json, sys
names = {s["job_name"] for s in json.load(sys.stdin)["data"]}
sys.exit(0 if names == {sys.argv[1]} else f"job_name labels {names!r}")' "$NAME" ||
    fail "Prometheus did not read the job name back"

# --- read-only: methods, bodies, sizes, paths.
[[ $(status -X POST "$URL/metrics") == 405 ]] || fail "POST not refused with 405"
[[ $(status -X PUT --data x "$URL/metrics") == 405 ]] || fail "PUT not refused with 405"
[[ $(status -X DELETE "$URL/") == 405 ]] || fail "DELETE not refused with 405"
[[ $(status -X GET --data 'cancel=1' "$URL/metrics") == 413 ]] || fail "GET with a body accepted"
big=$(head -c 20000 /dev/zero | tr '\0' a)
code=$(status -H "X-Big: $big" "$URL/metrics")
[[ $code == 431 || $code == 413 ]] || fail "a 20 kB header got $code"
code=$(status "$URL/metrics?$big")
[[ $code == 414 || $code == 431 ]] || fail "a 20 kB URL got $code"
[[ $(status "$URL/nothing") == 404 ]] || fail "unknown path not 404"
[[ $(status -I "$URL/metrics") == 200 ]] || fail "HEAD /metrics"
"$GPTCTL" cancel 1 >/dev/null
wait_for 30 job_is 1 cancelled

# --- the bearer token.
kill -TERM "$GPTD_PID"
wait "$GPTD_PID" || fail "gptd did not stop cleanly"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/token"
chmod 644 "$T/token"
if "$GPTD" --state-dir "$T/state" --socket "$SOCK" --http 127.0.0.1:0 \
    --http-token-file "$T/token" 2>"$T/bad.log"; then
    fail "gptd started with a token file others may read"
fi
grep -q 'http_token_file.*chmod 600' "$T/bad.log" || fail "no clear error for a 0644 token: $(cat "$T/bad.log")"
if "$GPTD" --state-dir "$T/state" --http 0.0.0.0:0 --check-config 2>"$T/bad.log"; then
    fail "a non-loopback listener without a token was accepted"
fi
grep -q 'not a loopback address: set http_token_file' "$T/bad.log" || fail "no clear error off loopback"
chmod 600 "$T/token"
TOKEN=$(cat "$T/token")
LOG=$T/gptd.${#PIDS[@]}.log # start_gptd's log
start_gptd --http 127.0.0.1:0 --http-token-file "$T/token"
wait_for 10 grep -q 'http: serving /metrics on .*(bearer token required)' "$LOG"
URL=http://127.0.0.1:$(http_port "$LOG")
[[ $(status "$URL/metrics") == 401 ]] || fail "no token: not 401"
curl -s -D "$T/headers.txt" -o /dev/null "$URL/metrics"
grep -qi '^WWW-Authenticate: Bearer' "$T/headers.txt" || fail "no WWW-Authenticate"
[[ $(status -H "Authorization: Bearer wrong-token-0123456789" "$URL/metrics") == 401 ]] ||
    fail "a wrong token: not 401"
[[ $(status -H "Authorization: Bearer ${TOKEN}x" "$URL/metrics") == 401 ]] ||
    fail "a longer token: not 401"
with_token() { [[ $(status -H "Authorization: Bearer $TOKEN" "$URL/metrics") == 200 ]]; }
wait_for 10 with_token
# (into a file: grep -q would close the pipe under curl, and pipefail.)
curl -sf -H "Authorization: Bearer $TOKEN" "$URL/metrics" >"$T/metrics.txt"
grep -q '^gptd_job_info{job_id="1",.*state="cancelled"} 1$' "$T/metrics.txt" ||
    fail "no job series with the token"
[[ $(status -X POST -H "Authorization: Bearer $TOKEN" "$URL/metrics") == 405 ]] ||
    fail "POST with the token not refused"
# The dashboard's JSON needs the token too; its own files (no data) do not.
[[ $(status "$URL/api/jobs") == 401 ]] || fail "/api/jobs without the token: not 401"
[[ $(status "$URL/api/jobs/1/metrics?since=0") == 401 ]] || fail "/api/jobs/1/metrics: not 401"
[[ $(status -H "Authorization: Bearer $TOKEN" "$URL/api/jobs/1/events") == 200 ]] ||
    fail "/api/jobs/1/events with the token: not 200"
[[ $(status "$URL/") == 200 && $(status "$URL/app.js") == 200 ]] ||
    fail "the dashboard's files need no token"
echo "http_prometheus: ok"
