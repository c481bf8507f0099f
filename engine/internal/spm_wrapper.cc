// Only sentencepiece and std headers here: see spm_wrapper.h.
#include "engine/internal/spm_wrapper.h"

#include <sentencepiece_processor.h>

namespace moeserve::engine::internal {

struct SpmWrapper::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SpmWrapper::SpmWrapper() : impl_(std::make_unique<Impl>()) {}
SpmWrapper::~SpmWrapper() = default;

bool SpmWrapper::Load(const std::string& path, std::string* error) {
  sentencepiece::util::Status s = impl_->sp.Load(path);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

bool SpmWrapper::Encode(const std::string& text, std::vector<int>* ids,
                        std::string* error) const {
  sentencepiece::util::Status s = impl_->sp.Encode(text, ids);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

bool SpmWrapper::Decode(const std::vector<int>& ids, std::string* text,
                        std::string* error) const {
  sentencepiece::util::Status s = impl_->sp.Decode(ids, text);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

std::string SpmWrapper::IdToPiece(int id) const {
  return impl_->sp.IdToPiece(id);
}
int SpmWrapper::vocab_size() const { return impl_->sp.GetPieceSize(); }
int SpmWrapper::bos_id() const { return impl_->sp.bos_id(); }
int SpmWrapper::eos_id() const { return impl_->sp.eos_id(); }
int SpmWrapper::unk_id() const { return impl_->sp.unk_id(); }
bool SpmWrapper::IsControl(int id) const { return impl_->sp.IsControl(id); }
bool SpmWrapper::IsByte(int id) const { return impl_->sp.IsByte(id); }

}  // namespace moeserve::engine::internal
