#include "policies/utility.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/internal/fake_residency_control.h"

namespace moeserve::policies {
namespace {

using engine::ExpertId;
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
using Estimate = UtilityPolicy::Estimate;
using TauProblem = UtilityPolicy::TauProblem;

UtilityPolicy* AsUtility(engine::OffloadPolicy* p) {
  return static_cast<UtilityPolicy*>(p);
}

TEST(UtilityTest, DefaultsAndSpeculationSettings) {
  auto policy = CreatePolicyOrFail<UtilityPolicy>();
  EXPECT_EQ(policy->name(), "utility");
  const engine::SpeculationDefaults defaults =
      engine::PolicySpeculation("utility", {}).value();
  EXPECT_EQ(defaults.drafter, "external");
  EXPECT_EQ(defaults.num_speculative_tokens, 8);  // the seed's gamma
  EXPECT_EQ(policy->ChooseDraftLength({.max_k = 4}), -1);
  const auto& o = AsUtility(policy.get())->options();
  EXPECT_EQ(o.gamma, 8);
  EXPECT_EQ(o.max_utility, 4);
  EXPECT_DOUBLE_EQ(o.forgetting_factor, 0.1);
  EXPECT_EQ(o.initial_tau, 1);
  auto registered =
      engine::CreatePolicy("utility", engine::PolicyTestConfig("utility"));
  ASSERT_TRUE(registered.ok()) << registered.status();
  const engine::SpeculationDefaults tested =
      engine::PolicySpeculation("utility", engine::PolicyTestConfig("utility"))
          .value();
  EXPECT_EQ(tested.drafter, "int4");
  EXPECT_EQ(tested.num_speculative_tokens, 2);
  // K defaults to gamma when gamma < 4.
  auto small = CreatePolicyOrFail<UtilityPolicy>({{"gamma", "3"}});
  EXPECT_EQ(AsUtility(small.get())->options().max_utility, 3);
  const engine::PolicyConfig set_config = {{"max_utility", "6"},
                                           {"forgetting_factor", "0.5"},
                                           {"initial_tau", "2"},
                                           {"drafter", "self"}};
  auto set = CreatePolicyOrFail<UtilityPolicy>(set_config);
  EXPECT_EQ(AsUtility(set.get())->options().max_utility, 6);
  EXPECT_DOUBLE_EQ(AsUtility(set.get())->options().forgetting_factor, 0.5);
  EXPECT_EQ(AsUtility(set.get())->options().initial_tau, 2);
  EXPECT_EQ(engine::PolicySpeculation("utility", set_config).value().drafter,
            "self");
}

TEST(UtilityTest, ConfigErrorsNameTheKey) {
  const std::vector<std::pair<engine::PolicyConfig, std::string>> cases = {
      {{{"gamma", "0"}}, "gamma"},
      {{{"gamma", "17"}}, "gamma"},
      {{{"gamma", "x"}}, "gamma"},
      {{{"max_utility", "0"}}, "max_utility"},
      {{{"gamma", "2"}, {"max_utility", "3"}}, "max_utility"},  // K <= gamma
      {{{"forgetting_factor", "0"}}, "forgetting_factor"},
      {{{"forgetting_factor", "1.5"}}, "forgetting_factor"},
      {{{"forgetting_factor", "nan"}}, "forgetting_factor"},
      {{{"initial_tau", "0"}}, "initial_tau"},
      {{{"max_utility", "2"}, {"initial_tau", "3"}}, "initial_tau"},
      {{{"drafter", ""}}, "drafter"},
      {{{"no_such_key", "1"}}, "no_such_key"},
  };
  for (const auto& [config, key] : cases) {
    auto policy = engine::CreatePolicy("utility", config);
    ASSERT_FALSE(policy.ok()) << key;
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(policy.status().message(), HasSubstr(key));
  }
}

// Alg. 1 by hand: K = 4, lambda = 0.1, boundaries from gamma = 8.
TEST(UtilityTest, InertialTransitionsOneLevelAtATimeWithAdaptiveBoundaries) {
  Estimate e{.level = 0, .up = 4, .down = 4, .last_frequency = 0};
  auto observe = [&e](int f) { UtilityPolicy::Observe(&e, f, 4, 0.1); };
  observe(3);  // Delta 3 < up 4: no move; up = floor(3.6 + 0.3) = 3
  EXPECT_EQ(e.level, 0);
  EXPECT_EQ(e.up, 3);
  EXPECT_EQ(e.down, 4);
  observe(6);  // Delta 3 >= up 3 (adapted): +1; up = floor(2.7 + 0.3) = 3
  EXPECT_EQ(e.level, 1);
  EXPECT_EQ(e.up, 3);
  observe(9);  // +1 again
  EXPECT_EQ(e.level, 2);
  observe(9);  // Delta 0: unchanged, boundaries too
  EXPECT_EQ(e.level, 2);
  EXPECT_EQ(e.up, 3);
  EXPECT_EQ(e.down, 4);
  observe(0);  // -Delta 9 >= down 4: ONE level down; down = floor(4.5) = 4
  EXPECT_EQ(e.level, 1);
  EXPECT_EQ(e.down, 4);
  observe(9);  // a jump of 9 is still one level; up = floor(2.7 + 0.9) = 3
  EXPECT_EQ(e.level, 2);
  EXPECT_EQ(e.up, 3);
  observe(8);  // -Delta 1 < down 4: inertia; down = floor(3.6 + 0.1) = 3
  EXPECT_EQ(e.level, 2);
  EXPECT_EQ(e.down, 3);
  EXPECT_EQ(e.last_frequency, 8);

  // Clamped to [0, K].
  Estimate top{.level = 1, .up = 1, .down = 1, .last_frequency = 0};
  UtilityPolicy::Observe(&top, 9, /*max_utility=*/1, 0.1);
  EXPECT_EQ(top.level, 1);
  Estimate bottom{.level = 0, .up = 1, .down = 1, .last_frequency = 9};
  UtilityPolicy::Observe(&bottom, 0, /*max_utility=*/1, 0.1);
  EXPECT_EQ(bottom.level, 0);
  // NextLevel is the transition without the state change.
  Estimate probe{.level = 2, .up = 4, .down = 4, .last_frequency = 5};
  EXPECT_EQ(UtilityPolicy::NextLevel(probe, 9, 4), 3);
  EXPECT_EQ(UtilityPolicy::NextLevel(probe, 1, 4), 1);
  EXPECT_EQ(UtilityPolicy::NextLevel(probe, 7, 4), 2);
  EXPECT_EQ(probe.level, 2);
}

// The step's counts, normalised to gamma + 1 = 9 tokens, feed Alg. 1 at
// OnStepEnd.
TEST(UtilityTest, RoutingFeedsTheEstimatorNormalisedToTheWindow) {
  FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/2,
                            /*slots=*/8);
  auto owned = CreatePolicyOrFail<UtilityPolicy>();
  UtilityPolicy* policy = AsUtility(owned.get());
  fake.set_policy(policy);
  fake.BeginStep(0);
  fake.RunLayer(0, {1, 2});  // 1 token (2 counts / top-2): f = 9 each
  fake.RunLayer(1, {3, 4}, nullptr, /*n=*/4, {1, 3});  // f = 2.25, 6.75
  EXPECT_EQ(policy->utility({0, 1}), 0);               // committed at OnStepEnd
  fake.EndStep();
  EXPECT_EQ(policy->estimate({0, 1}).last_frequency, 9);
  EXPECT_EQ(policy->utility({0, 1}), 1);
  EXPECT_EQ(policy->utility({0, 2}), 1);
  EXPECT_EQ(policy->estimate({1, 3}).last_frequency, 2);
  EXPECT_EQ(policy->utility({1, 3}), 0);      // 2 < up 4
  EXPECT_EQ(policy->estimate({1, 3}).up, 3);  // floor(3.6 + 0.2)
  EXPECT_EQ(policy->estimate({1, 4}).last_frequency, 7);
  EXPECT_EQ(policy->utility({1, 4}), 1);
  EXPECT_EQ(policy->utility({0, 0}), 0);
  // Not routed next step: f = 0, -Delta 9 >= down 4.
  fake.BeginStep(1);
  fake.RunLayer(0, {5, 6});
  fake.RunLayer(1, {3, 4}, nullptr, 4, {1, 3});
  fake.EndStep();
  EXPECT_EQ(policy->utility({0, 1}), 0);
  EXPECT_EQ(policy->utility({0, 5}), 1);
  EXPECT_EQ(policy->utility({1, 4}), 1);  // Delta 0
}

// Costs not measured: tau = initial_tau = 1. Level-0 experts are computed in
// place, hot ones move (prefetched, or demand-loaded when not resident).
TEST(UtilityTest, ColdExpertsComputedInPlaceWarmOnesLoaded) {
  FakeResidencyControl fake(/*layers=*/1, /*experts=*/8, /*k=*/2,
                            /*slots=*/1);
  auto owned = CreatePolicyOrFail<UtilityPolicy>();
  UtilityPolicy* policy = AsUtility(owned.get());
  fake.set_policy(policy);
  fake.BeginStep(0);
  fake.RunLayer(0, {1, 2});
  EXPECT_THAT(fake.inplace_calls, ElementsAre(Id{0, 1}, Id{0, 2}));
  EXPECT_EQ(fake.stats().inplace, 2u);
  EXPECT_EQ(fake.misses(), 0);
  EXPECT_THAT(fake.resident(), IsEmpty());
  fake.EndStep();
  EXPECT_EQ(policy->tau(0), 1);
  EXPECT_DOUBLE_EQ(fake.gauges["moeserve_utility_cold_share"], 1.0);
  EXPECT_DOUBLE_EQ(fake.gauges["moeserve_utility_mean_tau"], 1.0);
  EXPECT_THAT(fake.prefetch_batches, IsEmpty());  // never at step end
  // No lookahead: the plan runs at OnStepBegin. Both are at level 1; one
  // slot: only the first (the second would displace an equal one).
  fake.BeginStep(1);
  EXPECT_THAT(fake.prefetch_batches, ElementsAre(Batch{{{0, 1}}, 1}));
  fake.RunLayer(0, {2, 5});  // (0,2) hot, not resident: demand; (0,5) cold
  EXPECT_THAT(fake.inplace_calls, ElementsAre(Id{0, 1}, Id{0, 2}, Id{0, 5}));
  EXPECT_EQ(fake.misses(), 1);
  EXPECT_EQ(fake.stats().inplace, 3u);
  EXPECT_THAT(fake.victims, ElementsAre(Id{0, 1}));
  fake.EndStep();
  EXPECT_DOUBLE_EQ(fake.gauges["moeserve_utility_cold_share"], 0.5);
  // (0,5) rose to 1 but (0,2), resident, is as hot: no prefetch.
  fake.BeginStep(2);
  EXPECT_EQ(fake.prefetch_batches.size(), 1u);
  EXPECT_THAT(fake.resident(), ElementsAre(Id{0, 2}));
}

// Costs measured: tau from the optimisation. Three experts at level 1 do
// not fit one slot, so tau = 2 and level-1 experts stay in place.
TEST(UtilityTest, BalancedTauFromMeasuredCostsAndMemory) {
  FakeResidencyControl fake(/*layers=*/1, /*experts=*/8, /*k=*/2,
                            /*slots=*/1);
  fake.set_expert_costs({.link_seconds = 1,
                         .fast_compute_seconds = 1,
                         .inplace_compute_seconds = 1});
  auto owned = CreatePolicyOrFail<UtilityPolicy>();
  UtilityPolicy* policy = AsUtility(owned.get());
  fake.set_policy(policy);
  fake.BeginStep(0);
  fake.RunLayer(0, {1, 2, 3});  // 2 tokens: f = round(4.5) = 5 each
  fake.EndStep();
  ASSERT_EQ(policy->utility({0, 1}), 1);
  // tau = 1: 3 hot > 1 slot. tau = 2..4: objective |3 * 1 - 0| = 3 each:
  // the smallest.
  EXPECT_EQ(policy->tau(0), 2);
  EXPECT_DOUBLE_EQ(fake.gauges["moeserve_utility_mean_tau"], 2.0);
  fake.BeginStep(1);
  EXPECT_THAT(fake.prefetch_batches, IsEmpty());  // nothing at level >= 2
  fake.RunLayer(0, {1, 4});  // level 1 < tau 2, level 0: both in place
  EXPECT_EQ(fake.inplace_calls.size(), 5u);
  EXPECT_EQ(fake.misses(), 0);
  fake.EndStep();
}

// A control that refuses ComputeInPlace (a device fast tier): asked once,
// then never again; tau only bounds prefetch (smallest tau that fits).
TEST(UtilityTest, RefusedInPlaceFallsBackToMovingEverything) {
  FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/2,
                            /*slots=*/3);
  fake.set_compute_in_place(false);
  auto owned = CreatePolicyOrFail<UtilityPolicy>();
  UtilityPolicy* policy = AsUtility(owned.get());
  fake.set_policy(policy);
  fake.BeginStep(0);
  fake.RunLayer(0, {1, 2});
  fake.RunLayer(1, {3, 4});  // (1,4) evicts (0,1), least recently used
  fake.EndStep();
  EXPECT_FALSE(policy->inplace_available());
  EXPECT_THAT(fake.inplace_calls, ElementsAre(Id{0, 1}));
  EXPECT_EQ(fake.misses(), 4);
  EXPECT_THAT(fake.victims, ElementsAre(Id{0, 1}));
  // All four at level 1. Layer 0: 3 slots - layer 1's 2 resident hot = 1 <
  // its 2 hot experts at tau 1, so tau = 2. Layer 1: 3 - 1 = 2: tau = 1.
  EXPECT_EQ(policy->tau(0), 2);
  EXPECT_EQ(policy->tau(1), 1);
  EXPECT_DOUBLE_EQ(fake.gauges["moeserve_utility_cold_share"], 0.0);
}

// A complete lookahead moves each covered expert's view one level by the
// draft's forecast; prefetch goes by level, then layer, within the slots;
// victims are the coldest, least recently used first. OnStepEnd commits
// the real routing and drops the forecast.
TEST(UtilityTest, LookaheadForecastPrefetchesByUtilityAndEvictsColdest) {
  FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/2,
                            /*slots=*/2);
  auto owned = CreatePolicyOrFail<UtilityPolicy>();
  UtilityPolicy* policy = AsUtility(owned.get());
  fake.set_policy(policy);
  fake.BeginStep(0);
  fake.RunLayer(0, {1, 2}, nullptr, /*n=*/2, {1, 1});  // f = 5, 5
  fake.RunLayer(1, {3, 4}, nullptr, /*n=*/2, {1, 2});  // f = 5, 9
  fake.EndStep();
  EXPECT_EQ(fake.inplace_calls.size(), 4u);
  // No lookahead: at OnStepBegin, all four at level 1, two slots: the first
  // two in layer order. Only layer 0 runs (layer 1's estimates stay).
  fake.BeginStep(1);
  EXPECT_THAT(fake.prefetch_batches, ElementsAre(Batch{{{0, 1}, {0, 2}}, 1}));
  fake.RunLayer(0, {1, 2}, nullptr, /*n=*/2, {1, 1});  // hits, f = 5 again
  fake.EndStep();
  EXPECT_EQ(fake.stats().hits, 2u);

  // Partial windows are ignored.
  const Window w = {{{7}, {3, 4}}, {{7}, {3, 4}}};
  fake.Lookahead(Prefix(w, 1));
  EXPECT_EQ(policy->utility({0, 7}), 0);
  EXPECT_EQ(fake.prefetch_batches.size(), 1u);

  // Complete: (1,3) p = 9 vs f 5 (Delta 4 >= up 4): 2; (1,4) 9 vs 9: 1;
  // (0,7) 9 vs 0: 1; (0,1), (0,2) 0 vs 5: 0.
  fake.Lookahead(Prefix(w, 2));
  EXPECT_EQ(policy->utility({1, 3}), 2);
  EXPECT_EQ(policy->utility({1, 4}), 1);
  EXPECT_EQ(policy->utility({0, 7}), 1);
  EXPECT_EQ(policy->utility({0, 1}), 0);
  EXPECT_EQ(policy->estimate({1, 3}).level, 1);  // not committed
  // Level 2 first, then level 1 in layer order; (1,4) finds no colder
  // resident left.
  EXPECT_THAT(fake.prefetch_batches,
              ElementsAre(Batch{{{0, 1}, {0, 2}}, 1}, Batch{{{1, 3}}, 2},
                          Batch{{{0, 7}}, 1}));
  EXPECT_THAT(fake.victims, ElementsAre(Id{0, 1}, Id{0, 2}));
  EXPECT_THAT(fake.resident(), ElementsAre(Id{0, 7}, Id{1, 3}));

  fake.BeginStep(2);  // the lookahead planned this step: no second plan
  EXPECT_EQ(fake.prefetch_batches.size(), 3u);
  fake.RunLayer(0, {7});
  fake.RunLayer(1, {3, 4}, nullptr, 2, {1, 2});
  fake.EndStep();
  EXPECT_EQ(policy->utility({1, 3}), 1);  // committed: f 5 -> 5
  EXPECT_EQ(policy->utility({0, 7}), 1);  // committed: f 0 -> 9
  EXPECT_EQ(policy->utility({0, 1}), 0);  // committed: f 5 -> 0
}

TEST(UtilityTest, ChooseVictimsLowestUtilityThenLeastRecentlyUsed) {
  FakeResidencyControl fake(/*layers=*/1, /*experts=*/8, /*k=*/2,
                            /*slots=*/8);
  auto owned = CreatePolicyOrFail<UtilityPolicy>();
  UtilityPolicy* policy = AsUtility(owned.get());
  fake.set_policy(policy);
  fake.BeginStep(0);
  fake.RunLayer(0, {1, 2});
  fake.EndStep();  // (0,1), (0,2) at level 1, accessed in that order
  std::vector<ExpertId> victims;
  const std::vector<ExpertId> candidates = {{0, 2}, {0, 1}, {0, 5}, {0, 3}};
  policy->ChooseVictims(candidates, 3, &victims);
  EXPECT_THAT(ToPairs(victims), ElementsAre(Id{0, 3}, Id{0, 5}, Id{0, 1}));
  policy->OnAccess({0, 1});
  victims.clear();
  policy->ChooseVictims(candidates, 5, &victims);  // at most all of them
  EXPECT_THAT(ToPairs(victims),
              ElementsAre(Id{0, 3}, Id{0, 5}, Id{0, 2}, Id{0, 1}));
}

// App. C by hand. R = {1, 1, 1, 2, 2}, in place 1 s, fast 0.5 s:
//   tau 1: |1 - 3| = 2; tau 2: |2 - 2.5| = 0.5; tau 3: |3 - 2| = 1;
//   tau 4: |5 - 1| = 4.
TEST(UtilityTest, SolveTauHandComputedCases) {
  TauProblem p{.max_utility = 4,
               .experts_at = {10, 0, 0, 0, 0},
               .missing_at = {0, 0, 0, 0, 0},
               .routed_at = {1, 1, 1, 2, 2},
               .slots_left = 100,
               .link_seconds = 2,
               .fast_seconds = 0.5,
               .inplace_seconds = 1};
  EXPECT_EQ(UtilityPolicy::SolveTau(p), 2);

  // Memory: hot(1) = hot(2) = 6 > 4 slots; tau 3 (3 hot) is the best left.
  TauProblem mem = p;
  mem.experts_at = {2, 0, 3, 2, 1};
  mem.slots_left = 4;
  EXPECT_EQ(UtilityPolicy::SolveTau(mem), 3);

  // I/O: n = 5, 5, 2, 0 to move at 2 s each against max(T_cpu, T_gpu) =
  // 3, 2.5, 3, 5: only tau 4 fits; 1.5 s of draft time lets tau 3 fit too.
  TauProblem io = p;
  io.missing_at = {0, 0, 3, 2, 0};
  EXPECT_EQ(UtilityPolicy::SolveTau(io), 4);
  io.draft_seconds = 1.5;
  EXPECT_EQ(UtilityPolicy::SolveTau(io), 3);

  // Nothing feasible: K.
  TauProblem none = p;
  none.experts_at = {0, 0, 0, 0, 1};
  none.slots_left = 0;
  EXPECT_EQ(UtilityPolicy::SolveTau(none), 4);
  none.max_utility = 3;
  none.experts_at = {0, 0, 0, 1};
  EXPECT_EQ(UtilityPolicy::SolveTau(none), 3);

  // Ties go to the smaller tau.
  TauProblem tie = p;
  tie.routed_at = {0, 0, 0, 0, 0};
  EXPECT_EQ(UtilityPolicy::SolveTau(tie), 1);

  // Without in-place: the smallest feasible tau, I/O against the whole
  // layer on the fast tier (0.5 * 7 = 3.5 s): n = 2 at tau 3 needs 4 s.
  TauProblem moving = mem;
  moving.balance = false;
  EXPECT_EQ(UtilityPolicy::SolveTau(moving), 3);
  moving.missing_at = {0, 0, 3, 2, 0};
  EXPECT_EQ(UtilityPolicy::SolveTau(moving), 4);
}

}  // namespace
}  // namespace moeserve::policies
