#!/bin/bash
# A short soak against the real server on the demo model: every action runs,
# nothing ends with an unexpected status, the server survives and stops
# cleanly on SIGTERM, and the JSON report carries the figures the README
# quotes. No timing or growth thresholds (the soak is a benchmark).
set -euo pipefail
export SERVER="$1" SOAK="$2"
out="${TEST_TMPDIR:-/tmp}/soak.json"
tools/soak/soak.sh --no_build --server_flags="--threads=1" -- \
  --clients=4 --warmup=2s --duration=8s --report_every=4s --settle=1s \
  --max_new_tokens=8 --json_out="$out"
/usr/bin/python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert not r["server_exited"], r
t = r["tally"]
assert t["unexpected"] == 0, t["unexpected_samples"]
for action in ("stream", "cancel", "deadline", "time_limit", "unary", "abort",
               "tokenize", "invalid", "disconnect"):
    assert sum(t["by_action"][action].values()) > 0, ("no calls of", action, t)
assert t["by_action"]["invalid"].get("INVALID_ARGUMENT", 0) > 0, t
for key in ("baseline", "end_under_load", "after_settle", "peak"):
    for field in ("rss_mib", "threads", "open_fds"):
        assert r[key][field] > 0, (key, field, r[key])
assert r["calls_per_second"] > 0 and "rss_growth_percent" in r
print("soak smoke: OK", t["calls"], "calls")
PY
