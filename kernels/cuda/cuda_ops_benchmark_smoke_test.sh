#!/bin/bash
# Smoke test of cuda_ops_benchmark (nothing is timed): it must exit 0 and
# either say that there is no CUDA device or list its benchmarks.
set -euo pipefail
out="$("$1" --benchmark_list_tests 2>&1)"
printf '%s\n' "$out" | head -3
if grep -q "no CUDA device" <<<"$out" || grep -q "^BM_MatMul/" <<<"$out"; then
  exit 0
fi
echo "unexpected output from $1" >&2
exit 1
