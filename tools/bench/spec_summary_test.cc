#include "tools/bench/spec_summary.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/bench/policy_bench.h"

namespace moeserve::bench {
namespace {

PolicyResult Cell(const std::string& policy, const std::string& drafter, int k,
                  int concurrency, double tokens_per_s, double tpot) {
  PolicyResult r;
  r.policy = policy;
  r.drafter = drafter;
  r.num_speculative_tokens = k;
  r.ratio = 0.5;
  r.concurrency = concurrency;
  r.tokens_per_s = tokens_per_s;
  r.tpot_mean_ms = tpot;
  return r;
}

PolicyReport Report() {
  PolicyReport rep;
  rep.run_id = "20261128T120000Z-p42";
  rep.started_utc = "2026-11-28T12:00:00Z";
  rep.model_name = "demo";
  rep.options.link_gbps = 2;
  rep.options.link_latency_us = 10;
  rep.results = {
      Cell("lru", "none", 0, 1, 400, 2.0),
      Cell("lru", "self", 4, 1, 200, 4.0),
      Cell("self_spec", "self", 4, 1, 300, 3.0),
      Cell("cutoff", "external", 0, 1, 100, 8.0),  // no lru + external
      // Concurrency 8: only lru + self; the lru of concurrency 1 must not
      // stand in for the missing one.
      Cell("lru", "self", 4, 8, 500, 6.0),
      Cell("self_spec", "self", 4, 8, 1000, 3.0),
  };
  return rep;
}

TEST(SpecSummaryTest, PairsEachSpeculativeCellWithItsGroupsBaselines) {
  const PolicyReport rep = Report();
  const std::vector<SpecSummaryRow> rows = SpecSummaryRows(rep);
  ASSERT_EQ(rows.size(), 3u);

  EXPECT_EQ(rows[0].policy, &rep.results[2]);
  EXPECT_EQ(rows[0].lru, &rep.results[0]);
  EXPECT_EQ(rows[0].lru_drafter, &rep.results[1]);
  EXPECT_DOUBLE_EQ(rows[0].speedup_vs_lru, 300.0 / 400.0);
  EXPECT_DOUBLE_EQ(rows[0].speedup_vs_lru_drafter, 300.0 / 200.0);
  EXPECT_DOUBLE_EQ(rows[0].tpot_speedup_vs_lru, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(rows[0].tpot_speedup_vs_lru_drafter, 4.0 / 3.0);

  // cutoff's drafter (external) never ran on lru: undefined, not borrowed
  // from lru + self.
  EXPECT_EQ(rows[1].policy, &rep.results[3]);
  EXPECT_EQ(rows[1].lru, &rep.results[0]);
  EXPECT_EQ(rows[1].lru_drafter, nullptr);
  EXPECT_EQ(rows[1].speedup_vs_lru_drafter, 0);

  EXPECT_EQ(rows[2].policy, &rep.results[5]);
  EXPECT_EQ(rows[2].lru, nullptr);
  EXPECT_EQ(rows[2].speedup_vs_lru, 0);
  EXPECT_EQ(rows[2].lru_drafter, &rep.results[4]);
  EXPECT_DOUBLE_EQ(rows[2].speedup_vs_lru_drafter, 2.0);
}

TEST(SpecSummaryTest, SameDrafterMeansSameKAndBudget) {
  const PolicyResult policy = Cell("quant_draft", "int4", 0, 1, 1, 1);
  PolicyResult lru = Cell("lru", "int4", 0, 1, 1, 1);
  EXPECT_TRUE(IsLruWithSameDrafter(lru, policy));
  lru.num_speculative_tokens = 4;
  EXPECT_FALSE(IsLruWithSameDrafter(lru, policy));
  lru.num_speculative_tokens = 0;
  lru.draft_budget = "extra";
  EXPECT_FALSE(IsLruWithSameDrafter(lru, policy));
  lru.draft_budget = "";
  lru.ratio = 0.25;
  EXPECT_FALSE(IsLruWithSameDrafter(lru, policy));
}

TEST(SpecSummaryTest, JsonCarriesRunIdAndNullsForMissingBaselines) {
  const nlohmann::json j = SpecSummaryJson(Report());
  ASSERT_EQ(j.size(), 3u);
  for (const nlohmann::json& row : j) {
    EXPECT_EQ(row.at("run_id"), "20261128T120000Z-p42");
    EXPECT_EQ(row.at("model"), "demo");
    EXPECT_EQ(row.at("link"), "2 GB/s + 10 us");
  }
  EXPECT_DOUBLE_EQ(j[0].at("speedup_vs_lru_same_drafter").get<double>(), 1.5);
  EXPECT_EQ(j[0]["lru_same_drafter"].at("tokens_per_s"), 200.0);
  EXPECT_TRUE(j[1].at("speedup_vs_lru_same_drafter").is_null());
  EXPECT_TRUE(j[1].at("lru_same_drafter").is_null());
  EXPECT_TRUE(j[2].at("lru").is_null());
  EXPECT_TRUE(j[2].at("tpot_speedup_vs_lru").is_null());
}

TEST(SpecSummaryTest, PrintsOneRowPerSpeculativeCellWithTheRunId) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  PrintSpecSummary(Report(), out);
  std::fclose(out);
  const std::string text(buf, len);
  std::free(buf);
  EXPECT_NE(text.find("run 20261128T120000Z-p42"), std::string::npos) << text;
  EXPECT_NE(text.find("| 20261128T120000Z-p42 | demo | 2 GB/s + 10 us | 0.50 "
                      "| 1 | self_spec | self k=4 | 300.0 | 3.00 | 400.0 | "
                      "2.00 | 0.75x | 0.67x | 200.0 | 4.00 | 1.50x | 1.33x |"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("| cutoff | external k=adaptive | 100.0 | 8.00 | 400.0 "
                      "| 2.00 | 0.25x | 0.25x | n/a | n/a | n/a | n/a |"),
            std::string::npos)
      << text;
}

TEST(SpecSummaryTest, NothingWithoutSpeculativeCells) {
  PolicyReport rep = Report();
  rep.results.resize(2);  // lru and lru + self only
  EXPECT_TRUE(SpecSummaryRows(rep).empty());
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  PrintSpecSummary(rep, out);
  std::fclose(out);
  EXPECT_EQ(len, 0u);
  std::free(buf);
}

}  // namespace
}  // namespace moeserve::bench
