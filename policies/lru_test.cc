#include "policies/lru.h"

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

TEST(LruTest, EvictsLeastRecentlyUsedInOrder) {
  FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/1,
                            /*slots=*/3);
  auto policy = CreatePolicyOrFail<LruPolicy>();
  fake.set_policy(policy.get());
  fake.RunLayer(0, {0});
  fake.RunLayer(0, {1});
  fake.RunLayer(0, {2});
  fake.RunLayer(0, {0});  // hit; 0 is now the most recent
  EXPECT_THAT(fake.victims, IsEmpty());
  fake.RunLayer(0, {3});  // evicts 1
  fake.RunLayer(0, {4});  // evicts 2
  fake.RunLayer(0, {0});  // hit
  fake.RunLayer(1, {0});  // evicts 3
  EXPECT_THAT(fake.victims, ElementsAre(Id{0, 1}, Id{0, 2}, Id{0, 3}));
  EXPECT_EQ(fake.misses(), 6);
  EXPECT_THAT(fake.resident(), ElementsAre(Id{0, 0}, Id{0, 4}, Id{1, 0}));
  EXPECT_THAT(fake.evict_calls, IsEmpty());  // keeps experts across layers
}

TEST(LruTest, ChooseVictimsOrdersByLastAccessThenId) {
  auto policy = CreatePolicyOrFail<LruPolicy>();
  policy->OnAccess({1, 1});
  policy->OnAccess({0, 2});
  policy->OnAccess({0, 5});
  policy->OnAccess({1, 1});
  // Never accessed: (3, 0) and (0, 7) come first, by id.
  const std::vector<engine::ExpertId> candidates = {
      {1, 1}, {0, 5}, {3, 0}, {0, 2}, {0, 7}};
  std::vector<engine::ExpertId> victims;
  policy->ChooseVictims(candidates, 4, &victims);
  EXPECT_THAT(ToPairs(victims),
              ElementsAre(Id{0, 7}, Id{3, 0}, Id{0, 2}, Id{0, 5}));
  victims.clear();
  policy->ChooseVictims(candidates, 9, &victims);
  EXPECT_EQ(victims.size(), candidates.size());
  EXPECT_EQ(testing::ToPair(victims.back()), (Id{1, 1}));
}

TEST(LruTest, RejectsAnyConfigKey) {
  auto policy = LruPolicy::Create({{"capacity", "4"}});
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(policy.status().message(), ::testing::HasSubstr("capacity"));
}

}  // namespace
}  // namespace moeserve::policies
