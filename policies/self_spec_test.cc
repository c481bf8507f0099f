#include "policies/self_spec.h"

#include <algorithm>
#include <memory>
#include <set>
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

std::unique_ptr<SelfSpecPolicy> MakePolicy(
    const engine::PolicyConfig& config = {}) {
  auto policy = SelfSpecPolicy::Create(config);
  EXPECT_TRUE(policy.ok()) << policy.status();
  if (!policy.ok()) return nullptr;
  return std::unique_ptr<SelfSpecPolicy>(
      static_cast<SelfSpecPolicy*>(policy->release()));
}

// Pins never exceed capacity - max_union and are all resident.
void ExpectWithinBudget(const FakeResidencyControl& fake,
                        const SelfSpecPolicy& policy) {
  const std::set<Id> pinned = fake.pinned();
  EXPECT_LE(static_cast<int>(pinned.size()),
            std::max(fake.capacity_slots() - policy.max_union(), 0));
  EXPECT_EQ(static_cast<int>(pinned.size()), policy.total_pins());
  for (const Id& id : pinned)
    EXPECT_TRUE(fake.resident().count(id)) << id.first << "," << id.second;
}

TEST(SelfSpecTest, PinsTheHottestExpertsOfEachLayerAtStepEnd) {
  FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/2,
                            /*slots=*/12);
  auto policy = MakePolicy({{"draft_experts", "2"}});
  fake.set_policy(policy.get());
  fake.BeginStep(0);
  fake.RunLayer(0, {1, 3, 5}, nullptr, 0, {1, 4, 2});
  fake.RunLayer(1, {0, 6}, nullptr, 0, {3, 3});
  EXPECT_THAT(fake.pinned(), IsEmpty());  // only after the verification
  const int misses = fake.misses();
  fake.EndStep();
  EXPECT_EQ(fake.misses(), misses);  // pinning moved nothing
  EXPECT_THAT(fake.pin_calls,
              ElementsAre(Id{0, 3}, Id{0, 5}, Id{1, 0}, Id{1, 6}));
  EXPECT_THAT(policy->DraftExperts(0), ElementsAre(3, 5));
  EXPECT_THAT(policy->DraftExperts(1), ElementsAre(0, 6));  // tie: both
  EXPECT_THAT(policy->DraftExperts(2), IsEmpty());
  EXPECT_EQ(policy->total_pins(), 4);
  ExpectWithinBudget(fake, *policy);

  // Still the hottest next step: no Pin again, no Unpin.
  fake.BeginStep(1);
  fake.RunLayer(0, {3}, nullptr, 0, {2});
  fake.EndStep();
  EXPECT_EQ(fake.pin_calls.size(), 4u);
  EXPECT_THAT(fake.unpins, IsEmpty());
}

// The paper's mode (the default) offers the drafter only the pins; `ready`
// offers every expert, and the drafter then keeps those ready in the fast
// tier.
TEST(SelfSpecTest, DraftExpertsAreThePinsInThePapersMode) {
  for (const char* mode : {"", "pinned", "ready"}) {
    SCOPED_TRACE(mode);
    FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/2,
                              /*slots=*/12);
    engine::PolicyConfig config = {{"draft_experts", "2"}};
    if (*mode != '\0') config["draft_from"] = mode;
    auto policy = MakePolicy(config);
    fake.set_policy(policy.get());
    const bool paper = std::string(mode) != "ready";
    // Before any verification: no pins, so no draft experts at all.
    EXPECT_EQ(policy->IsDraftExpert({0, 3}), !paper);
    fake.BeginStep(0);
    fake.RunLayer(0, {1, 3, 5}, nullptr, 0, {1, 4, 2});
    fake.RunLayer(1, {0, 6}, nullptr, 0, {3, 3});
    fake.EndStep();
    ASSERT_THAT(policy->DraftExperts(0), ElementsAre(3, 5));
    for (int layer = 0; layer < 2; ++layer) {
      for (int e = 0; e < 8; ++e) {
        const std::vector<int> pins = policy->DraftExperts(layer);
        const bool pinned = std::count(pins.begin(), pins.end(), e) > 0;
        EXPECT_EQ(policy->IsDraftExpert({layer, e}), paper ? pinned : true)
            << layer << "," << e;
      }
    }
    // Expert (0, 1) is resident (cached by lru) but not pinned.
    EXPECT_TRUE(fake.resident().count(Id{0, 1}));
    EXPECT_EQ(policy->IsDraftExpert({0, 1}), !paper);
    EXPECT_FALSE(policy->IsDraftExpert({2, 0}) && paper);
  }
}

TEST(SelfSpecTest, TiesGoToTheLowerId) {
  FakeResidencyControl fake(1, 8, 2, 12);
  auto policy = MakePolicy({{"draft_experts", "2"}});
  fake.set_policy(policy.get());
  fake.BeginStep(0);
  fake.RunLayer(0, {2, 4, 6, 7}, nullptr, 0, {1, 3, 1, 1});
  fake.EndStep();
  EXPECT_THAT(policy->DraftExperts(0), ElementsAre(2, 4));
}

TEST(SelfSpecTest, PinsFollowTheLastStepWithoutDecay) {
  FakeResidencyControl fake(2, 8, 2, 12);
  auto policy = MakePolicy({{"draft_experts", "2"}, {"hotness_decay", "0"}});
  fake.set_policy(policy.get());
  fake.BeginStep(0);
  fake.RunLayer(0, {1, 3, 5}, nullptr, 0, {1, 4, 2});
  fake.EndStep();
  EXPECT_THAT(policy->DraftExperts(0), ElementsAre(3, 5));
  fake.BeginStep(1);
  fake.RunLayer(0, {1, 2}, nullptr, 0, {5, 5});
  fake.EndStep();
  EXPECT_THAT(policy->DraftExperts(0), ElementsAre(1, 2));
  EXPECT_THAT(fake.unpins, ElementsAre(Id{0, 3}, Id{0, 5}));
  EXPECT_THAT(fake.pinned(), ElementsAre(Id{0, 1}, Id{0, 2}));
  // A step without layer 0 forgets it entirely.
  fake.BeginStep(2);
  fake.RunLayer(1, {4}, nullptr, 0, {1});
  fake.EndStep();
  EXPECT_THAT(policy->DraftExperts(0), IsEmpty());
  EXPECT_THAT(policy->DraftExperts(1), ElementsAre(4));
  ExpectWithinBudget(fake, *policy);
}

TEST(SelfSpecTest, DecayedHotnessRemembersRecentSteps) {
  FakeResidencyControl fake(2, 8, 2, 12);
  auto policy = MakePolicy({{"draft_experts", "2"}});  // decay 0.5
  fake.set_policy(policy.get());
  fake.BeginStep(0);
  fake.RunLayer(0, {1, 3, 5}, nullptr, 0, {1, 4, 2});
  fake.EndStep();
  EXPECT_THAT(policy->DraftExperts(0), ElementsAre(3, 5));
  // Hotness: 1 -> 0.5 + 3 = 3.5, 3 -> 2, 5 -> 1.
  fake.BeginStep(1);
  fake.RunLayer(0, {1}, nullptr, 0, {3});
  fake.EndStep();
  EXPECT_DOUBLE_EQ(policy->Hotness({0, 1}), 3.5);
  EXPECT_DOUBLE_EQ(policy->Hotness({0, 3}), 2);
  EXPECT_THAT(policy->DraftExperts(0), ElementsAre(1, 3));
  EXPECT_THAT(fake.unpins, ElementsAre(Id{0, 5}));
  // Nothing routed in layer 0: the counts fade, the order (and pins) stay.
  fake.BeginStep(2);
  fake.RunLayer(1, {7}, nullptr, 0, {1});
  fake.EndStep();
  EXPECT_DOUBLE_EQ(policy->Hotness({0, 1}), 1.75);
  EXPECT_THAT(policy->DraftExperts(0), ElementsAre(1, 3));
  EXPECT_THAT(fake.unpins, ElementsAre(Id{0, 5}));
}

TEST(SelfSpecTest, PinBudgetLeavesRoomForTheLargestUnion) {
  // 6 slots, top-2: budget 4, 2 per layer.
  FakeResidencyControl fake(2, 8, 2, 6);
  auto policy = MakePolicy();  // N = 2 * top_k = 4
  fake.set_policy(policy.get());
  EXPECT_EQ(policy->draft_experts(), 4);
  EXPECT_EQ(policy->pin_budget(), 4);
  EXPECT_EQ(policy->pins_per_layer(), 2);
  fake.BeginStep(0);
  fake.RunLayer(0, {0, 1}, nullptr, 0, {2, 1});
  fake.RunLayer(1, {2, 3}, nullptr, 0, {1, 2});
  fake.EndStep();
  EXPECT_THAT(fake.pinned(),
              ElementsAre(Id{0, 0}, Id{0, 1}, Id{1, 2}, Id{1, 3}));
  ExpectWithinBudget(fake, *policy);

  // A union of 3: budget 3, 1 per layer; the colder pin of each layer goes
  // in OnRoute, before the demand loads (which then find their slots).
  fake.BeginStep(1);
  fake.RunLayer(0, {4, 5, 6});
  EXPECT_EQ(policy->max_union(), 3);
  EXPECT_EQ(policy->pins_per_layer(), 1);
  EXPECT_THAT(fake.unpins, ElementsAre(Id{0, 1}, Id{1, 2}));
  EXPECT_THAT(fake.pinned(), ElementsAre(Id{0, 0}, Id{1, 3}));
  EXPECT_TRUE(fake.resident().count({0, 6}));
  ExpectWithinBudget(fake, *policy);
  fake.EndStep();
  ExpectWithinBudget(fake, *policy);
  EXPECT_EQ(policy->total_pins(), 2);

  // A union of 5 in a 6-slot tier: no room for any pin.
  fake.BeginStep(2);
  fake.RunLayer(1, {0, 1, 4, 5, 6});
  EXPECT_THAT(fake.pinned(), IsEmpty());
  fake.EndStep();
  EXPECT_THAT(fake.pinned(), IsEmpty());
  EXPECT_EQ(policy->pin_budget(), 1);
  EXPECT_EQ(policy->pins_per_layer(), 0);
}

TEST(SelfSpecTest, PinsPerLayerSplitTheBudgetEvenly) {
  // 3 layers, 9 slots, top-2: budget 7 -> 2 per layer (6 pins).
  FakeResidencyControl fake(3, 8, 2, 9);
  auto policy = MakePolicy({{"draft_experts", "3"}});
  fake.set_policy(policy.get());
  EXPECT_EQ(policy->pins_per_layer(), 2);
  fake.BeginStep(0);
  for (int l = 0; l < 3; ++l) fake.RunLayer(l, {0, 1}, nullptr, 0, {1, 1});
  for (int l = 0; l < 3; ++l) fake.RunLayer(l, {2}, nullptr, 0, {1});
  fake.EndStep();
  EXPECT_EQ(fake.pinned().size(), 6u);
  ExpectWithinBudget(fake, *policy);
  // No room beside the demand loads at all.
  FakeResidencyControl tiny(2, 8, 2, 2);
  auto none = MakePolicy();
  tiny.set_policy(none.get());
  tiny.BeginStep(0);
  tiny.RunLayer(0, {0, 1}, nullptr, 0, {3, 3});
  tiny.EndStep();
  EXPECT_THAT(tiny.pin_calls, IsEmpty());
}

TEST(SelfSpecTest, NeverPinsAnExpertThatIsNotResident) {
  // 4 slots, top-1; a union of 2 leaves a budget of 2: 1 per layer.
  FakeResidencyControl fake(2, 8, 1, 4);
  auto policy = MakePolicy({{"draft_experts", "1"}});
  fake.set_policy(policy.get());
  fake.BeginStep(0);
  fake.RunLayer(0, {0, 1}, nullptr, 0, {5, 2});
  fake.RunLayer(0, {1}, nullptr, 0, {1});  // (0, 0) is now the oldest
  fake.RunLayer(1, {2, 3});
  fake.RunLayer(1, {4});  // evicts (0, 0), the hottest of layer 0
  ASSERT_FALSE(fake.resident().count({0, 0}));
  const std::set<Id> resident = fake.resident();
  const int misses = fake.misses();
  fake.EndStep();
  EXPECT_EQ(fake.misses(), misses);
  // Layer 0: (0, 0) is skipped; the next hottest resident one is pinned.
  EXPECT_THAT(fake.pin_calls, ElementsAre(Id{0, 1}, Id{1, 2}));
  for (const Id& id : fake.pin_calls) EXPECT_TRUE(resident.count(id));
  EXPECT_EQ(fake.resident(), resident);
  ExpectWithinBudget(fake, *policy);
  // Once the verification brings (0, 0) back it takes over.
  fake.BeginStep(1);
  fake.RunLayer(0, {0}, nullptr, 0, {1});
  fake.EndStep();
  EXPECT_THAT(policy->DraftExperts(0), ElementsAre(0));
  EXPECT_THAT(fake.unpins, ElementsAre(Id{0, 1}));
  ExpectWithinBudget(fake, *policy);
}

TEST(SelfSpecTest, EvictsLeastRecentlyUsedAmongTheUnpinned) {
  FakeResidencyControl fake(1, 8, 1, 4);
  auto policy = MakePolicy({{"draft_experts", "1"}});
  fake.set_policy(policy.get());
  fake.BeginStep(0);
  fake.RunLayer(0, {0}, nullptr, 0, {9});
  fake.EndStep();
  ASSERT_THAT(fake.pinned(), ElementsAre(Id{0, 0}));
  fake.BeginStep(1);
  fake.RunLayer(0, {1});
  fake.RunLayer(0, {2});
  fake.RunLayer(0, {3});
  fake.RunLayer(0, {1});  // hit; (0, 0) is the oldest but pinned
  EXPECT_THAT(fake.victims, IsEmpty());
  fake.RunLayer(0, {4});  // evicts 2
  fake.RunLayer(0, {5});  // evicts 3
  fake.RunLayer(0, {6});  // evicts 1
  EXPECT_THAT(fake.victims, ElementsAre(Id{0, 2}, Id{0, 3}, Id{0, 1}));
  EXPECT_TRUE(fake.resident().count({0, 0}));

  // ChooseVictims itself is lru's order.
  auto direct = MakePolicy();
  direct->OnAccess({1, 1});
  direct->OnAccess({0, 2});
  const std::vector<engine::ExpertId> candidates = {
      {1, 1}, {0, 2}, {3, 0}, {0, 7}};
  std::vector<engine::ExpertId> victims;
  direct->ChooseVictims(candidates, 3, &victims);
  EXPECT_THAT(ToPairs(victims), ElementsAre(Id{0, 7}, Id{3, 0}, Id{1, 1}));
}

TEST(SelfSpecTest, SettingsAndDefaults) {
  auto policy = MakePolicy();
  EXPECT_EQ(policy->name(), "self_spec");
  EXPECT_EQ(policy->num_speculative_tokens(), 4);
  EXPECT_EQ(engine::PolicySpeculation("self_spec", {}).value().drafter, "self");
  EXPECT_EQ(policy->draft_experts(), -1);  // model default, after Attach
  EXPECT_EQ(policy->pins_per_layer(), 0);
  {
    FakeResidencyControl fake(2, 8, 2, 64);
    fake.set_policy(policy.get());
    EXPECT_EQ(policy->draft_experts(), 4);  // min(8, 2 * 2)
    EXPECT_EQ(policy->pins_per_layer(), 4);
  }
  {
    auto p = MakePolicy();
    FakeResidencyControl fake(2, 3, 2, 64);
    fake.set_policy(p.get());
    EXPECT_EQ(p->draft_experts(), 3);  // no more than the experts
  }
  EXPECT_EQ(
      MakePolicy({{"num_speculative_tokens", "0"}})->num_speculative_tokens(),
      0);  // adaptive
  EXPECT_EQ(
      MakePolicy({{"num_speculative_tokens", "10"}})->num_speculative_tokens(),
      10);
  EXPECT_EQ(
      engine::PolicySpeculation("self_spec", {}).value().num_speculative_tokens,
      4);
  EXPECT_EQ(
      engine::PolicySpeculation("self_spec", {{"num_speculative_tokens", "10"}})
          .value()
          .num_speculative_tokens,
      10);
  {
    auto p = MakePolicy({{"draft_experts", "0"}});
    FakeResidencyControl fake(1, 8, 2, 64);
    fake.set_policy(p.get());
    fake.BeginStep(0);
    fake.RunLayer(0, {0, 1});
    fake.EndStep();
    EXPECT_THAT(fake.pin_calls, IsEmpty());  // plain LRU
  }
  // The registered test config is accepted.
  auto registered =
      engine::CreatePolicy("self_spec", engine::PolicyTestConfig("self_spec"));
  EXPECT_TRUE(registered.ok()) << registered.status();
  EXPECT_FALSE(engine::PolicyTestConfig("self_spec").empty());
}

TEST(SelfSpecTest, ConfigErrorsNameTheKey) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"draft_experts", "-1"},
           {"draft_experts", "four"},
           {"num_speculative_tokens", "65"},
           {"num_speculative_tokens", "-1"},
           {"num_speculative_tokens", "2.5"},
           {"hotness_decay", "1"},
           {"hotness_decay", "-0.1"},
           {"hotness_decay", "nan"},
           {"lookahead", "2"},
           {"draft_from", "cached"},
           {"draft_from", ""},
       }) {
    auto policy = SelfSpecPolicy::Create({{key, value}});
    ASSERT_FALSE(policy.ok()) << key << "=" << value;
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(policy.status().message(), HasSubstr(key));
  }
  auto via_registry =
      engine::CreatePolicy("self_spec", {{"draft_experts", "x"}});
  EXPECT_THAT(via_registry.status().message(),
              HasSubstr("policy 'self_spec': config key 'draft_experts'"));
}

TEST(SelfSpecTest, IgnoresStepStatsOfAnotherShape) {
  FakeResidencyControl fake(2, 8, 2, 12);
  auto policy = MakePolicy();
  fake.set_policy(policy.get());
  const std::vector<uint32_t> act(3 * 8, 1);
  policy->OnStepEnd(
      {.step = 0, .num_layers = 3, .num_experts = 8, .activations = act});
  EXPECT_THAT(fake.pin_calls, IsEmpty());
  EXPECT_EQ(policy->Hotness({0, 0}), 0);
}

}  // namespace
}  // namespace moeserve::policies
