// Runs moeserve_bench on the tiny mixtral fixture plus a generated tiny
// qwen2_moe with minimal settings and checks that the JSON report has every
// field with positive figures. Not a performance test: no figure is compared
// with a threshold.
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

TEST(MoeserveBenchSmokeTest, WritesPositiveFiguresForEveryPhase) {
  const std::string json_path =
      std::string(getenv("TEST_TMPDIR")) + "/bench.json";
  const std::string cmd =
      Runfile("tools/bench/moeserve_bench") +
      " --model_dir=" + Runfile("tests/golden/mixtral_tiny") +
      " --gen_qwen_tiny --gen_qwen_layers=2 --threads=2 --prompt_len=8"
      " --decode_steps=2 --batch_sizes=1,3 --prefill_batch_sizes=2"
      " --min_phase_seconds=0 --bandwidth_mib=16 --bandwidth_repeats=1 "
      "--json_out=" +
      json_path;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  std::ifstream in(json_path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  EXPECT_FALSE(j.at("machine").at("cpu_model").get<std::string>().empty());
  EXPECT_GT(j.at("memory_bandwidth_gbps").get<double>(), 0);
  EXPECT_EQ(j.at("threads").get<int>(), 2);
  ASSERT_EQ(j.at("models").size(), 2u);
  EXPECT_EQ(j["models"][0]["shape"]["model_type"], "mixtral");
  EXPECT_EQ(j["models"][1]["shape"]["model_type"], "qwen2_moe");
  EXPECT_GT(j["models"][1]["shape"]["shared_expert_ffn"].get<int>(), 0);
  for (const nlohmann::json& m : j["models"]) {
    ASSERT_EQ(m.at("results").size(), 3u)
        << m.dump();  // prefill 2, decode 1, 3
    for (const nlohmann::json& r : m["results"]) {
      for (const char* key :
           {"tokens_per_s", "weight_bytes_per_token", "weight_gbps",
            "roofline_ratio", "roofline_tokens_per_s", "experts_per_pass"}) {
        EXPECT_GT(r.at(key).get<double>(), 0) << key << " in " << r.dump();
      }
    }
    // Decode at batch 1 reads at most top_k experts per layer.
    const nlohmann::json& d1 = m["results"][1];
    EXPECT_EQ(d1["phase"], "decode");
    EXPECT_LE(
        d1["experts_per_pass"].get<double>(),
        m["shape"]["layers"].get<double>() * m["shape"]["top_k"].get<double>());
  }
}

}  // namespace
