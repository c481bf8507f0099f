#!/bin/bash
# Builds the libFuzzer targets of every parser with clang (outside Bazel:
# Bazel's toolchain here is g++) and runs each for a budget (see README.md).
# Each fuzzer sits beside the parser it fuzzes (<dir>/<name>.cc, seeds in
# <dir>/fuzz_seeds/); this script is the one place that lists them:
#   tests/fuzz/run_fuzzers.sh [seconds]        each for N seconds (default 20)
#   tests/fuzz/run_fuzzers.sh -runs=N [names]  each for N executions
#   (names: safetensors_fuzzer config_fuzzer tokenizer_fuzzer
#    request_validator_fuzzer engines_config_fuzzer bearer_tokens_fuzzer
#    request_translation_fuzzer;
#    default all)
# Exits non-zero when a fuzzer finds a crash; crash inputs are kept in the
# work directory it prints. Exits 1 when clang++ is absent (deploy/setup.sh
# installs clang): a fuzz run that cannot build is a failure, not a skip.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CXX="${CXX:-clang++}"
flags() {  # the compile and link flags; $1: the work directory
  FLAGS=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined
         -fno-sanitize-recover=undefined -I"$ROOT" -I"$1/gen" -I/usr/include
         -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL)
}
# Internal: compile one source to one object (run in parallel by compile()).
if [ "${1:-}" = "--compile-one" ]; then
  flags "$MOESERVE_FUZZ_WORK"
  mkdir -p "$(dirname "$3")"
  exec ${CCACHE:+"$CCACHE"} "$CXX" "${FLAGS[@]}" -c "$2" -o "$3"
fi

BUDGET="-max_total_time=${1:-20}"
if [[ "${1:-}" == -runs=* ]]; then BUDGET="$1"; fi
shift || true
if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "run_fuzzers: $CXX not found (deploy/setup.sh installs clang)" >&2
  exit 1
fi

WORK="$(mktemp -d /tmp/moeserve_fuzz.XXXXXX)"
echo "work dir: $WORK"
flags "$WORK"
# Objects are compiled one source at a time, in parallel, each once per run
# (the fuzzers share sources), through ccache when it is installed
# (deploy/setup.sh installs it): a rerun recompiles only what changed.
CCACHE="$(command -v ccache || true)"
export CCACHE MOESERVE_FUZZ_WORK="$WORK"
JOBS="$(nproc)"
# The link flags of //third_party:absl.
ABSL_LIBS=($(sed -n '/^ABSL_LINKOPTS = \[/,/^\]/s/.*"\(-l[a-z0-9_]*\)".*/\1/p' \
  "$ROOT/third_party/BUILD") -lpthread -ldl)

E="$ROOT/engine"
S="$ROOT/server"
# The .cc files of a Bazel target and of everything in this workspace it
# depends on, so a fuzzer links what the library links (a hand-kept list
# drifted once and broke the build); EXCLUDE names files built separately.
bazel_srcs() {  # target
  (cd "$ROOT" && bazel query --noshow_progress \
      "kind('source file', deps($1))" 2>/dev/null) |
    sed -n 's|^//\([^:]*\):\(.*\.cc\)$|\1/\2|p' |
    sed 's|^/||' | grep -v -x -F -f <(printf '%s\n' "${EXCLUDE[@]}") |
    sed "s|^|$ROOT/|"
}
# The sentencepiece plugin is dlopened, not linked (see tokenizer_fuzzer).
EXCLUDE=(engine/internal/spm_plugin.cc)
mapfile -t SAFETENSORS_SRCS < <(bazel_srcs //engine:safetensors)
mapfile -t MODEL_SRCS < <(bazel_srcs //engine:model_config)
# tokenizer.cc also loads tokenizer.json models (engine/hf_tokenizer: PCRE2, ICU).
mapfile -t TOKENIZER_SRCS < <(bazel_srcs //engine:tokenizer)
TOKENIZER_LIBS=(-lpcre2-8 -licuuc -licudata)
mapfile -t VALIDATOR_SRCS < <(bazel_srcs //server:request_validator)
mapfile -t ENGINES_CONFIG_SRCS < <(bazel_srcs //server:server_options)
mapfile -t BEARER_SRCS < <(bazel_srcs //server/security:bearer_tokens)
mapfile -t TRANSLATION_SRCS < <(
  { bazel_srcs //server/openai:request_translation
    bazel_srcs //server:request_validator; } | sort -u)
if [ "${#MODEL_SRCS[@]}" -eq 0 ]; then
  echo "bazel query found no sources (is bazel on PATH?)" >&2
  exit 1
fi

# Compiles every source not yet compiled in this run, $JOBS at a time, and
# sets OBJS to the objects of all of them.
compile() {  # sources...
  local src
  local -a todo=()
  OBJS=()
  for src in "$@"; do
    OBJS+=("$WORK/obj$src.o")
    [ -f "$WORK/obj$src.o" ] || todo+=("$src")
  done
  [ "${#todo[@]}" -eq 0 ] && return 0
  for src in "${todo[@]}"; do printf '%s\0%s\0' "$src" "$WORK/obj$src.o"; done |
    xargs -0 -n 2 -P "$JOBS" "$ROOT/tests/fuzz/run_fuzzers.sh" --compile-one
}

build() {  # dir, name, extra link flags..., -- sources...
  local dir="$1" name="$2"; shift 2
  local libs=()
  while [ "$1" != "--" ]; do libs+=("$1"); shift; done
  shift
  echo "building $name"
  compile "$dir/$name.cc" "$@"
  "$CXX" "${FLAGS[@]}" "${OBJS[@]}" "${ABSL_LIBS[@]}" "${libs[@]}" \
    -o "$WORK/$name"
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
  for f in "$S"/fuzz_seeds/request_validator/*.txtpb; do
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
  build "$E" safetensors_fuzzer -- "${SAFETENSORS_SRCS[@]}"
  run safetensors_fuzzer "$E/fuzz_seeds/safetensors"
fi
if wanted config_fuzzer; then
  build "$E" config_fuzzer -- "${MODEL_SRCS[@]}"
  run config_fuzzer "$E/fuzz_seeds/config"
fi
if wanted tokenizer_fuzzer; then
  # The sentencepiece plugin the tokenizer dlopens (engine/BUILD), without
  # sanitizers: sentencepiece itself is not instrumented.
  "$CXX" -std=c++20 -O1 -g -shared -fPIC "$E/internal/spm_plugin.cc" \
    -lsentencepiece -o "$WORK/libmoeserve_spm.so"
  build "$E" tokenizer_fuzzer "${TOKENIZER_LIBS[@]}" -- "${TOKENIZER_SRCS[@]}"
  export MOESERVE_SPM_PLUGIN="$WORK/libmoeserve_spm.so"
  export MOESERVE_FUZZ_TOKENIZER="$ROOT/models/demo/tokenizer.model"
  # 4 KiB inputs: a tokenizer piece is 16 KiB, and inputs that long run at
  # a tenth of the speed; tokenizer_test covers piecewise encoding.
  run tokenizer_fuzzer "$E/fuzz_seeds/tokenizer" 4096
fi
# The request messages (request_validator.h includes them).
mkdir -p "$WORK/gen"
protoc -I"$ROOT" --cpp_out="$WORK/gen" "$ROOT/proto/moeserve.proto"

if wanted request_validator_fuzzer; then
  encode_request_seeds
  build "$S" request_validator_fuzzer -lprotobuf -- "${VALIDATOR_SRCS[@]}" \
    "$WORK/gen/proto/moeserve.pb.cc"
  run request_validator_fuzzer "$WORK/seeds_request"
fi
if wanted engines_config_fuzzer; then
  build "$S" engines_config_fuzzer -lspdlog -lfmt -lprotobuf -- \
    "${ENGINES_CONFIG_SRCS[@]}" "$WORK/gen/proto/moeserve.pb.cc"
  run engines_config_fuzzer "$S/fuzz_seeds/engines_config"
fi
# The token file and Authorization header parsers (server/security).
if wanted bearer_tokens_fuzzer; then
  build "$S/security" bearer_tokens_fuzzer -lcrypto -- "${BEARER_SRCS[@]}"
  run bearer_tokens_fuzzer "$S/security/fuzz_seeds" 8192
fi
# The OpenAI API's request bodies (server/openai).
if wanted request_translation_fuzzer; then
  build "$S/openai" request_translation_fuzzer -lprotobuf -- \
    "${TRANSLATION_SRCS[@]}" "$WORK/gen/proto/moeserve.pb.cc"
  export MOESERVE_FUZZ_MODEL_DIR="$ROOT/models/demo"
  run request_translation_fuzzer "$S/openai/fuzz_seeds" 16384
fi
echo "fuzzers finished without findings"
