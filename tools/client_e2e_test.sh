#!/bin/bash
# moeserve_client against the real server on the demo model: --help and
# --version, streamed --json (every line parses; the last carries the finish
# reason and usage), --unary --json, --tokenize both ways (special tokens
# kept and skipped), --list_models,
# and an invalid request as a JSON error with exit status 1.
# Args: <moeserve binary> <moeserve_client binary>
set -euo pipefail
SERVER="$1"
CLIENT="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

"$CLIENT" --help >"$tmp/help.txt"
for group in "Connection:" "Mode and output:" "Request:" "Sampling:" \
  "--json (default: false)" "--target (default: 127.0.0.1:50051)"; do
  grep -qF -- "$group" "$tmp/help.txt" || { echo "help lacks $group"; cat "$tmp/help.txt"; exit 1; }
done
"$CLIENT" --version | grep -qE '^moeserve_client [0-9]+\.[0-9]+\.[0-9]+ \(git [0-9a-f]{7,}|unknown'

port=$(( 20000 + RANDOM % 20000 ))
"$SERVER" --model_dir=models/demo --port="$port" --metrics_port=0 \
  --threads=1 >"$tmp/server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  grep -q "health SERVING" "$tmp/server.log" && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/server.log"; exit 1; }
  sleep 0.1
done
T="--target=127.0.0.1:$port"

"$CLIENT" "$T" --prompt="Once upon a time" --max_new_tokens=6 --ignore_eos \
  --logprobs=2 --seed=3 --temperature=0.7 --json >"$tmp/stream.jsonl"
"$CLIENT" "$T" --prompt="Once upon a time" --max_new_tokens=6 --ignore_eos \
  --unary --json >"$tmp/unary.json"
"$CLIENT" "$T" --tokenize --prompt="Hello world" --json >"$tmp/encode.json"
ids="$(/usr/bin/python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["token_ids"])))' "$tmp/encode.json")"
"$CLIENT" "$T" --tokenize --prompt_token_ids="$ids" >"$tmp/decode.txt"
# With BOS and EOS (the demo's 1 and 2): kept unless asked, as HF's decode.
"$CLIENT" "$T" --tokenize --prompt_token_ids="1,$ids,2" >"$tmp/decode_special.txt"
"$CLIENT" "$T" --tokenize --prompt_token_ids="1,$ids,2" --skip_special_tokens \
  >"$tmp/decode_skip.txt"
"$CLIENT" "$T" --list_models >"$tmp/models.json"
rc=0
"$CLIENT" "$T" --prompt=x --top_p=2 --json >"$tmp/error.json" || rc=$?
[ "$rc" -eq 1 ] || { echo "invalid request exited $rc, want 1"; exit 1; }

/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
lines = [json.loads(l) for l in open(f"{tmp}/stream.jsonl")]
assert len(lines) >= 1, lines
tokens = sum(len(l["token_ids"]) for l in lines)
assert tokens == 6, (tokens, lines)
assert all(len(l["logprobs"]) == len(l["token_ids"]) for l in lines), lines
assert all(l["finish_reason"] == "FINISH_REASON_UNSPECIFIED" for l in lines[:-1])
last = lines[-1]
assert last["finish_reason"] == "LENGTH", last
assert last["usage"]["completion_tokens"] == 6, last
assert last["seed"] == "3", last
assert [l["index"] for l in lines] == list(range(len(lines)))
unary = json.load(open(f"{tmp}/unary.json"))
assert len(unary["token_ids"]) == 6 and unary["finish_reason"] == "LENGTH", unary
assert open(f"{tmp}/decode.txt").read().strip() == "Hello world"
assert open(f"{tmp}/decode_special.txt").read().strip() == "<s> Hello world</s>"
assert open(f"{tmp}/decode_skip.txt").read().strip() == "Hello world"
models = json.load(open(f"{tmp}/models.json"))
assert models["models"][0]["name"] == "demo", models
assert len(models["models"][0]["engines"]) >= 1, models
error = json.load(open(f"{tmp}/error.json"))
assert error["error"]["code"] == "INVALID_ARGUMENT", error
assert "top_p" in error["error"]["message"], error
print("client e2e: OK")
PY
