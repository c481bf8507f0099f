// FakeTokenizer: an engine::Tokenizer without sentencepiece, for test
// binaries that cannot load the sentencepiece plugin: under ThreadSanitizer
// the plugin cannot be opened RTLD_DEEPBIND, and without it its bundled
// protobuf collides with gRPC's (the process aborts on the version check).
//
// Vocabulary of `vocab` pieces: 0 "<unk>", 1 "<s>" (BOS), 2 "</s>" (EOS),
// 3 "a" (a plain piece, the detokenizer's anchor), then "▁w4", "▁w5", ...
// Encode splits on spaces: "w17" -> 17, "a" -> 3, anything else -> <unk>.
// Decode follows sentencepiece: "▁" is a space, the leading one dropped;
// BOS/EOS decode to nothing, <unk> to " ⁇ ".
#ifndef MOESERVE_ENGINE_TESTING_FAKE_TOKENIZER_H_
#define MOESERVE_ENGINE_TESTING_FAKE_TOKENIZER_H_

#include <memory>

#include "engine/tokenizer.h"

namespace moeserve::engine::testing {

// REQUIRES: vocab >= 5.
std::unique_ptr<Tokenizer> FakeTokenizer(int vocab);

}  // namespace moeserve::engine::testing

#endif  // MOESERVE_ENGINE_TESTING_FAKE_TOKENIZER_H_
