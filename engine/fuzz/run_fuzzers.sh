#!/bin/bash
# Builds the engine/ libFuzzer targets with clang (outside Bazel: Bazel's
# toolchain here is g++) and runs each for N seconds (default 20).
#   engine/fuzz/run_fuzzers.sh [seconds]
# Exits non-zero when a fuzzer finds a crash; crash inputs are kept in the
# work directory it prints. Exits 0 with "skipped: clang not found" when
# clang++ is absent.
set -euo pipefail

SECONDS_PER_FUZZER="${1:-20}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CXX="${CXX:-clang++}"
if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "skipped: clang not found"
  exit 0
fi

WORK="$(mktemp -d /tmp/engine_fuzz.XXXXXX)"
echo "work dir: $WORK"

FLAGS=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -I"$ROOT" -I/usr/include)
ABSL_LIBS=(-labsl_statusor -labsl_status -labsl_cord -labsl_cordz_info
           -labsl_cord_internal -labsl_cordz_functions -labsl_cordz_handle
           -labsl_exponential_biased -labsl_synchronization
           -labsl_graphcycles_internal -labsl_stacktrace -labsl_symbolize
           -labsl_debugging_internal -labsl_demangle_internal
           -labsl_malloc_internal -labsl_time -labsl_civil_time
           -labsl_time_zone -labsl_str_format_internal -labsl_strings
           -labsl_strings_internal -labsl_strerror -labsl_throw_delegate
           -labsl_bad_optional_access -labsl_bad_variant_access
           -labsl_raw_logging_internal -labsl_log_severity -labsl_base
           -labsl_spinlock_wait -labsl_int128 -lpthread)

E="$ROOT/engine"
SAFETENSORS_SRCS=("$E/dtype.cc" "$E/safetensors.cc" "$E/json_util.cc")
CONFIG_SRCS=("$E/model_config.cc" "$E/architecture.cc" "$E/json_util.cc"
             "$E"/arch/*.cc)

build() {  # name, sources...
  local name="$1"; shift
  echo "building $name"
  "$CXX" "${FLAGS[@]}" "$E/fuzz/$name.cc" "$@" "${ABSL_LIBS[@]}" \
    -o "$WORK/$name"
}

run() {  # name, seed dir
  local name="$1" seeds="$2"
  mkdir -p "$WORK/corpus_$name"
  cp "$seeds"/* "$WORK/corpus_$name/"
  echo "running $name for ${SECONDS_PER_FUZZER}s"
  (cd "$WORK" && "./$name" -max_total_time="$SECONDS_PER_FUZZER" \
     -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
     "corpus_$name" 2>&1 | tail -n 15)
  if ls "$WORK"/crash-* "$WORK"/leak-* "$WORK"/timeout-* >/dev/null 2>&1; then
    echo "FINDING in $name: see $WORK"
    exit 1
  fi
}

build safetensors_fuzzer "${SAFETENSORS_SRCS[@]}"
build config_fuzzer "${CONFIG_SRCS[@]}"
run safetensors_fuzzer "$E/fuzz/seeds/safetensors"
run config_fuzzer "$E/fuzz/seeds/config"
echo "fuzzers finished without findings"
