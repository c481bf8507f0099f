#!/bin/bash
# Runs help_test.py with Debian's interpreter over the binaries given.
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/help_test.py" "$@"
