#!/bin/sh
# Regenerates engine/testdata/test_tokenizer.model, the tiny sentencepiece
# model (BPE, 320 pieces, byte_fallback) used by tokenizer_test. Deterministic
# for a given sentencepiece version (0.1.97 here). Run from the repo root:
#   sh engine/testdata/make_test_tokenizer.sh
set -eu
out=engine/testdata
corpus=$(mktemp)
i=0
while [ $i -lt 200 ]; do
  echo "the quick brown fox jumps over the lazy dog $i times." >> "$corpus"
  echo "hello world, a small test corpus for the moeserve tokenizer." >> "$corpus"
  echo "mixture of experts models route each token to a few experts." >> "$corpus"
  i=$((i + 1))
done
spm_train --input="$corpus" --model_prefix="$out/test_tokenizer" \
  --vocab_size=320 --model_type=bpe --byte_fallback=true \
  --character_coverage=1.0 --bos_id=1 --eos_id=2 --unk_id=0 --pad_id=-1 \
  --normalization_rule_name=identity --num_threads=1 --minloglevel=2
rm -f "$corpus" "$out/test_tokenizer.vocab"
