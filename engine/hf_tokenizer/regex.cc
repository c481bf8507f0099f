#include "engine/hf_tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace moeserve::engine::hf_tokenizer {

namespace {

// Oniguruma's meaning of the shorthands that PCRE2 reads otherwise: \s is
// Unicode White_Space (PCRE2's \s also takes U+180E, through \h), and \h
// is an ASCII hex digit (horizontal space in PCRE2). Properties work inside
// and outside character classes alike. Escaped backslashes and \Q...\E are
// copied as they are.
std::string TranslateOniguruma(absl::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out.push_back(pattern[i]);
      continue;
    }
    const char next = pattern[i + 1];
    ++i;
    switch (next) {
      case 's':
        out.append("\\p{White_Space}");
        break;
      case 'S':
        out.append("\\P{White_Space}");
        break;
      case 'h':
        out.append("\\p{ASCII_Hex_Digit}");
        break;
      case 'H':
        out.append("\\P{ASCII_Hex_Digit}");
        break;
      case 'Q': {
        const size_t end = pattern.find("\\E", i + 1);
        const size_t stop =
            end == absl::string_view::npos ? pattern.size() : end + 2;
        out.append(pattern.data() + i - 1, stop - (i - 1));
        i = stop - 1;
        break;
      }
      default:
        out.push_back('\\');
        out.push_back(next);
    }
  }
  return out;
}

}  // namespace

MatchScratch::MatchScratch() : data_(pcre2_match_data_create(1, nullptr)) {}

MatchScratch::~MatchScratch() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(data_));
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(absl::string_view pattern,
                                                      bool literal) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Oniguruma's ^ and $ are line anchors (PCRE2_MULTILINE), its lines end
  // at \n only. PCRE2_UCP and PCRE2_MULTILINE are not allowed with (nor
  // needed for) a literal.
  const uint32_t options =
      PCRE2_UTF |
      (literal ? PCRE2_LITERAL : uint32_t{PCRE2_UCP | PCRE2_MULTILINE});
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  const std::string source =
      literal ? std::string(pattern) : TranslateOniguruma(pattern);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                    options, &error, &offset, context);
  pcre2_compile_context_free(context);
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
  // The iteration of the onig crate's find_iter, which HF tokenizers splits
  // with: an empty match is reported (it still cuts the text around it)
  // unless it sits where the previous match ended; then the search moves
  // one character on.
  size_t start = 0;
  size_t last_match_end = std::string::npos;
  while (start <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), start,
                               PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH, or a resource limit.
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0], end = ovector[1];
    if (begin == end && end == last_match_end) {
      ++start;
      while (start < text.size() &&
             (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
        ++start;
      }
      continue;
    }
    matches->emplace_back(begin, end);
    start = last_match_end = end;
  }
}

}  // namespace moeserve::engine::hf_tokenizer
