#include "policies/quant_draft.h"

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
using Phase = QuantDraftPolicy::Phase;

constexpr int kLow = QuantDraftPolicy::kLowPriority;
constexpr int kHigh = QuantDraftPolicy::kHighPriority;

QuantDraftPolicy* AsQuantDraft(engine::OffloadPolicy* p) {
  return static_cast<QuantDraftPolicy*>(p);
}

TEST(QuantDraftTest, DefaultsAndSpeculationSettings) {
  auto policy = CreatePolicyOrFail<QuantDraftPolicy>();
  EXPECT_EQ(policy->name(), "quant_draft");
  const engine::SpeculationDefaults defaults =
      engine::PolicySpeculation("quant_draft", {}).value();
  EXPECT_EQ(defaults.drafter, "int4");
  EXPECT_EQ(defaults.num_speculative_tokens, 0);  // the governor
  const auto& o = AsQuantDraft(policy.get())->options();
  EXPECT_EQ(o.num_speculative_tokens, 4);
  EXPECT_FALSE(o.max_speculative_tokens.has_value());  // k_SLO measured
  EXPECT_FALSE(o.ttft_slo_seconds.has_value());
  EXPECT_DOUBLE_EQ(o.phase2_start, 1.0 / 3.0);
  EXPECT_LT(kLow, kHigh);
  auto registered = engine::CreatePolicy(
      "quant_draft", engine::PolicyTestConfig("quant_draft"));
  ASSERT_TRUE(registered.ok()) << registered.status();
}

// Six planned positions, phase2_start 1/3: 1 position known -> phase I,
// 3 -> phase II, 6 -> phase III.
TEST(QuantDraftTest, ThreePhasesNothingThenLowThenHighInUseOrder) {
  FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/1,
                            /*slots=*/8);
  auto owned = CreatePolicyOrFail<QuantDraftPolicy>();
  auto* policy = AsQuantDraft(owned.get());
  fake.set_policy(policy);
  // (0,1) is resident from an earlier step.
  fake.BeginStep(0);
  fake.RunLayer(0, {1});
  fake.EndStep();
  ASSERT_EQ(fake.misses(), 1);

  const Window full = {
      {{1}, {2}},  // position 0
      {{3}, {2}},  // 1
      {{1}, {5}},  // 2
      {{6}, {7}},  // 3
      {{3}, {0}},  // 4
      {{6}, {7}},  // 5
  };
  fake.Lookahead(Prefix(full, 1));
  EXPECT_EQ(policy->phase(), Phase::kI);
  EXPECT_THAT(fake.prefetch_priorities, IsEmpty());

  // Phase II: the known positions' missing experts, low priority, by layer
  // then earliest position.
  fake.Lookahead(Prefix(full, 3));
  EXPECT_EQ(policy->phase(), Phase::kII);
  using P = std::pair<Id, int>;
  EXPECT_THAT(fake.prefetch_priorities,
              ElementsAre(P{{0, 3}, kLow}, P{{1, 2}, kLow}, P{{1, 5}, kLow}));

  // Phase III: the rest, high priority: (0,6)@3, (1,7)@3, (1,0)@4.
  fake.prefetch_priorities.clear();
  fake.Lookahead(Prefix(full, 6));
  EXPECT_EQ(policy->phase(), Phase::kIII);
  EXPECT_THAT(
      fake.prefetch_priorities,
      ElementsAre(P{{0, 6}, kHigh}, P{{1, 7}, kHigh}, P{{1, 0}, kHigh}));

  // new(p): experts first predicted at p that were not resident when p
  // arrived: p0 (1,2) [(0,1) resident]; p1 (0,3); p2 (1,5); p3 (0,6),(1,7);
  // p4 (1,0); p5 none. Rows past the last position: as p5.
  EXPECT_DOUBLE_EQ(policy->ExpectedNewExperts(0), 1);
  EXPECT_DOUBLE_EQ(policy->ExpectedNewExperts(2), 3);
  EXPECT_DOUBLE_EQ(policy->ExpectedNewExperts(5), 6);
  EXPECT_DOUBLE_EQ(policy->ExpectedNewExperts(6), 6);

  // The verification hits everything; the window ends with the step.
  fake.BeginStep(1);
  fake.RunLayer(0, {1, 3, 6});
  fake.RunLayer(1, {0, 2, 5, 7});
  fake.EndStep();
  EXPECT_EQ(fake.misses(), 1);
  EXPECT_EQ(policy->phase(), Phase::kNone);
  EXPECT_EQ(policy->FirstPosition({0, 1}), -1);
}

TEST(QuantDraftTest, Phase2StartMovesTheBoundary) {
  FakeResidencyControl fake(2, 8, 1, 8);
  auto owned = CreatePolicyOrFail<QuantDraftPolicy>({{"phase2_start", "1"}});
  auto* policy = AsQuantDraft(owned.get());
  fake.set_policy(policy);
  const Window full = {{{1}, {2}}, {{3}, {4}}, {{5}, {6}}};
  fake.Lookahead(Prefix(full, 2));
  EXPECT_EQ(policy->phase(), Phase::kI);  // 2 < 1 * 3
  EXPECT_THAT(fake.prefetches, IsEmpty());
  fake.Lookahead(Prefix(full, 3));
  EXPECT_EQ(policy->phase(), Phase::kIII);
  EXPECT_THAT(fake.prefetches, ElementsAre(Id{0, 1}, Id{0, 3}, Id{0, 5},
                                           Id{1, 2}, Id{1, 4}, Id{1, 6}));

  FakeResidencyControl fake0(2, 8, 1, 8);
  auto owned0 = CreatePolicyOrFail<QuantDraftPolicy>({{"phase2_start", "0"}});
  fake0.set_policy(owned0.get());
  fake0.Lookahead(Prefix(full, 1));
  EXPECT_EQ(AsQuantDraft(owned0.get())->phase(), Phase::kII);
  EXPECT_THAT(fake0.prefetches, ElementsAre(Id{0, 1}, Id{1, 2}));
}

// A lookahead delivered only when complete (planned_positions 0) is phase
// III at once.
TEST(QuantDraftTest, UnplannedLookaheadIsComplete) {
  FakeResidencyControl fake(2, 8, 1, 8);
  auto owned = CreatePolicyOrFail<QuantDraftPolicy>();
  fake.set_policy(owned.get());
  ExpertLookahead la;
  la.experts = {{{4}, {5}}};
  fake.Lookahead(la);
  EXPECT_EQ(AsQuantDraft(owned.get())->phase(), Phase::kIII);
  using P = std::pair<Id, int>;
  EXPECT_THAT(fake.prefetch_priorities,
              ElementsAre(P{{0, 4}, kHigh}, P{{1, 5}, kHigh}));
}

// Window experts nearest first, up to the fast tier's capacity: a third
// could only displace one needed sooner.
TEST(QuantDraftTest, NeverPrefetchesMoreThanTheCapacity) {
  FakeResidencyControl fake(2, 8, 1, /*slots=*/2);
  auto owned = CreatePolicyOrFail<QuantDraftPolicy>();
  fake.set_policy(owned.get());
  ExpertLookahead la;
  la.experts = {{{0, 1}, {2}}};
  fake.Lookahead(la);
  EXPECT_THAT(fake.prefetches, ElementsAre(Id{0, 0}, Id{0, 1}));
  EXPECT_THAT(fake.resident(), ElementsAre(Id{0, 0}, Id{0, 1}));
}

// A refused Prefetch (no victim: everything pinned) ends the round.
TEST(QuantDraftTest, StopsAtTheFirstRefusedPrefetch) {
  FakeResidencyControl fake(2, 8, 1, /*slots=*/2);
  auto owned = CreatePolicyOrFail<QuantDraftPolicy>();
  fake.set_policy(owned.get());
  ASSERT_TRUE(fake.Pin({1, 6}));
  ASSERT_TRUE(fake.Pin({1, 7}));
  ExpertLookahead la;
  la.experts = {{{0, 1}, {2}}};
  fake.Lookahead(la);
  EXPECT_THAT(fake.prefetches, ElementsAre(Id{0, 0}));
  EXPECT_THAT(fake.resident(), ElementsAre(Id{1, 6}, Id{1, 7}));
}

// Hand-computed Belady order over a scripted window, before the step and
// after its first layer.
TEST(QuantDraftTest, BeladyOverTheWindowThenLru) {
  FakeResidencyControl fake(/*layers=*/3, /*experts=*/8, /*k=*/1,
                            /*slots=*/16);
  auto owned = CreatePolicyOrFail<QuantDraftPolicy>();
  auto* policy = AsQuantDraft(owned.get());
  fake.set_policy(policy);
  ExpertLookahead la;
  la.planned_positions = 3;
  la.experts = {
      {{0}, {3}, {5}},  // position 0
      {{1}, {3}, {6}},  // 1
      {{}, {4}, {5}},   // 2
  };
  fake.Lookahead(la);
  // Next uses (layer, earliest position): (0,0)@0 (0,1)@1 (1,3)@0 (1,4)@2
  // (2,5)@0 (2,6)@1; (0,7) and (1,7) are not in the window.
  const std::vector<ExpertId> candidates = {{0, 0}, {0, 1}, {0, 7}, {1, 3},
                                            {1, 4}, {1, 7}, {2, 5}, {2, 6}};
  std::vector<ExpertId> victims;
  policy->ChooseVictims(candidates, 8, &victims);
  EXPECT_THAT(ToPairs(victims),
              ElementsAre(Id{0, 7}, Id{1, 7},  // outside: never used, by id
                          Id{2, 6}, Id{2, 5},  // farthest layer, later pos
                          Id{1, 4}, Id{1, 3}, Id{0, 1}, Id{0, 0}));
  victims.clear();
  policy->ChooseVictims(candidates, 3, &victims);
  EXPECT_THAT(ToPairs(victims), ElementsAre(Id{0, 7}, Id{1, 7}, Id{2, 6}));

  // The verification routes layer 0 to {0}: layer 0 is done, so (0,0) and
  // (0,1) leave the window; among the outside ones the least recently used
  // go first ((0,0) was just accessed).
  fake.BeginStep(1);
  fake.RunLayer(0, {0});
  victims.clear();
  policy->ChooseVictims(candidates, 8, &victims);
  EXPECT_THAT(ToPairs(victims),
              ElementsAre(Id{0, 1}, Id{0, 7}, Id{1, 7}, Id{0, 0},  // outside
                          Id{2, 6}, Id{2, 5}, Id{1, 4}, Id{1, 3}));
}

TEST(QuantDraftTest, LruBreaksTiesWithinTheWindow) {
  FakeResidencyControl fake(2, 8, 1, 16);
  auto owned = CreatePolicyOrFail<QuantDraftPolicy>();
  auto* policy = AsQuantDraft(owned.get());
  fake.set_policy(policy);
  ExpertLookahead la;
  la.experts = {{{}, {2, 3}}};  // same layer, same position: a tie
  fake.Lookahead(la);
  const std::vector<ExpertId> candidates = {{1, 2}, {1, 3}};
  std::vector<ExpertId> victims;
  policy->ChooseVictims(candidates, 1, &victims);
  EXPECT_THAT(ToPairs(victims), ElementsAre(Id{1, 2}));  // by id
  policy->OnAccess({1, 3});
  policy->OnAccess({1, 2});
  victims.clear();
  policy->ChooseVictims(candidates, 2, &victims);
  EXPECT_THAT(ToPairs(victims), ElementsAre(Id{1, 3}, Id{1, 2}));
}

// Through the fake's demand loads: LRU would evict (1,1), the oldest, which
// the window needs at layer 1; Belady evicts (0,2), outside the window.
TEST(QuantDraftTest, DemandLoadsEvictOutsideTheWindowBeforeLru) {
  FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/1,
                            /*slots=*/3);
  auto owned = CreatePolicyOrFail<QuantDraftPolicy>();
  fake.set_policy(owned.get());
  fake.BeginStep(0);
  fake.RunLayer(1, {1});
  fake.EndStep();
  fake.BeginStep(1);
  fake.RunLayer(0, {0, 2});
  fake.EndStep();
  ASSERT_EQ(fake.misses(), 3);
  ExpertLookahead la;
  la.experts = {{{0}, {1}}};
  fake.Lookahead(la);
  EXPECT_THAT(fake.prefetches, IsEmpty());  // all resident
  fake.BeginStep(2);
  fake.RunLayer(0, {0, 3});
  fake.RunLayer(1, {1});
  fake.EndStep();
  EXPECT_THAT(fake.victims, ElementsAre(Id{0, 2}));
  EXPECT_EQ(fake.misses(), 4);  // (0,3) only; (1,1) hit
}

// Timings of the governor tests: draft 2 ms a position, verification 10 ms
// plus 1 ms a draft, no prefill measured.
DraftLengthQuery Query(const std::vector<double>& acceptance, double link) {
  DraftLengthQuery q;
  q.max_k = 8;
  q.num_seqs = 1;
  q.acceptance = acceptance;
  q.draft_seconds_per_position = 0.002;
  q.verify_seconds_base = 0.010;
  q.verify_seconds_per_draft = 0.001;
  q.link_seconds_per_expert = link;
  return q;
}

TEST(QuantDraftGovernorTest, DefaultUntilMeasured) {
  auto owned = CreatePolicyOrFail<QuantDraftPolicy>();
  auto* policy = AsQuantDraft(owned.get());
  DraftLengthQuery q;
  q.max_k = 8;
  EXPECT_EQ(policy->ChooseDraftLength(q), 4);
  q.max_k = 2;
  EXPECT_EQ(policy->ChooseDraftLength(q), 2);  // the engine's bound
  const std::vector<double> p(8, 0.9);
  DraftLengthQuery no_draft_time = Query(p, 0);
  no_draft_time.draft_seconds_per_position = 0;
  EXPECT_EQ(policy->ChooseDraftLength(no_draft_time), 4);
  DraftLengthQuery no_acceptance = Query({}, 0);
  EXPECT_EQ(policy->ChooseDraftLength(no_acceptance), 4);
  // Acceptance and draft time measured, the plain pass not: a k = 0 step
  // every kProbeInterval calls, the first at once, until it is.
  DraftLengthQuery no_base = Query(p, 0);
  no_base.verify_seconds_base = 0;
  std::vector<int> ks;
  for (int i = 0; i < QuantDraftPolicy::kProbeInterval + 1; ++i) {
    ks.push_back(policy->ChooseDraftLength(no_base));
  }
  EXPECT_THAT(ks, ElementsAre(0, 4, 4, 4, 4, 4, 4, 4, 0));
  auto zero =
      CreatePolicyOrFail<QuantDraftPolicy>({{"num_speculative_tokens", "0"}});
  EXPECT_EQ(zero->ChooseDraftLength(q), 0);
}

// A configured k_SLO of 8, so that the measured TTFT bound (below) stays
// out of the tests of the throughput objective.
std::unique_ptr<engine::OffloadPolicy> WithKSlo8() {
  return CreatePolicyOrFail<QuantDraftPolicy>(
      {{"max_speculative_tokens", "8"}});
}

// p = 0.99, no link cost: Theta(k) = E(k) / (10 + 3k) ms rises up to k = 8
// (E(8) = 8.649, 8.649 / 34 = .2544 > E(7) / 31 = 7.726 / 31 = .2492); the
// config's and the engine's bounds cap it. (At p = 0.9 it would peak at
// k = 5: E(5) / 25 = .1874 > E(6) / 28 = .1863.)
TEST(QuantDraftGovernorTest, HighAcceptanceTakesTheLargestK) {
  auto owned = WithKSlo8();
  EXPECT_EQ(owned->ChooseDraftLength(Query(std::vector<double>(8, 0.9), 0)), 5);
  const std::vector<double> p(8, 0.99);
  EXPECT_EQ(owned->ChooseDraftLength(Query(p, 0)), 8);
  DraftLengthQuery q = Query(p, 0);
  q.max_k = 5;
  EXPECT_EQ(owned->ChooseDraftLength(q), 5);
  auto capped = CreatePolicyOrFail<QuantDraftPolicy>(
      {{"max_speculative_tokens", "3"}, {"num_speculative_tokens", "2"}});
  EXPECT_EQ(capped->ChooseDraftLength(Query(p, 0)), 3);
  // Fewer acceptance entries than max_k: no further.
  EXPECT_EQ(owned->ChooseDraftLength(Query({0.99, 0.99}, 0)), 2);
}

// p = 0.8. E(k) = 1, 1.8, 2.44, 2.952, 3.3616, 3.689, 3.951, 4.161, ...
// Fast link (0): T = 10 + 3k ms; Theta = .1, .1385, .1525, .1554, .1528 ->
//   k = 3.
// Slow link (5 ms/expert) with a window whose 4 experts all come with
//   position 0 (E_new(k) = 4): eq. (3), the draft overlapping the first
//   fetch, T = max(2k, 5) + 3 x 5 + 10 + k ms = 30, 31, 32, 34, 37, 40, 43
//   for k = 0..6; Theta = .0333, .0581, .0763, .0868, .0909, .0922 (k = 5),
//   .0919 -> k = 5: the misses of the first row are paid anyway, more
//   drafts amortise them. The additive cycle (2k + 4 x 5 + 10 + k = 30 + 3k)
//   would give .0333, .0545, .0678, .0757, .0800, .0820, .0823 (k = 6),
//   .0816 -> k = 6.
TEST(QuantDraftGovernorTest, SlowLinkAmortisedByALongerDraft) {
  FakeResidencyControl fake(2, 8, 1, 16);
  auto owned = WithKSlo8();
  auto* policy = AsQuantDraft(owned.get());
  fake.set_policy(policy);
  ExpertLookahead la;
  la.experts = {{{0, 1}, {2, 3}}, {{0, 1}, {2, 3}}, {{0, 1}, {2, 3}}};
  fake.Lookahead(la);
  EXPECT_DOUBLE_EQ(policy->ExpectedNewExperts(0), 4);
  EXPECT_DOUBLE_EQ(policy->ExpectedNewExperts(8), 4);
  const std::vector<double> p(8, 0.8);
  EXPECT_EQ(policy->ChooseDraftLength(Query(p, 0)), 3);
  const DraftLengthQuery slow = Query(p, 0.005);
  EXPECT_DOUBLE_EQ(policy->CycleSeconds(slow, 0), 0.030);
  EXPECT_DOUBLE_EQ(policy->CycleSeconds(slow, 2), 0.032);  // max(4, 5) ms
  EXPECT_DOUBLE_EQ(policy->CycleSeconds(slow, 3), 0.034);  // max(6, 5) ms
  EXPECT_EQ(policy->ChooseDraftLength(slow), 5);
}

// Eq. (3) around the first fetch. No window yet (E_new = 0): draft and
// verification only. One expert missing at position 0 (new(0) = 1, and the
// later rows are estimated by it: E_new(k) = k + 1): T_pcie,init is one
// 10 ms transfer, overlapped with the draft. The next window finds it
// resident (prefetched in phase III): new(0) = .75 x 1 + .25 x 0 = .75, so
// T_pcie,init is .75 of a transfer and T_pcie,new(1) half of one.
TEST(QuantDraftGovernorTest, CycleOverlapsTheDraftWithTheFirstFetchOnly) {
  FakeResidencyControl fake(2, 8, 1, 16);
  auto owned = WithKSlo8();
  auto* policy = AsQuantDraft(owned.get());
  fake.set_policy(policy);
  const DraftLengthQuery q = Query(std::vector<double>(8, 0.8), 0.010);
  EXPECT_DOUBLE_EQ(policy->CycleSeconds(q, 3), 0.019);  // 6 + 10 + 3
  ExpertLookahead la;
  la.experts = {{{0}, {}}};
  fake.Lookahead(la);
  EXPECT_DOUBLE_EQ(policy->ExpectedNewExperts(1), 2);
  // k = 1: max(2, 10) + 10 + 10 + 1 ms; k = 6: max(12, 10) + 60 + 10 + 6.
  EXPECT_DOUBLE_EQ(policy->CycleSeconds(q, 1), 0.031);
  EXPECT_DOUBLE_EQ(policy->CycleSeconds(q, 6), 0.088);
  fake.BeginStep();
  fake.EndStep();
  fake.Lookahead(la);
  EXPECT_DOUBLE_EQ(policy->ExpectedNewExperts(0), 0.75);
  EXPECT_DOUBLE_EQ(policy->CycleSeconds(q, 0), 0.0175);  // 7.5 + 10
  EXPECT_DOUBLE_EQ(policy->CycleSeconds(q, 1), 0.026);   // 10 + 5 + 11
}

// Neither max_speculative_tokens nor ttft_slo_ms: k_SLO is the largest k
// with TTFT(k) = prefill + T_cycle(k) <= 2 x (prefill + T_cycle(0)). At
// p = 0.99 and no link cost the objective alone takes 8 (above); T_cycle =
// 10 + 3k ms, so
//   prefill 0:     10 + 3k <= 20        -> k_SLO = 3
//   prefill 4 ms:  14 + 3k <= 28        -> 4
//   prefill 20 ms: 30 + 3k <= 60        -> 10, the engine's 8 binds.
TEST(QuantDraftGovernorTest, MeasuredTtftBoundCapsK) {
  auto owned = CreatePolicyOrFail<QuantDraftPolicy>();
  auto* policy = AsQuantDraft(owned.get());
  const std::vector<double> p(8, 0.99);
  DraftLengthQuery q = Query(p, 0);
  EXPECT_EQ(policy->SloDraftLength(q, 8), 3);
  EXPECT_EQ(policy->ChooseDraftLength(q), 3);
  q.prefill_seconds = 0.004;
  EXPECT_EQ(policy->ChooseDraftLength(q), 4);
  q.prefill_seconds = 0.020;
  EXPECT_EQ(policy->ChooseDraftLength(q), 8);
  // The slow-link window above: T_cycle(0) = 30 ms, budget 60 ms, T_cycle
  // (k >= 3) = 25 + 3k <= 60 up to k = 11: not binding, k = 5 as above.
  FakeResidencyControl fake(2, 8, 1, 16);
  fake.set_policy(policy);
  ExpertLookahead la;
  la.experts = {{{0, 1}, {2, 3}}, {{0, 1}, {2, 3}}, {{0, 1}, {2, 3}}};
  fake.Lookahead(la);
  EXPECT_EQ(
      policy->ChooseDraftLength(Query(std::vector<double>(8, 0.8), 0.005)), 5);
}

// The config wins over the measured bound: max_speculative_tokens is k_SLO
// itself; ttft_slo_ms replaces 2 x TTFT(0) as the budget (prefill 4 ms,
// T_cycle = 10 + 3k ms: 14 + 3k <= 31 -> 5; 14 > 13 -> 0, no probe); both
// given, both bound.
TEST(QuantDraftGovernorTest, ConfiguredSloOverridesTheMeasuredOne) {
  const std::vector<double> p(8, 0.99);
  DraftLengthQuery q = Query(p, 0);  // measured bound: 3
  EXPECT_EQ(WithKSlo8()->ChooseDraftLength(q), 8);
  q.prefill_seconds = 0.004;  // measured bound: 4
  auto ttft31 = CreatePolicyOrFail<QuantDraftPolicy>({{"ttft_slo_ms", "31"}});
  EXPECT_EQ(ttft31->ChooseDraftLength(q), 5);
  auto both = CreatePolicyOrFail<QuantDraftPolicy>(
      {{"ttft_slo_ms", "31"}, {"max_speculative_tokens", "3"}});
  EXPECT_EQ(both->ChooseDraftLength(q), 3);
  auto both_wide = CreatePolicyOrFail<QuantDraftPolicy>(
      {{"ttft_slo_ms", "31"}, {"max_speculative_tokens", "6"}});
  EXPECT_EQ(both_wide->ChooseDraftLength(q), 5);
  auto ttft13 = CreatePolicyOrFail<QuantDraftPolicy>({{"ttft_slo_ms", "13"}});
  std::vector<int> ks;
  for (int i = 0; i < QuantDraftPolicy::kProbeInterval + 1; ++i) {
    ks.push_back(ttft13->ChooseDraftLength(q));
  }
  EXPECT_THAT(ks, ::testing::Each(0));
}

// p = 0.5: Theta(1) = 1.5 / 13 > Theta(0) = 1 / 10 > Theta(2) = 1.75 / 16
// -> 1. p = 0.2: Theta(1) = 1.2 / 13 < 1 / 10 -> 0, with a probe of 1 every
// kProbeInterval-th time.
TEST(QuantDraftGovernorTest, LowAcceptanceDraftsLittleOrNothing) {
  auto owned = WithKSlo8();
  EXPECT_EQ(owned->ChooseDraftLength(Query(std::vector<double>(8, 0.5), 0)), 1);
  // Named: the query only points at its acceptance values.
  const std::vector<double> p_low(8, 0.2);
  const DraftLengthQuery low = Query(p_low, 0);
  std::vector<int> ks;
  for (int i = 0; i < QuantDraftPolicy::kProbeInterval + 1; ++i) {
    ks.push_back(owned->ChooseDraftLength(low));
  }
  EXPECT_THAT(ks, ElementsAre(0, 0, 0, 0, 0, 0, 0, 1, 0));
  DraftLengthQuery none = low;
  none.max_k = 0;
  EXPECT_EQ(owned->ChooseDraftLength(none), 0);
}

TEST(QuantDraftTest, RefusesBadConfigNamingTheKey) {
  const std::vector<std::pair<engine::PolicyConfig, std::string>> bad = {
      {{{"draft_experts", "2"}}, "draft_experts"},
      {{{"num_speculative_tokens", "-1"}}, "num_speculative_tokens"},
      {{{"num_speculative_tokens", "x"}}, "num_speculative_tokens"},
      {{{"num_speculative_tokens", "9"}}, "num_speculative_tokens"},  // > 8
      {{{"max_speculative_tokens", "17"}}, "max_speculative_tokens"},
      {{{"max_speculative_tokens", "2"}, {"num_speculative_tokens", "3"}},
       "num_speculative_tokens"},
      {{{"phase2_start", "1.5"}}, "phase2_start"},
      {{{"phase2_start", "nan"}}, "phase2_start"},
      {{{"ttft_slo_ms", "0"}}, "ttft_slo_ms"},
      {{{"ttft_slo_ms", "-5"}}, "ttft_slo_ms"},
      {{{"ttft_slo_ms", "fast"}}, "ttft_slo_ms"},
  };
  for (const auto& [config, key] : bad) {
    auto policy = QuantDraftPolicy::Create(config);
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument)
        << key;
    EXPECT_THAT(policy.status().message(), HasSubstr(key));
  }
  // A smaller bound lowers the default k with it.
  auto small =
      CreatePolicyOrFail<QuantDraftPolicy>({{"max_speculative_tokens", "2"}});
  EXPECT_EQ(AsQuantDraft(small.get())->options().num_speculative_tokens, 2);
}

}  // namespace
}  // namespace moeserve::policies
