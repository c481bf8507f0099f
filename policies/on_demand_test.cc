#include "policies/on_demand.h"

#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/internal/fake_residency_control.h"

namespace moeserve::policies {
namespace {

using testing::CreatePolicyOrFail;
using ::testing::ElementsAre;
using testing::FakeResidencyControl;
using testing::Id;
using ::testing::IsEmpty;
using testing::ToPairs;

TEST(OnDemandTest, EvictsEveryResidentExpertOfTheLayerAfterIt) {
  FakeResidencyControl fake(/*layers=*/4, /*experts=*/8, /*k=*/2,
                            /*slots=*/6);
  auto policy = CreatePolicyOrFail<OnDemandPolicy>();
  fake.set_policy(policy.get());
  // Another layer's expert, resident before: must survive layer 1.
  ASSERT_TRUE(fake.Prefetch({0, 5}));

  fake.RunLayer(1, {2, 5});

  EXPECT_THAT(fake.evict_calls, ElementsAre(Id{1, 2}, Id{1, 5}));
  EXPECT_THAT(fake.resident(), ElementsAre(Id{0, 5}));
  EXPECT_THAT(fake.pin_calls, IsEmpty());
  EXPECT_THAT(fake.prefetches, ElementsAre(Id{0, 5}));  // only the test's
}

TEST(OnDemandTest, KeepsNothingSoEveryRunMisses) {
  FakeResidencyControl fake(2, 4, 2, 4);
  auto policy = CreatePolicyOrFail<OnDemandPolicy>();
  fake.set_policy(policy.get());
  for (int step = 0; step < 3; ++step) {
    fake.RunLayer(0, {1, 3});
    fake.RunLayer(1, {0, 1});
  }
  EXPECT_EQ(fake.misses(), 12);
  EXPECT_THAT(fake.resident(), IsEmpty());
}

TEST(OnDemandTest, VictimsLowestIdFirst) {
  auto policy = CreatePolicyOrFail<OnDemandPolicy>();
  const std::vector<engine::ExpertId> candidates = {
      {2, 1}, {0, 3}, {0, 1}, {1, 0}};
  std::vector<engine::ExpertId> victims;
  policy->ChooseVictims(candidates, 2, &victims);
  EXPECT_THAT(ToPairs(victims), ElementsAre(Id{0, 1}, Id{0, 3}));
  victims.clear();
  policy->ChooseVictims(candidates, 10, &victims);
  EXPECT_THAT(ToPairs(victims),
              ElementsAre(Id{0, 1}, Id{0, 3}, Id{1, 0}, Id{2, 1}));
  victims.clear();
  policy->ChooseVictims(candidates, 0, &victims);
  EXPECT_THAT(victims, IsEmpty());
}

TEST(OnDemandTest, RejectsAnyConfigKey) {
  auto policy = OnDemandPolicy::Create({{"lookahead", "1"}});
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(policy.status().message(), ::testing::HasSubstr("lookahead"));
}

}  // namespace
}  // namespace moeserve::policies
