#ifndef MOESERVE_ENGINE_HF_TOKENIZER_REGEX_H_
#define MOESERVE_ENGINE_HF_TOKENIZER_REGEX_H_

// Regex: a PCRE2 pattern compiled for UTF-8 with Unicode properties
// (PCRE2_UTF | PCRE2_UCP, JIT where available), for the Split and ByteLevel
// pre-tokenizers of tokenizer.json, which are written for Oniguruma: so ^ and
// $ are line anchors (lines end at \n), \s/\S are Unicode White_Space and
// \h/\H ASCII hex digits (rewritten to properties), and matches iterate as
// in the onig crate.
//
// Owns the compiled code. Thread-safety: immutable after Compile; FindAll may
// be called concurrently, each caller passing its own MatchScratch.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moeserve::engine::hf_tokenizer {

// Per-caller match state (a pcre2_match_data); one serves every Regex.
class MatchScratch {
 public:
  MatchScratch();
  ~MatchScratch();
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
  void* data() const { return data_; }

 private:
  void* data_;
};

class Regex {
 public:
  // `literal`: the pattern is a plain string (Split's {"String": ...}).
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(
      absl::string_view pattern, bool literal = false);
  ~Regex();

  // The non-overlapping matches of `text` (valid UTF-8), leftmost first, as
  // [begin, end) byte offsets, in the onig crate's find_iter order (which HF
  // tokenizers uses): empty matches included, except one where the previous
  // match ended (the search then goes on one character later).
  void FindAll(absl::string_view text, MatchScratch* scratch,
               std::vector<std::pair<size_t, size_t>>* matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace moeserve::engine::hf_tokenizer

#endif  // MOESERVE_ENGINE_HF_TOKENIZER_REGEX_H_
