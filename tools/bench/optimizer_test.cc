#include "tools/bench/optimizer.h"

#include <vector>

#include "gtest/gtest.h"

namespace moeserve::bench {
namespace {

TEST(OptimizerTest, FitNonNegativeRecoversALinearModel) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (double n : {1.0, 2.0, 4.0, 8.0}) {
    for (double s : {10.0, 50.0}) {
      x.push_back({1.0, n, n * s});
      y.push_back(0.5 + 0.25 * n + 0.01 * n * s);
    }
  }
  const std::vector<double> c = FitNonNegative(x, y);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_NEAR(c[0], 0.5, 1e-9);
  EXPECT_NEAR(c[1], 0.25, 1e-9);
  EXPECT_NEAR(c[2], 0.01, 1e-9);
}

TEST(OptimizerTest, FitNonNegativeDropsNegativeCoefficients) {
  // y falls with the second column: plain least squares gives it a
  // negative coefficient; the fit drops it and refits the rest.
  std::vector<std::vector<double>> x = {{1, 1}, {1, 2}, {1, 3}, {1, 4}};
  std::vector<double> y = {4, 3, 2, 1};
  const std::vector<double> c = FitNonNegative(x, y);
  EXPECT_DOUBLE_EQ(c[1], 0.0);
  EXPECT_NEAR(c[0], 2.5, 1e-9);  // the mean
}

TEST(OptimizerTest, CoverageAndResidentShare) {
  EXPECT_DOUBLE_EQ(Coverage(8, 2, 0), 0);
  EXPECT_DOUBLE_EQ(Coverage(8, 2, 1), 0.25);
  EXPECT_DOUBLE_EQ(Coverage(8, 2, 2), 1 - 0.75 * 0.75);
  EXPECT_NEAR(Coverage(8, 2, 64), 1.0, 1e-7);
  EXPECT_DOUBLE_EQ(ResidentShareOf(6, 8, 48), 1.0);
  EXPECT_DOUBLE_EQ(ResidentShareOf(6, 8, 16), 8.0 / 48);
  EXPECT_DOUBLE_EQ(ResidentShareOf(6, 8, 4), 0.0);
}

TEST(OptimizerTest, PipelineOverlapsTheNextLayersLoad) {
  // Nothing to load: the computes back to back.
  EXPECT_DOUBLE_EQ(PipelineSeconds(4, 1.0, 0.0), 4.0);
  // Link-bound: every load back to back, then the last compute.
  EXPECT_DOUBLE_EQ(PipelineSeconds(4, 1.0, 3.0), 4 * 3.0 + 1.0);
  // Compute-bound: layer 0's load exposed, then the computes.
  EXPECT_DOUBLE_EQ(PipelineSeconds(4, 3.0, 1.0), 1.0 + 4 * 3.0);
  // The closed form x + (L - 1) max(c, x) + c.
  EXPECT_DOUBLE_EQ(PipelineSeconds(6, 0.7, 0.4), 0.4 + 5 * 0.7 + 0.7);
  EXPECT_DOUBLE_EQ(PipelineSeconds(6, 0.4, 0.7), 0.7 + 5 * 0.7 + 0.4);
}

TEST(OptimizerTest, ExpectedTokens) {
  EXPECT_DOUBLE_EQ(ExpectedTokens({0.5, 0.5}, 0), 1.0);
  EXPECT_DOUBLE_EQ(ExpectedTokens({0.5, 0.5}, 2), 1.75);
  EXPECT_DOUBLE_EQ(ExpectedTokens({0.5, 0.5}, 4), 1.75);  // unknown: 0
}

CostModel LinkBoundModel() {
  CostModel m;
  m.layers = 4;
  m.experts = 8;
  m.top_k = 2;
  m.slots = 8;
  m.target = {1e-3, 1e-4, 0, 0};
  m.draft = {2e-4, 1e-5, 0};
  m.link_seconds_per_expert = 1e-3;
  m.acceptance = {0.7, 0.7, 0.7, 0.7};
  return m;
}

TEST(OptimizerTest, WorkloadEstimateCountsTokensAndWaves) {
  CostModel m = LinkBoundModel();
  Workload w{.prompt_lengths = {10, 10, 10, 10}, .max_new_tokens = 10};
  const WorkloadEstimate one = EstimateWorkload(m, w, 1, 0);
  const WorkloadEstimate four = EstimateWorkload(m, w, 4, 0);
  EXPECT_GT(one.seconds, 0);
  EXPECT_NEAR(one.tokens_per_s * one.seconds, 40, 1e-9);
  // Four waves of one vs one wave of four: the link cost is shared.
  EXPECT_GT(four.tokens_per_s, one.tokens_per_s);
  EXPECT_DOUBLE_EQ(one.seq_steps, 4 * 9.0);
  // The per-step overhead adds seq_steps x overhead.
  CostModel o = m;
  o.overhead_seconds_per_seq_step = 1e-3;
  EXPECT_NEAR(EstimateWorkload(o, w, 1, 0).seconds, one.seconds + 36e-3, 1e-12);
}

// Link-bound: drafts are nearly free at a large batch and speculation wins;
// with acceptance 0 it never does.
TEST(OptimizerTest, SpeculationPaysWhenLinkBound) {
  CostModel m = LinkBoundModel();
  Workload w{.prompt_lengths = std::vector<int>(8, 10), .max_new_tokens = 32};
  EXPECT_GT(EstimateWorkload(m, w, 8, 3).tokens_per_s,
            EstimateWorkload(m, w, 8, 0).tokens_per_s);
  m.acceptance = {0, 0, 0, 0};
  EXPECT_LT(EstimateWorkload(m, w, 8, 3).tokens_per_s,
            EstimateWorkload(m, w, 8, 0).tokens_per_s);
}

}  // namespace
}  // namespace moeserve::bench
