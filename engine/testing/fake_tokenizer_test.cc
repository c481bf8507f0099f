// The fake tokenizer behaves as the Tokenizer contract says: encode/decode
// round trips, BOS/EOS ids, and streamed text deltas that add up to the
// full decode (IncrementalDetokenizer over the fake's anchor piece).
#include "engine/testing/fake_tokenizer.h"

#include "gtest/gtest.h"

namespace moeserve::engine::testing {
namespace {

TEST(FakeTokenizerTest, RoundTripsWordsAndKnowsItsSpecialIds) {
  std::unique_ptr<Tokenizer> t = FakeTokenizer(100);
  EXPECT_EQ(t->vocab_size(), 100);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  absl::StatusOr<std::vector<int32_t>> ids =
      t->Encode("w7 a w42 zz w100", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, 7, 3, 42, 0, 0}));
  EXPECT_EQ(*t->Decode({7, 3, 42}), "w7a w42");
  EXPECT_EQ(*t->IdToPiece(42), "\xE2\x96\x81w42");
  EXPECT_FALSE(t->Decode({100}).ok());
}

TEST(FakeTokenizerTest, StreamedDeltasAddUpToTheFullDecode) {
  std::unique_ptr<Tokenizer> t = FakeTokenizer(64);
  const std::vector<int32_t> ids = {1, 9, 10, 3, 11, 2, 63};
  IncrementalDetokenizer detok(t.get());
  std::string streamed;
  for (int32_t id : ids) streamed += *detok.Next(id);
  streamed += *detok.Flush();
  EXPECT_EQ(streamed, *t->Decode(ids));
}

}  // namespace
}  // namespace moeserve::engine::testing
