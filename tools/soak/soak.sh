#!/bin/bash
# Starts moeserve on a model, runs moeserve_soak against it, then stops the
# server with SIGTERM and reports whether it exited cleanly within its drain.
#
# Usage (from the workspace root):
#   tools/soak/soak.sh [--no_build] [--server_flags="--threads=2 ..."] \
#       -- [moeserve_soak flags, e.g. --clients=8 --duration=1h --json_out=F]
# Builds //server:moeserve and //tools/soak:moeserve_soak with --config=opt
# first (unless --no_build); B=... overrides the binaries' directory.
set -euo pipefail
build=1
server_flags="--threads=2"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no_build) build=0; shift ;;
    --server_flags=*) server_flags="${1#*=}"; shift ;;
    --) shift; break ;;
    *) echo "soak.sh: unknown argument $1 (soak flags go after --)" >&2; exit 2 ;;
  esac
done
if [[ "$build" == 1 ]]; then
  bazel build --config=opt //server:moeserve //tools/soak:moeserve_soak
fi
B="${B:-bazel-out/k8-optopt/bin}"
SERVER="${SERVER:-$B/server/moeserve}"
SOAK="${SOAK:-$B/tools/soak/moeserve_soak}"
port=$(( 20000 + RANDOM % 20000 ))
log="$(mktemp /tmp/moeserve_soak_server.XXXXXX.log)"
# shellcheck disable=SC2086
"$SERVER" --model_dir=models/demo --port="$port" --metrics_port=0 \
  $server_flags >"$log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  grep -q "health SERVING" "$log" && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
echo "server pid $server_pid on 127.0.0.1:$port (log $log)"
rc=0
"$SOAK" --target="127.0.0.1:$port" --server_pid="$server_pid" "$@" || rc=$?
start=$(date +%s.%N)
kill -TERM "$server_pid"
server_rc=0
wait "$server_pid" || server_rc=$?
trap - EXIT
printf 'server: SIGTERM -> exit %d in %.2f s\n' "$server_rc" \
  "$(echo "$(date +%s.%N) - $start" | bc)"
[[ "$server_rc" == 0 ]] || rc=1
exit "$rc"
