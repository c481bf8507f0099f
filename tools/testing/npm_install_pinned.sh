#!/bin/bash
# Installs pinned npm packages into a cache directory once, for the tests
# that need a JavaScript reference or client (engine/hf_tokenizer parity,
# deploy/ manifests, the OpenAI client e2e test). Usage:
#   npm_install_pinned.sh LABEL CACHE_DIR NAME@VERSION...
# Does nothing when every package is there at its version; otherwise installs
# them under a lock (concurrent tests share the cache). A failed install
# exits 1 with npm's last lines and the reason.
set -euo pipefail
label="$1"
cache="$2"
shift 2
packages=("$@")

installed() {  # every pinned package at its version?
  local spec name version
  for spec in "${packages[@]}"; do
    name="${spec%@*}"; version="${spec##*@}"
    [ "$(node -e 'try { console.log(require(process.argv[1]).version) } catch (e) {}' \
         "$cache/node_modules/$name/package.json")" = "$version" ] || return 1
  done
}

mkdir -p "$cache"
(
  flock 9
  if ! installed; then
    echo "$label: installing ${packages[*]} into $cache"
    # npm as the user runs it: Bazel's HOME hides the user's npm config and
    # its clean environment drops NODE_EXTRA_CA_CERTS, so trust the system's
    # CA store as curl and apt do (a network whose TLS proxy has its CA there).
    real_home="$(getent passwd "$(id -u)" | cut -d: -f6)"
    ca="${NODE_EXTRA_CA_CERTS:-}"
    if [ -z "$ca" ] && [ -r /etc/ssl/certs/ca-certificates.crt ]; then
      ca=/etc/ssl/certs/ca-certificates.crt
    fi
    if ! HOME="${real_home:-$HOME}" NODE_EXTRA_CA_CERTS="$ca" timeout 240 \
        npm install --prefix "$cache" --cache "$cache/.npm" --no-audit \
        --no-fund --no-save --no-package-lock --fetch-retries=1 \
        --fetch-timeout=60000 "${packages[@]}" >"$cache/install.log" 2>&1; then
      tail -n 20 "$cache/install.log" >&2
      echo "FAIL: npm install ${packages[*]} failed (is the npm registry reachable?)" >&2
      exit 1
    fi
    installed || { echo "FAIL: npm installed other versions than ${packages[*]}" >&2; exit 1; }
  fi
) 9>"$cache/.lock"
