#!/bin/bash
# Runs the TLS / mTLS / token end-to-end test with Debian's interpreter (the
# python3 first on PATH may be a separate build that cannot import grpc).
set -euo pipefail
server="$1"
# The stubs import each other as proto.moeserve_pb2: put the root on the path.
stubs_dir="$(dirname "$(dirname "$2")")"
exec /usr/bin/python3 "$(dirname "$0")/tls_e2e_test.py" "$server" "$stubs_dir" \
  "$3"
