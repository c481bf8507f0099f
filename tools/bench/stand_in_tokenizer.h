// StandInTokenizer: a placeholder engine::Tokenizer for models that come
// without one (the random-weight models the bench generates).
//
// The engine needs a Tokenizer (EOS id, streamed text), but the policy bench
// feeds token ids and never reads the text. This writes a minimal
// sentencepiece model with exactly `vocab` pieces ("<unk>", "<s>", "</s>",
// then "t3", "t4", ...; unigram, no normalization) to a temporary file, loads
// it with Tokenizer::Load and removes the file, so every id the model can
// emit decodes without error and EOS is id 2 (ignored by the bench's
// ignore_eos requests).
//
// The model file is encoded here directly in protobuf wire format (only the
// fields sentencepiece needs: pieces with their type), because sentencepiece
// itself lives behind engine/'s private plugin.
// Thread-compatible.
#ifndef MOESERVE_TOOLS_BENCH_STAND_IN_TOKENIZER_H_
#define MOESERVE_TOOLS_BENCH_STAND_IN_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/tokenizer.h"

namespace moeserve::bench {

// The serialized sentencepiece ModelProto described above. REQUIRES:
// vocab >= 4.
std::string StandInTokenizerModel(int64_t vocab);

// InvalidArgument for vocab < 4; Internal when the temporary file cannot be
// written; the Tokenizer::Load error otherwise.
absl::StatusOr<std::unique_ptr<engine::Tokenizer>> StandInTokenizer(
    int64_t vocab);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_STAND_IN_TOKENIZER_H_
