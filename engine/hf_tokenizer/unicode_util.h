#ifndef MOESERVE_ENGINE_HF_TOKENIZER_UNICODE_UTIL_H_
#define MOESERVE_ENGINE_HF_TOKENIZER_UNICODE_UTIL_H_

// UTF-8 helpers for the Hugging Face tokenizer (engine/hf_tokenizer): lossy
// decoding as Rust's String::from_utf8_lossy and the WHATWG TextDecoder do
// it, Unicode White_Space, NFC through ICU, and GPT-2's byte <-> character
// table of byte-level BPE. Stateless; safe to call concurrently.

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace moeserve::engine::hf_tokenizer {

// True when `text` is well-formed UTF-8 (no surrogates, no overlongs).
bool IsValidUtf8(absl::string_view text);

// `text` with every maximal ill-formed subsequence replaced by one U+FFFD
// (the "substitution of maximal subparts" practice of Unicode chapter 3).
std::string Utf8Lossy(absl::string_view text);

// Decodes the code point at `text[*pos]` and advances *pos. REQUIRES:
// well-formed UTF-8 and *pos < text.size() at a character boundary.
char32_t NextCodePoint(absl::string_view text, size_t* pos);
// Appends the UTF-8 encoding of `cp`.
void AppendUtf8(char32_t cp, std::string* out);

// Unicode White_Space (Rust's char::is_whitespace).
bool IsUnicodeWhitespace(char32_t cp);

// NFC of `text` (valid UTF-8). Returns false (and leaves *out alone) when
// `text` is already NFC, the common case, so that callers need not copy.
bool NormalizeNfc(absl::string_view text, std::string* out);

// GPT-2's bytes_to_unicode: byte b is written as the character
// ByteToChar()[b] in byte-level vocabularies ("Ġ" for a space).
const std::array<char32_t, 256>& ByteToChar();
// The inverse: the byte of a character of that table, or -1.
int CharToByte(char32_t cp);

}  // namespace moeserve::engine::hf_tokenizer

#endif  // MOESERVE_ENGINE_HF_TOKENIZER_UNICODE_UTIL_H_
