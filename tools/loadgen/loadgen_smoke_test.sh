#!/bin/bash
# Smoke test of moeserve_loadgen: starts the real server on the demo model on
# free ports, runs a tiny two-level load and checks that the JSON report has
# every field with positive values. Measures nothing; no timing thresholds.
set -euo pipefail
server="$1"
loadgen="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

# Port 0: the server binds a free port and logs it.
"$server" --model_dir=models/demo --port=0 --metrics_port=0 --threads=1 \
  >"$tmp/server.log" 2>&1 &
server_pid=$!
trap 'kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true' EXIT

port=""
for _ in $(seq 1 300); do
  port="$(sed -n 's/.*gRPC listening on [^ ]*:\([0-9][0-9]*\).*/\1/p' \
    "$tmp/server.log" | head -n1)"
  [[ -n "$port" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/server.log"; exit 1; }
  sleep 0.1
done
if [[ -z "$port" ]]; then
  echo "server did not report its port"; cat "$tmp/server.log"; exit 1
fi

json="$tmp/x.json"
"$loadgen" --target="127.0.0.1:$port" --wait_ready_seconds=60 \
  --concurrency=1,2 --requests_per_level=2 --max_new_tokens=4 \
  --json_out="$json"

# A non-loopback target is refused before any connection (exit 2).
rc=0
"$loadgen" --target=10.1.2.3:50051 >/dev/null 2>&1 || rc=$?
[[ "$rc" == 2 ]] || { echo "non-loopback target: exit $rc, want 2"; exit 1; }

/usr/bin/python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["machine"]["cores"] > 0, report["machine"]
assert report["server"] and report["server"][0]["engines"], report["server"]
levels = report["levels"]
assert [l["concurrency"] for l in levels] == [1, 2], levels
for l in levels:
    assert l["requests_ok"] == 2 and not l["errors"], l
    assert l["tokens"] == 8, l  # ignore_eos: exactly max_new_tokens each
    for key in ("wall_s", "tokens_per_s", "ttft_p50_ms", "ttft_p99_ms",
                "tpot_p50_ms", "tpot_p99_ms"):
        assert l[key] > 0, (key, l)
ratio = report["throughput_ratio"]
assert ratio["high_concurrency"] == 2 and ratio["low_concurrency"] == 1, ratio
assert ratio["ratio"] > 0, ratio
print("loadgen smoke: OK")
PY
