#!/bin/bash
# Installs into a temporary prefix (deploy/install_files.sh, what
# deploy/install.sh runs after building) and checks the installed server,
# started from another directory with an empty environment, serves the
# bundled demo model to the installed client; and that a server installed
# without its plugin exits non-zero naming the missing file as an install
# problem (--exit_on_load_failure, on by default).
# Args: <moeserve> <moeserve_client> <libmoeserve_spm.so>
set -euo pipefail
SERVER="$1"
CLIENT="$2"
PLUGIN="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
prefix="$tmp/prefix"
deploy/install_files.sh "$prefix" models "$SERVER" "$CLIENT" "$PLUGIN"
for f in bin/moeserve bin/moeserve_client lib/moeserve/libmoeserve_spm.so \
  share/moeserve/models/demo/config.json \
  share/moeserve/models/demo/model.safetensors \
  share/moeserve/models/demo-draft/config.json; do
  [ -f "$prefix/$f" ] && [ ! -L "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done

mkdir -p "$tmp/elsewhere"
cd "$tmp/elsewhere"
port=$(( 20000 + RANDOM % 20000 ))
env -i "$prefix/bin/moeserve" --port="$port" --metrics_port=0 --threads=1 \
  >"$tmp/server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  grep -q "health SERVING" "$tmp/server.log" && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/server.log"; exit 1; }
  sleep 0.1
done
grep -q "health SERVING" "$tmp/server.log" || { cat "$tmp/server.log"; exit 1; }
env -i "$prefix/bin/moeserve_client" --target="127.0.0.1:$port" \
  --prompt="Once upon a time" --max_new_tokens=4 --ignore_eos --unary --json \
  >"$tmp/answer.json"
/usr/bin/python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))
assert len(a["token_ids"]) == 4 and a["finish_reason"] == "LENGTH", a
' "$tmp/answer.json"
kill -TERM "$server_pid"
wait "$server_pid"
trap - EXIT
env -i "$prefix/bin/moeserve" --version | grep -q "^moeserve "

# The same server without its plugin: an install problem, exit non-zero.
broken="$tmp/broken"
mkdir -p "$broken/bin"
cp "$prefix/bin/moeserve" "$broken/bin/"
cp -r "$prefix/share" "$broken/"
rc=0
env -i timeout 60 "$broken/bin/moeserve" --port=0 --metrics_port=0 \
  --threads=1 >"$tmp/broken.log" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
  echo "server without its plugin exited $rc (want non-zero, not a timeout)"
  cat "$tmp/broken.log"
  exit 1
fi
grep -q "FAILED_PRECONDITION: install problem: cannot load the plugin libmoeserve_spm.so" \
  "$tmp/broken.log" || { cat "$tmp/broken.log"; exit 1; }
if grep -q "not a sentencepiece model" "$tmp/broken.log"; then
  echo "a missing plugin must not be blamed on the model"; cat "$tmp/broken.log"; exit 1
fi
echo "install: OK"
