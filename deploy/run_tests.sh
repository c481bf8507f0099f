#!/bin/bash
# README command 2 (and what .ci/run calls): set everything up and run every
# test: all Bazel test targets, the unit tests and the gRPC serving path
# again under AddressSanitizer + UndefinedBehaviorSanitizer (one build),
# the concurrency stress tests under ThreadSanitizer, and the parser fuzzers
# for a few seconds each. The last line is
# "N passed, N failed, N skipped", counting test targets (one per target and
# config) plus one per fuzzer run; a target whose every case skipped (the
# CUDA tests on a machine without a GPU) is counted as skipped, not passed.
# The line before it counts the skipped test cases (read from each target's
# test.xml).
set -uo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }

passed=0
failed=0
# "phase seconds" pairs, printed at the end: where the time went.
phase_times=()
phase_name=""
phase_start=$SECONDS
phase() {  # name: ends the running phase and starts this one
  if [ -n "$phase_name" ]; then
    phase_times+=("${phase_name} $((SECONDS - phase_start))s")
  fi
  phase_name="$1"
  phase_start=$SECONDS
}
skipped_targets=0
skipped_cases=0
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# Runs one `bazel test` invocation and adds its targets to the counts. A
# failure before any target ran (a broken BUILD file, say) counts as one.
run_bazel_tests() {
  echo "== bazel test $*"
  bazel test --keep_going --test_output=errors "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local p f
  p=$(grep -cE '^//\S+\s+(\(cached\) )?PASSED' "$log")
  f=$(grep -cE '^//\S+\s+(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  passed=$((passed + p))
  failed=$((failed + f))
  count_skips
}

# Reads the test.xml of every target that passed in the last run ($log):
# adds its skipped cases, and moves a target whose every case skipped from
# passed to skipped. bazel-testlogs points at the last run's configuration.
count_skips() {
  local target pkg name cases skips
  local -a xmls
  while read -r target; do
    pkg="${target#//}"
    name="${pkg#*:}"
    pkg="${pkg%%:*}"
    mapfile -t xmls < <(find -L "bazel-testlogs/${pkg}/${name}" \
      -name test.xml 2>/dev/null)
    [ "${#xmls[@]}" -eq 0 ] && continue
    cases=$(cat "${xmls[@]}" | grep -o '<testcase ' | wc -l)
    skips=$(cat "${xmls[@]}" | grep -o '<skipped' | wc -l)
    skipped_cases=$((skipped_cases + skips))
    if [ "$cases" -gt 0 ] && [ "$skips" -eq "$cases" ]; then
      echo "   every case skipped: ${target}"
      skipped_targets=$((skipped_targets + 1))
      passed=$((passed - 1))
    fi
  done < <(grep -oE '^//\S+\s+(\(cached\) )?PASSED' "$log" | awk '{print $1}')
}

# Every test target.
phase "tests"
run_bazel_tests //...

# Unit tests of validation, metrics, kernels, engine and policies under ASan
# and UBSan.
SANITIZED=(//server:all //metrics:all)
if [ -f kernels/cpu/BUILD ]; then SANITIZED+=(//kernels/...); fi
# Less the two tokenizer tests that cannot run under a sanitizer (RSS
# figures, and the sentencepiece plugin's RTLD_DEEPBIND, which ASan
# refuses): they would only report every case skipped.
if [ -f engine/BUILD ]; then
  SANITIZED+=(//engine/... -//engine:tokenizer_memory_test
    -//engine:tokenizer_protobuf_coexistence_test)
fi
if [ -f policies/BUILD ]; then SANITIZED+=(//policies/...); fi
# The OpenAI-compatible HTTP API's unit tests (its e2e test runs the real
# binary with the sentencepiece plugin, which the sanitizers refuse).
SANITIZED+=(//server/openai:all -//server/openai:openai_client_e2e_test)
# The whole gRPC serving path of the real binary, on a tokenizer.json model
# (the sentencepiece plugin's RTLD_DEEPBIND is refused by the sanitizers).
SANITIZED+=(//tests:tokenizer_json_serving_e2e_test)
# --config=asan is ASan and UBSan in one build (.bazelrc): no recovery, any
# report aborts (the serving e2e test checks the server's exit status).
phase "asan+ubsan"
run_bazel_tests --config=asan -- "${SANITIZED[@]}"

# Concurrency tests under ThreadSanitizer: the offload tier, the thread
# pool, the metrics registry, the engine <-> server hand-off (concurrent
# streams with cancellation, deadlines and aborts; gRPC itself is replaced by
# a transport TSan can see, since Debian's gRPC is not instrumented), and the
# OpenAI API's streams parking and waking their HTTP connections and the
# watch over parked sockets.
phase "tsan"
run_bazel_tests --config=tsan -- //engine/offload:expert_residency_stress_test \
  //engine:host_experts_test //engine:host_worker_test \
  //engine/offload:link_test \
  //engine/offload:link_transport_test //engine/offload:slot_pool_test \
  //kernels/cpu:thread_pool_test //base:mutex_test //metrics:registry_test \
  //server:serving_handoff_test //server/openai:sse_stream_test \
  //server/openai:http_api_server_test //server/openai:hangup_watch_test

# clang's thread-safety analysis over the libraries with shared state: a
# build (--config=clang_tsa, see .bazelrc), counted as one test. It runs in
# its own output base (a second Bazel server) because it reconfigures the C++
# toolchain for clang, which would throw away the g++ outputs of this one.
# clang comes with deploy/setup.sh: missing, it is a failure, not a skip.
phase "clang_tsa"
if command -v clang >/dev/null 2>&1; then
  echo "== bazel build --config=clang_tsa"
  tsa_base="${HOME}/.cache/moeserve-clang-tsa"
  if bazel --output_base="$tsa_base" build --keep_going --config=clang_tsa -- \
    //base/... //kernels/... //metrics/... //engine:all //engine/offload/... \
    //engine/builder/... //policies/... //server/... //tools/loadgen/...; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
  if [ "${CI:-}" = "true" ]; then bazel --output_base="$tsa_base" shutdown; fi
else
  echo "== clang_tsa: clang not found (deploy/setup.sh installs it)"
  failed=$((failed + 1))
fi

# Parser fuzzers (built with clang outside Bazel), briefly. A missing
# runner or clang++ is a failure, not a skip.
phase "fuzzers"
echo "== fuzzers"
if tests/fuzz/run_fuzzers.sh 10; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
fi

if [ "${CI:-}" = "true" ]; then bazel shutdown; fi
phase ""
echo "time: ${phase_times[*]}; total $((SECONDS / 60)) min $((SECONDS % 60)) s"
echo "skipped: ${skipped_cases} test cases; ${skipped_targets} targets skipped every case (not counted as passed)"
echo "${passed} passed, ${failed} failed, ${skipped_targets} skipped"
[ "$failed" -eq 0 ]
