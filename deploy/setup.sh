#!/bin/bash
# Installs what moeserve needs from Debian packages, and nothing else.
# Safe to run again: it only calls apt-get when a package is missing, and
# then runs `apt-get update` once before installing.
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap g++ clang clang-format
  # tests/fuzz/run_fuzzers.sh: a rerun recompiles only what changed
  ccache
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
  libabsl-dev libspdlog-dev libfmt-dev libmicrohttpd-dev nlohmann-json3-dev
  libsentencepiece-dev libgtest-dev libgmock-dev libbenchmark-dev
  # engine/hf_tokenizer: pre-tokenizer regexes, NFC
  libpcre2-dev libicu-dev
  # tests
  python3 python3-grpcio python3-protobuf prometheus curl openssl sentencepiece
  python3-sentencepiece nodejs
  # moeserve_bench --plot (and its test)
  gnuplot-nox
)
# npm: Debian's package, unless the installed nodejs brings its own (the
# nodesource build does, and conflicts with Debian's npm). The deploy/ and
# engine/hf_tokenizer/ tests install their npm packages at test time.
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

missing=()
for p in "${PACKAGES[@]}"; do
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != \
       "install ok installed" ]; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} Debian packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
# Recommended packages too: the test tools were verified with them present.
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
echo "setup: done"
