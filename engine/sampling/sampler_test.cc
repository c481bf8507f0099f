#include "engine/sampling/sampler.h"

#include <cmath>
#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

std::vector<float> Logits() { return {1.0f, 3.0f, 2.0f, 3.0f, -1.0f}; }

TEST(Sampler, GreedyIsArgmaxWithLowestIndexOnTies) {
  Sampler s({}, {}, 5);
  std::vector<float> l = Logits();
  EXPECT_EQ(s.Sample(l), 1);
}

TEST(Sampler, RepetitionPenaltyFollowsHuggingFace) {
  SamplingConfig c;
  c.repetition_penalty = 2;
  const std::vector<int32_t> prompt = {1, 4};
  Sampler s(c, prompt, 5);
  std::vector<float> l = Logits();
  EXPECT_EQ(s.Sample(l), 3);  // token 1 penalised 3 -> 1.5
  EXPECT_FLOAT_EQ(l[1], 1.5f);
  EXPECT_FLOAT_EQ(l[4], -2.0f);  // negative logits are multiplied
  EXPECT_FLOAT_EQ(l[2], 2.0f);
}

TEST(Sampler, PresenceAndFrequencyCountOutputOnly) {
  SamplingConfig c;
  c.presence_penalty = 0.5f;
  c.frequency_penalty = 0.25f;
  const std::vector<int32_t> prompt = {2};
  Sampler s(c, prompt, 5);
  s.Accept(1);
  s.Accept(1);
  std::vector<float> l = Logits();
  s.Sample(l);
  EXPECT_FLOAT_EQ(l[1], 3.0f - 0.5f - 0.5f);
  EXPECT_FLOAT_EQ(l[2], 2.0f);  // prompt tokens are not penalised
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  SamplingConfig c;
  c.temperature = 1.0f;
  auto run = [&](uint64_t seed) {
    c.seed = seed;
    Sampler s(c, {}, 5);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> l = Logits();
      out.push_back(s.Sample(l));
    }
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, FrequenciesMatchSoftmaxAtTemperature) {
  SamplingConfig c;
  c.temperature = 0.5f;
  c.seed = 1;
  Sampler s(c, {}, 5);
  std::map<int32_t, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = Logits();
    // Fresh sampler state for penalties is irrelevant: no penalties set.
    counts[s.Sample(l)]++;
  }
  double z = 0;
  for (float l : Logits()) z += std::exp(l / 0.5);
  for (int t = 0; t < 5; ++t) {
    const double p = std::exp(Logits()[t] / 0.5) / z;
    EXPECT_NEAR(counts[t] / static_cast<double>(n), p, 0.01) << t;
  }
}

TEST(Sampler, TopKAndTopPRestrictTheSupport) {
  SamplingConfig c;
  c.temperature = 1.0f;
  c.top_k = 2;
  Sampler k(c, {}, 5);
  for (int i = 0; i < 500; ++i) {
    std::vector<float> l = Logits();
    const int32_t t = k.Sample(l);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  c.top_k = 0;
  c.top_p = 0.5f;  // tokens 1 and 3 hold ~0.8; the first alone ~0.4
  Sampler p(c, {}, 5);
  for (int i = 0; i < 500; ++i) {
    std::vector<float> l = Logits();
    const int32_t t = p.Sample(l);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  c.top_p = 1;
  c.min_p = 0.5f;  // token 2 has e^-1 ~ 0.37 of the top: dropped
  Sampler m(c, {}, 5);
  for (int i = 0; i < 500; ++i) {
    std::vector<float> l = Logits();
    const int32_t t = m.Sample(l);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
}

TEST(TopLogprobs, NormalisedAndOrdered) {
  const std::vector<float> l = Logits();
  auto [chosen, top] = TopLogprobs(l, 2, 3);
  double z = 0;
  for (float v : l) z += std::exp(v);
  EXPECT_NEAR(chosen.logprob, 2.0 - std::log(z), 1e-5);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);
  EXPECT_EQ(top[1].token, 3);
  EXPECT_EQ(top[2].token, 2);
  EXPECT_NEAR(top[0].logprob, 3.0 - std::log(z), 1e-5);
}

}  // namespace
}  // namespace moeserve::engine
