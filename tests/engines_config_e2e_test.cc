// Per-engine settings end to end, through the real binary on the bundled
// demo model: an A/B split whose --policy engine has its own policy_config,
// an --engines_config file with two configured engines, and the refusal of
// bad files at start (exit 2, a message naming the file, engine and key).
#include <signal.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/moeserve.grpc.pb.h"
#include "tests/server_process.h"

namespace moeserve {
namespace {

using ::testing::HasSubstr;

constexpr char kBinary[] = "server/moeserve";

// Writes `text` to a fresh file under the test's temporary directory.
std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::ofstream(path) << text;
  return path;
}

class EnginesConfigE2eTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags) {
    flags.insert(flags.end(), {"--model_dir=models/demo", "--threads=2",
                               "--drain_seconds=2"});
    auto server = testing::ServerProcess::Start(kBinary, flags);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::Inference::NewStub(server_->channel());
    ASSERT_TRUE(
        testing::WaitUntilServing(server_->channel().get(), absl::Seconds(60)))
        << "never became SERVING";
  }

  // Engine name -> its ListModels entry.
  std::map<std::string, v1::EngineInfo> Engines() {
    grpc::ClientContext context;
    v1::ListModelsResponse response;
    EXPECT_TRUE(stub_->ListModels(&context, {}, &response).ok());
    std::map<std::string, v1::EngineInfo> out;
    if (response.models_size() != 1) return out;
    for (const v1::EngineInfo& e : response.models(0).engines()) {
      out[e.name()] = e;
    }
    return out;
  }

  // Greedy text of a short request on `engine`.
  std::string Greedy(const std::string& engine) {
    v1::GenerateRequest r;
    r.set_prompt("The LORD");
    r.set_policy(engine);
    r.mutable_sampling()->set_max_new_tokens(8);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
    v1::GenerateUnaryResponse response;
    const grpc::Status st = stub_->GenerateUnary(&context, r, &response);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(response.policy(), engine);
    return response.text();
  }

  std::string Metrics() {
    absl::StatusOr<std::string> m =
        testing::HttpGet(server_->metrics_port(), "/metrics");
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : "";
  }

  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(EnginesConfigE2eTest, AbSplitWithAConfiguredPolicyServes) {
  // Before per-engine settings this left the server NOT_SERVING: lru was
  // handed lfu_static's top_percent.
  Start({"--policy=lfu_static", "--ab=lfu_static=0.5,lru=0.5",
         "--policy_config=top_percent=5"});
  std::map<std::string, v1::EngineInfo> engines = Engines();
  ASSERT_EQ(engines.size(), 2u);
  EXPECT_EQ(engines["lfu_static"].policy_config().at("top_percent"), "5");
  EXPECT_TRUE(engines["lru"].policy_config().empty());
  EXPECT_DOUBLE_EQ(engines["lru"].ab_weight(), 0.5);
  EXPECT_EQ(Greedy("lfu_static"), Greedy("lru"));  // policies never change
  EXPECT_EQ(server_->StopWith(SIGTERM), 0);
}

TEST_F(EnginesConfigE2eTest, FileServesTwoEnginesWithTheirOwnSettings) {
  const std::string path = WriteFile("engines.json", R"({
    "engines": [
      {"name": "pinned", "policy": "lfu_static",
       "policy_config": {"top_percent": 5, "profile_steps": 4},
       "expert_cache_ratio": 0.5, "max_num_seqs": 8},
      {"name": "lru", "policy": "lru", "expert_cache_mb": 1,
       "slow_tier": "disk", "link_gbps": 8}
    ],
    "ab": {"pinned": 3, "lru": 1}
  })");
  Start({absl::StrCat("--engines_config=", path)});
  std::map<std::string, v1::EngineInfo> engines = Engines();
  ASSERT_EQ(engines.size(), 2u);
  const v1::EngineInfo& pinned = engines["pinned"];
  EXPECT_EQ(pinned.policy(), "lfu_static");
  EXPECT_EQ(pinned.policy_config().at("top_percent"), "5");
  EXPECT_EQ(pinned.policy_config().at("profile_steps"), "4");
  EXPECT_EQ(pinned.max_num_seqs(), 8u);
  EXPECT_EQ(pinned.slow_tier(), "host");
  EXPECT_DOUBLE_EQ(pinned.ab_weight(), 0.75);
  const v1::EngineInfo& lru = engines["lru"];
  EXPECT_TRUE(lru.policy_config().empty());
  EXPECT_EQ(lru.slow_tier(), "disk");
  EXPECT_DOUBLE_EQ(lru.link_gbps(), 8);
  EXPECT_EQ(lru.max_num_seqs(), 64u);  // the flag's default
  EXPECT_LT(lru.expert_cache_bytes(), pinned.expert_cache_bytes());
  EXPECT_EQ(Greedy("pinned"), Greedy("lru"));
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("policy_config=\"profile_steps=4,"
                                 "top_percent=5\""));
  EXPECT_THAT(metrics, HasSubstr("moeserve_engine_info{policy=\"lru\","
                                 "offload_policy=\"lru\",policy_config=\"\""));
  EXPECT_EQ(server_->StopWith(SIGTERM), 0);
}

// A bad file stops the server at start with exit code 2 and a message that
// names the file and what is wrong in it.
TEST(EnginesConfigRefusalTest, BadFilesAreRefusedAtStartByName) {
  struct Case {
    std::string json;
    std::vector<std::string> expected;  // substrings of the message
  };
  const std::vector<Case> cases = {
      {R"({"engines": [{"name": "lru", "policy": "lru",
                        "policy_config": {"top_percent": 5}}]})",
       {"engine 'lru'", "policy_config", "top_percent"}},
      {R"({"engines": [{"name": "a", "policy": "lru", "cache": 1}]})",
       {"engine 'a'", "unknown key 'cache'"}},
      {R"({"engines": [{"name": "a", "policy": "lru"},
                       {"name": "a", "policy": "overlap"}]})",
       {"engine name 'a' appears twice"}},
      {R"({"engines": [{"name": "a", "policy": "belady"}]})",
       {"engine 'a'", "policy:", "unknown offload policy 'belady'"}},
      {R"({"engines": [{"name": "a", "policy": "lru"}], "ab": {"a": -1}})",
       {"ab: weight of 'a'", ">= 0"}},
      {R"({"engines": [{"name": "a", "policy": "lru"},
                       {"name": "b", "policy": "lru"}],
           "ab": {"a": 0, "b": 0}})",
       {"ab: weights sum to 0"}},
      {R"({"engines": [{"name": "a", "policy": "lru"}], "ab": {"c": 1}})",
       {"ab: 'c' is not one of the engines"}},
      {R"({"engines": [{"name": "a", "expert_cache_ratio": "half"}]})",
       {"engine 'a'", "expert_cache_ratio"}},
      {R"({"engines": [{"name": "qd", "policy": "quant_draft",
                        "draft_budget": "more"}]})",
       {"engine 'qd'", "draft_budget: must be shared or extra, got 'more'"}},
      {R"({"engines": [], "extra": 1})", {"unknown key 'extra'"}},
      {R"({"engines": [)", {"engines config"}},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string path =
        WriteFile(absl::StrCat("bad", i++, ".json"), c.json);
    absl::StatusOr<testing::ExitResult> run = testing::RunToExit(
        kBinary,
        {absl::StrCat("--engines_config=", path), "--model_dir=models/demo",
         "--port=0", "--metrics_port=0"},
        absl::Seconds(30));
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->exit_code, 2) << c.json << "\n" << run->output;
    EXPECT_THAT(run->output, HasSubstr("--engines_config=" + path)) << c.json;
    for (const std::string& part : c.expected) {
      EXPECT_THAT(run->output, HasSubstr(part)) << c.json;
    }
  }
  // The flag forms are refused the same way.
  absl::StatusOr<testing::ExitResult> run =
      testing::RunToExit(kBinary,
                         {"--policy=lru", "--policy_config=top_percent=5",
                          "--port=0", "--metrics_port=0"},
                         absl::Seconds(30));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 2) << run->output;
  EXPECT_THAT(run->output, HasSubstr("engine 'lru': policy_config:"));
  EXPECT_THAT(run->output, HasSubstr("top_percent"));
  run = testing::RunToExit(kBinary,
                           {"--policy=quant_draft", "--draft_budget=more",
                            "--port=0", "--metrics_port=0"},
                           absl::Seconds(30));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 2) << run->output;
  EXPECT_THAT(run->output,
              HasSubstr("--draft_budget: must be shared or extra, got 'more'"));
}

}  // namespace
}  // namespace moeserve
