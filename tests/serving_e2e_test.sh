#!/bin/bash
# Runs the serving end-to-end test (64 concurrent streams, cancel/deadline/
# queue-full resource accounting, stop strings, UTF-8 deltas) with Debian's
# interpreter, which is the one that can import grpc.
set -euo pipefail
server="$1"
# The stubs import each other as proto.moeserve_pb2: put the root on the path.
stubs_dir="$(dirname "$(dirname "$2")")"
exec /usr/bin/python3 "$(dirname "$0")/serving_e2e_test.py" \
  "$server" "$stubs_dir"
