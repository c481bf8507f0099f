#!/bin/bash
# Builds the libFuzzer targets of every parser with clang (outside Bazel:
# Bazel's toolchain here is g++) and runs each for a budget (see README.md):
#   engine/fuzz/run_fuzzers.sh [seconds]        each for N seconds (default 20)
#   engine/fuzz/run_fuzzers.sh -runs=N [names]  each for N executions
#   (names: safetensors_fuzzer config_fuzzer tokenizer_fuzzer
#    request_validator_fuzzer engines_config_fuzzer bearer_tokens_fuzzer;
#    default all)
# Exits non-zero when a fuzzer finds a crash; crash inputs are kept in the
# work directory it prints. Exits 0 with "skipped: clang not found" when
# clang++ is absent.
set -euo pipefail

BUDGET="-max_total_time=${1:-20}"
if [[ "${1:-}" == -runs=* ]]; then BUDGET="$1"; fi
shift || true
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CXX="${CXX:-clang++}"
if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "skipped: clang not found"
  exit 0
fi

WORK="$(mktemp -d /tmp/engine_fuzz.XXXXXX)"
echo "work dir: $WORK"

FLAGS=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -I"$ROOT" -I"$WORK/gen" -I/usr/include
       -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL)
# The link flags of //third_party:absl.
ABSL_LIBS=($(sed -n '/^ABSL_LINKOPTS = \[/,/^\]/s/.*"\(-l[a-z0-9_]*\)".*/\1/p' \
  "$ROOT/third_party/BUILD") -lpthread -ldl)

E="$ROOT/engine"
S="$ROOT/server"
MODEL_SRCS=("$E/model_config.cc" "$E/architecture.cc" "$E/json_util.cc"
            "$E"/arch/*.cc)
SAFETENSORS_SRCS=("$E/dtype.cc" "$E/safetensors.cc" "$E/json_util.cc")
WEIGHTS_SRCS=("${MODEL_SRCS[@]}" "$E/dtype.cc" "$E/safetensors.cc"
              "$E/sharded_safetensors.cc" "$E/model_weights.cc")
# tokenizer.cc also loads tokenizer.json models (engine/hf_tokenizer: PCRE2, ICU).
TOKENIZER_SRCS=("$E/tokenizer.cc" "$E/internal/spm_wrapper.cc"
                "$ROOT/base/plugin_loader.cc" "$E/hf_tokenizer/hf_bpe_model.cc"
                "$E/hf_tokenizer/regex.cc" "$E/hf_tokenizer/unicode_util.cc")
TOKENIZER_LIBS=(-lpcre2-8 -licuuc -licudata)
ENGINES_CONFIG_SRCS=("$S/engines_config.cc" "$S/server_options.cc"
                     "$S/request_validator.cc" "$E/builder/engine_spec.cc"
                     "$ROOT/policies/registry.cc" "$ROOT/base/install_paths.cc"
                     "$E/spec/drafter_registry.cc" "${WEIGHTS_SRCS[@]}")

build() {  # name, extra link flags..., -- sources...
  local name="$1"; shift
  local libs=()
  while [ "$1" != "--" ]; do libs+=("$1"); shift; done
  shift
  echo "building $name"
  "$CXX" "${FLAGS[@]}" "$E/fuzz/$name.cc" "$@" "${ABSL_LIBS[@]}" \
    "${libs[@]}" -o "$WORK/$name"
}

run() {  # name, seed dir[, max input length]
  local name="$1" seeds="$2" max_len="${3:-65536}"
  mkdir -p "$WORK/corpus_$name"
  cp "$seeds"/* "$WORK/corpus_$name/"
  echo "running $name ($BUDGET)"
  (cd "$WORK" && "./$name" "$BUDGET" \
     -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
     "corpus_$name" 2>&1 | tail -n 15)
  if ls "$WORK"/crash-* "$WORK"/leak-* "$WORK"/timeout-* \
       "$WORK"/oom-* >/dev/null 2>&1; then
    echo "FINDING in $name: see $WORK"
    exit 1
  fi
}

# Request seeds are kept as text protos and encoded here (mode byte 0:
# GenerateRequest, 1: TokenizeRequest).
encode_request_seeds() {
  local out="$WORK/seeds_request" f type mode
  mkdir -p "$out"
  for f in "$E"/fuzz/seeds/request/*.txtpb; do
    case "$(basename "$f")" in
      tokenize*) type=TokenizeRequest; mode='\x01' ;;
      *) type=GenerateRequest; mode='\x00' ;;
    esac
    { printf "$mode"; protoc -I"$ROOT" --encode="moeserve.v1.$type" \
        "$ROOT/proto/moeserve.proto" < "$f"; } > "$out/$(basename "$f" .txtpb)"
  done
}

wanted() {  # name: selected on the command line (or nothing selected)
  [ "${#SELECTED[@]}" -eq 0 ] && return 0
  local n; for n in "${SELECTED[@]}"; do [ "$n" = "$1" ] && return 0; done
  return 1
}
SELECTED=("$@")

if wanted safetensors_fuzzer; then
  build safetensors_fuzzer -- "${SAFETENSORS_SRCS[@]}"
  run safetensors_fuzzer "$E/fuzz/seeds/safetensors"
fi
if wanted config_fuzzer; then
  build config_fuzzer -- "${MODEL_SRCS[@]}"
  run config_fuzzer "$E/fuzz/seeds/config"
fi
if wanted tokenizer_fuzzer; then
  # The sentencepiece plugin the tokenizer dlopens (engine/BUILD), without
  # sanitizers: sentencepiece itself is not instrumented.
  "$CXX" -std=c++20 -O1 -g -shared -fPIC "$E/internal/spm_plugin.cc" \
    -lsentencepiece -o "$WORK/libmoeserve_spm.so"
  build tokenizer_fuzzer "${TOKENIZER_LIBS[@]}" -- "${TOKENIZER_SRCS[@]}"
  export MOESERVE_SPM_PLUGIN="$WORK/libmoeserve_spm.so"
  export MOESERVE_FUZZ_TOKENIZER="$ROOT/models/demo/tokenizer.model"
  # 4 KiB inputs: a tokenizer piece is 16 KiB, and inputs that long run at
  # a tenth of the speed; tokenizer_test covers piecewise encoding.
  run tokenizer_fuzzer "$E/fuzz/seeds/tokenizer" 4096
fi
# The request messages (request_validator.h includes them).
mkdir -p "$WORK/gen"
protoc -I"$ROOT" --cpp_out="$WORK/gen" "$ROOT/proto/moeserve.proto"

if wanted request_validator_fuzzer; then
  encode_request_seeds
  build request_validator_fuzzer -lprotobuf -- "$S/request_validator.cc" \
    "$WORK/gen/proto/moeserve.pb.cc"
  run request_validator_fuzzer "$WORK/seeds_request"
fi
if wanted engines_config_fuzzer; then
  build engines_config_fuzzer -lspdlog -lfmt -lprotobuf -- \
    "${ENGINES_CONFIG_SRCS[@]}" "$WORK/gen/proto/moeserve.pb.cc"
  run engines_config_fuzzer "$E/fuzz/seeds/engines_config"
fi
# The token file and Authorization header parsers (server/security).
if wanted bearer_tokens_fuzzer; then
  echo "building bearer_tokens_fuzzer"
  "$CXX" "${FLAGS[@]}" "$S/security/bearer_tokens_fuzzer.cc" \
    "$S/security/bearer_tokens.cc" "$S/security/constant_time.cc" \
    "${ABSL_LIBS[@]}" -lcrypto -o "$WORK/bearer_tokens_fuzzer"
  run bearer_tokens_fuzzer "$S/security/fuzz_seeds" 8192
fi
echo "fuzzers finished without findings"
