// Issue 16: one 1 MiB prompt cost 200-260 MB of RSS in the tokenizer and
// much of it stayed held. Measures the peak RSS (VmHWM, reset through
// /proc/self/clear_refs) of Tokenizer::Encode on the demo tokenizer and the
// RSS left afterwards.
#include <malloc.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/tokenizer.h"
#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

constexpr char kModel[] = "models/demo/tokenizer.model";

// A /proc/self/status field in KiB ("VmHWM", "VmRSS"); -1 when unreadable.
long StatusKb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0)
      return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

// Resets VmHWM to the current RSS; false when the kernel refuses.
bool ResetPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

std::string ProseBytes(size_t n) {
  static const char* kWords[] = {
      "the", "LORD", "said",   "unto",  "Moses,", "and", "they", "went",
      "out", "of",   "Egypt.", "héllo", "世界",   "✓",   "\n\n", "1234"};
  std::mt19937 rng(16);
  std::string s;
  while (s.size() < n) {
    s += kWords[rng() % 16];
    s += ' ';
  }
  s.resize(n);
  while (!s.empty() && (s.back() & 0xC0) == 0x80) s.pop_back();
  if (!s.empty() && (s.back() & 0x80)) s.pop_back();
  return s;
}

// Issue 29: short words, many tokens per byte ("a of to it ...").
std::string ShortWordsBytes(size_t n) {
  static const char* kWords[] = {"a",  "of", "to", "it", "I",  "is",
                                 "on", "an", "be", "we", "by", "or"};
  std::mt19937 rng(29);
  std::string s;
  while (s.size() < n) {
    s += kWords[rng() % 12];
    s += ' ';
  }
  s.resize(n);
  return s;
}

struct Cost {
  long peak_kb = 0;  // VmHWM over the RSS before
  long held_kb = 0;  // RSS after (ids freed) over the RSS before
  size_t tokens = 0;
};

// Peak and held RSS of one encode; peak_kb -1 when VmHWM cannot be reset.
template <typename F>
Cost Measure(F encode) {
  Cost c;
  malloc_trim(0);
  const long before = StatusKb("VmRSS");
  if (!ResetPeak()) return {-1, 0, 0};
  {
    absl::StatusOr<std::vector<int32_t>> ids = encode();
    EXPECT_TRUE(ids.ok());
    c.tokens = ids.ok() ? ids->size() : 0;
    c.peak_kb = StatusKb("VmHWM") - before;
  }
  c.held_kb = StatusKb("VmRSS") - before;
  return c;
}

// Before: one sentencepiece call over the whole text, ~110 bytes per byte
// (EncodeWhole, printed for comparison). Encode cuts the text into pieces
// of Tokenizer::kPieceBytes: its peak no longer grows with the text beyond
// the ids themselves, and it returns what it freed.
TEST(TokenizerMemory, EncodeOfALargeTextIsBounded) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Sanitizers keep freed memory in quarantine and pad every block: RSS
  // says nothing about the tokenizer there.
  GTEST_SKIP() << "RSS is not meaningful under a sanitizer";
#endif
  auto tok = Tokenizer::Load(kModel);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_TRUE((*tok)->piecewise());
  (void)(*tok)->Encode("warm up", true);
  for (size_t bytes : {size_t{64} << 10, size_t{1} << 20, size_t{1} << 21}) {
    for (bool short_words : {false, true}) {
      const std::string text =
          short_words ? ShortWordsBytes(bytes) : ProseBytes(bytes);
      const Cost whole =
          Measure([&] { return (*tok)->EncodeWhole(text, true); });
      const Cost pieces = Measure([&] { return (*tok)->Encode(text, true); });
      if (pieces.peak_kb < 0) GTEST_SKIP() << "cannot reset VmHWM";
      EXPECT_EQ(whole.tokens, pieces.tokens);
      std::printf(
          "%s %zu KiB, %zu tokens: whole peak +%ld KiB (%.0f B/B), held +%ld "
          "KiB; pieces peak +%ld KiB (%.0f B/B), held +%ld KiB\n",
          short_words ? "short words" : "prose", bytes >> 10, pieces.tokens,
          whole.peak_kb, whole.peak_kb * 1024.0 / bytes, whole.held_kb,
          pieces.peak_kb, pieces.peak_kb * 1024.0 / bytes, pieces.held_kb);
      // The ids (4 bytes each, twice while copied) and a piece's working set.
      EXPECT_LT(pieces.peak_kb, 32 * 1024) << bytes;
      EXPECT_LT(pieces.held_kb, 8 * 1024) << bytes;
    }
  }
}

// Issue 29: eight texts of 64 KiB encoded at once (eight /tokenize calls).
TEST(TokenizerMemory, ConcurrentEncodesAreBounded) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "RSS is not meaningful under a sanitizer";
#endif
  auto tok = Tokenizer::Load(kModel);
  ASSERT_TRUE(tok.ok()) << tok.status();
  (void)(*tok)->Encode("warm up", true);
  constexpr int kThreads = 8;
  for (bool short_words : {false, true}) {
    const std::string text =
        short_words ? ShortWordsBytes(64 << 10) : ProseBytes(64 << 10);
    const Cost cost = Measure([&]() -> absl::StatusOr<std::vector<int32_t>> {
      std::vector<std::thread> threads;
      std::vector<size_t> tokens(kThreads);
      for (int i = 0; i < kThreads; ++i) {
        threads.emplace_back([&, i] {
          for (int r = 0; r < 4; ++r) {
            auto ids = (*tok)->Encode(text, true);
            tokens[i] = ids.ok() ? ids->size() : 0;
          }
        });
      }
      for (std::thread& t : threads) t.join();
      return std::vector<int32_t>(tokens.begin(), tokens.end());
    });
    if (cost.peak_kb < 0) GTEST_SKIP() << "cannot reset VmHWM";
    std::printf("%d threads x 4 x 64 KiB %s: peak +%ld KiB, held +%ld KiB\n",
                kThreads, short_words ? "short words" : "prose", cost.peak_kb,
                cost.held_kb);
    EXPECT_LT(cost.peak_kb, 64 * 1024);
    EXPECT_LT(cost.held_kb, 16 * 1024);
  }
}

}  // namespace
}  // namespace moeserve::engine
