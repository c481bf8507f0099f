#!/bin/bash
# The real server accepts every A/B setup's engines.json
# (deploy/k8s/setups/*/engines.json, the ConfigMaps' content): started with
# it, as the Deployment starts it, it becomes healthy and /metrics shows
# moeserve_engine_info for exactly the file's engines with their A/B weights.
#
# Args: <moeserve> <engines.json>...
set -euo pipefail
server="$1"
shift
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
py=/usr/bin/python3
command -v curl >/dev/null || { echo "FAIL: curl is missing" >&2; exit 1; }

free_port() {
  "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

passed=0
for engines in "$@"; do
  setup="$(basename "$(dirname "$engines")")"
  metrics_port=$(free_port)
  "$server" --port="$(free_port)" --metrics_port="$metrics_port" \
    --model_dir=models/demo --threads=2 --engines_config="$engines" \
    --drain_seconds=1 >"$tmp/$setup.log" 2>&1 &
  server_pid=$!
  for i in $(seq 600); do
    if curl -sf "http://127.0.0.1:$metrics_port/healthz" >/dev/null; then break; fi
    if ! kill -0 "$server_pid" 2>/dev/null || [ "$i" -eq 600 ]; then
      tail -n 20 "$tmp/$setup.log" >&2
      echo "FAIL: $setup: moeserve --engines_config=$engines did not become healthy" >&2
      exit 1
    fi
    sleep 0.1
  done
  curl -sf "http://127.0.0.1:$metrics_port/metrics" >"$tmp/$setup.metrics"
  "$py" - "$engines" "$tmp/$setup.metrics" <<'PY'
import json, re, sys
cfg = json.load(open(sys.argv[1]))
want = {e["name"]: e.get("policy", e["name"]) for e in cfg["engines"]}
total = sum(cfg.get("ab", {}).values())
got = {}
for line in open(sys.argv[2]):
    if line.startswith("moeserve_engine_info{"):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        got[labels["policy"]] = labels
assert sorted(got) == sorted(want), f"engines {sorted(got)}, want {sorted(want)}"
for name, labels in got.items():
    assert labels["offload_policy"] == want[name], (name, labels)
    if total:
        w = cfg["ab"].get(name, 0) / total
        assert abs(float(labels["ab_weight"]) - w) < 1e-6, (name, labels["ab_weight"], w)
print(f"ok: {sys.argv[1]}: engines {sorted(got)}")
PY
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  passed=$((passed + 1))
done
[ "$passed" -ge 2 ] || { echo "FAIL: want >= 2 setups, got $passed" >&2; exit 1; }
echo "setups: $passed passed, 0 failed"
