#include "engine/tokenizer.h"

#include <sys/stat.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/internal/spm_wrapper.h"

namespace moeserve::engine {
namespace {

constexpr absl::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Text that may still change when more tokens arrive.
bool IsUnstable(absl::string_view text) {
  return absl::EndsWith(text, kReplacementChar) || EndsWithIncompleteUtf8(text);
}

}  // namespace

bool EndsWithIncompleteUtf8(absl::string_view text) {
  // Walk back over at most 3 continuation bytes to the lead byte.
  size_t n = text.size();
  size_t cont = 0;
  while (cont < 4 && cont < n &&
         (static_cast<unsigned char>(text[n - 1 - cont]) & 0xC0) == 0x80) {
    ++cont;
  }
  if (cont == n) return cont > 0;  // Only continuation bytes.
  unsigned char lead = static_cast<unsigned char>(text[n - 1 - cont]);
  size_t need = 0;
  if ((lead & 0x80) == 0)
    need = 0;
  else if ((lead & 0xE0) == 0xC0)
    need = 1;
  else if ((lead & 0xF0) == 0xE0)
    need = 2;
  else if ((lead & 0xF8) == 0xF0)
    need = 3;
  else
    return false;  // Invalid lead byte: not a partial character.
  return cont < need;
}

Tokenizer::Tokenizer(std::unique_ptr<internal::PieceModel> model)
    : spm_(std::move(model)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(
    const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat(path, ": tokenizer model not found"));
  }
  auto spm = std::make_unique<internal::SpmWrapper>();
  std::string error;
  if (!spm->Load(path, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a sentencepiece model: ", error));
  }
  return FromPieceModel(std::move(spm));
}

std::unique_ptr<Tokenizer> Tokenizer::FromPieceModel(
    std::unique_ptr<internal::PieceModel> model) {
  std::unique_ptr<Tokenizer> t(new Tokenizer(std::move(model)));
  t->FindAnchor();
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadFromModelDir(
    const std::string& model_dir) {
  return Load(model_dir + "/tokenizer.model");
}

void Tokenizer::FindAnchor() {
  for (int id = 0; id < spm_->vocab_size(); ++id) {
    if (spm_->IsControl(id) || spm_->IsByte(id) || id == spm_->unk_id()) {
      continue;
    }
    std::string piece = spm_->IdToPiece(id), text, error;
    if (piece.empty() || absl::StartsWith(piece, "\xE2\x96\x81")) continue;
    if (!spm_->Decode({id}, &text, &error) || text.empty()) continue;
    if (IsUnstable(text) || text.find(' ') != std::string::npos) continue;
    anchor_id_ = id;
    anchor_text_ = text;
    return;
  }
}

absl::Status Tokenizer::CheckIds(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", id, " out of range [0, ", vocab_size(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text,
                                                       bool add_bos) const {
  std::vector<int> ids;
  std::string error;
  if (!spm_->Encode(std::string(text), &ids, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("encode failed: ", error));
  }
  std::vector<int32_t> out;
  out.reserve(ids.size() + 1);
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

absl::StatusOr<std::string> Tokenizer::Decode(
    const std::vector<int32_t>& ids) const {
  MOESERVE_RETURN_IF_ERROR(CheckIds(ids));
  std::string text, error;
  if (!spm_->Decode(std::vector<int>(ids.begin(), ids.end()), &text, &error)) {
    return absl::InternalError(absl::StrCat("decode failed: ", error));
  }
  return text;
}

absl::StatusOr<std::string> Tokenizer::IdToPiece(int32_t id) const {
  MOESERVE_RETURN_IF_ERROR(CheckIds({id}));
  return spm_->IdToPiece(id);
}

int32_t Tokenizer::bos_id() const { return spm_->bos_id(); }
int32_t Tokenizer::eos_id() const { return spm_->eos_id(); }
int32_t Tokenizer::vocab_size() const { return spm_->vocab_size(); }

absl::StatusOr<std::string> IncrementalDetokenizer::DecodeRange(
    size_t begin, size_t end) const {
  if (begin == 0 || tokenizer_->anchor_id_ < 0) {
    return tokenizer_->Decode({ids_.begin() + begin, ids_.begin() + end});
  }
  std::vector<int32_t> window = {tokenizer_->anchor_id_};
  window.insert(window.end(), ids_.begin() + begin, ids_.begin() + end);
  MOESERVE_ASSIGN_OR_RETURN(std::string text, tokenizer_->Decode(window));
  return text.substr(std::min(text.size(), tokenizer_->anchor_text_.size()));
}

absl::StatusOr<std::string> IncrementalDetokenizer::Next(int32_t id) {
  MOESERVE_RETURN_IF_ERROR(tokenizer_->CheckIds({id}));
  ids_.push_back(id);
  MOESERVE_ASSIGN_OR_RETURN(std::string prefix,
                            DecodeRange(prefix_offset_, read_offset_));
  MOESERVE_ASSIGN_OR_RETURN(std::string text,
                            DecodeRange(prefix_offset_, ids_.size()));
  if (text.size() <= prefix.size() || IsUnstable(text) ||
      !absl::StartsWith(text, prefix)) {
    return std::string();
  }
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return text.substr(prefix.size());
}

absl::Status IncrementalDetokenizer::Prime(const std::vector<int32_t>& ids) {
  MOESERVE_RETURN_IF_ERROR(tokenizer_->CheckIds(ids));
  const internal::PieceModel& spm = *tokenizer_->spm_;
  auto plain = [&spm](int32_t id) {
    return !spm.IsByte(id) && !spm.IsControl(id) && id != spm.unk_id();
  };
  size_t start = ids.size();
  while (start > 0 && !plain(ids[start - 1])) --start;
  start = start > kPrimeContext ? start - kPrimeContext : 0;
  if (start > 0) {
    ids_.insert(ids_.end(), ids.begin(), ids.begin() + start);
    prefix_offset_ = read_offset_ = ids_.size();
  }
  for (size_t i = start; i < ids.size(); ++i) {
    MOESERVE_RETURN_IF_ERROR(Next(ids[i]).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> IncrementalDetokenizer::Flush() {
  MOESERVE_ASSIGN_OR_RETURN(std::string prefix,
                            DecodeRange(prefix_offset_, read_offset_));
  MOESERVE_ASSIGN_OR_RETURN(std::string text,
                            DecodeRange(prefix_offset_, ids_.size()));
  prefix_offset_ = read_offset_ = ids_.size();
  if (text.size() <= prefix.size()) return std::string();
  return text.substr(prefix.size());
}

}  // namespace moeserve::engine
