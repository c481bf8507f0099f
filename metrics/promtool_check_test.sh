#!/bin/bash
# Lints metrics_dump's exposition with `promtool check metrics`; any output
# or non-zero exit is a failure. Also checks that promtool rejects a broken
# exposition, so a promtool that accepts everything cannot pass this test.
set -u

dump="$1"
promtool="$(command -v promtool || true)"
if [[ -z "${promtool}" && -x /usr/bin/promtool ]]; then
  promtool=/usr/bin/promtool
fi
if [[ -z "${promtool}" ]]; then
  echo "FAIL: promtool not found (apt-get install prometheus); it is a" \
    "declared dependency of this test." >&2
  exit 1
fi

text="$("${dump}")" || { echo "FAIL: metrics_dump exited non-zero" >&2; exit 1; }
if ! grep -q '^moeserve_time_to_first_token_seconds_bucket{policy="lru",le="+Inf"} 6$' \
    <<<"${text}"; then
  echo "FAIL: metrics_dump output lacks the expected histogram" >&2
  exit 1
fi

report="$("${promtool}" check metrics <<<"${text}" 2>&1)"
rc=$?
if [[ ${rc} -ne 0 || -n "${report}" ]]; then
  echo "FAIL: promtool check metrics (exit ${rc}):" >&2
  echo "${report}" >&2
  echo "--- exposition ---" >&2
  echo "${text}" >&2
  exit 1
fi

bad=$'# HELP x_total X.\n# TYPE x_total counter\nx_total{a="unterminated} 1\n'
if "${promtool}" check metrics <<<"${bad}" >/dev/null 2>&1; then
  echo "FAIL: promtool accepted a malformed exposition" >&2
  exit 1
fi
echo "PASS: promtool check metrics accepts metrics_dump's output"
