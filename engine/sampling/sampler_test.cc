#include "engine/sampling/sampler.h"

#include <cmath>
#include <map>
#include <random>
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

// Argmax (two passes, vectorisable) agrees with the one-pass scan it
// replaced on every length (the 16-lane body and the tail), ties, NaNs,
// infinities and signed zeros.
TEST(Sampler, ArgmaxMatchesTheSequentialScan) {
  auto scan = [](const std::vector<float>& v) {
    int32_t best = 0;
    for (int32_t i = 1; i < static_cast<int32_t>(v.size()); ++i) {
      if (v[i] > v[best]) best = i;
    }
    return best;
  };
  std::mt19937 rng(3);
  const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 5.0f};
  for (int len : {1, 2, 15, 16, 17, 31, 32, 33, 100, 4096, 151936}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> v(len);
      std::uniform_int_distribution<int> small(-3, 3);  // many ties
      for (float& x : v) x = static_cast<float>(small(rng));
      const int extras = trial % 5;
      for (int e = 0; e < extras; ++e) {
        v[rng() % len] = specials[rng() % std::size(specials)];
      }
      if (trial == 7) v[0] = NAN;
      if (trial == 8) std::fill(v.begin(), v.end(), -INFINITY);
      if (trial == 9) std::fill(v.begin(), v.end(), NAN);
      ASSERT_EQ(Argmax(v), scan(v)) << "length " << len << " trial " << trial;
    }
  }
  EXPECT_EQ(Argmax(std::vector<float>{}), 0);
}

// Issue 16: 1 / 1e-39 is inf in float; the softmax then computed inf - inf
// and drew from NaN weights (here: the last token instead of the argmax).
TEST(Sampler, TinyTemperatureIsGreedy) {
  for (float t : {1e-39f, 1e-38f, 1e-30f, 1e-6f, 9.9e-6f}) {
    SamplingConfig c;
    c.temperature = t;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      c.seed = seed;
      Sampler s(c, {}, 5);
      EXPECT_TRUE(s.greedy()) << t;
      std::vector<float> l = Logits();
      EXPECT_EQ(s.Sample(l), 1) << t;
      l = Logits();
      const TokenDistribution d = s.Distribution(l);
      EXPECT_EQ(d.ids, std::vector<int32_t>{1}) << t;
    }
  }
  SamplingConfig c;
  c.temperature = kGreedyTemperature;
  EXPECT_FALSE(Sampler(c, {}, 5).greedy());
}

// Issue 16: a penalty of 1e-45 turned a positive logit into inf (garbage
// under sampling: inf - inf); it is clamped to kMinRepetitionPenalty.
TEST(Sampler, RepetitionPenaltyIsClamped) {
  SamplingConfig c;
  c.repetition_penalty = 1e-45f;
  c.temperature = 1;
  const std::vector<int32_t> prompt = {0, 1};
  Sampler s(c, prompt, 5);
  EXPECT_FLOAT_EQ(s.config().repetition_penalty, kMinRepetitionPenalty);
  std::vector<float> l = Logits();
  const TokenDistribution d = s.Distribution(l);
  for (float v : l) EXPECT_TRUE(std::isfinite(v) || v == -INFINITY) << v;
  double sum = 0;
  for (double p : d.probs) {
    EXPECT_TRUE(std::isfinite(p));
    sum += p;
  }
  EXPECT_NEAR(sum, 1.0, 1e-9);
  c.repetition_penalty = 1e30f;
  EXPECT_FLOAT_EQ(Sampler(c, prompt, 5).config().repetition_penalty,
                  kMaxRepetitionPenalty);
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

// Logits over a vocabulary of 50 from a fixed generator.
std::vector<float> RandomLogits(std::mt19937& g) {
  std::normal_distribution<float> nd(0, 2);
  std::vector<float> l(50);
  for (float& x : l) x = nd(g);
  return l;
}

// Configurations covering every filter and penalty.
std::vector<SamplingConfig> Configs() {
  std::vector<SamplingConfig> out;
  for (int i = 0; i < 12; ++i) {
    SamplingConfig c;
    c.temperature = 0.4f + 0.3f * (i % 4);
    c.top_k = (i % 3) * 7;
    c.top_p = i % 4 == 0 ? 0.9f : 1.0f;
    c.min_p = i % 5 == 0 ? 0.05f : 0;
    c.repetition_penalty = i % 2 ? 1.3f : 1;
    c.presence_penalty = i % 6 == 1 ? 0.5f : 0;
    c.frequency_penalty = i % 4 == 3 ? 0.3f : 0;
    out.push_back(c);
  }
  return out;
}

TEST(Sampler, DistributionProcessesLogitsLikeSampleAndRecordsNothing) {
  std::mt19937 g(5);
  const std::vector<int32_t> prompt = {1, 5, 9, 9, 40};
  for (const SamplingConfig& c : Configs()) {
    Sampler a(c, prompt, 50);
    Sampler b(c, prompt, 50);
    for (int i = 0; i < 50; ++i) {
      const std::vector<float> l = RandomLogits(g);
      std::vector<float> la = l, lb = l, lb2 = l;
      const int32_t t = a.Sample(la);
      const TokenDistribution d = b.Distribution(lb);
      EXPECT_EQ(la, lb);  // same in-place processing
      const TokenDistribution d2 = b.Distribution(lb2);
      EXPECT_EQ(d.ids, d2.ids);  // nothing recorded in between
      EXPECT_EQ(d.probs, d2.probs);
      ASSERT_FALSE(d.ids.empty());
      double sum = 0;
      for (size_t k = 0; k < d.ids.size(); ++k) {
        sum += d.probs[k];
        if (k > 0) {
          EXPECT_GE(d.probs[k - 1], d.probs[k]);
        }
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
      EXPECT_GT(d.Prob(t), 0) << "sampled token outside the support";
      if (c.top_k > 0) {
        EXPECT_LE(static_cast<int32_t>(d.ids.size()), c.top_k);
      }
      b.Accept(t);  // keep the histories equal
    }
  }
}

TEST(Sampler, DistributionAtTemperatureIsTheSoftmax) {
  SamplingConfig c;
  c.temperature = 0.5f;
  Sampler s(c, {}, 5);
  std::vector<float> l = Logits();
  const TokenDistribution d = s.Distribution(l);
  ASSERT_EQ(d.ids.size(), 5u);
  EXPECT_EQ(d.ids[0], 1);  // ties: lower id first
  EXPECT_EQ(d.ids[1], 3);
  double z = 0;
  for (float v : Logits()) z += std::exp(v / 0.5);
  for (int t = 0; t < 5; ++t) {
    EXPECT_NEAR(d.Prob(t), std::exp(Logits()[t] / 0.5) / z, 1e-12) << t;
  }
  EXPECT_EQ(d.Prob(7), 0);
}

TEST(Sampler, GreedyDistributionIsThePenalisedArgmax) {
  SamplingConfig c;
  c.repetition_penalty = 2;
  const std::vector<int32_t> prompt = {1};
  Sampler s(c, prompt, 5);
  EXPECT_TRUE(s.greedy());
  std::vector<float> l = Logits();
  const TokenDistribution d = s.Distribution(l);
  EXPECT_EQ(d.ids, std::vector<int32_t>{3});
  EXPECT_EQ(d.probs, std::vector<double>{1.0});
  EXPECT_FLOAT_EQ(l[1], 1.5f);
}

// DrawFrom(Distribution(l)) with a generator in the same state picks the same
// token as Sample(l): same support, same order, same single draw (the two
// only differ in where rounding puts a bucket boundary, which no draw here
// comes near).
TEST(Sampler, DrawFromDistributionReproducesSampleOverManySeeds) {
  std::mt19937 g(11);
  const std::vector<int32_t> prompt = {3, 3, 17};
  int compared = 0;
  for (SamplingConfig c : Configs()) {
    for (uint64_t seed = 0; seed < 400; ++seed) {
      c.seed = seed * 1000003 + 1;
      Sampler a(c, prompt, 50);
      Sampler b(c, prompt, 50);
      for (int i = 0; i < 4; ++i) {
        const std::vector<float> l = RandomLogits(g);
        std::vector<float> la = l, lb = l;
        const int32_t t = a.Sample(la);
        const int32_t u = b.DrawFrom(b.Distribution(lb));
        ASSERT_EQ(t, u) << "seed " << c.seed << " step " << i;
        b.Accept(u);
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 12 * 400 * 4);
}

TEST(Sampler, DistributionMatchesSampleFrequencies) {
  SamplingConfig c;
  c.temperature = 0.8f;
  c.top_k = 4;
  c.min_p = 0.1f;
  c.seed = 3;
  std::mt19937 g(2);
  const std::vector<float> base = RandomLogits(g);
  Sampler s(c, {}, 50);
  std::vector<float> l = base;
  const TokenDistribution d = s.Distribution(l);
  std::map<int32_t, int> counts;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    l = base;
    const int32_t t = s.Sample(l);
    counts[t]++;
    s.Unaccept(t);  // keep the history as Distribution saw it
  }
  double chi2 = 0;
  for (size_t k = 0; k < d.ids.size(); ++k) {
    const double e = n * d.probs[k];
    const double o = counts.count(d.ids[k]) ? counts[d.ids[k]] : 0;
    chi2 += (o - e) * (o - e) / e;
  }
  int observed_tokens = 0;
  for (auto& [t, k] : counts) observed_tokens += d.Prob(t) > 0;
  EXPECT_EQ(observed_tokens, static_cast<int>(counts.size()));
  // Chi-square critical values at p = 0.001 for df = 1..3 (top-k 4 keeps
  // at most 4 tokens; min-p may drop some).
  const double critical[] = {10.828, 13.816, 16.266};
  ASSERT_GE(d.ids.size(), 2u);
  ASSERT_LE(d.ids.size(), 4u);
  EXPECT_LT(chi2, critical[d.ids.size() - 2]);
}

TEST(Sampler, UniformAndDrawFromConsumeOneDrawEach) {
  SamplingConfig c;
  c.temperature = 1;
  c.seed = 9;
  Sampler a(c, {}, 5);
  Sampler b(c, {}, 5);
  std::vector<float> l = Logits();
  const TokenDistribution d = a.Distribution(l);
  const double u = a.Uniform();
  EXPECT_GE(u, 0);
  EXPECT_LT(u, 1);
  a.DrawFrom(d);
  b.Uniform();
  b.Uniform();
  EXPECT_EQ(a.Uniform(), b.Uniform());
}

TEST(Sampler, UnacceptUndoesAccept) {
  SamplingConfig c;
  c.temperature = 1;
  c.repetition_penalty = 1.5f;
  c.presence_penalty = 0.5f;
  c.frequency_penalty = 0.25f;
  const std::vector<int32_t> prompt = {2};
  Sampler fresh(c, prompt, 5);
  Sampler s(c, prompt, 5);
  s.Accept(1);
  s.Accept(1);
  s.Accept(2);
  s.Accept(4);
  std::vector<float> l = Logits();
  std::vector<float> f = Logits();
  s.Distribution(l);
  fresh.Distribution(f);
  EXPECT_NE(l, f);
  s.Unaccept(1);
  s.Unaccept(4);
  s.Unaccept(2);
  s.Unaccept(1);
  s.Unaccept(1);  // nothing left to undo: ignored
  s.Unaccept(3);  // never accepted: ignored
  s.Unaccept(-1);
  s.Unaccept(99);
  l = Logits();
  EXPECT_EQ(s.Distribution(l).probs, fresh.Distribution(f = Logits()).probs);
  EXPECT_EQ(l, f);  // the prompt's repetition penalty is still applied
  EXPECT_FLOAT_EQ(l[2], 2.0f / 1.5f);
  EXPECT_FLOAT_EQ(l[1], 3.0f);
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
