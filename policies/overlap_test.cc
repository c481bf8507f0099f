#include "policies/overlap.h"

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

// Router input of 2 rows; only its address and n matter to the fake.
const float kHidden[2 * 4] = {};

TEST(OverlapTest, PrefetchesExactlyThePredictedExpertsOfTheNextLayer) {
  FakeResidencyControl fake(/*layers=*/4, /*experts=*/8, /*k=*/2,
                            /*slots=*/8);
  auto policy = CreatePolicyOrFail<OverlapPolicy>();
  fake.set_policy(policy.get());
  fake.set_prediction(2, {3, 6});
  fake.set_prediction(3, {1});

  fake.RunLayer(1, {0, 5}, kHidden, 2);

  ASSERT_EQ(fake.predict_calls.size(), 1u);
  EXPECT_EQ(fake.predict_calls[0].layer, 2);
  EXPECT_EQ(fake.predict_calls[0].hidden, kHidden);
  EXPECT_EQ(fake.predict_calls[0].n, 2);
  EXPECT_EQ(fake.predict_calls[0].k, 2);
  EXPECT_THAT(fake.prefetches, ElementsAre(Id{2, 3}, Id{2, 6}));
  EXPECT_TRUE(fake.IsResident({2, 3}));
  EXPECT_TRUE(fake.IsResident({2, 6}));
  EXPECT_THAT(fake.evict_calls, IsEmpty());

  fake.RunLayer(2, {3, 6}, kHidden, 2);  // both hit
  EXPECT_EQ(fake.misses(), 2);           // only layer 1's two
}

TEST(OverlapTest, NothingForTheLastLayer) {
  FakeResidencyControl fake(4, 8, 2, 8);
  auto policy = CreatePolicyOrFail<OverlapPolicy>();
  fake.set_policy(policy.get());
  fake.set_prediction(3, {1});
  fake.set_prediction(4, {1});
  fake.RunLayer(3, {0, 5}, kHidden, 2);
  EXPECT_THAT(fake.predict_calls, IsEmpty());
  EXPECT_THAT(fake.prefetches, IsEmpty());
}

TEST(OverlapTest, LookaheadTwoAlsoPredictsTheLayerAfterWithTheSameHidden) {
  FakeResidencyControl fake(4, 8, 2, 8);
  auto policy = CreatePolicyOrFail<OverlapPolicy>({{"lookahead", "2"}});
  fake.set_policy(policy.get());
  fake.set_prediction(2, {3, 6});
  fake.set_prediction(3, {1});
  fake.RunLayer(1, {0}, kHidden, 2);
  ASSERT_EQ(fake.predict_calls.size(), 2u);
  EXPECT_EQ(fake.predict_calls[0].layer, 2);
  EXPECT_EQ(fake.predict_calls[1].layer, 3);
  EXPECT_EQ(fake.predict_calls[1].hidden, kHidden);
  EXPECT_THAT(fake.prefetches, ElementsAre(Id{2, 3}, Id{2, 6}, Id{3, 1}));

  fake.prefetches.clear();
  fake.predict_calls.clear();
  fake.RunLayer(2, {3}, kHidden, 2);  // only layer 3 is left
  ASSERT_EQ(fake.predict_calls.size(), 1u);
  EXPECT_EQ(fake.predict_calls[0].layer, 3);
  EXPECT_THAT(fake.prefetches, ElementsAre(Id{3, 1}));
}

TEST(OverlapTest, LruReplacementNeverEvictsTheLayerAboutToRun) {
  FakeResidencyControl fake(/*layers=*/3, /*experts=*/4, /*k=*/2,
                            /*slots=*/3);
  auto policy = CreatePolicyOrFail<OverlapPolicy>();
  fake.set_policy(policy.get());
  fake.RunLayer(1, {1});  // (1,1) resident, long ago
  fake.set_prediction(1, {2});
  fake.RunLayer(0, {0}, kHidden, 1);  // prefetches (1,2); 3 slots full
  EXPECT_THAT(fake.victims, IsEmpty());
  fake.set_prediction(2, {3});
  // Prefetching (2,3) needs a slot: (1,1) is the least recently accessed,
  // but layer 1 is about to acquire it, so (0,0) goes.
  fake.RunLayer(1, {1, 2}, kHidden, 1);
  EXPECT_THAT(fake.victims, ElementsAre(Id{0, 0}));
  EXPECT_EQ(fake.misses(), 2);  // (1,1) and (0,0) on first use only
  EXPECT_THAT(fake.resident(), ElementsAre(Id{1, 1}, Id{1, 2}, Id{2, 3}));
}

TEST(OverlapTest, ChooseVictimsIsLru) {
  auto policy = CreatePolicyOrFail<OverlapPolicy>();
  policy->OnAccess({0, 3});
  policy->OnAccess({0, 1});
  std::vector<engine::ExpertId> victims;
  const std::vector<engine::ExpertId> candidates = {{0, 1}, {0, 3}, {1, 0}};
  policy->ChooseVictims(candidates, 3, &victims);
  EXPECT_THAT(ToPairs(victims), ElementsAre(Id{1, 0}, Id{0, 3}, Id{0, 1}));
}

TEST(OverlapTest, RejectsBadConfig) {
  for (const char* value : {"0", "3", "x", ""}) {
    auto policy = OverlapPolicy::Create({{"lookahead", value}});
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument)
        << value;
    EXPECT_THAT(policy.status().message(), ::testing::HasSubstr("lookahead"));
  }
  auto policy = OverlapPolicy::Create({{"look_ahead", "1"}});
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(policy.status().message(), ::testing::HasSubstr("look_ahead"));
}

}  // namespace
}  // namespace moeserve::policies
