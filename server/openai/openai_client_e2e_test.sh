#!/bin/bash
# The OpenAI-compatible HTTP API end to end: a real moeserve on models/demo
# with --http_port, driven by the official `openai` npm client
# (openai_client_e2e_test.mjs: completions and chat, streamed and not, stop
# strings, max_tokens, seeds, n, invalid fields, unknown model, full queue,
# /v1/models, /health), then by curl: a server-sent event stream that ends
# with "data: [DONE]", and a client that goes away mid-stream, after which
# moeserve_num_requests_running is back to 0; last SIGTERM with a stream in
# flight (/health 503 while draining, the stream cut with an error event
# and data: [DONE], exit 0).
#
# Installs openai@$OPENAI_VERSION (Apache-2.0) into $MOESERVE_NPM_OPENAI
# (default: ~/.cache/moeserve-npm-openai of the real user's home, kept
# between runs), as engine/hf_tokenizer/parity_test.sh installs its
# packages.
#
# Args: <moeserve binary>
set -euo pipefail
server="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
here="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-__main__}/server/openai"
[ -d "$here" ] || here="$(cd "$(dirname "$0")" && pwd)"
py=/usr/bin/python3
OPENAI_VERSION=4.95.0

for cmd in node npm curl "$py"; do
  command -v "$cmd" >/dev/null ||
    { echo "FAIL: $cmd not found (the test needs Node.js, npm, curl, python3)" >&2; exit 1; }
done

# Bazel sets HOME to the test's temporary directory: cache under the real one
# so the package is fetched once, not on every run.
real_home="$(getent passwd "$(id -u)" | cut -d: -f6)"
npm_dir="${MOESERVE_NPM_OPENAI:-${real_home:-${TEST_TMPDIR:-/tmp}}/.cache/moeserve-npm-openai}"
"${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-__main__}/tools/testing/npm_install_pinned.sh" \
  openai_client_e2e_test "$npm_dir" "openai@$OPENAI_VERSION"

free_port() {
  "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
grpc_port=$(free_port)
metrics_port=$(free_port)
http_port=$(free_port)
base="http://127.0.0.1:$http_port"
metrics="http://127.0.0.1:$metrics_port/metrics"

server_pid=""
curl_pid=""
cleanup() {
  for pid in $curl_pid $server_pid; do kill "$pid" 2>/dev/null || true; done
  for pid in $curl_pid $server_pid; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "---- moeserve log" >&2; tail -n 40 "$tmp/moeserve.log" >&2 || true
  exit 1
}

# One running sequence and two waiting (the mjs fills the queue); a quarter
# of the experts in the fast tier over an emulated slow link, so that a long
# generation lasts seconds (the policy never changes the tokens).
"$server" --port="$grpc_port" --metrics_port="$metrics_port" \
  --http_port="$http_port" --model_dir=models/demo --threads=2 \
  --max_num_seqs=1 --max_waiting=2 --expert_cache_ratio=0.25 \
  --link_gbps=0.2 --drain_seconds=2 >"$tmp/moeserve.log" 2>&1 &
server_pid=$!

# /health answers 503 while the model loads, then 200 (60 s at most).
for i in $(seq 600); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$base/health" || true)
  [ "$code" = 200 ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "moeserve exited"
  [ "$i" -lt 600 ] || fail "/health never answered 200 (last: $code)"
  sleep 0.1
done
grep -q "chat template: kjv_dialogue" "$tmp/moeserve.log" ||
  fail "the demo model's chat template was not recognised"

echo "== openai npm client"
node "$here/openai_client_e2e_test.mjs" "$npm_dir" "$base/v1" "$metrics" ||
  fail "openai client checks"

echo "== curl: a stream ends with data: [DONE]"
curl -sfN "$base/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "lru", "prompt": "The LORD", "max_tokens": 6, "stream": true}' \
  >"$tmp/stream.txt" || fail "curl stream"
grep -q '^data: {.*"object":"text_completion"' "$tmp/stream.txt" ||
  fail "no text_completion chunk: $(head -c 300 "$tmp/stream.txt")"
[ "$(grep -v '^$' "$tmp/stream.txt" | tail -n 1)" = "data: [DONE]" ] ||
  fail "the stream does not end with data: [DONE]: $(tail -c 300 "$tmp/stream.txt")"

running() {
  curl -sf "$metrics" | awk '/^moeserve_num_requests_running/ {print $2 + 0}'
}
cancelled() {
  curl -sf "$metrics" |
    awk '/^moeserve_request_success_total.*finished_reason="cancelled"/ {print $2}'
}

echo "== curl: a client that leaves mid-stream frees its sequence"
before=$(cancelled)
curl -sN "$base/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "The LORD", "max_tokens": 512, "ignore_eos": true, "stream": true}' \
  >"$tmp/cut.txt" 2>/dev/null &
curl_pid=$!
for i in $(seq 200); do
  [ "$(grep -c '^data: ' "$tmp/cut.txt" || true)" -ge 3 ] && [ "$(running)" = 1 ] && break
  [ "$i" -lt 200 ] || fail "the long stream never ran ($(running) running)"
  sleep 0.05
done
kill "$curl_pid"
wait "$curl_pid" 2>/dev/null || true
curl_pid=""
grep -q 'data: \[DONE\]' "$tmp/cut.txt" && fail "the stream ended before the client left"
for i in $(seq 100); do
  [ "$(running)" = 0 ] && break
  [ "$i" -lt 100 ] || fail "moeserve_num_requests_running stayed $(running) after the client left"
  sleep 0.1
done
after=$(cancelled)
"$py" -c "import sys; sys.exit(0 if float('$after') > float('$before') else 1)" ||
  fail "no request counted cancelled ($before -> $after)"

echo "== requests counted with the gRPC ones"
# (A file, not a pipe: grep -q would close it early and, with pipefail,
# curl's broken pipe fail the check.)
curl -sf "$metrics" >"$tmp/metrics.txt" || fail "GET /metrics"
grep -q 'moeserve_grpc_requests_total{method="/v1/completions",code="OK"}' \
  "$tmp/metrics.txt" || fail "no moeserve_grpc_requests_total for /v1/completions"
grep -q 'moeserve_grpc_requests_total{method="/v1/completions",code="RESOURCE_EXHAUSTED"}' \
  "$tmp/metrics.txt" || fail "the 429 was not counted"

echo "== SIGTERM mid-stream: /health 503, the stream cut at the drain (error event, [DONE]), exit 0"
curl -sN "$base/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "The LORD", "max_tokens": 512, "ignore_eos": true, "stream": true}' \
  >"$tmp/drain.txt" 2>/dev/null &
curl_pid=$!
for i in $(seq 200); do
  [ "$(grep -c '^data: ' "$tmp/drain.txt" || true)" -ge 2 ] && break
  [ "$i" -lt 200 ] || fail "the stream to drain never started"
  sleep 0.05
done
kill -TERM "$server_pid"
sleep 0.3
code=$(curl -s -o /dev/null -w '%{http_code}' "$base/health" || true)
[ "$code" = 503 ] || fail "/health answered $code while draining, not 503"
wait "$server_pid" || fail "moeserve exited $? on SIGTERM"
server_pid=""
wait "$curl_pid" 2>/dev/null || true  # its connection was closed
curl_pid=""
grep -q '"finish_reason":"length"' "$tmp/drain.txt" &&
  fail "a 512-token stream finished within --drain_seconds=2"
# Cut, it still ends as a stream: an error event, then [DONE] (issue 29).
grep -q '^data: {"error".*shutting down' "$tmp/drain.txt" ||
  fail "the stream cut by the drain has no error event"
[ "$(grep '^data: ' "$tmp/drain.txt" | tail -n 1)" = "data: [DONE]" ] ||
  fail "the stream cut by the drain does not end with data: [DONE]"
echo PASS
