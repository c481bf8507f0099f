// Runs moeserve_bench's policy mode on models/demo with tiny settings (2
// requests x 4 tokens, 2 policies, one ratio, link emulation on) and checks
// that the JSON report has every field and that both policies generated the
// same tokens. Not a performance test: no figure is compared with a
// threshold.
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

TEST(PolicyBenchSmokeTest, ReportsEveryPolicyWithIdenticalOutputs) {
  const std::string json_path =
      std::string(getenv("TEST_TMPDIR")) + "/policy_bench.json";
  const std::string cmd = Runfile("tools/bench/moeserve_bench") +
                          " --model_dir=" + Runfile("models/demo") +
                          " --policies=on_demand,overlap"
                          " --expert_cache_ratio=0.25 --link_gbps=20"
                          " --link_latency_us=5 --num_requests=2"
                          " --max_new_tokens=4 --concurrency=2 --threads=2"
                          " --policy_repeats=2"
                          " --json_out=" +
                          json_path;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  std::ifstream in(json_path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  EXPECT_EQ(j.at("mode"), "policies");
  EXPECT_TRUE(j.at("outputs_identical").get<bool>());
  EXPECT_EQ(j.at("threads").get<int>(), 2);
  // The default backend, named as Backend::name() ("cpu-avx2-2t", ...).
  EXPECT_EQ(j.at("backend").get<std::string>().rfind("cpu", 0), 0u);
  EXPECT_GT(j.at("expert_compute_samples").get<int>(), 0);
  EXPECT_TRUE(j.at("link").at("emulated").get<bool>());
  EXPECT_GT(j["link"].at("miss_transfer_us").get<double>(), 0);
  EXPECT_GT(j.at("expert_compute_us").get<double>(), 0);
  EXPECT_GT(j.at("model").at("expert_blob_bytes").get<double>(), 0);
  ASSERT_EQ(j.at("results").size(), 2u);
  EXPECT_EQ(j["results"][0]["policy"], "on_demand");
  EXPECT_EQ(j["results"][1]["policy"], "overlap");
  for (const nlohmann::json& r : j["results"]) {
    EXPECT_EQ(r.at("tokens").get<int>(), 2 * 4) << r.dump();
    EXPECT_EQ(r.at("concurrency").get<int>(), 2);
    EXPECT_DOUBLE_EQ(r.at("expert_cache_ratio").get<double>(), 0.25);
    for (const char* key :
         {"tokens_per_s", "tpot_mean_ms", "tpot_p50_ms", "tpot_p99_ms",
          "link_bytes_per_token", "speedup_vs_on_demand", "wall_seconds"}) {
      EXPECT_GT(r.at(key).get<double>(), 0) << key << " in " << r.dump();
    }
    EXPECT_EQ(r.at("repeat_tokens_per_s").size(), 2u);
    for (const char* key : {"hit_rate", "stall_share", "link_busy_share"}) {
      EXPECT_GE(r.at(key).get<double>(), 0) << key;
      EXPECT_LE(r.at(key).get<double>(), 1) << key;
    }
    EXPECT_TRUE(r.contains("prefetch_precision"));
  }
  // on_demand never prefetches; its precision is null (n/a).
  EXPECT_TRUE(j["results"][0]["prefetch_precision"].is_null());
}

}  // namespace
