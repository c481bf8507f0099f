#include "policies/lfu_static.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/internal/fake_residency_control.h"

namespace moeserve::policies {
namespace {

using ::testing::ElementsAre;
using testing::FakeResidencyControl;
using ::testing::HasSubstr;
using testing::Id;
using ::testing::IsEmpty;
using testing::ToPairs;

constexpr int kLayers = 4;
constexpr int kExperts = 8;  // 32 experts in all

std::unique_ptr<LfuStaticPolicy> MakePolicy(
    const engine::PolicyConfig& config) {
  auto policy = LfuStaticPolicy::Create(config);
  EXPECT_TRUE(policy.ok()) << policy.status();
  if (!policy.ok()) return nullptr;
  return std::unique_ptr<LfuStaticPolicy>(
      static_cast<LfuStaticPolicy*>(policy->release()));
}

// Runs OnStepBegin/OnStepEnd for one step with the given activations.
void Step(engine::OffloadPolicy* policy, int64_t step,
          const std::vector<std::pair<Id, uint32_t>>& hits) {
  std::vector<uint32_t> act(kLayers * kExperts, 0);
  for (const auto& [id, count] : hits)
    act[id.first * kExperts + id.second] = count;
  policy->OnStepBegin({.step = step});
  policy->OnStepEnd({.step = step,
                     .num_layers = kLayers,
                     .num_experts = kExperts,
                     .activations = act});
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(LfuStaticTest, PinsTopPercentAfterProfileSteps) {
  FakeResidencyControl fake(kLayers, kExperts, /*k=*/2, /*slots=*/8);
  auto policy = MakePolicy({{"profile_steps", "2"}});  // 10% of 32 -> 3
  fake.set_policy(policy.get());

  Step(policy.get(), 0, {{{0, 1}, 3}, {{2, 7}, 5}, {{3, 3}, 4}, {{1, 0}, 1}});
  EXPECT_THAT(fake.pin_calls, IsEmpty());
  // Totals: (0,1)=5, (2,7)=5, (3,3)=4, (1,0)=4: ties go to the lower id.
  Step(policy.get(), 1, {{{0, 1}, 2}, {{1, 0}, 3}});
  EXPECT_THAT(fake.pin_calls, ElementsAre(Id{0, 1}, Id{2, 7}, Id{1, 0}));
  EXPECT_THAT(fake.pinned(), ElementsAre(Id{0, 1}, Id{1, 0}, Id{2, 7}));
  EXPECT_THAT(ToPairs(policy->pinned()),
              ElementsAre(Id{0, 1}, Id{2, 7}, Id{1, 0}));

  // Static: later steps change nothing.
  Step(policy.get(), 2, {{{3, 3}, 100}});
  Step(policy.get(), 3, {{{3, 3}, 100}});
  EXPECT_EQ(fake.pin_calls.size(), 3u);
  EXPECT_THAT(fake.unpins, IsEmpty());
}

TEST(LfuStaticTest, OnDemandWhileProfilingAndForNonPinnedAfter) {
  FakeResidencyControl fake(kLayers, kExperts, 2, 8);
  auto policy = MakePolicy({{"profile_steps", "1"}});
  fake.set_policy(policy.get());
  fake.RunLayer(0, {1, 4});  // profiling: both evicted after the layer
  EXPECT_THAT(fake.evict_calls, ElementsAre(Id{0, 1}, Id{0, 4}));
  EXPECT_THAT(fake.resident(), IsEmpty());

  Step(policy.get(), 0, {{{0, 1}, 9}, {{0, 2}, 1}, {{1, 5}, 3}});
  ASSERT_THAT(fake.pinned(), ElementsAre(Id{0, 1}, Id{0, 2}, Id{1, 5}));
  fake.evict_calls.clear();
  fake.RunLayer(0, {1, 4});
  EXPECT_THAT(fake.evict_calls, ElementsAre(Id{0, 4}));  // not the pinned
  EXPECT_THAT(fake.resident(), ElementsAre(Id{0, 1}, Id{0, 2}, Id{1, 5}));
  fake.RunLayer(1, {5});
  EXPECT_THAT(fake.evict_calls, ElementsAre(Id{0, 4}));
}

TEST(LfuStaticTest, PinBudget) {
  struct Case {
    std::string top_percent;
    int slots;
    int k;
    size_t pins;
  };
  for (const Case& c : std::vector<Case>{
           {"10", 8, 2, 3},     // floor(3.2)
           {"50", 8, 2, 6},     // 16, capped at slots - k
           {"1", 8, 2, 1},      // floor(0.32) = 0, at least 1
           {"0", 8, 2, 0},      // none
           {"100", 2, 2, 0},    // no room beside the demand loads
           {"12.5", 40, 2, 4},  // exactly 4
       }) {
    FakeResidencyControl fake(kLayers, kExperts, c.k, c.slots);
    auto policy =
        MakePolicy({{"top_percent", c.top_percent}, {"profile_steps", "1"}});
    fake.set_policy(policy.get());
    Step(policy.get(), 0, {});
    EXPECT_EQ(fake.pin_calls.size(), c.pins) << c.top_percent;
    EXPECT_EQ(fake.pinned().size(), c.pins) << c.top_percent;
  }
}

TEST(LfuStaticTest, PinsFromAProfileFileAtTheFirstStep) {
  ExpertProfile profile = ExpertProfile::Zeros(kLayers, kExperts);
  profile.counts[3 * kExperts + 6] = 7;
  profile.counts[0 * kExperts + 2] = 9;
  profile.counts[1 * kExperts + 1] = 7;
  profile.counts[2 * kExperts + 0] = 1;
  const std::string path = TempPath("profile.json");
  ASSERT_TRUE(WriteProfile(path, profile).ok());

  FakeResidencyControl fake(kLayers, kExperts, 2, 8);
  auto policy = MakePolicy({{"profile", path}});
  fake.set_policy(policy.get());
  EXPECT_THAT(fake.pin_calls, IsEmpty());
  Step(policy.get(), 0, {{{2, 2}, 50}});  // ignored: the file decides
  EXPECT_THAT(fake.pin_calls, ElementsAre(Id{0, 2}, Id{1, 1}, Id{3, 6}));
  Step(policy.get(), 1, {});
  EXPECT_EQ(fake.pin_calls.size(), 3u);
}

TEST(LfuStaticTest, ProfileOfAnotherShapeFallsBackToProfiling) {
  const std::string path = TempPath("small_profile.json");
  ASSERT_TRUE(WriteProfile(path, ExpertProfile::Zeros(2, 2)).ok());
  FakeResidencyControl fake(kLayers, kExperts, 2, 8);
  auto policy = MakePolicy({{"profile", path}, {"profile_steps", "1"}});
  fake.set_policy(policy.get());
  Step(policy.get(), 0, {{{2, 2}, 50}});
  EXPECT_THAT(fake.pin_calls, ElementsAre(Id{2, 2}, Id{0, 0}, Id{0, 1}));
}

TEST(LfuStaticTest, ProfileRoundTripAndErrors) {
  ExpertProfile profile = ExpertProfile::Zeros(2, 3);
  profile.counts = {1, 2, 3, 4, 5, 6};
  const std::string path = TempPath("round_trip.json");
  ASSERT_TRUE(WriteProfile(path, profile).ok());
  auto read = ReadProfile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->num_layers, 2);
  EXPECT_EQ(read->num_experts, 3);
  EXPECT_THAT(read->counts, ElementsAre(1, 2, 3, 4, 5, 6));

  const std::string bad = TempPath("bad.json");
  std::ofstream(bad)
      << R"({"num_layers":2,"num_experts":2,"counts":[[1,2],[3]]})";
  EXPECT_EQ(ReadProfile(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::ofstream(bad) << "not json";
  EXPECT_EQ(ReadProfile(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto missing = LfuStaticPolicy::Create({{"profile", TempPath("nope.json")}});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("profile"));
}

TEST(LfuStaticTest, RejectsBadConfig) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"top_percent", "ten"},
           {"top_percent", "101"},
           {"top_percent", "-1"},
           {"profile_steps", "0"},
           {"profile_steps", "1.5"},
           {"profile", ""},
           {"top_n", "3"}}) {
    auto policy = LfuStaticPolicy::Create({{key, value}});
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument)
        << key << "=" << value;
    EXPECT_THAT(policy.status().message(), HasSubstr(key));
  }
}

TEST(LfuStaticTest, VictimsLowestCountFirst) {
  FakeResidencyControl fake(kLayers, kExperts, 2, 8);
  auto policy = MakePolicy({{"profile_steps", "5"}});
  fake.set_policy(policy.get());
  Step(policy.get(), 0, {{{0, 0}, 5}, {{0, 1}, 2}, {{1, 3}, 9}});
  std::vector<engine::ExpertId> victims;
  policy->ChooseVictims(
      std::vector<engine::ExpertId>{{1, 3}, {0, 0}, {0, 1}, {2, 2}}, 4,
      &victims);
  EXPECT_THAT(ToPairs(victims),
              ElementsAre(Id{2, 2}, Id{0, 1}, Id{0, 0}, Id{1, 3}));
}

}  // namespace
}  // namespace moeserve::policies
