#!/bin/bash
# README command 1: set everything up, build the server optimised, and run it
# on the bundled demo model (gRPC on 127.0.0.1:50051, /metrics on :9400).
# Extra arguments are passed to moeserve, e.g. --port=50052.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh
bazel build --config=opt //server:moeserve //tools:moeserve_client
exec bazel-bin/server/moeserve --model_dir=models/demo "$@"
