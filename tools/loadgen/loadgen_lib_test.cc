// Unit tests of the load generator's pure parts: the loopback check, the
// percentile and level summary, the ratio, the prompt sets and the
// requests built from them.
#include <gtest/gtest.h>

#include "tools/loadgen/level_runner.h"
#include "tools/loadgen/loopback.h"
#include "tools/loadgen/prompts.h"
#include "tools/loadgen/report.h"
#include "tools/loadgen/stats.h"

namespace moeserve::loadgen {
namespace {

TEST(LoopbackTest, AcceptsLoopbackHosts) {
  for (const char* t : {"127.0.0.1:50051", "127.9.8.7:1", "localhost:80",
                        "LOCALHOST:80", "[::1]:50051", "ipv4:127.0.0.1:5",
                        "ipv6:[::1]:5", "dns:///localhost:5"}) {
    EXPECT_TRUE(CheckLoopbackTarget(t).ok()) << t;
  }
}

TEST(LoopbackTest, RefusesOtherHostsAndBadPorts) {
  for (const char* t :
       {"10.0.0.1:50051", "0.0.0.0:50051", "example.com:443", "[::]:1",
        "[2001:db8::1]:1", "::1", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000",
        "127.0.0.1:x", "unix:/tmp/s", "localhost.evil:1", "128.0.0.1:1", ""}) {
    EXPECT_FALSE(CheckLoopbackTarget(t).ok()) << t;
  }
}

TEST(StatsTest, NearestRankPercentile) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({3, 1, 2}, 50), 2);
  EXPECT_EQ(Percentile({3, 1, 2}, 99), 3);
  EXPECT_EQ(Percentile({5}, 0), 5);
}

TEST(StatsTest, SummarizeCountsOnlySuccessfulTokens) {
  std::vector<RequestSample> samples(3);
  samples[0] = {true, "OK", 4, 0.010, 0.002};
  samples[1] = {true, "OK", 4, 0.030, 0.004};
  samples[2] = {false, "UNAVAILABLE", 2, 0.020, 0.1};
  const LevelSummary s = Summarize(2, 4, false, 2.0, samples);
  EXPECT_EQ(s.requests_issued, 3);
  EXPECT_EQ(s.requests_ok, 2);
  EXPECT_EQ(s.tokens, 8u);
  EXPECT_DOUBLE_EQ(s.tokens_per_s, 4.0);
  EXPECT_DOUBLE_EQ(s.ttft_p50_ms, 10.0);
  EXPECT_DOUBLE_EQ(s.ttft_p99_ms, 30.0);
  EXPECT_DOUBLE_EQ(s.tpot_p99_ms, 4.0);
  EXPECT_EQ(s.errors.at("UNAVAILABLE"), 1);
}

TEST(ReportTest, RatioIsHighestOverLowestConcurrency) {
  std::vector<LevelSummary> levels(3);
  levels[0].concurrency = 4;
  levels[0].tokens_per_s = 30;
  levels[1].concurrency = 1;
  levels[1].tokens_per_s = 10;
  levels[2].concurrency = 64;
  levels[2].tokens_per_s = 55;
  const ThroughputRatio r = ComputeRatio(levels);
  EXPECT_EQ(r.high_concurrency, 64);
  EXPECT_EQ(r.low_concurrency, 1);
  EXPECT_DOUBLE_EQ(r.ratio, 5.5);
  EXPECT_EQ(ComputeRatio({levels[0]}).ratio, 0);
}

TEST(ReportTest, MedianSweepAndRatio) {
  std::vector<Sweep> sweeps(3, Sweep(2));
  const double low[] = {10, 20, 40};
  const double high[] = {50, 60, 80};  // ratios 5, 3, 2
  for (int i = 0; i < 3; ++i) {
    sweeps[i][0].concurrency = 1;
    sweeps[i][0].tokens_per_s = low[i];
    sweeps[i][0].requests_ok = 1;
    sweeps[i][1].concurrency = 64;
    sweeps[i][1].tokens_per_s = high[i];
  }
  const Sweep median = MedianSweep(sweeps);
  EXPECT_DOUBLE_EQ(median[0].tokens_per_s, 20);
  EXPECT_DOUBLE_EQ(median[1].tokens_per_s, 60);
  EXPECT_EQ(median[0].requests_ok, 3);
  EXPECT_DOUBLE_EQ(MedianRatio(sweeps).ratio, 3);
  EXPECT_DOUBLE_EQ(Median({1, 2, 3, 4}), 2.5);
}

TEST(PromptsTest, SixteenDistinctNonEmptyPrompts) {
  const auto& prompts = FixedPrompts();
  ASSERT_EQ(prompts.size(), 16u);
  for (const auto& p : prompts) EXPECT_FALSE(p.empty());
}

TEST(PromptsTest, TokenIdPromptsAreFixedAndInTheVocabulary) {
  const auto prompts = TokenIdPrompts(16, 512, 4096);
  ASSERT_EQ(prompts.size(), 16u);
  for (const auto& p : prompts) {
    ASSERT_EQ(p.size(), 512u);
    EXPECT_EQ(p[0], 1u);  // BOS
    for (size_t i = 1; i < p.size(); ++i) {
      EXPECT_GE(p[i], 3u);
      EXPECT_LT(p[i], 4096u);
    }
  }
  EXPECT_NE(prompts[0], prompts[1]);
  EXPECT_EQ(prompts, TokenIdPrompts(16, 512, 4096));  // same every run
}

TEST(LevelRunnerTest, TokenRequestsCarryIdsAndGreedySampling) {
  LevelOptions options;
  options.max_new_tokens = 7;
  const moeserve::v1::GenerateRequest r = MakeTokenRequest({1, 5, 9}, options);
  EXPECT_TRUE(r.prompt().empty());
  ASSERT_EQ(r.prompt_token_ids_size(), 3);
  EXPECT_EQ(r.prompt_token_ids(2), 9u);
  EXPECT_EQ(r.sampling().max_new_tokens(), 7u);
  EXPECT_EQ(r.sampling().temperature(), 0);
  EXPECT_TRUE(r.sampling().ignore_eos());
  EXPECT_EQ(MakeRequest("x", options).prompt(), "x");
}

}  // namespace
}  // namespace moeserve::loadgen
