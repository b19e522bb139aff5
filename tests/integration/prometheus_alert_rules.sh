#!/usr/bin/env bash
# Every alert rule of etc/prometheus/gptd-alerts.yml shown to fire, and to
# stay quiet on healthy series, with Debian prometheus's `promtool test
# rules` on the synthetic series of tests/prometheus/gptd-alerts.test.yml
# (http_prometheus_rules shows the rules on a real scrape; here each one
# fires, which a short test of a live gptd cannot wait for). A rule of the
# file that no test case expects to fire fails the test, so a new rule
# comes with its case.
#   prometheus_alert_rules.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: prometheus_alert_rules.sh SOURCE_DIR}
source "$(dirname "$0")/lib.sh"
command -v promtool >/dev/null || fail "promtool is not installed (packaging/install-deps.sh)"
rules=$src/etc/prometheus/gptd-alerts.yml
cases=$src/tests/prometheus/gptd-alerts.test.yml

promtool check rules "$rules" >/dev/null
out=$(promtool test rules "$cases" 2>&1) || fail "promtool test rules: $out"

# The rules the file has, and those a case expects firing (an exp_alerts
# with entries under its alertname).
have=$(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' "$rules" | sort -u)
fired=$(awk '/^ *alertname:/ { name = $2 }
             /^ *exp_alerts: *$/ { print name }' "$cases" | sort -u)
(($(wc -l <<<"$have") >= 4)) || fail "too few rules read from $rules: $have"
missing=$(comm -23 <(echo "$have") <(echo "$fired"))
[[ -z $missing ]] || fail "no case in $cases makes these rules fire: $missing"
echo "prometheus_alert_rules: ok ($(wc -l <<<"$have") rules each fire)"
