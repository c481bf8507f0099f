#include "engine/hf_tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace moeserve::engine::hf_tokenizer {

MatchScratch::MatchScratch() : data_(pcre2_match_data_create(1, nullptr)) {}

MatchScratch::~MatchScratch() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(data_));
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(absl::string_view pattern,
                                                      bool literal) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_UCP is not allowed with (nor needed for) a literal.
  const uint32_t options =
      PCRE2_UTF | (literal ? PCRE2_LITERAL : uint32_t{PCRE2_UCP});
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                    pattern.size(), options, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(
        absl::StrCat("regex \"", pattern, "\" does not compile at offset ",
                     offset, ": ", reinterpret_cast<const char*>(message)));
  }
  // Without JIT (an unsupported CPU) pcre2_match interprets: slower, same
  // results.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::unique_ptr<Regex> regex(new Regex());
  regex->pattern_ = std::string(pattern);
  regex->code_ = code;
  return regex;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::FindAll(absl::string_view text, MatchScratch* scratch,
                    std::vector<std::pair<size_t, size_t>>* matches) const {
  matches->clear();
  auto* code = static_cast<pcre2_code*>(code_);
  auto* data = static_cast<pcre2_match_data*>(scratch->data());
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), start,
                               PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH, or a resource limit.
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches->emplace_back(begin, end);
      start = end;
    } else {
      // Empty match: skip one character.
      if (begin >= text.size()) break;
      start = begin + 1;
      while (start < text.size() &&
             (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
        ++start;
      }
    }
  }
}

}  // namespace moeserve::engine::hf_tokenizer
