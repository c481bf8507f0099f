#!/bin/bash
# Under the default --exit_on_load_failure, a model that cannot be loaded
# ends the process with status 1 and the reason in its log (an orchestrator
# sees a failed container, not a live NOT_SERVING one); with
# --exit_on_load_failure=false the server stays up NOT_SERVING (the other
# e2e tests cover that side).
# Args: <moeserve binary>
set -euo pipefail
server="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

expect_exit_1() {  # <name> <reason substring> <server args...>
  local name="$1" reason="$2"
  shift 2
  local rc=0
  timeout 60 "$server" --port=0 --metrics_port=0 --threads=1 "$@" \
    >"$tmp/$name.log" 2>&1 || rc=$?
  if [ "$rc" -ne 1 ]; then
    echo "FAIL $name: exit status $rc, want 1 (124 = still running at 60 s)"
    cat "$tmp/$name.log"
    exit 1
  fi
  grep -q "the model failed to load; exiting (--exit_on_load_failure)" \
    "$tmp/$name.log" || { echo "FAIL $name: no reason line"; cat "$tmp/$name.log"; exit 1; }
  grep -qF -- "$reason" "$tmp/$name.log" ||
    { echo "FAIL $name: reason lacks '$reason'"; cat "$tmp/$name.log"; exit 1; }
  echo "ok $name: exit 1, $(grep -m1 'failed to load' "$tmp/$name.log" | cut -c1-160)"
}

expect_exit_1 missing_dir "/nonexistent/model" --model_dir=/nonexistent/model

broken="$tmp/broken_model"
mkdir -p "$broken"
cp models/demo/* "$broken/"
echo '{"model_type": "mixtral", "hidden_size": ' >"$broken/config.json"
expect_exit_1 corrupt_config "config.json" --model_dir="$broken"
echo "load failure exit: OK"
