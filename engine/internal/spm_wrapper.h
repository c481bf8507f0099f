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

#include "engine/internal/piece_model.h"

namespace moeserve::engine::internal {

class SpmWrapper final : public PieceModel {
 public:
  SpmWrapper();
  ~SpmWrapper() override;

  // On failure returns false and sets *error.
  bool Load(const std::string& path, std::string* error);
  bool Encode(const std::string& text, std::vector<int>* ids,
              std::string* error) const override;
  bool Decode(const std::vector<int>& ids, std::string* text,
              std::string* error) const override;
  std::string IdToPiece(int id) const override;
  int vocab_size() const override;
  int bos_id() const override;
  int eos_id() const override;
  int unk_id() const override;
  bool IsControl(int id) const override;
  bool IsByte(int id) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moeserve::engine::internal

#endif  // MOESERVE_ENGINE_INTERNAL_SPM_WRAPPER_H_
