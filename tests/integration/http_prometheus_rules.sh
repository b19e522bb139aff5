#!/usr/bin/env bash
# The Grafana dashboard (etc/grafana/gptd-dashboard.json) and the alert
# rules (etc/prometheus/gptd-alerts.yml) against a real Prometheus
# (Debian's, loopback, 1 s scrapes and rule evaluations, private storage)
# scraping a gptd that trains, with the stand-in NVML (GPU series on any
# host):
#  - promtool accepts the rules; Prometheus loads them, each healthy;
#  - every panel's query (the dashboard's variables set to "all") runs
#    and returns series; every rule's expression runs, and each metric
#    either names has series, the process_* ones included;
#  - a job that fails (its data file removed between submit and start)
#    makes GptdJobFailed fire, labelled with its job id.
# Also the CSV outputs: `gptctl logs --csv` and /api/jobs/ID/metrics?
# format=csv give the same rows (steps, losses) as `gptctl --json logs`.
#   http_prometheus_rules.sh GPTD GPTCTL ITEST SRC FAKE_NVML
source "$(dirname "$0")/daemon_common.sh"
FAKE_NVML=$5

command -v prometheus >/dev/null || fail "prometheus is not installed (packaging/install-deps.sh)"
command -v promtool >/dev/null || fail "promtool is not installed (packaging/install-deps.sh)"
RULES=$SRC/etc/prometheus/gptd-alerts.yml
DASH=$SRC/etc/grafana/gptd-dashboard.json
promtool check rules "$RULES" >"$T/promtool.txt" 2>&1 || fail "promtool: $(cat "$T/promtool.txt")"

GPTD_NVML_LIBRARY=$FAKE_NVML start_gptd --http 127.0.0.1:0 --workers 1
wait_for 10 grep -q 'http: serving /metrics' "$T/gptd.0.log"
PORT=$(grep -o 'http: serving /metrics on 127.0.0.1:[0-9]*' "$T/gptd.0.log" | cut -d: -f3)
URL=http://127.0.0.1:$PORT

# A job that evaluates and snapshots (every job series exists), long
# enough to hold the only worker while the failing job waits behind it.
cat >"$T/train.json" <<EOT
{"name": "train",
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 6, "vocab_size": 10},
 "data": {"kind": "synthetic", "task": "addition", "digits": 2},
 "trainer": {"max_steps": 1000000, "micro_batch": 16, "global_batch": 16, "log_every": 5,
             "eval_every": 10, "eval_batches": 1, "threads": 1},
 "optimizer": {"lr": 1e-3, "warmup_steps": 0},
 "snapshot": {"every": 20}}
EOT
printf 'abcab cabba %.0s' {1..60} >"$T/text.txt"
cat >"$T/fail.json" <<EOT
{"name": "doomed",
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "vocab_size": 8},
 "data": {"kind": "text", "path": "$T/text.txt"},
 "trainer": {"max_steps": 20, "micro_batch": 2, "global_batch": 2, "eval_every": 0,
             "eval_batches": 1, "threads": 1},
 "snapshot": {"every": 5}}
EOT
"$GPTCTL" submit "$T/train.json" >/dev/null
wait_for 60 job_step_at_least 1 40

# --- the CSV outputs agree with the JSON records.
"$GPTCTL" --json logs 1 >"$T/logs.json"
"$GPTCTL" logs --csv 1 >"$T/logs.csv"
curl -sf -D "$T/csv.headers" "$URL/api/jobs/1/metrics?format=csv" >"$T/api.csv"
grep -qi '^Content-Type: text/csv' "$T/csv.headers" || fail "format=csv: $(cat "$T/csv.headers")"
python3 - "$T/logs.json" "$T/logs.csv" "$T/api.csv" <<'PY' || fail "the CSV rows differ from gptctl --json logs"
import csv, json, sys
want = {}
for line in open(sys.argv[1]):
    o = json.loads(line)
    if o.get("type") == "metric":
        want[o["step"]] = o
cols = ("run_id,step,max_steps,epoch,loss,val_loss,accuracy,lr,grad_norm,tokens_per_s,"
        "ms_per_step,mfu,eta_s,tokens,world_size,mem_params_bytes,mem_grads_bytes,"
        "mem_optim_bytes,mem_acts_bytes,time").split(",")
for path in sys.argv[2:]:
    rows = list(csv.DictReader(open(path)))
    if list(rows[0].keys()) != cols:
        sys.exit(f"{path}: header {list(rows[0].keys())}")
    seen = 0
    for r in rows:
        o = want.get(int(r["step"]))
        if o is None:
            continue  # the API's read may be newer than the logs dump
        seen += 1
        # gptctl's JSON carries 15 significant digits, the API's CSV all 17.
        if float(f"{float(r['loss']):.15g}") != o["loss"]:
            sys.exit(f"{path}: step {r['step']} loss {r['loss']} != {o['loss']}")
        if ("val_loss" in o) != (r["val_loss"] != ""):
            sys.exit(f"{path}: step {r['step']}: val_loss {r['val_loss']!r} vs {o.get('val_loss')}")
        if int(r["tokens"]) != o["tokens"] or int(r["run_id"]) != o["run_id"]:
            sys.exit(f"{path}: step {r['step']}: tokens/run_id differ")
    if seen < len(want) - 1 or seen < 5:
        sys.exit(f"{path}: {seen} rows matched of {len(want)}")
print("csv ok")
PY
[[ $(curl -s -o /dev/null -w '%{http_code}' "$URL/api/jobs/1/events?format=csv") == 400 ]] ||
    fail "format=csv on /events is not refused"

# --- a real Prometheus with the rules.
PPORT=$(free_port)
mkdir -p "$T/prom"
cat >"$T/prom/prometheus.yml" <<EOT
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: ['$RULES']
scrape_configs:
  - job_name: gptd
    static_configs:
      - targets: ['127.0.0.1:$PORT']
EOT
prometheus --config.file="$T/prom/prometheus.yml" --storage.tsdb.path="$T/prom/data" \
    --web.listen-address="127.0.0.1:$PPORT" --log.level=warn 2>"$T/prometheus.log" &
PIDS+=($!)
PROM=http://127.0.0.1:$PPORT
# enough_scrapes: three scrapes with different steps (the rates have
# points); polled every half second, as in http_prometheus.sh.
enough_scrapes() {
    sleep 0.5
    curl -sf --get "$PROM/api/v1/query" --data-urlencode 'query=changes(gptd_job_step{job_id="1"}[5m]) >= 2' |
        python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["data"]["result"] else 1)'
}
wait_for 60 enough_scrapes

# Every panel's and rule's query: it runs; a panel's returns series; every
# metric an expression names has series.
python3 - "$PROM" "$DASH" "$RULES" <<'PY' || fail "a dashboard or rule query found no series"
import json, re, sys, urllib.parse, urllib.request
prom, dash, rules = sys.argv[1:]
def query(q):
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url) as r:
        d = json.load(r)
    if d["status"] != "success":
        sys.exit(f"query failed: {q}: {d}")
    return d["data"]["result"]
def names(expr):
    return set(re.findall(r"\b((?:gptd|process)_[a-z_]+)\b", expr))
grafana = {"$job": ".+", "$scrape_job": ".+", "$__rate_interval": "1m"}
checked = set()
panels = json.load(open(dash))["panels"]
for p in panels:
    for t in p["targets"]:
        e = t["expr"]
        for k, v in grafana.items():
            e = e.replace(k, v)
        if not query(e):
            sys.exit(f"panel {p['title']!r}: no series for {e}")
        checked |= names(e)
exprs = re.findall(r"^\s*expr: (?:>-\n((?:\s{10}.*\n)+)|(.*)\n)", open(rules).read(), re.M)
exprs = [" ".join((a or b).split()) for a, b in exprs]
if len(exprs) != 4:
    sys.exit(f"{len(exprs)} rule expressions read from the rules file, want 4")
for e in exprs:
    query(e)
    checked |= names(e)
for n in sorted(checked):
    if not query(n):
        sys.exit(f"no series {n}")
must = {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
        "process_start_time_seconds", "gptd_job_restarts_total", "gptd_job_step",
        "gptd_node_up", "gptd_node_heartbeat_age_seconds", "gptd_job_info"}
if must - checked:
    sys.exit(f"not queried by any panel or rule: {must - checked}")
print(f"{len(panels)} panels, {len(exprs)} rules, {len(checked)} series present")
PY
rules_ok() {
    curl -sf "$PROM/api/v1/rules" | python3 -c '
import json, sys
r = [r for g in json.load(sys.stdin)["data"]["groups"] for r in g["rules"]]
names = {x["name"] for x in r if x["health"] == "ok"}
sys.exit(0 if names == {"GptdJobFailed", "GptdJobRestarting", "GptdJobNoStep", "GptdNodeHeartbeatLost"} else 1)'
}
wait_for 20 rules_ok

# --- a job that fails fires GptdJobFailed.
"$GPTCTL" submit "$T/fail.json" >/dev/null
rm "$T/text.txt"
"$GPTCTL" cancel 1 >/dev/null
wait_for 60 job_is 2 failed
firing() {
    curl -sf "$PROM/api/v1/alerts" | python3 -c '
import json, sys
a = json.load(sys.stdin)["data"]["alerts"]
sys.exit(0 if any(x["labels"].get("alertname") == "GptdJobFailed" and x["state"] == "firing"
                  and x["labels"].get("job_id") == "2" for x in a) else 1)'
}
wait_for 30 firing
echo "http_prometheus_rules: ok"
