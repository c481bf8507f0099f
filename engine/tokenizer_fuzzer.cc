// libFuzzer target: the sentencepiece tokenizer behind Tokenizer (Encode,
// Decode) and the IncrementalDetokenizer (Next, Prime, Flush) on the demo
// model's tokenizer (models/demo/tokenizer.model, or $MOESERVE_FUZZ_TOKENIZER).
//
// Input: one mode byte, then either text (mode bit 0 set: Encode it, Decode
// the ids, stream them) or little-endian 16-bit token ids taken modulo the
// vocabulary (stream them, primed with the first mode>>1 % 32 as a prompt).
// Checked: no crash; Decode, with special tokens skipped or kept, is valid
// UTF-8 (kept: Decode's text when the ids hold none); every streamed delta
// is valid UTF-8 and carries no U+FFFD from an unfinished prompt tail;
// without a prompt the deltas add up to Decode(ids)
// (IncrementalDetokenizer's contract).
//
// Built and run by tests/fuzz/run_fuzzers.sh (tokenizer_fuzzer).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/tokenizer.h"

namespace {

using moeserve::engine::IncrementalDetokenizer;
using moeserve::engine::Tokenizer;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "tokenizer_fuzzer: %s: %s\n", what, detail.c_str());
  std::abort();
}

// Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    const int n = c < 0x80         ? 0
                  : (c >> 5) == 6  ? 1
                  : (c >> 4) == 14 ? 2
                  : (c >> 3) == 30 ? 3
                                   : -1;
    if (n < 0 || i + n >= s.size() + (n == 0)) return false;
    uint32_t cp = n == 0 ? c : c & (0x3F >> n);
    for (int k = 1; k <= n; ++k) {
      const unsigned char cc = s[i + k];
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

const Tokenizer& TheTokenizer() {
  static const Tokenizer* tokenizer = [] {
    const char* env = std::getenv("MOESERVE_FUZZ_TOKENIZER");
    const std::string path = env ? env : "models/demo/tokenizer.model";
    auto t = Tokenizer::Load(path);
    if (!t.ok()) Fail("cannot load the tokenizer", t.status().ToString());
    return t->release();
  }();
  return *tokenizer;
}

// Streams ids[prompt..] after priming with ids[..prompt]; returns the text.
std::string Stream(const Tokenizer& tok, const std::vector<int32_t>& ids,
                   size_t prompt) {
  IncrementalDetokenizer detok(&tok);
  if (prompt > 0) {
    auto st = detok.Prime({ids.begin(), ids.begin() + prompt});
    if (!st.ok()) Fail("Prime", st.ToString());
  }
  std::string text;
  for (size_t i = prompt; i < ids.size(); ++i) {
    auto delta = detok.Next(ids[i]);
    if (!delta.ok()) Fail("Next", delta.status().ToString());
    if (!IsValidUtf8(*delta)) Fail("delta is not valid UTF-8", *delta);
    text += *delta;
  }
  auto rest = detok.Flush();
  if (!rest.ok()) Fail("Flush", rest.status().ToString());
  if (!IsValidUtf8(*rest)) Fail("Flush is not valid UTF-8", *rest);
  return text + *rest;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tok = TheTokenizer();
  const uint8_t mode = data[0];
  ++data;
  --size;
  std::vector<int32_t> ids;
  size_t prompt = 0;
  if (mode & 1) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    auto encoded = tok.Encode(text, /*add_bos=*/mode & 2);
    if (!encoded.ok()) return 0;  // refusing is fine; crashing is not
    ids = *std::move(encoded);
  } else {
    for (size_t i = 0; i + 1 < size && ids.size() < 512; i += 2) {
      ids.push_back((data[i] | data[i + 1] << 8) % tok.vocab_size());
    }
    prompt = std::min<size_t>(ids.size(), (mode >> 1) % 32);
  }
  absl::StatusOr<std::string> decoded = tok.Decode(ids);
  if (!decoded.ok()) Fail("Decode", decoded.status().ToString());
  if (!IsValidUtf8(*decoded)) Fail("Decode is not valid UTF-8", *decoded);
  for (int32_t id : ids) {
    if (!tok.IdToPiece(id).ok()) Fail("IdToPiece", std::to_string(id));
  }
  // Keeping special tokens (the Tokenize RPC's default): valid UTF-8, and
  // Decode's text when there are none (the demo tokenizer's control pieces
  // are <s> and </s>).
  absl::StatusOr<std::string> kept =
      tok.Decode(ids, moeserve::engine::SpecialTokens::kKeep);
  if (!kept.ok()) Fail("Decode(kKeep)", kept.status().ToString());
  if (!IsValidUtf8(*kept)) Fail("Decode(kKeep) is not valid UTF-8", *kept);
  const bool special = std::any_of(ids.begin(), ids.end(), [&tok](int32_t id) {
    return id == tok.bos_id() || id == tok.eos_id();
  });
  if (!special && *kept != *decoded) {
    Fail("Decode(kKeep) differs from Decode without special tokens",
         *kept + " vs " + *decoded);
  }
  // Streaming costs two decodes per id: at most kStreamIds of them.
  constexpr size_t kStreamIds = 48;
  if (ids.size() > kStreamIds) {
    ids.resize(kStreamIds);
    decoded = tok.Decode(ids);
    if (!decoded.ok()) Fail("Decode", decoded.status().ToString());
  }
  const std::string streamed = Stream(tok, ids, prompt);
  if (prompt == 0 && streamed != *decoded) {
    Fail("streamed text differs from Decode", streamed + " vs " + *decoded);
  }
  return 0;
}
