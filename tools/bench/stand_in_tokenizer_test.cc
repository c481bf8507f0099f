#include "tools/bench/stand_in_tokenizer.h"

#include "gtest/gtest.h"

namespace moeserve::bench {
namespace {

TEST(StandInTokenizerTest, EveryIdOfTheVocabDecodes) {
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> t = StandInTokenizer(300);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 300);
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_EQ((*t)->eos_id(), 2);
  std::vector<int32_t> all;
  for (int32_t id = 0; id < 300; ++id) all.push_back(id);
  EXPECT_TRUE((*t)->Decode(all).ok());
  absl::StatusOr<std::string> text = (*t)->Decode({1, 7, 299, 2});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "t7t299");  // control pieces decode to nothing
  EXPECT_FALSE((*t)->Decode({300}).ok());

  // Streaming detokenization, as the engine does per token.
  engine::IncrementalDetokenizer detok(t->get());
  std::string streamed;
  for (int32_t id : {5, 6, 7}) streamed += *detok.Next(id);
  streamed += *detok.Flush();
  EXPECT_EQ(streamed, "t5t6t7");
}

TEST(StandInTokenizerTest, LoadsAQwenSizedVocab) {
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> t =
      StandInTokenizer(151936);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 151936);
  EXPECT_TRUE((*t)->Decode({151935}).ok());
}

TEST(StandInTokenizerTest, RefusesATinyVocab) {
  EXPECT_FALSE(StandInTokenizer(3).ok());
}

}  // namespace
}  // namespace moeserve::bench
