#!/usr/bin/env bash
# Prometheus for real: starts the Debian `prometheus` server scraping a prefixd
# daemon (demo model) on loopback every second, sends chat requests that share
# 4 system prompts, and checks through Prometheus' HTTP API that the hit-ratio
# PromQL of ops/grafana/prefixd-dashboard.json (panel 1, and the device series
# of panel 2) equals what the daemon's own GET /v1/cache/stats reports.
# Exit 77 = skipped (prometheus, curl or python3 missing).
# Usage: test_prometheus_hit_ratio.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "${1:?usage: test_prometheus_hit_ratio.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
grafana_json="$root/ops/grafana/prefixd-dashboard.json"
source "$(dirname "$0")/lib/prefixd_test.sh"

for tool in prometheus curl python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool not found (Debian packages prometheus, curl, python3); skipping"
    exit 77
  fi
done
[[ -x "$build_dir/prefixd" ]] || { echo "missing $build_dir/prefixd"; exit 1; }
[[ -f "$grafana_json" ]] || { echo "missing $grafana_json"; exit 1; }

work=$(mktemp -d)
prom_pid=""
cleanup() {
  if [[ -n "$prom_pid" ]] && kill -0 "$prom_pid" 2>/dev/null; then
    kill -TERM "$prom_pid" 2>/dev/null || true
    wait "$prom_pid" 2>/dev/null || true
  fi
  kill_prefixd
  rm -rf "$work"
}
trap cleanup EXIT

json_get() {  # json_get PYTHON_EXPR: evaluates it with `d` = the JSON on stdin
  python3 -c "import json, sys; d = json.load(sys.stdin); print($1)"
}

# --- the daemon ---------------------------------------------------------------
start_prefixd "$build_dir" "$work/daemon" --model demo --threads 1 --cache-dir "$build_dir/test-cache"
port=$PREFIXD_PORT
url="http://127.0.0.1:$port"

# --- prometheus ---------------------------------------------------------------
prom_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: prefixd
    scrape_interval: 1s
    scrape_timeout: 900ms
    static_configs:
      - targets: ["127.0.0.1:$port"]
YAML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prom.log" 2>&1 &
prom_pid=$!
prom="http://127.0.0.1:$prom_port"
for _ in $(seq 1 300); do
  curl -fsS "$prom/-/ready" >/dev/null 2>&1 && break
  kill -0 "$prom_pid" 2>/dev/null || { echo "prometheus exited:"; cat "$work/prom.log"; exit 1; }
  sleep 0.1
done
curl -fsS "$prom/-/ready" >/dev/null || { echo "prometheus did not become ready"; cat "$work/prom.log"; exit 1; }

promql() {  # promql EXPR -> the scalar value of an instant query ("none" when empty)
  curl -fsS "$prom/api/v1/query" --data-urlencode "query=$1" |
    json_get '(d["data"]["result"][0]["value"][1] if d["data"]["result"] else "none") if d["data"]["resultType"] == "vector" else d["data"]["result"][1]'
}

# Two scrapes before any traffic, so that every counter's first sample in the
# rate() window is its zero start.
for _ in $(seq 1 200); do
  n=$(promql 'count_over_time(prefixd_prompt_tokens_total[10m])')
  [[ "$n" != "none" ]] && ((n >= 2)) && break
  sleep 0.2
done
[[ "$n" != "none" ]] && ((n >= 2)) || { echo "prometheus did not scrape prefixd"; cat "$work/prom.log"; exit 1; }

# --- workload: 4 shared system prompts, 3 questions each ----------------------
systems=(
  "You are the support assistant of the Acme Rocket Company. Answer questions about rocket skates, anvils and giant magnets politely, briefly and accurately."
  "You are a legal research helper. Cite the statute, the section and the year for every claim, and say clearly when the law is unsettled or varies by state."
  "You are a cooking coach for beginners. Explain each step of a recipe in plain words, give metric and imperial amounts, and warn about common mistakes."
  "You are a travel planner for rail journeys across Europe. Suggest routes with train numbers, changes and seat reservations, and mention night trains."
)
questions=("What should I know first?" "Give me three tips." "What is the most common mistake?")
for q in "${questions[@]}"; do
  for s in "${systems[@]}"; do
    code=$(curl -sS -o "$work/resp.json" -w '%{http_code}' -H 'Content-Type: application/json' \
      -d "{\"messages\": [{\"role\": \"system\", \"content\": \"$s\"}, {\"role\": \"user\", \"content\": \"$q\"}], \"max_tokens\": 4, \"temperature\": 0}" \
      "$url/v1/chat/completions")
    [[ "$code" == 200 ]] || { echo "chat completion answered $code:"; cat "$work/resp.json"; exit 1; }
  done
done

stats=$(curl -fsS "$url/v1/cache/stats")
prompt_tokens=$(echo "$stats" | json_get 'd["prompt_tokens"]')
saved_tokens=$(echo "$stats" | json_get 'd["tokens_saved"]')
device_tokens=$(echo "$stats" | json_get 'd["cached_tokens"]["device"]')
expected=$(python3 -c "print($saved_tokens / $prompt_tokens)")
expected_device=$(python3 -c "print($device_tokens / $prompt_tokens)")
echo "daemon: prompt_tokens=$prompt_tokens tokens_saved=$saved_tokens -> hit ratio $expected (device $expected_device)"
python3 -c "import sys; sys.exit(0 if 0 < $expected < 1 else 1)" || {
  echo "the workload should give a hit ratio strictly between 0 and 1"; exit 1; }

# Wait until Prometheus has scraped the final counters.
for _ in $(seq 1 100); do
  seen=$(promql 'sum(prefixd_prompt_tokens_total)')
  [[ "$seen" == "$prompt_tokens" ]] && break
  sleep 0.2
done
[[ "$seen" == "$prompt_tokens" ]] || { echo "prometheus shows $seen prompt tokens, the daemon $prompt_tokens"; exit 1; }

# The dashboard's expressions, with its variables bound: all jobs and
# instances, and a rate window that spans the whole test.
bind_vars() { sed -e 's/\$job/.*/g; s/\$instance/.*/g; s/\$__rate_interval/10m/g'; }
hit_expr=$(json_get '[p for p in d["panels"] if p["id"] == 1][0]["targets"][0]["expr"]' <"$grafana_json" | bind_vars)
tier_expr=$(json_get '[p for p in d["panels"] if p["id"] == 2][0]["targets"][0]["expr"]' <"$grafana_json" | bind_vars)
echo "PromQL: $hit_expr"
got=$(promql "$hit_expr")
got_device=$(curl -fsS "$prom/api/v1/query" --data-urlencode "query=$tier_expr" |
  json_get '[r["value"][1] for r in d["data"]["result"] if r["metric"].get("tier") == "device"][0]')
echo "prometheus: hit ratio $got (device $got_device)"
python3 - "$got" "$expected" "$got_device" "$expected_device" <<'PY'
import sys
got, expected, got_device, expected_device = map(float, sys.argv[1:])
tol = 1e-6
if abs(got - expected) > tol:
    sys.exit(f"hit ratio: prometheus {got} != daemon {expected}")
if abs(got_device - expected_device) > tol:
    sys.exit(f"device hit ratio: prometheus {got_device} != daemon {expected_device}")
PY

# Every expression of the dashboard is valid PromQL and evaluates.
python3 - "$grafana_json" "$prom" <<'PY'
import json, sys, urllib.parse, urllib.request
dash, prom = json.load(open(sys.argv[1])), sys.argv[2]
for panel in dash["panels"]:
    for t in panel["targets"]:
        expr = (t["expr"].replace("$job", ".*").replace("$instance", ".*")
                .replace("$__rate_interval", "10m"))
        url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            body = json.load(urllib.request.urlopen(url))
        except Exception as e:
            sys.exit(f"panel {panel['id']} ({panel['title']}): {e}: {expr}")
        if body.get("status") != "success":
            sys.exit(f"panel {panel['id']} ({panel['title']}): {body}: {expr}")
print("all dashboard expressions evaluate")
PY

stop_prefixd "$work/daemon"
echo "ok"
