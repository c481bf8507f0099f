#ifndef MOESERVE_ENGINE_INTERNAL_PIECE_MODEL_H_
#define MOESERVE_ENGINE_INTERNAL_PIECE_MODEL_H_

// PieceModel: the vocabulary operations Tokenizer builds on (a sentencepiece
// processor's, in std types). SpmWrapper is the production implementation;
// engine/testing/fake_tokenizer has one without sentencepiece, for binaries
// that cannot load the sentencepiece plugin (ThreadSanitizer refuses the
// RTLD_DEEPBIND it needs next to gRPC's protobuf).
//
// Thread-safety: const methods must be safe to call concurrently.

#include <cstdlib>
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

  // REQUIRES: id in [0, vocab_size()). The bytes the piece adds to a text
  // in the middle of a decode: "" for a control piece, one byte for a
  // byte-fallback piece ("<0xE2>": part of a UTF-8 character), " ⁇ " for
  // the unknown piece, else the piece with each "▁" a space. This default
  // is sentencepiece's decoding; a model with other rules overrides it.
  virtual std::string PieceBytes(int id) const {
    if (IsControl(id)) return std::string();
    std::string piece = IdToPiece(id);
    if (id == unk_id()) return " \xE2\x81\x87 ";
    if (IsByte(id) && piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 &&
        piece[5] == '>') {
      return std::string(1, static_cast<char>(std::strtol(
                                piece.substr(3, 2).c_str(), nullptr, 16)));
    }
    static constexpr char kWordMarker[] = "\xE2\x96\x81";  // U+2581
    std::string bytes;
    for (size_t i = 0; i < piece.size();) {
      if (piece.compare(i, 3, kWordMarker) == 0) {
        bytes += ' ';
        i += 3;
      } else {
        bytes += piece[i++];
      }
    }
    return bytes;
  }
};

}  // namespace moeserve::engine::internal

#endif  // MOESERVE_ENGINE_INTERNAL_PIECE_MODEL_H_
