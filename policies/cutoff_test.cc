#include "policies/cutoff.h"

#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/internal/fake_residency_control.h"

namespace moeserve::policies {
namespace {

using engine::DraftLengthQuery;
using engine::ExpertId;
using engine::ExpertLookahead;
using testing::CreatePolicyOrFail;
using ::testing::ElementsAre;
using testing::FakeResidencyControl;
using ::testing::HasSubstr;
using testing::Id;
using ::testing::IsEmpty;
using testing::Prefix;
using testing::ToPairs;
using testing::Window;

using Batch = std::pair<std::vector<Id>, int>;  // (ids, priority)

CutoffPolicy* AsCutoff(engine::OffloadPolicy* p) {
  return static_cast<CutoffPolicy*>(p);
}

// Records the timings as the engine's governor query would carry them.
void SetTimings(engine::OffloadPolicy* policy, double draft, double link) {
  DraftLengthQuery q;
  q.max_k = 4;
  q.draft_seconds_per_position = draft;
  q.link_seconds_per_expert = link;
  EXPECT_EQ(policy->ChooseDraftLength(q), -1);  // never chooses k
}

TEST(CutoffTest, DefaultsAndSpeculationSettings) {
  auto policy = CreatePolicyOrFail<CutoffPolicy>();
  EXPECT_EQ(policy->name(), "cutoff");
  const engine::SpeculationDefaults defaults =
      engine::PolicySpeculation("cutoff", {}).value();
  EXPECT_EQ(defaults.drafter, "external");
  EXPECT_EQ(defaults.num_speculative_tokens, 0);  // adaptive
  const auto& o = AsCutoff(policy.get())->options();
  EXPECT_EQ(o.max_cutoff_layer, -1);  // all layers
  EXPECT_EQ(o.prefetch_priority, 1);
  EXPECT_EQ(AsCutoff(policy.get())->cutoff_layer(), -1);  // none yet
  auto registered =
      engine::CreatePolicy("cutoff", engine::PolicyTestConfig("cutoff"));
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(
      engine::PolicySpeculation("cutoff", engine::PolicyTestConfig("cutoff"))
          .value()
          .drafter,
      "int4");
  auto set = CreatePolicyOrFail<CutoffPolicy>(
      {{"max_cutoff_layer", "2"}, {"prefetch_priority", "-3"}});
  EXPECT_EQ(AsCutoff(set.get())->options().max_cutoff_layer, 2);
  EXPECT_EQ(AsCutoff(set.get())->options().prefetch_priority, -3);
}

TEST(CutoffTest, ConfigErrorsNameTheKey) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"max_cutoff_layer", "-1"},
           {"max_cutoff_layer", "x"},
           {"prefetch_priority", "1.5"},
           {"prefetch_priority", "100000"},
           {"drafter", ""},
           {"no_such_key", "1"}}) {
    auto policy = engine::CreatePolicy("cutoff", {{key, value}});
    ASSERT_FALSE(policy.ok()) << key << "=" << value;
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(policy.status().message(), HasSubstr(key));
  }
}

// Without timings and with room for everything: every layer, one batch per
// layer in ascending order, only the missing experts, at the priority.
TEST(CutoffTest, OneBatchPerLayerAscendingOnlyMissing) {
  FakeResidencyControl fake(/*layers=*/3, /*experts=*/8, /*k=*/2,
                            /*slots=*/16);
  auto owned = CreatePolicyOrFail<CutoffPolicy>();
  auto* policy = AsCutoff(owned.get());
  fake.set_policy(policy);
  fake.BeginStep(0);
  fake.RunLayer(1, {4});  // (1,4) resident
  fake.EndStep();
  fake.prefetches.clear();
  const Window full = {
      {{2, 0}, {4}, {7}},     // position 0
      {{0}, {4, 5}, {7, 6}},  // position 1
  };
  fake.Lookahead(Prefix(full, 1));
  EXPECT_EQ(policy->cutoff_layer(), 2);
  EXPECT_THAT(fake.prefetch_batches,
              ElementsAre(Batch{{Id{0, 0}, Id{0, 2}}, 1},  // (1,4) resident
                          Batch{{Id{2, 7}}, 1}));
  fake.prefetch_batches.clear();
  // The grown window: only what is new and missing.
  fake.Lookahead(Prefix(full, 2));
  EXPECT_EQ(policy->cutoff_layer(), 2);
  EXPECT_THAT(fake.prefetch_batches,
              ElementsAre(Batch{{Id{1, 5}}, 1}, Batch{{Id{2, 6}}, 1}));
  fake.prefetch_batches.clear();
  // Everything resident: no batch at all.
  fake.Lookahead(Prefix(full, 2));
  EXPECT_THAT(fake.prefetch_batches, IsEmpty());
  EXPECT_EQ(fake.stats().prefetch_loads, 5u);
}

TEST(CutoffTest, MaxCutoffLayerCapsTheLayers) {
  FakeResidencyControl fake(/*layers=*/4, /*experts=*/8, /*k=*/1,
                            /*slots=*/16);
  auto owned = CreatePolicyOrFail<CutoffPolicy>(
      {{"max_cutoff_layer", "1"}, {"prefetch_priority", "5"}});
  auto* policy = AsCutoff(owned.get());
  fake.set_policy(policy);
  fake.Lookahead(Prefix({{{1}, {2}, {3}, {4}}}, 1));
  EXPECT_EQ(policy->cutoff_layer(), 1);
  // L is exported for the engine's metrics.
  EXPECT_EQ(fake.gauges["moeserve_spec_cutoff_layer"], 1);
  EXPECT_THAT(fake.prefetch_batches,
              ElementsAre(Batch{{Id{0, 1}}, 5}, Batch{{Id{1, 2}}, 5}));
}

// Memory: the missing experts of layers 0..L must fit in capacity_slots
// minus the window's experts already resident.
TEST(CutoffTest, FewFreeSlotsGiveASmallCutoff) {
  const Window full = {{{0, 1}, {2, 3}, {4, 5}, {6, 7}}};
  {
    FakeResidencyControl fake(/*layers=*/4, /*experts=*/8, /*k=*/2,
                              /*slots=*/5);
    auto owned = CreatePolicyOrFail<CutoffPolicy>();
    auto* policy = AsCutoff(owned.get());
    fake.set_policy(policy);
    fake.Lookahead(Prefix(full, 1));
    EXPECT_EQ(policy->cutoff_layer(), 1);  // 4 <= 5 < 6
    EXPECT_THAT(fake.prefetch_batches,
                ElementsAre(Batch{{Id{0, 0}, Id{0, 1}}, 1},
                            Batch{{Id{1, 2}, Id{1, 3}}, 1}));
  }
  {
    FakeResidencyControl fake(/*layers=*/4, /*experts=*/8, /*k=*/2,
                              /*slots=*/3);
    auto owned = CreatePolicyOrFail<CutoffPolicy>();
    auto* policy = AsCutoff(owned.get());
    fake.set_policy(policy);
    fake.Lookahead(Prefix(full, 1));
    EXPECT_EQ(policy->cutoff_layer(), 0);
    EXPECT_THAT(fake.prefetch_batches,
                ElementsAre(Batch{{Id{0, 0}, Id{0, 1}}, 1}));
  }
  {
    // Layer 2's experts are resident (needed): 6 slots - 2 leave 4 for the
    // missing ones, layers 0 and 1; layer 2 adds nothing, layer 3 breaks.
    FakeResidencyControl fake(/*layers=*/4, /*experts=*/8, /*k=*/2,
                              /*slots=*/6);
    auto owned = CreatePolicyOrFail<CutoffPolicy>();
    auto* policy = AsCutoff(owned.get());
    fake.set_policy(policy);
    fake.BeginStep(0);
    fake.RunLayer(2, {4, 5});
    fake.EndStep();
    fake.Lookahead(Prefix(full, 1));
    EXPECT_EQ(policy->cutoff_layer(), 2);
    EXPECT_THAT(fake.prefetch_batches,
                ElementsAre(Batch{{Id{0, 0}, Id{0, 1}}, 1},
                            Batch{{Id{1, 2}, Id{1, 3}}, 1}));
  }
  {
    // One slot: not even layer 0 fits.
    FakeResidencyControl fake(/*layers=*/4, /*experts=*/8, /*k=*/2,
                              /*slots=*/1);
    auto owned = CreatePolicyOrFail<CutoffPolicy>();
    auto* policy = AsCutoff(owned.get());
    fake.set_policy(policy);
    fake.Lookahead(Prefix(full, 1));
    EXPECT_EQ(policy->cutoff_layer(), -1);
    EXPECT_THAT(fake.prefetch_batches, IsEmpty());
  }
}

// Time: N(L) * link <= draft per position * positions still to draft.
TEST(CutoffTest, SlowLinkOrShortDraftGiveASmallCutoff) {
  // 4 planned positions, 1 known: 3 positions of draft compute left.
  const Window full = {{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {}, {}, {}};
  struct Case {
    double draft, link;
    int want;
  };
  for (const Case& c : {
           Case{1.0, 0.1, 3},   // 8 x 0.1 <= 3
           Case{1.0, 0.5, 2},   // 6 x 0.5 <= 3 < 8 x 0.5
           Case{1.0, 1.0, 0},   // slow link: 2 <= 3 < 4
           Case{0.15, 0.1, 1},  // short draft: 4 x 0.1 <= 0.45 < 6 x 0.1
           Case{1.0, 2.0, -1},  // 2 x 2 > 3: nothing
       }) {
    FakeResidencyControl fake(/*layers=*/4, /*experts=*/8, /*k=*/2,
                              /*slots=*/16);
    auto owned = CreatePolicyOrFail<CutoffPolicy>();
    auto* policy = AsCutoff(owned.get());
    fake.set_policy(policy);
    SetTimings(policy, c.draft, c.link);
    EXPECT_DOUBLE_EQ(policy->draft_seconds_per_position(), c.draft);
    EXPECT_DOUBLE_EQ(policy->link_seconds_per_expert(), c.link);
    fake.Lookahead(Prefix(full, 1));
    EXPECT_EQ(policy->cutoff_layer(), c.want) << c.draft << " " << c.link;
    EXPECT_EQ(static_cast<int>(fake.prefetch_batches.size()), c.want + 1);
    for (size_t i = 0; i < fake.prefetch_batches.size(); ++i) {
      EXPECT_EQ(fake.prefetch_batches[i].first[0].first, static_cast<int>(i));
    }
  }
  {
    // The complete window has no draft compute left: nothing new goes.
    FakeResidencyControl fake(/*layers=*/4, /*experts=*/8, /*k=*/2,
                              /*slots=*/16);
    auto owned = CreatePolicyOrFail<CutoffPolicy>();
    auto* policy = AsCutoff(owned.get());
    fake.set_policy(policy);
    SetTimings(policy, 1.0, 0.1);
    fake.Lookahead(Prefix(full, 4));
    EXPECT_EQ(policy->cutoff_layer(), -1);
    EXPECT_THAT(fake.prefetch_batches, IsEmpty());
  }
  {
    // Unknown timings (0) do not overwrite measured ones.
    auto owned = CreatePolicyOrFail<CutoffPolicy>();
    auto* policy = AsCutoff(owned.get());
    SetTimings(policy, 1.0, 0.5);
    SetTimings(policy, 0, 0);
    EXPECT_DOUBLE_EQ(policy->draft_seconds_per_position(), 1.0);
    EXPECT_DOUBLE_EQ(policy->link_seconds_per_expert(), 0.5);
  }
}

TEST(CutoffTest, LruEvictionWithPredictionsAsUses) {
  FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/1,
                            /*slots=*/3);
  auto owned = CreatePolicyOrFail<CutoffPolicy>();
  auto* policy = AsCutoff(owned.get());
  fake.set_policy(policy);
  fake.BeginStep(0);
  fake.RunLayer(0, {0});
  fake.RunLayer(0, {1});
  fake.RunLayer(1, {2});
  fake.EndStep();
  // Plain LRU: the least recently accessed first.
  std::vector<ExpertId> victims;
  policy->ChooseVictims(std::vector<ExpertId>{{1, 2}, {0, 0}, {0, 1}}, 3,
                        &victims);
  EXPECT_THAT(ToPairs(victims), ElementsAre(Id{0, 0}, Id{0, 1}, Id{1, 2}));
  // A demand miss evicts the least recently used.
  fake.BeginStep(1);
  fake.RunLayer(1, {3});
  fake.EndStep();
  EXPECT_THAT(fake.victims, ElementsAre(Id{0, 0}));
  // The window predicts (0,1) (resident: now a use) and (1,4): one free slot
  // after the needed one, so the prefetch of (1,4) evicts the least recently
  // used outside the window, (1,2), not (0,1).
  fake.Lookahead(Prefix({{{1}, {4}}, {}}, 1));
  EXPECT_EQ(policy->cutoff_layer(), 1);
  EXPECT_THAT(fake.prefetch_batches, ElementsAre(Batch{{Id{1, 4}}, 1}));
  EXPECT_THAT(fake.victims, ElementsAre(Id{0, 0}, Id{1, 2}));
  EXPECT_TRUE(fake.IsResident({0, 1}));
  EXPECT_TRUE(fake.IsResident({1, 4}));
}

}  // namespace
}  // namespace moeserve::policies
