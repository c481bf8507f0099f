#!/bin/bash
# `promtool check rules` on the recording and alert rules, then
# `promtool test rules` on their unit tests (Debian's `prometheus` package,
# installed by deploy/setup.sh).
#
# Args: <moeserve.rules.yml> <moeserve.rules.test.yml>
set -euo pipefail
rules="$1"
tests="$2"
command -v /usr/bin/promtool >/dev/null ||
  { echo "FAIL: promtool is missing: install Debian's 'prometheus' package (deploy/setup.sh does)" >&2; exit 1; }
# The test file names the rules file relative to itself: copy both together.
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
cp "$rules" "$tmp/moeserve.rules.yml"
cp "$tests" "$tmp/moeserve.rules.test.yml"
/usr/bin/promtool check rules "$tmp/moeserve.rules.yml"
(cd "$tmp" && /usr/bin/promtool test rules moeserve.rules.test.yml)
echo PASS
