#include "server/server_options.h"

#include <climits>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(int, drain_seconds);
ABSL_DECLARE_FLAG(int, keepalive_time_ms);
ABSL_DECLARE_FLAG(int, kv_cache_mb);
ABSL_DECLARE_FLAG(int, max_num_seqs);
ABSL_DECLARE_FLAG(int, max_batched_tokens);
ABSL_DECLARE_FLAG(int, max_waiting);
ABSL_DECLARE_FLAG(int64_t, expert_cache_mb);
ABSL_DECLARE_FLAG(double, link_gbps);
ABSL_DECLARE_FLAG(double, link_latency_us);
ABSL_DECLARE_FLAG(double, inplace_compute_ratio);
ABSL_DECLARE_FLAG(uint32_t, max_new_tokens_cap);
ABSL_DECLARE_FLAG(uint32_t, max_input_tokens);
ABSL_DECLARE_FLAG(uint64_t, max_prompt_bytes);
ABSL_DECLARE_FLAG(std::string, engines);
ABSL_DECLARE_FLAG(std::string, policy);

namespace moeserve::server {
namespace {

using ::testing::HasSubstr;

TEST(ParseAbSplit, NormalisesWeights) {
  absl::StatusOr<std::vector<AbArm>> arms = ParseAbSplit("lru=1, overlap=3");
  ASSERT_TRUE(arms.ok()) << arms.status();
  ASSERT_EQ(arms->size(), 2u);
  EXPECT_EQ((*arms)[0].policy, "lru");
  EXPECT_DOUBLE_EQ((*arms)[0].weight, 0.25);
  EXPECT_EQ((*arms)[1].policy, "overlap");
  EXPECT_DOUBLE_EQ((*arms)[1].weight, 0.75);
}

TEST(ParseAbSplit, EmptyMeansNoSplit) {
  absl::StatusOr<std::vector<AbArm>> arms = ParseAbSplit("");
  ASSERT_TRUE(arms.ok());
  EXPECT_TRUE(arms->empty());
}

TEST(ParseAbSplit, RefusesBadInput) {
  for (const char* bad : {"lru", "lru=0", "lru=-1", "lru=x", "LRU=1",
                          "lru=1,lru=2", "=1", "lru=nan",
                          // Finite weights whose sum overflows (issue 16).
                          "lru=1e308,overlap=1e308"}) {
    absl::StatusOr<std::vector<AbArm>> arms = ParseAbSplit(bad);
    EXPECT_FALSE(arms.ok()) << bad;
    EXPECT_THAT(std::string(arms.status().message()), HasSubstr("--ab")) << bad;
  }
}

TEST(ServerOptions, EngineNamesDefaultFirstNoDuplicates) {
  ServerOptions o;
  EngineFlags flags;
  flags.policy = "lru";
  flags.ab = "overlap=0.5,lru=0.5";
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  EXPECT_THAT(o.EngineNames(), ::testing::ElementsAre("lru", "overlap"));
  EXPECT_DOUBLE_EQ(o.AbWeight("overlap"), 0.5);
}

TEST(ParseEngineSpecs, NamesPoliciesAndBudgets) {
  absl::StatusOr<std::vector<engine::EngineSpec>> specs =
      ParseEngineSpecs("small=lru@ratio=0.25,big=overlap@mb=64");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[0].name, "small");
  EXPECT_EQ((*specs)[0].policy, "lru");
  EXPECT_DOUBLE_EQ((*specs)[0].expert_cache_ratio, 0.25);
  EXPECT_EQ((*specs)[1].policy, "overlap");
  EXPECT_EQ((*specs)[1].expert_cache_mb, 64);
  for (const char* bad :
       {"small", "a=lru@ratio=2", "a=lru@size=3", "a=lru,a=lru", "A=lru",
        "a=lru@ratio=x",
        // Issue 16: a fraction became 0 (the full ratio budget), 1e30 an
        // undefined cast; 0 and negatives meant the ratio.
        "a=lru@mb=0.5", "a=lru@mb=1e30", "a=lru@mb=0", "a=lru@mb=-1",
        "a=lru@mb=17592186044416", "a=lru@ratio=0"}) {
    absl::StatusOr<std::vector<engine::EngineSpec>> r = ParseEngineSpecs(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--engines"))
        << bad;
  }
}

TEST(ServerOptions, DefaultsFollowDesign) {
  absl::StatusOr<ServerOptions> o = ServerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->host, "127.0.0.1");
  EXPECT_EQ(o->port, 50051);
  EXPECT_EQ(o->metrics_port, 9400);
  EXPECT_EQ(o->default_engine().name, "lru");
  EXPECT_EQ(o->default_engine().policy, "lru");
  EXPECT_EQ(o->max_receive_message_bytes, 4 << 20);
  // --drafter= and --num_speculative_tokens=-1: lru's own (no speculation).
  EXPECT_EQ(o->default_engine().drafter, "none");
  EXPECT_EQ(o->default_engine().num_speculative_tokens, 0);
  EXPECT_EQ(o->default_engine().draft_model_dir, "models/demo-draft");
}

TEST(ParseEngineSpecs, RefusesMoreThanMaxEngines) {
  std::string text;
  for (size_t i = 0; i <= kMaxEngines; ++i) {
    text += (i ? ",e" : "e") + std::to_string(i) + "=lru";
  }
  absl::StatusOr<std::vector<engine::EngineSpec>> r = ParseEngineSpecs(text);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("--engines: more than 16 engines"));
}

// Every flag issue 16 found accepted and then misapplied, refused at start
// with a message naming it.
TEST(ServerOptions, OutOfRangeFlagsAreRefusedByName) {
  struct Case {
    const char* flag;
    std::function<void()> set;
  };
  const Case cases[] = {
      {"--max_waiting:", [] { absl::SetFlag(&FLAGS_max_waiting, 0); }},
      {"--max_waiting:", [] { absl::SetFlag(&FLAGS_max_waiting, INT_MAX); }},
      {"--threads:", [] { absl::SetFlag(&FLAGS_threads, MaxThreads() + 1); }},
      {"--threads:", [] { absl::SetFlag(&FLAGS_threads, INT_MAX); }},
      {"--expert_cache_mb:",
       [] { absl::SetFlag(&FLAGS_expert_cache_mb, int64_t{1} << 50); }},
      {"--link_gbps:", [] { absl::SetFlag(&FLAGS_link_gbps, 1e-300); }},
      {"--link_gbps:", [] { absl::SetFlag(&FLAGS_link_gbps, 1e300); }},
      {"--link_latency_us:",
       [] { absl::SetFlag(&FLAGS_link_latency_us, 1e300); }},
      {"--inplace_compute_ratio:",
       [] { absl::SetFlag(&FLAGS_inplace_compute_ratio, 1e300); }},
      {"--kv_cache_mb:", [] { absl::SetFlag(&FLAGS_kv_cache_mb, INT_MAX); }},
      {"--max_num_seqs:", [] { absl::SetFlag(&FLAGS_max_num_seqs, INT_MAX); }},
      {"--max_batched_tokens:",
       [] { absl::SetFlag(&FLAGS_max_batched_tokens, INT_MAX); }},
      {"--drain_seconds:",
       [] { absl::SetFlag(&FLAGS_drain_seconds, INT_MAX); }},
      {"--keepalive_time_ms:",
       [] { absl::SetFlag(&FLAGS_keepalive_time_ms, INT_MAX); }},
      {"--max_new_tokens_cap:",
       [] { absl::SetFlag(&FLAGS_max_new_tokens_cap, UINT32_MAX); }},
      {"--max_input_tokens:",
       [] { absl::SetFlag(&FLAGS_max_input_tokens, UINT32_MAX); }},
      {"--max_prompt_bytes:",
       [] { absl::SetFlag(&FLAGS_max_prompt_bytes, UINT64_MAX); }},
      {"--policy:",
       [] {
         absl::SetFlag(&FLAGS_engines, "a=lru,b=overlap");
         absl::SetFlag(&FLAGS_policy, "lru");
       }},
  };
  for (const Case& c : cases) {
    absl::FlagSaver saver;
    c.set();
    absl::StatusOr<ServerOptions> o = ServerOptionsFromFlags();
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << c.flag;
    EXPECT_THAT(std::string(o.status().message()),
                ::testing::StartsWith(c.flag))
        << o.status();
  }
  // The bounds themselves start.
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_threads, MaxThreads());
  absl::SetFlag(&FLAGS_max_waiting, 1);
  absl::SetFlag(&FLAGS_link_gbps, 0.001);
  EXPECT_TRUE(ServerOptionsFromFlags().ok());
}

TEST(ServerOptions, PromptBytesFollowInputTokens) {
  absl::FlagSaver saver;
  absl::StatusOr<ServerOptions> o = ServerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->limits.max_prompt_bytes, 2048u * kPromptBytesPerToken);
  absl::SetFlag(&FLAGS_max_input_tokens, 8192);
  o = ServerOptionsFromFlags();
  EXPECT_EQ(o->limits.max_prompt_bytes, 8192u * kPromptBytesPerToken);
  absl::SetFlag(&FLAGS_max_input_tokens, 10);
  o = ServerOptionsFromFlags();
  EXPECT_EQ(o->limits.max_prompt_bytes, 4096u);
  absl::SetFlag(&FLAGS_max_prompt_bytes, 1000);
  o = ServerOptionsFromFlags();
  EXPECT_EQ(o->limits.max_prompt_bytes, 1000u);
}

}  // namespace
}  // namespace moeserve::server
