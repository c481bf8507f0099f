#!/bin/bash
# A real Prometheus (Debian's `prometheus`, a declared dependency installed by
# deploy/setup.sh) scrapes a real moeserve running three A/B engines (lru, overlap,
# self_spec); a query
# through Prometheus's HTTP API must return moeserve_expert_requests_total for
# every engine, with the values /metrics shows, and the self_spec engine
# alone has drafted. Also `promtool check metrics`.
#
# Args: <moeserve binary> <moeserve_client binary>
set -euo pipefail
server="$1"
client="$2"
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
  for pid in $prom_pid $server_pid; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in $prom_pid $server_pid; do
    wait "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT
on_failure() {
  echo "---- moeserve log" >&2; tail -n 30 "$tmp/moeserve.log" >&2 || true
  echo "---- prometheus log" >&2; tail -n 30 "$tmp/prometheus.log" >&2 || true
}
trap 'on_failure' ERR
fail() { echo "FAIL: $*" >&2; on_failure; exit 1; }

"$server" --port="$grpc_port" --metrics_port="$metrics_port" \
  --model_dir=models/demo --threads=2 --ab=lru=0.4,overlap=0.3,self_spec=0.3 \
  --expert_cache_ratio=0.5 --drain_seconds=1 >"$tmp/moeserve.log" 2>&1 &
server_pid=$!

cat >"$tmp/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: moeserve
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
YAML
/usr/bin/promtool check config "$tmp/prometheus.yml" >/dev/null
/usr/bin/prometheus --config.file="$tmp/prometheus.yml" \
  --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!

# Wait (60 s at most) for the model to be served: /healthz answers 200.
for i in $(seq 600); do
  if curl -sf "http://127.0.0.1:$metrics_port/healthz" >/dev/null; then break; fi
  kill -0 "$server_pid" 2>/dev/null || fail "moeserve exited"
  [ "$i" -lt 600 ] || fail "moeserve never became healthy"
  sleep 0.1
done

# Traffic for both engines, chosen by name.
for policy in lru overlap self_spec; do
  for prompt in "The LORD" "And God said"; do
    "$client" --target="127.0.0.1:$grpc_port" --prompt="$prompt" \
      --max_new_tokens=8 --policy="$policy" >"$tmp/client.out" 2>&1 ||
      { cat "$tmp/client.out" >&2; fail "client failed for policy $policy"; }
  done
done

curl -sf "http://127.0.0.1:$metrics_port/metrics" >"$tmp/metrics.txt"
if ! /usr/bin/promtool check metrics <"$tmp/metrics.txt" >"$tmp/promtool.out" 2>&1; then
  cat "$tmp/promtool.out" >&2
  fail "promtool check metrics rejected /metrics"
fi
[ ! -s "$tmp/promtool.out" ] ||
  { cat "$tmp/promtool.out" >&2; fail "promtool check metrics has lint findings"; }

# Poll Prometheus (40 s at most) until its query returns, for both engines, the
# hit and miss series with the values this idle server's /metrics shows.
"$py" - "$prom_port" "$tmp/metrics.txt" <<'PY'
import json, re, sys, time, urllib.parse, urllib.request

port, metrics_file = sys.argv[1], sys.argv[2]
want = {}
for line in open(metrics_file):
    m = re.match(r'moeserve_expert_requests_total\{(.*)\} (\S+)$', line)
    if m:
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        want[(labels["policy"], labels["result"])] = float(m.group(2))
expected_keys = {(p, r) for p in ("lru", "overlap", "self_spec")
                 for r in ("hit", "hit_loading", "miss", "inplace")}
assert set(want) == expected_keys, f"/metrics has {sorted(want)}"
assert all(v > 0 for (p, r), v in want.items() if r == "miss"), want
# No policy of these computes in place (only utility does).
assert all(v == 0 for (p, r), v in want.items() if r == "inplace"), want
# The self_spec engine drafted and verified; the others did not.
drafts = {}
for line in open(metrics_file):
    m = re.match(r'moeserve_spec_decode_num_drafts_total\{policy="(\w+)"\} (\S+)$',
                 line)
    if m:
        drafts[m.group(1)] = float(m.group(2))
assert drafts.get("self_spec", 0) > 0 and drafts.get("lru") == 0, drafts


def query(q):
    url = (f"http://127.0.0.1:{port}/api/v1/query?" +
           urllib.parse.urlencode({"query": q}))
    with urllib.request.urlopen(url, timeout=5) as reply:
        body = json.load(reply)
    assert body["status"] == "success", body
    return body["data"]["result"]


got, up, deadline = None, None, time.time() + 40
while time.time() < deadline:
    try:
        up = query('up{job="moeserve"}')
        got = {(s["metric"].get("policy"), s["metric"].get("result")):
               float(s["value"][1])
               for s in query("moeserve_expert_requests_total")}
    except (OSError, ValueError) as e:  # Prometheus still starting
        got = repr(e)
    # `up` is asked first: a scrape can land between the two queries, so
    # the series may match while `up` was still empty; ask again then.
    if got == want and up:
        break
    time.sleep(0.5)
else:
    sys.exit(f"FAIL: Prometheus query moeserve_expert_requests_total returned "
             f"{got!r}, want {want!r} (up: {up!r})")
assert up and up[0]["value"][1] == "1", up
print(f"Prometheus returned {len(got)} series for both engines: {got}")
PY
echo PASS
