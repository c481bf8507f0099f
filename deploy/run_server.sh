#!/bin/bash
# README command 1: set everything up, build the server optimised, and run it
# on the bundled demo model (gRPC on 127.0.0.1:50051, /metrics on :9400).
# Extra arguments are passed to moeserve, e.g. --port=50052.
# The build shows one progress line, not the compiler's log; that log is
# printed only when the build fails (and kept in the file it names).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh

log="${TMPDIR:-/tmp}/moeserve-build.log"
echo "building moeserve (optimised; a first build takes several minutes)"
bazel build --config=opt --color=no --curses=no --show_progress_rate_limit=1 \
  //server:moeserve //tools:moeserve_client >"$log" 2>&1 &
build_pid=$!
last=""
while kill -0 "$build_pid" 2>/dev/null; do
  # Bazel's progress lines look like "[123 / 456] Compiling engine/x.cc; ...".
  step="$(grep -o '^\[[0-9,]* / [0-9,]*\]' "$log" | tail -n 1 || true)"
  if [ -n "$step" ] && [ "$step" != "$last" ]; then
    if [ -t 1 ]; then printf '\r  %s actions ' "$step"; fi
    last="$step"
  fi
  sleep 1
done
if ! wait "$build_pid"; then
  [ -t 1 ] && echo
  echo "build failed (full log: $log):"
  grep -v '^\[[0-9,]* / ' "$log" | tail -n 80
  exit 1
fi
[ -t 1 ] && printf '\r  done%*s\n' 30 ''
exec bazel-bin/server/moeserve --model_dir=models/demo "$@"
