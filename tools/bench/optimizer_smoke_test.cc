// Runs moeserve_bench --optimize with tiny settings on models/demo (draft
// models/demo-draft, link emulation on) and checks the JSON report: the
// profile, the (b, k) grid, a recommendation inside it and an estimated vs
// measured row for it. Not a performance test: no figure is compared with
// a threshold, and the estimate's error is not checked.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

std::string Runfile(const std::string& path) {
  return std::string(getenv("TEST_SRCDIR")) + "/moeserve/" + path;
}

TEST(OptimizerSmokeTest, RecommendsAndChecksAPoint) {
  const std::string json_path =
      std::string(getenv("TEST_TMPDIR")) + "/optimize.json";
  const std::string cmd =
      Runfile("tools/bench/moeserve_bench") +
      " --optimize --model_dir=" + Runfile("models/demo") +
      " --draft_model_dir=" + Runfile("models/demo-draft") +
      " --expert_cache_ratio=0.25 --link_gbps=20 --link_latency_us=5 "
      "--optimize_batches=1,2 --optimize_max_k=2 --optimize_profile_tokens=4 "
      "--num_requests=2 --max_new_tokens=5 --warmup_tokens=2 --threads=2 "
      "--json_out=" +
      json_path;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(json_path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  EXPECT_EQ(j.at("mode"), "optimize");
  EXPECT_EQ(j.at("policy"), "throughput");
  EXPECT_TRUE(j.at("outputs_identical").get<bool>());
  EXPECT_GT(j.at("slots").get<int>(), 0);
  const nlohmann::json& p = j.at("profile");
  EXPECT_EQ(p.at("target_coefficients").size(), 4u);
  EXPECT_EQ(p.at("draft_coefficients").size(), 3u);
  ASSERT_EQ(p.at("acceptance").size(), 2u);
  for (const auto& a : p["acceptance"]) {
    EXPECT_GE(a.get<double>(), 0);
    EXPECT_LE(a.get<double>(), 1);
  }
  for (const auto& c : p["target_coefficients"]) EXPECT_GE(c.get<double>(), 0);
  EXPECT_GT(j.at("link").at("measured_seconds_per_expert").get<double>(), 0);
  EXPECT_FALSE(j.at("samples").empty());
  for (const auto& s : j["samples"])
    EXPECT_GT(s.at("seconds").get<double>(), 0);
  ASSERT_EQ(j.at("grid").size(), 2u * 3u);  // b in {1, 2} x k in {0, 1, 2}
  const nlohmann::json& rec = j.at("recommended");
  const int b = rec.at("max_num_seqs").get<int>();
  const int k = rec.at("num_speculative_tokens").get<int>();
  EXPECT_TRUE(b == 1 || b == 2);
  EXPECT_GE(k, 0);
  EXPECT_LE(k, 2);
  double best = 0;
  for (const auto& g : j["grid"]) {
    best = std::max(best, g.at("tokens_per_s").get<double>());
  }
  EXPECT_DOUBLE_EQ(rec.at("estimated_tokens_per_s").get<double>(), best);
  ASSERT_FALSE(j.at("checks").empty());
  const nlohmann::json& first = j["checks"][0];
  EXPECT_TRUE(first.at("recommended").get<bool>());
  EXPECT_EQ(first.at("batch").get<int>(), b);
  EXPECT_EQ(first.at("k").get<int>(), k);
  for (const auto& c : j["checks"]) {
    const double est = c.at("estimated_tokens_per_s").get<double>();
    const double meas = c.at("measured_tokens_per_s").get<double>();
    EXPECT_GT(est, 0);
    EXPECT_GT(meas, 0);
    EXPECT_NEAR(c.at("relative_error").get<double>(), (est - meas) / meas,
                1e-9);
  }
}

}  // namespace
