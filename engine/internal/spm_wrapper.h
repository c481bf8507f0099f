#ifndef MOESERVE_ENGINE_INTERNAL_SPM_WRAPPER_H_
#define MOESERVE_ENGINE_INTERNAL_SPM_WRAPPER_H_

// A std-only facade over sentencepiece::SentencePieceProcessor.
//
// Why: Debian's sentencepiece_processor.h declares `namespace absl { using
// std::string_view; }`, which clashes with Abseil's own absl::string_view
// class, so no translation unit may include both. spm_wrapper.cc includes
// sentencepiece only; everything else uses this header.
//
// Owns the processor. Thread-safety: const methods are safe to call
// concurrently after Load (sentencepiece encode/decode are const).

#include <memory>
#include <string>
#include <vector>

namespace moeserve::engine::internal {

class SpmWrapper {
 public:
  SpmWrapper();
  ~SpmWrapper();

  // On failure returns false and sets *error.
  bool Load(const std::string& path, std::string* error);
  bool Encode(const std::string& text, std::vector<int>* ids,
              std::string* error) const;
  // REQUIRES: every id in [0, vocab_size()).
  bool Decode(const std::vector<int>& ids, std::string* text,
              std::string* error) const;
  std::string IdToPiece(int id) const;
  int vocab_size() const;
  int bos_id() const;  // -1 when the model has none.
  int eos_id() const;
  int unk_id() const;
  bool IsControl(int id) const;
  bool IsByte(int id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moeserve::engine::internal

#endif  // MOESERVE_ENGINE_INTERNAL_SPM_WRAPPER_H_
