// Issue 16: one 1 MiB prompt cost 200-260 MB of RSS in the tokenizer and
// much of it stayed held. Measures the peak RSS (VmHWM, reset through
// /proc/self/clear_refs) of Tokenizer::Encode on the demo tokenizer and the
// RSS left afterwards.
#include <malloc.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
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
  for (size_t bytes : {size_t{64} << 10, size_t{1} << 20}) {
    const std::string text = ProseBytes(bytes);
    const Cost whole = Measure([&] { return (*tok)->EncodeWhole(text, true); });
    const Cost pieces = Measure([&] { return (*tok)->Encode(text, true); });
    if (pieces.peak_kb < 0) GTEST_SKIP() << "cannot reset VmHWM";
    EXPECT_EQ(whole.tokens, pieces.tokens);
    std::printf(
        "%zu KiB, %zu tokens: whole peak +%ld KiB (%.0f B/B), held +%ld KiB; "
        "pieces peak +%ld KiB (%.0f B/B), held +%ld KiB\n",
        bytes >> 10, pieces.tokens, whole.peak_kb,
        whole.peak_kb * 1024.0 / bytes, whole.held_kb, pieces.peak_kb,
        pieces.peak_kb * 1024.0 / bytes, pieces.held_kb);
    // The ids (4 bytes each, twice while copied) and a piece's working set.
    EXPECT_LT(pieces.peak_kb, 32 * 1024) << bytes;
    EXPECT_LT(pieces.held_kb, 8 * 1024) << bytes;
  }
}

}  // namespace
}  // namespace moeserve::engine
