// --engines_config parsing and the flag forms' resolution into engine specs:
// inheritance of the server-wide flags, the default engine, A/B weights,
// policy_config values, and every refusal naming engine and key.
#include "server/engines_config.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_options.h"

namespace moeserve::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

engine::EngineSpec Defaults() {
  engine::EngineSpec d;
  d.expert_cache_ratio = 0.5;
  d.slow_tier = "disk";
  d.max_num_seqs = 16;
  d.link.gbps = 4;
  return d;
}

TEST(EnginesConfigTest, EnginesInheritTheFlagsAndOverrideWhatTheyName) {
  absl::StatusOr<EnginesConfig> c = ParseEnginesConfig(R"({
    "engines": [
      {"name": "pinned", "policy": "lfu_static",
       "policy_config": {"top_percent": 5, "profile_steps": 16},
       "expert_cache_mb": 64},
      {"name": "lru", "max_num_seqs": 4, "slow_tier": "host",
       "link_gbps": 0, "inplace_compute_ratio": 4, "kv_cache_mb": 32}
    ],
    "ab": {"pinned": 1, "lru": 3},
    "default": "lru"
  })",
                                                       Defaults());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->engines.size(), 2u);
  const engine::EngineSpec& lru = c->engines[0];  // "default" comes first
  const engine::EngineSpec& pinned = c->engines[1];
  EXPECT_EQ(lru.name, "lru");
  EXPECT_EQ(lru.policy, "lru");  // the name, when no policy is given
  EXPECT_EQ(lru.max_num_seqs, 4);
  EXPECT_EQ(lru.slow_tier, "host");
  EXPECT_EQ(lru.link.gbps, 0);
  EXPECT_EQ(lru.link.inplace_compute_ratio, 4);
  EXPECT_EQ(pinned.link.inplace_compute_ratio, 8);  // the default
  EXPECT_EQ(lru.kv_cache_bytes, 32u << 20);
  EXPECT_DOUBLE_EQ(lru.expert_cache_ratio, 0.5);  // the flag's
  EXPECT_EQ(pinned.policy_config,
            (std::map<std::string, std::string>{{"profile_steps", "16"},
                                                {"top_percent", "5"}}));
  EXPECT_EQ(pinned.expert_cache_mb, 64);
  EXPECT_EQ(pinned.slow_tier, "disk");  // the flag's
  EXPECT_EQ(pinned.max_num_seqs, 16);
  ASSERT_EQ(c->ab.size(), 2u);
  EXPECT_DOUBLE_EQ(c->ab[0].weight + c->ab[1].weight, 1.0);
  for (const AbArm& arm : c->ab) {
    EXPECT_DOUBLE_EQ(arm.weight, arm.policy == "lru" ? 0.75 : 0.25);
  }
}

TEST(EnginesConfigTest, RefusalsNameTheEngineAndTheKey) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"engines": [{"name": "lru", "policy_config": {"top_percent": 5}}]})",
       "engine 'lru': policy_config: policy 'lru': unknown config key "
       "'top_percent'"},
      {R"({"engines": [{"name": "a", "policy": "lru", "ratio": 1}]})",
       "engine 'a': unknown key 'ratio'"},
      {R"({"engines": [{"name": "a", "policy": "lru", "max_num_seqs": 0}]})",
       "engine 'a': max_num_seqs: must be in [1, 4096], got 0"},
      // Issue 16: accepted, then misapplied.
      {R"({"engines": [{"name": "a", "max_waiting": 0}]})",
       "engine 'a': max_waiting: must be in [1, "},
      {R"({"engines": [{"name": "a", "link_gbps": 1e-300}]})",
       "engine 'a': link_gbps: must be 0 (off) or in [0.001, "},
      {R"({"engines": [{"name": "a", "expert_cache_mb": 17592186044416}]})",
       "engine 'a': expert_cache_mb: must be in [1, 16777216]"},
      {R"({"engines": [{"name": "a", "expert_cache_mb": 0.5}]})",
       "engine 'a': field \"expert_cache_mb\" must be an integer"},
      {R"({"engines": [{"name": "lru"}, {"name": "overlap"}],
           "ab": {"lru": 1e308, "overlap": 1e308}})",
       "ab: weights sum to infinity"},
      {R"({"engines": [{"name": "a", "policy": "lru",
                        "expert_cache_ratio": 0.5, "expert_cache_mb": 8}]})",
       "engine 'a': expert_cache_ratio: give expert_cache_ratio or "
       "expert_cache_mb, not both"},
      {R"({"engines": [{"name": "a", "policy": "lru", "drafter": "eagle"}]})",
       "engine 'a': drafter: unknown drafter 'eagle' (registered: none, "
       "external, int4, self"},
      {R"({"engines": [{"name": "a", "num_speculative_tokens": 17}]})",
       "engine 'a': num_speculative_tokens: must be in [0, 16]"},
      {R"({"engines": [{"name": "a", "num_speculative_tokens": -1}]})",
       "engine 'a': num_speculative_tokens: must be in [0, 16]"},
      {R"({"engines": [{"name": "a", "num_speculative_tokens": 1.5}]})",
       "engine 'a': field \"num_speculative_tokens\" must be an integer"},
      {R"({"engines": [{"name": "a", "drafter": 1}]})",
       "engine 'a': field \"drafter\" must be a string"},
      {R"({"engines": [{"name": "a", "draft_budget": "more"}]})",
       "engine 'a': draft_budget: must be shared or extra, got 'more'"},
      {R"({"engines": [{"name": "a", "draft_budget": 1}]})",
       "engine 'a': field \"draft_budget\" must be a string"},
      {R"({"engines": [{"name": "a", "policy": "lru",
                        "policy_config": {"k": [1]}}]})",
       "policy_config: key 'k' must be a string, number or boolean"},
      {R"({"engines": [{"name": "Bad"}]})", "name: 'Bad' is not"},
      {R"({"engines": [{"policy": "lru"}]})", "engines[0]: "},
      {R"({"engines": [{"name": "lru"}, {"name": "lru"}]})",
       "engines[1]: engine name 'lru' appears twice"},
      {R"({"engines": [{"name": "a", "policy": "nope"}]})",
       "engine 'a': policy: unknown offload policy 'nope'"},
      {R"({"engines": [{"name": "lru"}], "ab": {"lru": -1}})",
       "ab: weight of 'lru' must be a number >= 0"},
      {R"({"engines": [{"name": "lru"}], "ab": {"lru": 0}})",
       "ab: weights sum to 0"},
      {R"({"engines": [{"name": "lru"}], "ab": {"x": 1}})",
       "ab: 'x' is not one of the engines"},
      {R"({"engines": [{"name": "lru"}], "default": "x"})",
       "default: 'x' is not one of the engines"},
      {R"({"engines": []})", "engines: must be a non-empty array"},
      {R"({"engine": []})", "unknown key 'engine'"},
      {R"([1])", "the top level must be an object"},
      {R"({"engines": )", "engines config"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<EnginesConfig> config =
        ParseEnginesConfig(c.json, Defaults());
    EXPECT_FALSE(config.ok()) << c.json;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.message))
        << c.json;
  }
}

TEST(EnginesConfigTest, SpeculationIsInheritedAndOverriddenPerEngine) {
  engine::EngineSpec d = Defaults();
  d.drafter = "self";  // --drafter=self
  d.num_speculative_tokens = 3;
  d.draft_model_dir = "/drafts/a";
  absl::StatusOr<EnginesConfig> c = ParseEnginesConfig(R"({
    "engines": [
      {"name": "lru_self", "policy": "lru"},
      {"name": "lru", "policy": "lru", "drafter": "none"},
      {"name": "adaptive", "policy": "lru", "num_speculative_tokens": 0},
      {"name": "own", "policy": "self_spec", "drafter": "",
       "num_speculative_tokens": 16, "draft_model_dir": "/drafts/b"}
    ]
  })",
                                                       d);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->engines.size(), 4u);
  EXPECT_EQ(c->engines[0].drafter, "self");  // the flags'
  EXPECT_EQ(c->engines[0].num_speculative_tokens, 3);
  EXPECT_EQ(c->engines[0].draft_model_dir, "/drafts/a");
  EXPECT_EQ(c->engines[1].drafter, "none");
  EXPECT_EQ(c->engines[1].num_speculative_tokens, 3);
  EXPECT_EQ(c->engines[2].drafter, "self");
  EXPECT_EQ(c->engines[2].num_speculative_tokens, 0);
  // Parsing keeps "" (the policy's own); ResolveEngines resolves it.
  EXPECT_EQ(c->engines[3].drafter, "");
  EXPECT_EQ(c->engines[3].num_speculative_tokens, 16);
  EXPECT_EQ(c->engines[3].draft_model_dir, "/drafts/b");
}

TEST(EnginesConfigTest, AMissingFileIsNamed) {
  absl::StatusOr<EnginesConfig> c =
      LoadEnginesConfig("/nonexistent/engines.json", Defaults());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("--engines_config=/nonexistent/engines.json: "));
}

TEST(ResolveEnginesTest, PolicyConfigReachesOnlyThePolicyEngine) {
  EngineFlags flags;
  flags.policy = "lfu_static";
  flags.ab = "lfu_static=0.5,lru=0.5";
  flags.policy_config = "top_percent=5";
  ServerOptions o;
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  ASSERT_EQ(o.engines.size(), 2u);
  EXPECT_EQ(o.engines[0].name, "lfu_static");
  EXPECT_EQ(o.engines[0].policy_config.at("top_percent"), "5");
  EXPECT_TRUE(o.engines[1].policy_config.empty());
  EXPECT_THAT(o.EngineNames(), ElementsAre("lfu_static", "lru"));
}

TEST(ResolveEnginesTest, FlagFormRefusalsNameFlagEngineAndKey) {
  EngineFlags flags;
  flags.policy = "lru";
  flags.policy_config = "top_percent=5";
  ServerOptions o;
  absl::Status st = ResolveEngines(flags, &o);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("--policy/--policy_config: engine 'lru': "
                        "policy_config:"));
  flags = EngineFlags();
  flags.policy = "nope";
  st = ResolveEngines(flags, &o);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(st.message()), HasSubstr("engine 'nope': policy:"));
  flags = EngineFlags();
  flags.engines_config = "/x.json";
  flags.engines = "a=lru";
  EXPECT_THAT(std::string(ResolveEngines(flags, &o).message()),
              HasSubstr("not both"));
  flags.engines.clear();
  flags.policy_config = "lookahead=2";
  EXPECT_THAT(std::string(ResolveEngines(flags, &o).message()),
              HasSubstr("put each engine's policy_config in the file"));
  flags.policy_config.clear();
  flags.policy_given = true;
  EXPECT_THAT(std::string(ResolveEngines(flags, &o).message()),
              HasSubstr("say \"default\" in the file"));
}

TEST(ResolveEnginesTest, AbFlagWithAFileMustNameItsEngines) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/engines.json";
  std::ofstream(path)
      << R"({"engines": [{"name": "lru"}, {"name": "overlap"}]})";
  EngineFlags flags;
  flags.engines_config = path;
  flags.ab = "lru=1,overlap=3";
  ServerOptions o;
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  EXPECT_DOUBLE_EQ(o.AbWeight("overlap"), 0.75);
  flags.ab = "lru=1,nosuch=3";
  const absl::Status st = ResolveEngines(flags, &o);
  EXPECT_THAT(
      std::string(st.message()),
      HasSubstr("--ab: 'nosuch' is not an engine of --engines_config="));
}

// Each engine's drafter and k as it will run them: what it names, else the
// flags, else its policy's own.
TEST(ResolveEnginesTest, FileEnginesGetTheirPolicysSpeculationResolved) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/spec_engines.json";
  std::ofstream(path) << R"({
    "engines": [
      {"name": "lru", "policy": "lru"},
      {"name": "lru_self", "policy": "lru", "drafter": "self"},
      {"name": "self_spec"},
      {"name": "self_spec_k2", "policy": "self_spec",
       "policy_config": {"num_speculative_tokens": 2}},
      {"name": "self_spec_off", "policy": "self_spec", "drafter": "none"},
      {"name": "self_spec_k6", "policy": "self_spec",
       "num_speculative_tokens": 6}
    ],
    "ab": {"lru": 1, "lru_self": 1}
  })";
  EngineFlags flags;
  flags.engines_config = path;
  ServerOptions o;
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  std::map<std::string, std::pair<std::string, int>> got;
  for (const engine::EngineSpec& s : o.engines) {
    got[s.name] = {s.drafter, s.num_speculative_tokens};
  }
  using P = std::pair<std::string, int>;
  EXPECT_EQ(got["lru"], P("none", 0));
  EXPECT_EQ(got["lru_self"], P("self", 0));  // lru has no k: adaptive
  EXPECT_EQ(got["self_spec"], P("self", 4));
  EXPECT_EQ(got["self_spec_k2"], P("self", 2));
  EXPECT_EQ(got["self_spec_off"], P("none", 4));
  EXPECT_EQ(got["self_spec_k6"], P("self", 6));

  // The flags are every engine's defaults; an engine's own key wins.
  flags.defaults.drafter = "none";
  flags.defaults.num_speculative_tokens = 5;
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  got.clear();
  for (const engine::EngineSpec& s : o.engines) {
    got[s.name] = {s.drafter, s.num_speculative_tokens};
  }
  EXPECT_EQ(got["lru"], P("none", 5));
  EXPECT_EQ(got["lru_self"], P("self", 5));
  EXPECT_EQ(got["self_spec"], P("none", 5));
  EXPECT_EQ(got["self_spec_k6"], P("none", 6));
}

// SpecMoEOff's CPU attention is a throughput-policy option: its
// host_attention key turns the engine's setting on, also when the engine
// names its drafter and k itself.
TEST(ResolveEnginesTest, ThroughputPolicyKeyTurnsHostAttentionOn) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/host_attention.json";
  std::ofstream(path) << R"({
    "engines": [
      {"name": "plain", "policy": "throughput",
       "policy_config": {"drafter": "int4"}},
      {"name": "host", "policy": "throughput",
       "policy_config": {"drafter": "int4", "host_attention": 1}},
      {"name": "host_k3", "policy": "throughput", "drafter": "int4",
       "num_speculative_tokens": 3, "policy_config": {"host_attention": 1}},
      {"name": "setting", "policy": "lru", "host_attention": 1}
    ]
  })";
  EngineFlags flags;
  flags.engines_config = path;
  ServerOptions o;
  absl::Status st = ResolveEngines(flags, &o);
  ASSERT_TRUE(st.ok()) << st;
  std::map<std::string, int> got;
  for (const engine::EngineSpec& s : o.engines) got[s.name] = s.host_attention;
  EXPECT_EQ(got["plain"], 0);
  EXPECT_EQ(got["host"], 1);
  EXPECT_EQ(got["host_k3"], 1);
  EXPECT_EQ(got["setting"], 1);
}

TEST(ResolveEnginesTest, SpeculationFlagsReachEveryFlagFormEngine) {
  EngineFlags flags;
  flags.policy = "self_spec";
  flags.ab = "self_spec=1,lru=1";
  ServerOptions o;
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  ASSERT_EQ(o.engines.size(), 2u);
  EXPECT_EQ(o.engines[0].drafter, "self");
  EXPECT_EQ(o.engines[0].num_speculative_tokens, 4);
  EXPECT_EQ(o.engines[1].drafter, "none");
  // --drafter=none turns speculation off even for self_spec.
  flags.defaults.drafter = "none";
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  EXPECT_EQ(o.engines[0].drafter, "none");
  EXPECT_EQ(o.engines[1].drafter, "none");
  // --drafter=self --num_speculative_tokens=2: every engine drafts 2.
  flags.defaults.drafter = "self";
  flags.defaults.num_speculative_tokens = 2;
  flags.engines = "self_spec=self_spec,small=lru@ratio=0.25";
  flags.ab = "self_spec=1,small=1";
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  for (const engine::EngineSpec& s : o.engines) {
    EXPECT_EQ(s.drafter, "self") << s.name;
    EXPECT_EQ(s.num_speculative_tokens, 2) << s.name;
  }
}

// quant_draft brings the int4 drafter and an adaptive k (its governor);
// --draft_budget is every engine's default, an engine's own key wins.
TEST(ResolveEnginesTest, QuantDraftResolvesToInt4AndDraftBudgetIsInherited) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/quant_draft_engines.json";
  std::ofstream(path) << R"({
    "engines": [
      {"name": "quant_draft"},
      {"name": "qd_shared", "policy": "quant_draft", "draft_budget": "shared"},
      {"name": "qd_k3", "policy": "quant_draft", "num_speculative_tokens": 3,
       "draft_budget": "extra"},
      {"name": "lru", "policy": "lru"}
    ]
  })";
  EngineFlags flags;
  flags.engines_config = path;
  ServerOptions o;
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  std::map<std::string, engine::EngineSpec> got;
  for (const engine::EngineSpec& s : o.engines) got[s.name] = s;
  EXPECT_EQ(got["quant_draft"].drafter, "int4");
  EXPECT_EQ(got["quant_draft"].num_speculative_tokens, 0);  // adaptive
  EXPECT_EQ(got["quant_draft"].draft_budget, "shared");     // the default
  EXPECT_EQ(got["qd_k3"].drafter, "int4");
  EXPECT_EQ(got["qd_k3"].num_speculative_tokens, 3);
  EXPECT_EQ(got["qd_k3"].draft_budget, "extra");
  EXPECT_EQ(got["lru"].drafter, "none");

  // --draft_budget=extra: engines that leave the key out inherit it.
  flags.defaults.draft_budget = "extra";
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  got.clear();
  for (const engine::EngineSpec& s : o.engines) got[s.name] = s;
  EXPECT_EQ(got["quant_draft"].draft_budget, "extra");
  EXPECT_EQ(got["qd_shared"].draft_budget, "shared");
  EXPECT_EQ(got["qd_k3"].draft_budget, "extra");
  EXPECT_EQ(got["lru"].draft_budget, "extra");

  // The flag forms: --policy=quant_draft --ab=lru=1,quant_draft=1
  // --draft_budget=extra.
  flags = EngineFlags();
  flags.policy = "quant_draft";
  flags.ab = "lru=1,quant_draft=1";
  flags.defaults.draft_budget = "extra";
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  ASSERT_EQ(o.engines.size(), 2u);
  EXPECT_EQ(o.engines[0].name, "quant_draft");
  EXPECT_EQ(o.engines[0].drafter, "int4");
  EXPECT_EQ(o.engines[0].num_speculative_tokens, 0);
  EXPECT_EQ(o.engines[0].draft_budget, "extra");
  EXPECT_EQ(o.engines[1].drafter, "none");
  EXPECT_EQ(o.engines[1].draft_budget, "extra");
  flags.engines = "quant_draft=quant_draft@ratio=0.5,lru=lru";
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  for (const engine::EngineSpec& s : o.engines) {
    EXPECT_EQ(s.draft_budget, "extra") << s.name;
  }
}

TEST(ResolveEnginesTest, BadSpeculationFlagsAreNamedAsFlags) {
  EngineFlags flags;
  flags.defaults.drafter = "eagle";
  ServerOptions o;
  absl::Status st = ResolveEngines(flags, &o);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("--drafter: unknown drafter 'eagle' (registered: "
                        "none, external, int4, self"));
  for (int k : {-2, 17}) {
    flags = EngineFlags();
    flags.defaults.num_speculative_tokens = k;
    st = ResolveEngines(flags, &o);
    EXPECT_THAT(std::string(st.message()),
                HasSubstr("--num_speculative_tokens: must be in [0, 16]"))
        << k;
  }
  flags = EngineFlags();
  flags.defaults.draft_budget = "more";
  st = ResolveEngines(flags, &o);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("--draft_budget: must be shared or extra, got 'more'"));
  // Also with a file (whose engines could override them).
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/one_engine.json";
  std::ofstream(path) << R"({"engines": [{"name": "lru", "drafter": "none"}]})";
  flags = EngineFlags();
  flags.engines_config = path;
  flags.defaults.drafter = "eagle";
  EXPECT_THAT(std::string(ResolveEngines(flags, &o).message()),
              HasSubstr("--drafter: unknown drafter 'eagle'"));
  flags.defaults.drafter = "";
  flags.defaults.draft_budget = "";
  EXPECT_THAT(std::string(ResolveEngines(flags, &o).message()),
              HasSubstr("--draft_budget: must be shared or extra, got ''"));
}

TEST(EnginesConfigTest, RefusesMoreThanMaxEngines) {
  std::string text = R"({"engines": [)";
  for (size_t i = 0; i <= kMaxEngines; ++i) {
    text += absl::StrCat(i ? "," : "", R"({"name": "e)", i,
                         R"(", "policy": "lru"})");
  }
  text += "]}";
  absl::StatusOr<EnginesConfig> config = ParseEnginesConfig(text, Defaults());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("engines: 17 engines, at most 16"));
}

TEST(ResolveEnginesTest, EnginesFlagKeepsThePolicyEngineFirst) {
  EngineFlags flags;
  flags.policy = "big";
  flags.policy_given = true;
  flags.engines = "small=lru@ratio=0.25,big=overlap@mb=64";
  flags.ab = "small=1,big=1";
  ServerOptions o;
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  EXPECT_THAT(o.EngineNames(), ElementsAre("big", "small"));
  EXPECT_EQ(o.engines[0].policy, "overlap");
  EXPECT_EQ(o.engines[0].expert_cache_mb, 64);
  flags.ab = "small=1,other=1";
  EXPECT_THAT(std::string(ResolveEngines(flags, &o).message()),
              HasSubstr("'other' is not an engine of --engines"));
}

// Issue 16: --engines without the --policy engine used to add that engine
// (by default "lru") as a hidden extra, default engine.
TEST(ResolveEnginesTest, EnginesFlagWithoutPolicyAddsNoHiddenEngine) {
  EngineFlags flags;  // --policy not given: "lru", policy_given false
  flags.engines = "small=overlap@ratio=0.25,big=overlap@mb=64";
  ServerOptions o;
  ASSERT_TRUE(ResolveEngines(flags, &o).ok());
  EXPECT_THAT(o.EngineNames(), ElementsAre("small", "big"));
  // Given, --policy must name one of them.
  flags.policy = "lru";
  flags.policy_given = true;
  const absl::Status st = ResolveEngines(flags, &o);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("--policy: 'lru' is not an engine of --engines"));
}

}  // namespace
}  // namespace moeserve::server
