#!/bin/bash
# Validates the Kubernetes manifests under deploy/k8s (every kustomization
# rendered, every object against the Kubernetes / Prometheus Operator OpenAPI
# schemas, plus probes, ports, selectors and engines.json; see
# validate_manifests.mjs). The schemas come from the npm packages below,
# installed at test time into a cache under the user's home; a failed
# install fails the test with the reason.
#
# Args: <validate_manifests.mjs> <deploy/k8s dir> <moeserve.rules.yml>
set -euo pipefail
script="$1"
k8s_dir="$2"
rules="$3"

# The newest releases whose engines allow Debian 12's Node.js 18
# (kubernetes-models 5 wants Node >= 22); the schemas are Kubernetes 1.29+
# (grpc probes, sleep actions).
PACKAGES=(kubernetes-models@4.5.1 @kubernetes-models/prometheus-operator@4.4.4
          js-yaml@4.1.0)

for tool in node npm; do
  command -v "$tool" >/dev/null ||
    { echo "FAIL: '$tool' is missing: install Debian's 'nodejs' and 'npm' packages" >&2; exit 1; }
done

# Bazel sets HOME to the test's temporary directory: cache under the real one
# so the packages are fetched once, not on every run.
home="$(getent passwd "$(id -u)" | cut -d: -f6)"
cache="${MOESERVE_NPM_CACHE:-${home:-${TEST_TMPDIR:-/tmp}}/.cache/moeserve-deploy-npm}"

"${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-__main__}/tools/testing/npm_install_pinned.sh" \
  manifests_test "$cache" "${PACKAGES[@]}"

# A plain copy: Bazel's runfiles are symlinks, which kustomize's loader
# (kubectl, for the cross-check) refuses as files outside the root.
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
rm -rf "$tmp/k8s" && cp -rL "$k8s_dir" "$tmp/k8s"
node "$script" "$cache/node_modules" "$tmp/k8s" "$rules"
