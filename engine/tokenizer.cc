#include "engine/tokenizer.h"

#include <malloc.h>
#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/hf_tokenizer/hf_bpe_model.h"
#include "engine/internal/spm_wrapper.h"
#include "engine/json_util.h"

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
  // sentencepiece opens the path itself: a FIFO would block it for a
  // writer (issue 29), a device read forever. Refused at once.
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a regular file (", json_util::FileKind(st.st_mode), ")"));
  }
  auto spm = std::make_unique<internal::SpmWrapper>();
  std::string error;
  if (!spm->Load(path, &error)) {
    // A plugin that cannot be loaded is the install's fault, not the
    // model's: say so, and do not blame the file.
    if (absl::StartsWith(error, "install problem: ")) {
      return absl::FailedPreconditionError(error);
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a sentencepiece model: ", error));
  }
  return FromPieceModel(std::move(spm));
}

std::unique_ptr<Tokenizer> Tokenizer::FromPieceModel(
    std::unique_ptr<internal::PieceModel> model) {
  std::unique_ptr<Tokenizer> t(new Tokenizer(std::move(model)));
  t->FindAnchor();
  t->CheckPiecewise();
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadFromModelDir(
    const std::string& model_dir) {
  const std::string spm_path = model_dir + "/tokenizer.model";
  const std::string hf_path = model_dir + "/tokenizer.json";
  struct stat st;
  if (stat(spm_path.c_str(), &st) != 0 && stat(hf_path.c_str(), &st) == 0) {
    // No sentencepiece model: the Hugging Face tokenizer.json (byte-level
    // BPE, engine/hf_tokenizer). Encoded whole: its memory is linear and
    // small, and a cut could split the whitespace that an lstrip/rstrip
    // added token swallows (the probes cannot know the model's tokens).
    MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<internal::PieceModel> model,
                              hf_tokenizer::LoadHfTokenizer(hf_path));
    std::unique_ptr<Tokenizer> tokenizer = FromPieceModel(std::move(model));
    tokenizer->piecewise_ = false;
    return tokenizer;
  }
  return Load(spm_path);
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

namespace {

// Where the piece of `text` that starts at `begin` ends (Encode): before a
// space (U+0020) that follows a printable ASCII character other than a
// space, the last such point within `max_bytes`, else the first after it,
// else the end. Every piece but the first therefore starts a new word
// (sentencepiece's words begin at a space and no piece spans a word
// boundary), and no normalizer turns the character before the cut into
// whitespace.
size_t NextCut(absl::string_view text, size_t begin, size_t max_bytes) {
  auto cut_at = [text](size_t p) {
    return text[p] == ' ' && text[p - 1] > ' ' && text[p - 1] < 0x7F;
  };
  const size_t limit = std::min(text.size(), begin + max_bytes);
  if (limit == text.size()) return limit;
  for (size_t p = limit; p > begin; --p) {
    if (cut_at(p)) return p;
  }
  for (size_t p = limit + 1; p < text.size(); ++p) {
    if (cut_at(p)) return p;
  }
  return text.size();
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text,
                                                       bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  absl::Status st = piecewise_ ? EncodePiecewise(text, kPieceBytes, &out)
                               : EncodePiece(text, /*after_text=*/false, &out);
  if (absl::IsFailedPrecondition(st)) {
    // A piece's ids did not start with the anchor's: encode whole.
    out.resize(add_bos && bos_id() >= 0 ? 1 : 0);
    st = EncodePiece(text, /*after_text=*/false, &out);
  }
  if (!st.ok()) return st;
  if (text.size() >= kTrimAfterBytes) ReturnFreedMemory();
  return out;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::EncodeWhole(
    absl::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  MOESERVE_RETURN_IF_ERROR(EncodePiece(text, /*after_text=*/false, &out));
  return out;
}

absl::Status Tokenizer::EncodePiecewise(absl::string_view text,
                                        size_t piece_bytes,
                                        std::vector<int32_t>* out) const {
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = NextCut(text, begin, piece_bytes);
    MOESERVE_RETURN_IF_ERROR(
        EncodePiece(text.substr(begin, end - begin), begin > 0, out));
    begin = end;
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::EncodePiece(absl::string_view piece, bool after_text,
                                    std::vector<int32_t>* out) const {
  // A piece that follows text is encoded behind the anchor (which ends in
  // a printable non-space character, like the text before the cut), whose
  // own ids are then dropped: the piece's leading space then encodes as in
  // the middle of a text, not as the start of one.
  std::string input;
  if (after_text) input = anchor_text_;
  input.append(piece.data(), piece.size());
  std::vector<int> ids;
  std::string error;
  if (!spm_->Encode(input, &ids, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("encode failed: ", error));
  }
  size_t skip = 0;
  if (after_text) {
    if (ids.size() < anchor_ids_.size() ||
        !std::equal(anchor_ids_.begin(), anchor_ids_.end(), ids.begin())) {
      return absl::FailedPreconditionError("anchor merged into the piece");
    }
    skip = anchor_ids_.size();
  }
  out->insert(out->end(), ids.begin() + skip, ids.end());
  return absl::OkStatus();
}

void Tokenizer::CheckPiecewise() {
  // Needs an anchor of printable ASCII that encodes on its own.
  if (anchor_id_ < 0) return;
  for (char c : anchor_text_) {
    if (c <= ' ' || c >= 0x7F) return;
  }
  std::vector<int32_t> anchor;
  if (!EncodePiece(anchor_text_, false, &anchor).ok() || anchor.empty()) {
    return;
  }
  anchor_ids_.assign(anchor.begin(), anchor.end());
  // Cut at every eligible point of texts with runs of spaces, leading and
  // trailing spaces, newlines, tabs, digits, punctuation and multi-byte
  // characters: the ids must be the whole text's.
  static constexpr const char* kProbes[] = {
      "The LORD said unto Moses, Go in unto Pharaoh.",
      "hello  world   with    runs of     spaces",
      "  leading and trailing spaces   ",
      "line one\n line two\n\n  indented\tand\ttabs \n",
      "h\xC3\xA9llo w\xC3\xB6rld \xE4\xB8\x96\xE7\x95\x8C \xE2\x9C\x93 1234 "
      "56.78 a-b c_d (e) [f] {g} 'h' \"i\"",
      "x y z 0 1 2 ! ? . , ; : x. y, z! a's",
  };
  for (const char* probe : kProbes) {
    std::vector<int32_t> whole, pieces;
    if (!EncodePiece(probe, false, &whole).ok() ||
        !EncodePiecewise(probe, 1, &pieces).ok() || whole != pieces) {
      anchor_ids_.clear();
      return;
    }
  }
  piecewise_ = true;
}

void Tokenizer::ReturnFreedMemory() {
#ifdef __GLIBC__
  // sentencepiece's working set for a long text is hundreds of bytes per
  // input byte in many small blocks, freed into this thread's malloc arena,
  // which keeps them (issue 16: 1.4 GB held after 8 concurrent 1 MiB
  // prompts). Give the free pages back to the system.
  malloc_trim(0);
#endif
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids,
                                              SpecialTokens special) const {
  MOESERVE_RETURN_IF_ERROR(CheckIds(ids));
  if (special == SpecialTokens::kKeep) return DecodeKeepingSpecial(ids);
  std::string text, error;
  if (!spm_->Decode(std::vector<int>(ids.begin(), ids.end()), &text, &error)) {
    return absl::InternalError(absl::StrCat("decode failed: ", error));
  }
  return text;
}

absl::StatusOr<std::string> Tokenizer::DecodeAfterText(
    std::vector<int32_t>::const_iterator begin,
    std::vector<int32_t>::const_iterator end) const {
  if (anchor_id_ < 0) return Decode({begin, end});
  std::vector<int32_t> window = {anchor_id_};
  window.insert(window.end(), begin, end);
  MOESERVE_ASSIGN_OR_RETURN(std::string text, Decode(window));
  return text.substr(std::min(text.size(), anchor_text_.size()));
}

absl::StatusOr<std::string> Tokenizer::DecodeKeepingSpecial(
    const std::vector<int32_t>& ids) const {
  // The pieces between control pieces are decoded as runs (byte fallback
  // and UTF-8 repair work over a run), each but a leading one as in the
  // middle of a text; the control pieces go in as their piece text.
  std::string out;
  auto run_begin = ids.begin();
  auto flush_run =
      [&](std::vector<int32_t>::const_iterator run_end) -> absl::Status {
    if (run_begin == run_end) return absl::OkStatus();
    absl::StatusOr<std::string> text =
        run_begin == ids.begin() ? Decode({run_begin, run_end})
                                 : DecodeAfterText(run_begin, run_end);
    if (!text.ok()) return text.status();
    out += *text;
    return absl::OkStatus();
  };
  for (auto it = ids.begin(); it != ids.end(); ++it) {
    if (!spm_->IsControl(*it)) continue;
    MOESERVE_RETURN_IF_ERROR(flush_run(it));
    out += spm_->IdToPiece(*it);
    run_begin = it + 1;
  }
  MOESERVE_RETURN_IF_ERROR(flush_run(ids.end()));
  return out;
}

absl::StatusOr<std::string> Tokenizer::IdToPiece(int32_t id) const {
  MOESERVE_RETURN_IF_ERROR(CheckIds({id}));
  return spm_->IdToPiece(id);
}

absl::StatusOr<std::string> Tokenizer::TokenBytes(int32_t id) const {
  MOESERVE_RETURN_IF_ERROR(CheckIds({id}));
  return spm_->PieceBytes(id);
}

int32_t Tokenizer::bos_id() const { return spm_->bos_id(); }
int32_t Tokenizer::eos_id() const { return spm_->eos_id(); }
int32_t Tokenizer::vocab_size() const { return spm_->vocab_size(); }

absl::StatusOr<std::string> IncrementalDetokenizer::DecodeRange(
    size_t begin, size_t end) const {
  if (begin == 0) {
    return tokenizer_->Decode({ids_.begin() + begin, ids_.begin() + end});
  }
  return tokenizer_->DecodeAfterText(ids_.begin() + begin, ids_.begin() + end);
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
  MOESERVE_ASSIGN_OR_RETURN(std::string delta, NewText(text, prefix));
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return delta;
}

absl::StatusOr<std::string> IncrementalDetokenizer::NewText(
    const std::string& text, const std::string& prefix) const {
  if (read_offset_ < prompt_end_) {
    // Prompt ids that never became text: the prompt ends inside a
    // character. Decoded alone they end in U+FFFD; if the full text still
    // starts with that, no generated id completed the character and those
    // U+FFFD are the prompt's, not the completion's.
    MOESERVE_ASSIGN_OR_RETURN(std::string prompt_text,
                              DecodeRange(prefix_offset_, prompt_end_));
    if (prompt_text.size() > prefix.size() &&
        absl::StartsWith(text, prompt_text)) {
      return text.substr(prompt_text.size());
    }
  }
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
  prompt_end_ = ids_.size();
  return absl::OkStatus();
}

absl::StatusOr<std::string> IncrementalDetokenizer::Flush() {
  MOESERVE_ASSIGN_OR_RETURN(std::string prefix,
                            DecodeRange(prefix_offset_, read_offset_));
  MOESERVE_ASSIGN_OR_RETURN(std::string text,
                            DecodeRange(prefix_offset_, ids_.size()));
  if (text.size() <= prefix.size()) {
    prefix_offset_ = read_offset_ = ids_.size();
    return std::string();
  }
  MOESERVE_ASSIGN_OR_RETURN(std::string delta, NewText(text, prefix));
  prefix_offset_ = read_offset_ = ids_.size();
  return delta;
}

}  // namespace moeserve::engine
