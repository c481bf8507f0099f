#include "engine/hf_tokenizer/unicode_util.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

namespace moeserve::engine::hf_tokenizer {
namespace {

// Length of the well-formed sequence starting at text[pos] (1..4), or 0 when
// it is ill-formed; *maximal is set to the length of the maximal subpart
// (at least 1) that one U+FFFD replaces.
size_t SequenceLength(absl::string_view text, size_t pos, size_t* maximal) {
  const auto at = [&](size_t i) -> unsigned {
    return static_cast<unsigned char>(text[i]);
  };
  const unsigned lead = at(pos);
  *maximal = 1;
  if (lead < 0x80) return 1;
  size_t need;
  unsigned lo = 0x80, hi = 0xBF;  // Range of the second byte.
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    if (pos + k >= text.size()) return 0;
    const unsigned b = at(pos + k);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
    *maximal = k + 1;
  }
  return need;
}

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t maximal;
    const size_t n = SequenceLength(text, pos, &maximal);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string Utf8Lossy(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t maximal;
    const size_t n = SequenceLength(text, pos, &maximal);
    if (n > 0) {
      out.append(text.data() + pos, n);
      pos += n;
    } else {
      out.append("\xEF\xBF\xBD");
      pos += maximal;
    }
  }
  return out;
}

char32_t NextCodePoint(absl::string_view text, size_t* pos) {
  const auto at = [&](size_t i) -> char32_t {
    return static_cast<unsigned char>(text[i]);
  };
  size_t p = *pos;
  const char32_t lead = at(p);
  if (lead < 0x80) {
    *pos = p + 1;
    return lead;
  }
  if (lead < 0xE0) {
    *pos = p + 2;
    return ((lead & 0x1F) << 6) | (at(p + 1) & 0x3F);
  }
  if (lead < 0xF0) {
    *pos = p + 3;
    return ((lead & 0x0F) << 12) | ((at(p + 1) & 0x3F) << 6) |
           (at(p + 2) & 0x3F);
  }
  *pos = p + 4;
  return ((lead & 0x07) << 18) | ((at(p + 1) & 0x3F) << 12) |
         ((at(p + 2) & 0x3F) << 6) | (at(p + 3) & 0x3F);
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsUnicodeWhitespace(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool NormalizeNfc(absl::string_view text, std::string* out) {
  // ASCII (and everything below U+0300, the first combining mark) is NFC.
  bool low = true;
  for (char c : text) {
    const unsigned char b = static_cast<unsigned char>(c);
    if (b >= 0xCC) {
      low = false;
      break;
    }
  }
  if (low) return false;
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err)) return false;
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (nfc->isNormalizedUTF8(piece, err) || U_FAILURE(err)) return false;
  err = U_ZERO_ERROR;
  std::string normalized;
  icu::StringByteSink<std::string> sink(&normalized);
  nfc->normalizeUTF8(0, piece, sink, nullptr, err);
  if (U_FAILURE(err)) return false;
  *out = std::move(normalized);
  return true;
}

const std::array<char32_t, 256>& ByteToChar() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') ||
                             (b >= 0xA1 && b <= 0xAC) ||
                             (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

int CharToByte(char32_t cp) {
  static const std::array<int16_t, 324> table = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    const auto& fwd = ByteToChar();
    for (int b = 0; b < 256; ++b) t[fwd[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

}  // namespace moeserve::engine::hf_tokenizer
