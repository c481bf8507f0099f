#!/bin/bash
# Every panel query of deploy/grafana/moeserve-dashboard.json returns series
# from a real Prometheus (Debian's `prometheus`, installed by deploy/setup.sh)
# that scrapes a real moeserve every second and evaluates
# deploy/prometheus/moeserve.rules.yml every second. The server runs the
# engines of an A/B setup's ConfigMap (deploy/k8s/setups/*/engines.json, so
# the real server also accepts that file), and moeserve_loadgen drives every
# engine after Prometheus's first scrape so the counters move.
#
# Args: <moeserve> <moeserve_loadgen> <dashboard_queries.py> <dashboard.json>
#       <moeserve.rules.yml> <engines.json> <drafting engine>
set -euo pipefail
server="$1"
loadgen="$2"
queries="$3"
dashboard="$4"
rules="$5"
engines="$6"
drafter="$7"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
py=/usr/bin/python3

for tool in /usr/bin/prometheus /usr/bin/promtool curl; do
  command -v "$tool" >/dev/null ||
    { echo "FAIL: $tool is missing: install Debian's 'prometheus' and 'curl' packages (deploy/setup.sh does)" >&2; exit 1; }
done

free_port() {
  "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
grpc_port=$(free_port)
metrics_port=$(free_port)
prom_port=$(free_port)

server_pid=""
prom_pid=""
cleanup() {
  for pid in $prom_pid $server_pid; do kill "$pid" 2>/dev/null || true; done
  for pid in $prom_pid $server_pid; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
logs() {
  echo "---- moeserve log" >&2; tail -n 30 "$tmp/moeserve.log" >&2 || true
  echo "---- prometheus log" >&2; tail -n 30 "$tmp/prometheus.log" >&2 || true
}
fail() { echo "FAIL: $*" >&2; logs; exit 1; }

"$server" --port="$grpc_port" --metrics_port="$metrics_port" \
  --model_dir=models/demo --threads=2 --engines_config="$engines" \
  --drain_seconds=1 >"$tmp/moeserve.log" 2>&1 &
server_pid=$!

cp "$rules" "$tmp/moeserve.rules.yml"
cat >"$tmp/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - moeserve.rules.yml
scrape_configs:
  - job_name: moeserve
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
YAML
/usr/bin/promtool check config "$tmp/prometheus.yml" >"$tmp/promtool.out" 2>&1 ||
  { cat "$tmp/promtool.out" >&2; fail "promtool check config"; }
/usr/bin/prometheus --config.file="$tmp/prometheus.yml" \
  --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!

# The model is served (60 s at most): /healthz answers 200.
for i in $(seq 600); do
  if curl -sf "http://127.0.0.1:$metrics_port/healthz" >/dev/null; then break; fi
  kill -0 "$server_pid" 2>/dev/null || fail "moeserve exited (engines_config $engines)"
  [ "$i" -lt 600 ] || fail "moeserve never became healthy"
  sleep 0.1
done
# Prometheus has scraped it once (30 s at most), so the traffic below moves
# counters between two scrapes and every rate has something to show.
for i in $(seq 300); do
  if curl -sf "http://127.0.0.1:$prom_port/api/v1/query?query=up%7Bjob%3D%22moeserve%22%7D%3D%3D1" |
      grep -q '"value"'; then break; fi
  kill -0 "$prom_pid" 2>/dev/null || fail "prometheus exited"
  [ "$i" -lt 300 ] || fail "prometheus never scraped moeserve"
  sleep 0.1
done

# Traffic for every engine of the file, chosen by name.
for engine in $("$py" -c 'import json,sys; print(" ".join(e["name"] for e in json.load(open(sys.argv[1]))["engines"]))' "$engines"); do
  "$loadgen" --target="127.0.0.1:$grpc_port" --policy="$engine" --concurrency=2 \
    --requests_per_level=8 --max_new_tokens=16 --warmup_requests=0 \
    --max_seconds_per_level=30 >"$tmp/loadgen.out" 2>&1 ||
    { cat "$tmp/loadgen.out" >&2; fail "loadgen failed for engine $engine"; }
done

"$py" "$queries" "$prom_port" "$dashboard" "$engines" "$drafter" "$rules" ||
  fail "dashboard queries"
echo PASS
