#ifndef MOESERVE_ENGINE_INTERNAL_PIECE_MODEL_H_
#define MOESERVE_ENGINE_INTERNAL_PIECE_MODEL_H_

// PieceModel: the vocabulary operations Tokenizer builds on (a sentencepiece
// processor's, in std types). SpmWrapper is the production implementation;
// engine/testing/fake_tokenizer has one without sentencepiece, for binaries
// that cannot load the sentencepiece plugin (ThreadSanitizer refuses the
// RTLD_DEEPBIND it needs next to gRPC's protobuf).
//
// Thread-safety: const methods must be safe to call concurrently.

#include <string>
#include <vector>

namespace moeserve::engine::internal {

class PieceModel {
 public:
  virtual ~PieceModel() = default;

  // On failure return false and set *error.
  virtual bool Encode(const std::string& text, std::vector<int>* ids,
                      std::string* error) const = 0;
  // REQUIRES: every id in [0, vocab_size()). sentencepiece semantics: the
  // "▁" (U+2581) word marker decodes to a space, the first one of the
  // result dropped; control pieces decode to nothing.
  virtual bool Decode(const std::vector<int>& ids, std::string* text,
                      std::string* error) const = 0;
  virtual std::string IdToPiece(int id) const = 0;
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;  // -1 when the model has none.
  virtual int eos_id() const = 0;
  virtual int unk_id() const = 0;
  virtual bool IsControl(int id) const = 0;
  virtual bool IsByte(int id) const = 0;
};

}  // namespace moeserve::engine::internal

#endif  // MOESERVE_ENGINE_INTERNAL_PIECE_MODEL_H_
