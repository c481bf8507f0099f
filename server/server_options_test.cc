#include "server/server_options.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
                          "lru=1,lru=2", "=1", "lru=nan"}) {
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
  for (const char* bad : {"small", "a=lru@ratio=2", "a=lru@size=3",
                          "a=lru,a=lru", "A=lru", "a=lru@ratio=x"}) {
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

}  // namespace
}  // namespace moeserve::server
