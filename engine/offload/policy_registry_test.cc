#include "engine/offload/policy_registry.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::IsSupersetOf;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

const std::vector<std::string> kPolicies = {"lfu_static", "lru", "on_demand",
                                            "overlap"};

TEST(RegistryTest, AllFourPoliciesRegisteredAndSorted) {
  const std::vector<std::string> names = RegisteredPolicies();
  EXPECT_THAT(names, IsSupersetOf(kPolicies));
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

TEST(RegistryTest, CreatesEachByNameWithDefaults) {
  for (const std::string& name : kPolicies) {
    auto policy = CreatePolicy(name, {});
    ASSERT_TRUE(policy.ok()) << name << ": " << policy.status();
    EXPECT_EQ((*policy)->name(), name);
  }
}

TEST(RegistryTest, TestConfigsAreValidConfigs) {
  EXPECT_THAT(PolicyTestConfig("lfu_static"),
              UnorderedElementsAre(Pair("profile_steps", "2")));
  EXPECT_THAT(PolicyTestConfig("lru"), IsEmpty());
  EXPECT_THAT(PolicyTestConfig("no_such_policy"), IsEmpty());
  for (const std::string& name : RegisteredPolicies()) {
    auto policy = CreatePolicy(name, PolicyTestConfig(name));
    EXPECT_TRUE(policy.ok()) << name << ": " << policy.status();
  }
}

TEST(RegistryTest, UnknownNameIsNotFoundListingTheNames) {
  auto policy = CreatePolicy("belady", {});
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(policy.status().message(), HasSubstr("belady"));
  for (const std::string& name : kPolicies) {
    EXPECT_THAT(policy.status().message(), HasSubstr(name));
  }
}

TEST(RegistryTest, UnknownConfigKeyIsInvalidArgumentNamingTheKey) {
  for (const std::string& name : kPolicies) {
    auto policy = CreatePolicy(name, {{"no_such_key", "1"}});
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument)
        << name;
    EXPECT_THAT(policy.status().message(), HasSubstr("no_such_key"));
    EXPECT_THAT(policy.status().message(), HasSubstr(name));
  }
}

TEST(RegistryTest, MalformedValueIsInvalidArgumentNamingTheKey) {
  auto policy = CreatePolicy("overlap", {{"lookahead", "many"}});
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(policy.status().message(), HasSubstr("lookahead"));
}

TEST(RegistryTest, ParsePolicyConfig) {
  auto config = ParsePolicyConfig(" top_percent = 5,profile_steps=4 ");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(*config, UnorderedElementsAre(Pair("top_percent", "5"),
                                            Pair("profile_steps", "4")));
  auto policy = CreatePolicy("lfu_static", *config);
  EXPECT_TRUE(policy.ok()) << policy.status();

  auto with_equals = ParsePolicyConfig("profile=/a=b.json");
  ASSERT_TRUE(with_equals.ok());
  EXPECT_EQ(with_equals->at("profile"), "/a=b.json");

  auto empty = ParsePolicyConfig("");
  ASSERT_TRUE(empty.ok());
  EXPECT_THAT(*empty, IsEmpty());

  for (const char* bad : {"lookahead", "=1", "a=1,a=2", "a=1,,b=2"}) {
    EXPECT_EQ(ParsePolicyConfig(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(RegistryTest, SpeculationReadsTraitsWithoutBuildingThePolicy) {
  for (const std::string& name : kPolicies) {
    absl::StatusOr<SpeculationDefaults> s = PolicySpeculation(name, {});
    ASSERT_TRUE(s.ok()) << name << ": " << s.status();
    EXPECT_EQ(s->drafter, "none") << name;
    EXPECT_EQ(s->num_speculative_tokens, 0) << name;
  }
  absl::StatusOr<SpeculationDefaults> unknown = PolicySpeculation("belady", {});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(),
            CreatePolicy("belady", {}).status().message());
}

TEST(RegistryTest, SpeculationErrorsAreTheFactorysErrors) {
  const PolicyConfig bad = {{"num_speculative_tokens", "17"}};
  absl::StatusOr<SpeculationDefaults> s = PolicySpeculation("self_spec", bad);
  EXPECT_EQ(s.status(), CreatePolicy("self_spec", bad).status());
  const PolicyConfig empty_drafter = {{"drafter", ""}};
  for (const char* name : {"cutoff", "utility", "throughput"}) {
    EXPECT_EQ(PolicySpeculation(name, empty_drafter).status(),
              CreatePolicy(name, empty_drafter).status())
        << name;
  }
}

TEST(PolicyConfigTest, DrafterKey) {
  EXPECT_EQ(*GetDrafterConfig({}, "external"), "external");
  absl::StatusOr<SpeculationDefaults> adaptive =
      DrafterKeySpeculation({{"drafter", "int4"}}, "external");
  ASSERT_TRUE(adaptive.ok()) << adaptive.status();
  EXPECT_EQ(adaptive->drafter, "int4");
  EXPECT_EQ(adaptive->num_speculative_tokens, 0);
  EXPECT_FALSE(DrafterKeySpeculation({{"drafter", ""}}, "external").ok());
  EXPECT_EQ(*GetDrafterConfig({{"drafter", "int4"}}, "external"), "int4");
  absl::StatusOr<std::string> empty = GetDrafterConfig({{"drafter", ""}}, "x");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("'drafter'"));
}

TEST(PolicyConfigTest, ChoiceKey) {
  EXPECT_EQ(*GetChoiceConfig({}, "mode", {"a", "b"}), "a");
  EXPECT_EQ(*GetChoiceConfig({{"mode", "b"}}, "mode", {"a", "b"}), "b");
  absl::StatusOr<std::string> other =
      GetChoiceConfig({{"mode", "c"}}, "mode", {"a", "b"});
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(other.status().message(),
            "config key 'mode': expected one of a, b, got 'c'");
}

TEST(PolicyConfigTest, SpeculativeTokensDefaultAndBound) {
  absl::StatusOr<SpeculativeTokens> defaults = GetSpeculativeTokens({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->num, 4);
  EXPECT_EQ(defaults->max, 8);
  absl::StatusOr<SpeculativeTokens> small =
      GetSpeculativeTokens({{"max_speculative_tokens", "2"}});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->num, 2);  // the default k is held to the max
  EXPECT_EQ(small->max, 2);
  absl::StatusOr<SpeculativeTokens> over = GetSpeculativeTokens(
      {{"num_speculative_tokens", "5"}, {"max_speculative_tokens", "4"}});
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(over.status().message(),
              ::testing::HasSubstr("(max_speculative_tokens 4)"));
  EXPECT_FALSE(GetSpeculativeTokens({{"max_speculative_tokens", "17"}}).ok());
}

}  // namespace
}  // namespace moeserve::engine
