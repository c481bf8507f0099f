#include "engine/spec_decode/verifier.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"

// Statistical tests with fixed seeds: each draws a fixed sequence, so a
// result never changes between runs. A correct verifier passes each
// chi-square test at p = 0.001; these seeds were not picked to make a wrong
// one pass (a residual off by a few percent gives statistics in the
// thousands at these sample sizes).
namespace moeserve::engine {
namespace {

constexpr int32_t kVocab = 6;
constexpr int kTrials = 200000;

// Chi-square critical values at p = 0.001 for df = 1..35.
constexpr std::array<double, 35> kChi2Critical = {
    10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877,
    29.588, 31.264, 32.909, 34.528, 36.123, 37.697, 39.252, 40.790, 42.312,
    43.820, 45.315, 46.797, 48.268, 49.728, 51.179, 52.620, 54.052, 55.476,
    56.892, 58.301, 59.703, 61.098, 62.487, 63.870, 65.247, 66.619};

// Pearson's goodness of fit of `counts` (over `n` draws) to `expected`
// probabilities; a count in a cell of probability 0 fails the test outright.
// Passes when the statistic is below the critical value for df = (cells
// with probability > 0) - 1.
void ExpectChiSquareFit(const std::vector<int64_t>& counts,
                        const std::vector<double>& expected, int64_t n) {
  ASSERT_EQ(counts.size(), expected.size());
  double chi2 = 0;
  int cells = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] <= 0) {
      EXPECT_EQ(counts[i], 0) << "cell " << i << " has probability 0";
      continue;
    }
    ++cells;
    const double e = expected[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  const int df = cells - 1;
  ASSERT_GE(df, 1);
  ASSERT_LE(df, static_cast<int>(kChi2Critical.size()));
  EXPECT_LT(chi2, kChi2Critical[df - 1]) << "df " << df;
}

// A distribution over kVocab tokens from dense probabilities (zeros left out
// of the support), most likely first as Sampler::Distribution orders it.
TokenDistribution Dist(const std::vector<double>& dense) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < static_cast<int32_t>(dense.size()); ++i) {
    if (dense[i] > 0) ids.push_back(i);
  }
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return dense[a] > dense[b]; });
  TokenDistribution d;
  d.ids = ids;
  for (int32_t id : ids) d.probs.push_back(dense[id]);
  return d;
}

std::vector<double> Dense(const TokenDistribution& d, int32_t vocab) {
  std::vector<double> out(vocab, 0.0);
  for (size_t i = 0; i < d.ids.size(); ++i) out[d.ids[i]] = d.probs[i];
  return out;
}

Sampler SampledSampler(uint64_t seed) {
  SamplingConfig c;
  c.temperature = 1;
  c.seed = seed;
  return Sampler(c, {}, kVocab);
}

double SumMin(const std::vector<double>& p, const std::vector<double>& q) {
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i) s += std::min(p[i], q[i]);
  return s;
}

// Draws kTrials drafts from q (q_dense empty: the deterministic drafter
// proposing token t % kVocab on trial t, verified with q = nullptr), verifies
// each against p, and checks the emitted tokens follow p and the acceptance
// rate is sum_x min(p(x), q(x)).
void CheckLossless(const std::vector<double>& p_dense,
                   const std::vector<double>& q_dense, uint64_t seed) {
  const TokenDistribution p = Dist(p_dense);
  const bool point = q_dense.empty();
  const TokenDistribution q = point ? TokenDistribution{} : Dist(q_dense);
  Sampler target = SampledSampler(seed);
  Sampler drafter = SampledSampler(seed ^ 0x9e3779b97f4a7c15ULL);
  std::vector<int64_t> counts(kVocab, 0);
  int64_t accepted = 0;
  double expected_accept = 0;
  for (int t = 0; t < kTrials; ++t) {
    const int32_t draft = point ? t % kVocab : drafter.DrawFrom(q);
    const DraftVerdict v =
        VerifyDraftToken(p, draft, point ? nullptr : &q, target);
    if (v.accepted) {
      ASSERT_EQ(v.token, draft);
      ++accepted;
    }
    ASSERT_GE(v.token, 0);
    ASSERT_LT(v.token, kVocab);
    ++counts[v.token];
  }
  ExpectChiSquareFit(counts, p_dense, kTrials);
  if (point) {
    // Each draft x is accepted with probability p(x): on average over the
    // round-robin drafts, 1 / kVocab.
    expected_accept = 1.0 / kVocab;
  } else {
    expected_accept = SumMin(p_dense, q_dense);
  }
  EXPECT_NEAR(static_cast<double>(accepted) / kTrials, expected_accept, 0.005);
}

const std::vector<double> kP = {0.30, 0.25, 0.20, 0.15, 0.07, 0.03};

TEST(VerifyDraftToken, SampledOutputFollowsTargetWhenDrafterDiffers) {
  CheckLossless(kP, {0.05, 0.10, 0.30, 0.30, 0.15, 0.10}, 1);
}

TEST(VerifyDraftToken, SampledOutputFollowsTargetWhenDrafterIsSharper) {
  CheckLossless(kP, {0.90, 0.02, 0.02, 0.02, 0.02, 0.02}, 2);
}

TEST(VerifyDraftToken, DrafterSupportOutsideTheTargetsNeverLeaks) {
  // p lives on {0, 1, 2} (as after top-k); q mostly on {3, 4, 5}.
  CheckLossless({0.5, 0.3, 0.2, 0, 0, 0}, {0.1, 0.05, 0, 0.4, 0.3, 0.15}, 3);
  // and the other way round: q inside a strict part of p's support.
  CheckLossless(kP, {0, 0, 0.5, 0, 0.5, 0}, 4);
}

TEST(VerifyDraftToken, ExplicitPointMassDrafter) {
  // q = the point mass on token 4: accepted with probability p(4).
  CheckLossless(kP, {0, 0, 0, 0, 1, 0}, 5);
}

TEST(VerifyDraftToken, DeterministicDrafterWithNullQ) {
  CheckLossless(kP, {}, 6);
  CheckLossless({0.5, 0.3, 0.2, 0, 0, 0}, {}, 7);
}

TEST(VerifyDraftToken, IdenticalDistributionsAlwaysAccept) {
  const TokenDistribution p = Dist(kP);
  Sampler target = SampledSampler(8);
  Sampler drafter = SampledSampler(9);
  for (int t = 0; t < 10000; ++t) {
    const int32_t d = drafter.DrawFrom(p);
    const DraftVerdict v = VerifyDraftToken(p, d, &p, target);
    ASSERT_TRUE(v.accepted);
    ASSERT_EQ(v.token, d);
  }
}

TEST(VerifyDraftToken, SampledRowsConsumeOneDrawPlusOneOnRejection) {
  const TokenDistribution p = Dist(kP);
  const TokenDistribution q = Dist({0, 0, 0, 0, 0.5, 0.5});
  Sampler a = SampledSampler(10);
  Sampler b = SampledSampler(10);
  int draws = 0;
  for (int t = 0; t < 1000; ++t) {
    const DraftVerdict v = VerifyDraftToken(p, 4 + t % 2, &q, a);
    draws += v.accepted ? 1 : 2;
  }
  for (int i = 0; i < draws; ++i) b.Uniform();
  EXPECT_EQ(a.Uniform(), b.Uniform());
}

TEST(SampleBonus, SampledFollowsTarget) {
  const TokenDistribution p = Dist(kP);
  Sampler s = SampledSampler(11);
  std::vector<int64_t> counts(kVocab, 0);
  for (int t = 0; t < kTrials; ++t) ++counts[SampleBonus(p, s)];
  ExpectChiSquareFit(counts, kP, kTrials);
}

TEST(VerifyDraftToken, GreedyAcceptsExactlyTheArgmaxAndDrawsNothing) {
  SamplingConfig c;  // temperature 0
  c.seed = 12;
  Sampler s(c, {}, kVocab);
  Sampler fresh(c, {}, kVocab);
  ASSERT_TRUE(s.greedy());
  std::vector<float> logits = {0.5f, 2.0f, 1.0f, 2.0f, -1.0f, 0.0f};
  const TokenDistribution p = s.Distribution(logits);
  ASSERT_EQ(p.ids, std::vector<int32_t>{1});
  const TokenDistribution q = Dist(kP);
  for (int32_t d = 0; d < kVocab; ++d) {
    const DraftVerdict with_q = VerifyDraftToken(p, d, &q, s);
    const DraftVerdict without_q = VerifyDraftToken(p, d, nullptr, s);
    EXPECT_EQ(with_q.accepted, d == 1) << d;
    EXPECT_EQ(with_q.token, 1) << d;
    EXPECT_EQ(without_q.accepted, d == 1) << d;
    EXPECT_EQ(without_q.token, 1) << d;
  }
  EXPECT_EQ(SampleBonus(p, s), 1);
  // A hand-built p under a greedy sampler: its most likely token, ties to
  // the lower id.
  const TokenDistribution tie = Dist({0, 0.1, 0, 0.45, 0, 0.45});
  EXPECT_EQ(SampleBonus(tie, s), 3);
  EXPECT_EQ(VerifyDraftToken(tie, 5, nullptr, s).token, 3);
  EXPECT_EQ(s.Uniform(), fresh.Uniform());  // no draws consumed
}

// A toy bigram "model": logits of the next token given the last one.
std::vector<float> BigramLogits(const float (&table)[kVocab][kVocab],
                                int32_t last) {
  return std::vector<float>(table[last], table[last] + kVocab);
}

constexpr float kTargetTable[kVocab][kVocab] = {
    {1.0f, 0.2f, -0.5f, 0.8f, 0.0f, -1.0f},
    {0.1f, 1.5f, 0.3f, -0.2f, 0.7f, 0.0f},
    {-0.3f, 0.4f, 0.9f, 1.2f, -0.8f, 0.5f},
    {0.6f, -0.6f, 0.2f, 0.3f, 1.1f, 0.4f},
    {0.0f, 0.9f, -0.4f, 0.5f, 0.2f, 1.3f},
    {1.4f, 0.1f, 0.6f, -0.7f, 0.3f, 0.2f},
};
constexpr float kDraftTable[kVocab][kVocab] = {
    {0.8f, 0.5f, -0.2f, 0.6f, 0.3f, -0.5f},
    {0.0f, 1.0f, 0.6f, 0.0f, 0.4f, 0.2f},
    {0.1f, 0.2f, 1.1f, 0.7f, -0.3f, 0.6f},
    {0.9f, -0.2f, 0.0f, 0.6f, 0.8f, 0.1f},
    {0.3f, 0.6f, 0.0f, 0.2f, 0.5f, 1.0f},
    {1.0f, 0.4f, 0.3f, -0.2f, 0.1f, 0.6f},
};

// Target: penalties (so each row's distribution depends on the recorded
// history) and top-k (so some pairs are impossible).
SamplingConfig TargetConfig(uint64_t seed) {
  SamplingConfig c;
  c.temperature = 0.9f;
  c.top_k = 5;
  c.repetition_penalty = 1.4f;
  c.presence_penalty = 0.5f;
  c.frequency_penalty = 0.3f;
  c.seed = seed;
  return c;
}

SamplingConfig DrafterConfig(uint64_t seed) {
  SamplingConfig c;
  c.temperature = 1.2f;
  c.repetition_penalty = 1.1f;
  c.seed = seed;
  return c;
}

const std::vector<int32_t> kPrompt = {2, 4};

// Runs speculative decoding with `k` drafts per round until `count` tokens
// are out, the way an engine would: the drafter drafts k tokens (recording
// them provisionally), the target verifies row by row, Accept()ing each
// emitted token before the next row's Distribution, stops at the first
// rejection, and takes a bonus token when all k pass. Afterwards both
// samplers' histories are rolled back with Unaccept, ready for the next
// trial.
std::vector<int32_t> SpeculativeTokens(Sampler& target, Sampler& drafter, int k,
                                       int count) {
  std::vector<int32_t> out;
  auto last = [&] { return out.empty() ? kPrompt.back() : out.back(); };
  while (static_cast<int>(out.size()) < count) {
    std::vector<int32_t> drafts;
    std::vector<TokenDistribution> qs;
    for (int j = 0; j < k; ++j) {
      std::vector<float> l =
          BigramLogits(kDraftTable, drafts.empty() ? last() : drafts.back());
      qs.push_back(drafter.Distribution(l));
      drafts.push_back(drafter.DrawFrom(qs.back()));
      drafter.Accept(drafts.back());
    }
    for (int32_t d : drafts) drafter.Unaccept(d);
    bool all_accepted = true;
    for (int j = 0; j < k; ++j) {
      std::vector<float> l = BigramLogits(kTargetTable, last());
      const TokenDistribution p = target.Distribution(l);
      const DraftVerdict v = VerifyDraftToken(p, drafts[j], &qs[j], target);
      target.Accept(v.token);
      drafter.Accept(v.token);
      out.push_back(v.token);
      if (!v.accepted) {
        all_accepted = false;
        break;
      }
    }
    if (all_accepted) {
      std::vector<float> l = BigramLogits(kTargetTable, last());
      const int32_t t = SampleBonus(target.Distribution(l), target);
      target.Accept(t);
      drafter.Accept(t);
      out.push_back(t);
    }
  }
  for (int32_t t : out) {
    target.Unaccept(t);
    drafter.Unaccept(t);
  }
  out.resize(count);
  return out;
}

// The target's joint distribution of the next two tokens, computed without
// speculation: p(x1) p(x2 | x1) with x1 recorded in the history.
std::vector<double> TargetPairDistribution() {
  Sampler s(TargetConfig(0), kPrompt, kVocab);
  std::vector<float> l = BigramLogits(kTargetTable, kPrompt.back());
  const std::vector<double> p1 = Dense(s.Distribution(l), kVocab);
  std::vector<double> joint(kVocab * kVocab, 0.0);
  for (int32_t x1 = 0; x1 < kVocab; ++x1) {
    if (p1[x1] == 0) continue;
    s.Accept(x1);
    l = BigramLogits(kTargetTable, x1);
    const std::vector<double> p2 = Dense(s.Distribution(l), kVocab);
    s.Unaccept(x1);
    for (int32_t x2 = 0; x2 < kVocab; ++x2) {
      joint[x1 * kVocab + x2] = p1[x1] * p2[x2];
    }
  }
  return joint;
}

TEST(SpeculativeChain, TwoTokenJointDistributionEqualsTheTargets) {
  const std::vector<double> joint = TargetPairDistribution();
  int zero_cells = 0;
  for (double v : joint) zero_cells += v == 0;
  ASSERT_GT(zero_cells, 0);  // top-k makes some pairs impossible
  for (int k : {1, 2, 4}) {
    SCOPED_TRACE(k);
    Sampler target(TargetConfig(100 + k), kPrompt, kVocab);
    Sampler drafter(DrafterConfig(200 + k), kPrompt, kVocab);
    std::vector<int64_t> counts(kVocab * kVocab, 0);
    for (int t = 0; t < kTrials; ++t) {
      const std::vector<int32_t> out = SpeculativeTokens(target, drafter, k, 2);
      ++counts[out[0] * kVocab + out[1]];
    }
    ExpectChiSquareFit(counts, joint, kTrials);
  }
}

// The same chain without Accept between rows verifies row 2 against a
// distribution that ignores token 1's penalties: the test above must be
// able to see that, or it proves nothing about the ordering contract.
TEST(SpeculativeChain, SkippingAcceptBetweenRowsIsDetected) {
  const std::vector<double> joint = TargetPairDistribution();
  Sampler target(TargetConfig(300), kPrompt, kVocab);
  Sampler drafter(DrafterConfig(301), kPrompt, kVocab);
  std::vector<int64_t> counts(kVocab * kVocab, 0);
  for (int t = 0; t < kTrials; ++t) {
    int32_t out[2];
    int32_t last = kPrompt.back();
    for (int j = 0; j < 2; ++j) {
      std::vector<float> ld = BigramLogits(kDraftTable, last);
      const TokenDistribution q = drafter.Distribution(ld);
      const int32_t d = drafter.DrawFrom(q);
      std::vector<float> lt = BigramLogits(kTargetTable, last);
      out[j] = VerifyDraftToken(target.Distribution(lt), d, &q, target).token;
      last = out[j];  // but no target.Accept: penalties go stale
    }
    ++counts[out[0] * kVocab + out[1]];
  }
  double chi2 = 0;
  for (size_t i = 0; i < joint.size(); ++i) {
    if (joint[i] == 0) continue;
    const double e = joint[i] * kTrials;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  EXPECT_GT(chi2, 10 * kChi2Critical.back());
}

TEST(SpeculativeChain, GreedyEqualsPlainGreedyDecoding) {
  SamplingConfig c = TargetConfig(0);
  c.temperature = 0;
  Sampler plain(c, kPrompt, kVocab);
  std::vector<int32_t> expected;
  int32_t last = kPrompt.back();
  for (int i = 0; i < 24; ++i) {
    std::vector<float> l = BigramLogits(kTargetTable, last);
    last = plain.Sample(l);
    expected.push_back(last);
  }
  for (int k : {1, 3, 5}) {
    Sampler target(c, kPrompt, kVocab);
    Sampler drafter(DrafterConfig(400 + k), kPrompt, kVocab);
    EXPECT_EQ(SpeculativeTokens(target, drafter, k, 24), expected) << k;
  }
}

}  // namespace
}  // namespace moeserve::engine
