// Runs moeserve_bench --host_overhead on generated tiny models (mixtral
// from files, qwen2_moe in memory) and checks the JSON's host_overhead rows:
// one per (policy, batch), counts that hold today (launches per MoE layer at
// least what attention and routing need and nearly the same at batch 1 and
// 4, the grouped expert op; no allocation in a warm decode step; a miss or
// a hit for every routed expert) and a positive time. Not a performance
// test: the time and the other counts (syncs: one per MoE layer plus one
// per link copy today) are printed, not compared with a threshold.
#include <algorithm>
#include <cstdio>
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

// `files`: the generated model written to a directory (--gen_dir) and
// loaded, else built in memory.
nlohmann::json RunBench(const std::string& gen_model, bool files) {
  const std::string tmp = getenv("TEST_TMPDIR");
  const std::string json_path = tmp + "/" + gen_model + ".json";
  const std::string cmd = Runfile("tools/bench/moeserve_bench") +
                          " --host_overhead --gen_model=" + gen_model +
                          (files ? " --gen_dir=" + tmp + "/" + gen_model : "") +
                          " --policies=on_demand,lru --batch_sizes=1,4"
                          " --expert_cache_ratio=0.5 --prompt_len=8"
                          " --decode_steps=8 --json_out=" +
                          json_path;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(json_path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

void CheckRows(const nlohmann::json& j) {
  EXPECT_EQ(j.at("mode"), "host_overhead");
  EXPECT_EQ(j.at("backend"), "null");
  EXPECT_FALSE(j.at("machine").at("cpu_model").get<std::string>().empty());
  const int layers = j.at("layers").get<int>();
  const int top_k = j.at("top_k").get<int>();
  EXPECT_GT(layers, 0);
  EXPECT_GT(j.at("experts").get<int>(), 0);
  const nlohmann::json& rows = j.at("host_overhead");
  ASSERT_EQ(rows.size(), 4u) << j.dump();
  int i = 0;
  for (const char* policy : {"on_demand", "lru"}) {
    for (int batch : {1, 4}) {
      const nlohmann::json& r = rows[i++];
      std::printf("%s\n", r.dump().c_str());
      EXPECT_EQ(r.at("policy"), policy);
      EXPECT_EQ(r.at("batch").get<int>(), batch);
      EXPECT_DOUBLE_EQ(r.at("expert_cache_ratio").get<double>(), 0.5);
      // Attention's and the router's launches and at least one expert.
      EXPECT_GE(r.at("launches_per_moe_layer").get<double>(), 5.0) << r;
      // Routing is read back: a sync per MoE layer at least.
      EXPECT_GE(r.at("syncs_per_moe_layer").get<double>(), 1.0) << r;
      EXPECT_GT(r.at("copies_to_host_per_moe_layer").get<double>(), 0) << r;
      EXPECT_EQ(r.at("allocations_per_step").get<double>(), 0) << r;
      EXPECT_EQ(r.at("allocated_bytes_per_step").get<double>(), 0) << r;
      EXPECT_GT(r.at("host_us_per_layer").get<double>(), 0) << r;
      EXPECT_DOUBLE_EQ(r.at("host_us_per_layer").get<double>() * layers,
                       r.at("host_us_per_step").get<double>());
      EXPECT_EQ(r.at("run_us_per_step").size(),
                j.at("timed_runs").get<size_t>());
      // A difference of two runs' CPU time: a number, not bounded here.
      EXPECT_TRUE(r.at("host_cpu_us_per_layer").is_number()) << r;
      EXPECT_TRUE(r.at("stall_us_per_step").is_number()) << r;
      // At most top_k misses per token per layer; on_demand keeps nothing
      // beyond the layer, so it misses whenever it routes.
      const double misses = r.at("misses_per_moe_layer").get<double>();
      EXPECT_LE(misses, batch * top_k) << r;
      if (std::string(policy) == "on_demand") EXPECT_GT(misses, 0) << r;
      const double hit_rate = r.at("hit_rate").get<double>();
      EXPECT_GE(hit_rate, 0);
      EXPECT_LE(hit_rate, 1);
    }
    // A layer's ready experts are one grouped op (issue 30 item 2): four
    // times the tokens, about twice the experts, under one launch more per
    // MoE layer (it was 3 per routed expert), plus what the extra misses
    // add: an expert still loading is computed in a call of its own
    // (ExpertProvider's contract), and how many are still loading when
    // reached depends on the link thread's timing (seen: lru 24.8 -> 25.8
    // launches with 0.9 -> 3.3 misses a layer). The exact counts with every
    // expert resident are //engine:host_overhead_test's.
    const double one = rows[i - 2].at("launches_per_moe_layer").get<double>();
    const double four = rows[i - 1].at("launches_per_moe_layer").get<double>();
    const double extra_misses =
        std::max(0.0, rows[i - 1].at("misses_per_moe_layer").get<double>() -
                          rows[i - 2].at("misses_per_moe_layer").get<double>());
    EXPECT_LT(four - one, 1.0 + extra_misses)
        << policy << ": batch 1 " << one << ", batch 4 " << four;
  }
}

TEST(HostOverheadSmokeTest, MixtralTinyFromFilesRows) {
  CheckRows(RunBench("mixtral_tiny", /*files=*/true));
}

TEST(HostOverheadSmokeTest, QwenTinyInMemoryRows) {
  CheckRows(RunBench("qwen_tiny", /*files=*/false));
}

}  // namespace
