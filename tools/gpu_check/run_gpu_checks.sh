#!/bin/bash
# Runs the CUDA backend's checks and GPU figures from a bundle made by
# bundle.sh, on a machine with a GPU and the CUDA 13 runtime, from the
# workspace root (models/ and tests/golden/ are read from there):
#
#   tools/gpu_check/run_gpu_checks.sh BUNDLE LOG_DIR [tests|bench|all|whole_model]
#
# whole_model (not part of all: it would not fit one 10-minute command with
# the rest) measures the whole Qwen3-30B-A3B shape, generated in memory
# (61 GB of host RAM, ~62 GB of VRAM at ratio 1.0).
#
# Tests run side by side (one log each, a PASS/FAIL line each in summary.txt
# with the test cases run, failed and skipped: a step that ran no case or
# skipped one fails),
# then the benchmarks one at a time with nothing else on the GPU. Each step has
# its own time limit so one hang cannot eat the machine's lease.
set -uo pipefail
bundle="$(realpath "$1")"
logs="$(realpath -m "$2")"
what="${3:-all}"
mkdir -p "$logs"
summary="$logs/summary.txt"

# CUDA's libraries: the toolkit's if present, else the pip wheels'.
cuda_libs=/usr/local/cuda/lib64
if [[ ! -e "$cuda_libs/libcublasLt.so.13" ]]; then
  cuda_libs="$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null |
    head -1)")"
fi
libpath="$bundle/lib:$cuda_libs"
# Only our binaries get the bundle's libraries (python3 keeps its own).
run=(env "LD_LIBRARY_PATH=$libpath")
export MOESERVE_CUDA_PLUGIN="$bundle/bin/libmoeserve_cuda.so"
# On the GPU machine a CUDA test that skips is a failure
# (kernels/testing/cuda_skip.h), so a run cannot pass by skipping.
export MOESERVE_REQUIRE_CUDA=1
# The tests read runfiles as $TEST_SRCDIR/moeserve/<path>.
mkdir -p /tmp/gpu_check_runfiles
ln -sfn "$PWD" /tmp/gpu_check_runfiles/moeserve
export TEST_SRCDIR=/tmp/gpu_check_runfiles
# A server wrapper for the Python e2e test (it execs the binary it is given).
wrapper=/tmp/gpu_check_moeserve
printf '#!/bin/bash\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$libpath" \
  "$bundle/bin/moeserve" >"$wrapper"
chmod +x "$wrapper"

# The test cases a step ran, from its gtest XML ($logs/NAME.xml) or, for a
# Python unittest step, its log: "CASES FAILED SKIPPED", or nothing when
# neither says (a crash before any report).
case_counts() {  # case_counts NAME
  local xml="$logs/$1.xml" log="$logs/$1.log"
  if [[ -s "$xml" ]]; then
    local cases failed skipped
    cases=$(grep -o '<testcase ' "$xml" | wc -l)
    failed=$(grep -o '<failure' "$xml" | wc -l)
    skipped=$(grep -o '<skipped' "$xml" | wc -l)
    echo "$cases $failed $skipped"
  elif grep -q '^Ran [0-9]* tests\?' "$log" 2>/dev/null; then
    local ran bad skip
    ran=$(sed -n 's/^Ran \([0-9]*\) tests\?.*/\1/p' "$log" | tail -1)
    bad=$(grep -oE '(failures|errors)=[0-9]+' "$log" | tail -2 |
      sed 's/.*=//' | awk '{s+=$1} END {print s+0}')
    skip=$(grep -oE 'skipped=[0-9]+' "$log" | tail -1 | sed 's/.*=//')
    echo "$ran $bad ${skip:-0}"
  fi
}

# A step passes only when its command exits 0 AND it ran test cases of which
# none failed or skipped (MOESERVE_REQUIRE_CUDA=1 already fails a CUDA skip;
# this also catches a binary that ran nothing). Benchmarks (no case counts)
# are judged by their exit status.
step() {  # step NAME LIMIT_S COMMAND... -> $logs/NAME.log, a line in summary
  local name="$1" limit="$2"
  shift 2
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  local verdict=PASS counts="" cases failed skipped
  counts="$(case_counts "$name")"
  if [[ -n "$counts" ]]; then
    read -r cases failed skipped <<<"$counts"
    if [[ "$cases" -eq 0 || "$failed" -gt 0 || "$skipped" -gt 0 ]]; then
      verdict="FAIL(cases)"
    fi
    counts=" ($cases cases, $failed failed, $skipped skipped)"
  fi
  [[ $rc -ne 0 ]] && verdict="FAIL(rc=$rc)"
  [[ $rc -eq 124 || $rc -eq 137 ]] && verdict="TIMEOUT(${limit}s)"
  echo "$verdict $name $((SECONDS - t0))s$counts" | tee -a "$summary"
}

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
  nproc
  free -g | head -2
  echo "cuda libs: $cuda_libs"
} >"$logs/machine.txt" 2>&1
cat "$logs/machine.txt"

if [[ "$what" == tests || "$what" == all ]]; then
  B="$bundle/bin"
  x() { echo "--gtest_output=xml:$logs/$1.xml"; }
  step cuda_memory_test 60 "${run[@]}" "$B/cuda_memory_test" \
    "$(x cuda_memory_test)" &
  step cuda_ops_differential_test 130 "${run[@]}" \
    "$B/cuda_ops_differential_test" "$(x cuda_ops_differential_test)" &
  step grouped_experts_test 60 "${run[@]}" "$B/grouped_experts_test" \
    "$(x grouped_experts_test)" &
  step cuda_parity_test 130 "${run[@]}" "$B/cuda_parity_test" \
    --gtest_filter="${PARITY_FILTER:-*}" "$(x cuda_parity_test)" &
  # CUDA graphs (issue 30 item 3): the backend's capture/replay, then the
  # model with graphs on vs off, logits bit for bit.
  step cuda_graph_region_test 60 "${run[@]}" "$B/cuda_graph_region_test" \
    "$(x cuda_graph_region_test)" &
  step cuda_graphs_test 130 "${run[@]}" "$B/cuda_graphs_test" \
    "$(x cuda_graphs_test)" &
  # models/demo-fg and models/demo-draft (40 MB) may have been left out of
  # the tree for the carry limit: then the cases that read them are not run
  # (and say so), instead of failing on a missing file.
  fg_filter='*_cuda'
  if [[ -f models/demo-fg/config.json && -f models/demo-draft/config.json ]]; then
    # The external drafter on the GPU (issue 33): the draft model in VRAM,
    # the cross-model prediction on the device.
    step external_drafter_cuda 60 "${run[@]}" "$B/external_drafter_test" \
      --gtest_filter='*Cuda*' "$(x external_drafter_cuda)" &
  else
    fg_filter='*_cuda-*qwen3_demo_fg*:*qwen3_demo_draft*'
    echo "NOT RUN external_drafter_cuda and the qwen3_demo_fg/_draft" \
      "invariance cases: models/demo-fg or models/demo-draft not in the tree" |
      tee -a "$summary"
  fi
  step policy_invariance_cuda 130 "${run[@]}" "$B/policy_invariance_test" \
    --gtest_filter="${INVARIANCE_FILTER:-$fg_filter}" \
    "$(x policy_invariance_cuda)" &
  step serving_e2e_cuda 130 env \
    MOESERVE_E2E_SERVER_FLAGS="--backend=cuda --expert_cache_ratio=0.25" \
    python3 tests/serving_e2e_test.py "$wrapper" "$bundle" &
  wait
fi

if [[ "$what" == bench || "$what" == all ]]; then
  B="$bundle/bin"
  step cuda_ops_benchmark 60 "${run[@]}" "$B/cuda_ops_benchmark" \
    --benchmark_min_time=0.05 --benchmark_counters_tabular=true
  # Each bench step's --max_seconds sits below its time limit: a run cut
  # short still exits 0 with the cells that finished in its JSON.
  common=(--backend=cuda --concurrency=1,4 --num_requests="${BENCH_REQUESTS:-8}"
    --max_new_tokens=32 --warmup_tokens=16 --policy_repeats=1
    --expert_cache_ratio=0.25,0.5)
  step bench_demo 80 "${run[@]}" "$B/moeserve_bench" "${common[@]}" \
    --model_dir=models/demo --policies="${BENCH_POLICIES:-on_demand,lru,lfu_static,overlap,self_spec,quant_draft,cutoff,utility,throughput}" \
    --max_seconds=50 --json_out="$logs/bench_demo.json"
  # --gen_model generates in memory on every core (no --gen_dir: nothing
  # written to disk; the stderr log says how fast).
  step bench_qwen 120 "${run[@]}" "$B/moeserve_bench" "${common[@]}" \
    --gen_model=qwen --gen_layers="${QWEN_LAYERS:-24}" \
    --policies=on_demand,lru,lfu_static,overlap \
    --max_seconds=60 --json_out="$logs/bench_qwen.json"
  step bench_mixtral 100 "${run[@]}" "$B/moeserve_bench" "${common[@]}" \
    --gen_model=mixtral --gen_layers=2 \
    --policies=on_demand,lru,lfu_static,overlap \
    --max_seconds=50 --json_out="$logs/bench_mixtral.json"
  # ms/token at concurrency 1 and 4, every expert resident, with the dense
  # sub-steps as CUDA graphs (--cuda_graphs) and without (issue 30 item 3).
  graphs_model=models/demo-fg
  [[ -e "$graphs_model/config.json" ]] || graphs_model=models/demo
  for g in false true; do
    step "bench_graphs_$g" 60 "${run[@]}" "$B/moeserve_bench" \
      --backend=cuda --cuda_graphs="$g" --model_dir="$graphs_model" \
      --policies=lru --expert_cache_ratio=1.0 --concurrency=1,4 \
      --num_requests=8 --max_new_tokens=64 --warmup_tokens=16 \
      --policy_repeats=1 --max_seconds=40 \
      --json_out="$logs/bench_graphs_$g.json"
  done
fi

if [[ "$what" == whole_model ]]; then
  # The whole Qwen3-30B-A3B shape (48 layers, 128 experts x 9 MiB = 58.0 GB
  # of bf16 experts; 61.1 GB generated in host RAM): every expert in VRAM
  # (ratio 1.0) and a 24 GiB fast tier (0.4444 of 58.0 GB = 24.0 GiB).
  # --max_seconds counts from the first run, after generation.
  step bench_qwen3_30b 300 "${run[@]}" "$bundle/bin/moeserve_bench" \
    --backend=cuda --gen_model=qwen3_30b_a3b --gen_layers="${QWEN3_LAYERS:-0}" \
    --policies="${QWEN3_POLICIES:-on_demand,lru}" \
    --expert_cache_ratio=1.0,0.4444 --concurrency=1,4 \
    --num_requests="${BENCH_REQUESTS:-4}" --max_new_tokens=32 \
    --warmup_tokens=16 --policy_repeats=1 --max_seconds=200 \
    --json_out="$logs/bench_qwen3_30b.json"
fi
cat "$summary"
