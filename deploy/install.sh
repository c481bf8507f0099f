#!/bin/bash
# Builds moeserve optimised and installs it into PREFIX (default
# /usr/local): PREFIX/bin (server, client, bench, load generator, soak),
# PREFIX/lib/moeserve (plugins), PREFIX/share/moeserve/models (the bundled
# models). The installed server, run from any directory with no environment,
# serves the demo model:
#
#   deploy/install.sh /opt/moeserve
#   /opt/moeserve/bin/moeserve            # demo model on 127.0.0.1:50051
#   /opt/moeserve/bin/moeserve_client --prompt="Once upon a time"
#
# --with_cuda also builds and installs the CUDA backend plugin (needs nvcc;
# it runs only on a machine with an NVIDIA GPU). --no_build installs what the
# last `bazel build --config=opt` left.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=/usr/local
build=1
cuda=0
for arg in "$@"; do
  case "$arg" in
    --no_build) build=0 ;;
    --with_cuda) cuda=1 ;;
    -*) echo "install.sh: unknown option $arg" >&2; exit 2 ;;
    *) prefix="$arg" ;;
  esac
done
targets=(//server:moeserve //tools:moeserve_client //tools/bench:moeserve_bench
  //tools/loadgen:moeserve_loadgen //tools/soak:moeserve_soak
  //engine:libmoeserve_spm.so)
if [ "$cuda" = 1 ]; then targets+=(//kernels/cuda:libmoeserve_cuda.so); fi
if [ "$build" = 1 ]; then bazel build --config=opt "${targets[@]}"; fi
B=bazel-out/k8-optopt/bin
files=("$B/server/moeserve" "$B/tools/moeserve_client"
  "$B/tools/bench/moeserve_bench" "$B/tools/loadgen/moeserve_loadgen"
  "$B/tools/soak/moeserve_soak" "$B/engine/libmoeserve_spm.so")
if [ "$cuda" = 1 ]; then files+=("$B/kernels/cuda/libmoeserve_cuda.so"); fi
exec deploy/install_files.sh "$prefix" models "${files[@]}"
