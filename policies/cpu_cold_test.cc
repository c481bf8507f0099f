#include "policies/cpu_cold.h"

#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/offload/policy_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/internal/fake_residency_control.h"
#include "policies/lru.h"

namespace moeserve::policies {
namespace {

using engine::ExpertCosts;
using testing::CreatePolicyOrFail;
using ::testing::ElementsAre;
using testing::FakeResidencyControl;
using ::testing::HasSubstr;
using testing::Id;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr char kGauge[] = "moeserve_cpu_cold_threshold_rows";

// Measured costs: a link transfer, the host's first row and each further
// row, the fast side's compute.
ExpertCosts Costs(double link, double first, double per_row, double fast = 0) {
  return {.link_seconds = link,
          .fast_compute_seconds = fast,
          .host_seconds_first_row = first,
          .host_seconds_per_row = per_row};
}

CpuColdPolicy* AsCpuCold(engine::OffloadPolicy* p) {
  return static_cast<CpuColdPolicy*>(p);
}

// ---------------------------------------------------------------- threshold

TEST(CpuColdThresholdTest, LargestRowCountCheaperThanACopy) {
  const int max = CpuColdPolicy::kMaxRows;
  // 1, 2 < 3 <= 3.
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(3, 1, 1), max), 2);
  // Strict: host(3) = 2 is not cheaper than a copy of 2.
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(2, 1, 0.5), max), 2);
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(2.01, 1, 0.5), max), 3);
  // The fast side's compute counts once measured: copy = 3 + 0.5.
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(3, 1, 1, 0.5), max), 3);
  // Realistic magnitudes: a 2 ms copy, 150 us + 40 us per row on the host.
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(2e-3, 150e-6, 40e-6), max),
            47);  // 150 + 46 x 40 = 1990 us < 2000 us; 47 x 40 + 150 > 2000
  // The host is slower for one row already: nothing in place.
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(1, 1, 0), max), 0);
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(1, 2, 0.1), max), 0);
  // A host cost flat in the rows: every count, up to the cap.
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(3, 1, 0), max), max);
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(3, 1, 0), 16), 16);
  // Capped.
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(3, 1, 1e-9), 100), 100);
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(3, 1, 1e-9), max), max);
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(3, 1, 1), 1), 1);
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(3, 1, 1), 0), 0);
}

TEST(CpuColdThresholdTest, ZeroUntilLinkAndHostAreMeasured) {
  const int max = CpuColdPolicy::kMaxRows;
  EXPECT_EQ(CpuColdPolicy::ThresholdRows({}, max), 0);
  // No transfer measured yet.
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(0, 1e-6, 1e-7), max), 0);
  // No host compute (a host fast tier, or a device one without it).
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(Costs(1, 0, 0), max), 0);
  EXPECT_EQ(CpuColdPolicy::ThresholdRows(
                {.link_seconds = 1, .inplace_compute_seconds = 1e-6}, max),
            0);
}

// ---------------------------------------------------------------- routing

TEST(CpuColdTest, InPlaceAtOrBelowThresholdLoadedAbove) {
  FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/2,
                            /*slots=*/4);
  auto policy = CreatePolicyOrFail<CpuColdPolicy>();
  fake.set_policy(policy.get());
  fake.set_expert_costs(Costs(3, 1, 1));  // threshold 2
  fake.BeginStep(0);
  fake.RunLayer(0, {1, 2, 3, 4}, nullptr, 0, {1, 2, 3, 7});
  EXPECT_EQ(AsCpuCold(policy.get())->threshold_rows(), 2);
  EXPECT_THAT(fake.inplace_calls, ElementsAre(Id{0, 1}, Id{0, 2}));
  EXPECT_THAT(fake.resident(), ElementsAre(Id{0, 3}, Id{0, 4}));
  engine::ResidencyStats st = fake.stats();
  EXPECT_EQ(st.inplace, 2u);
  EXPECT_EQ(st.misses, 2u);
  EXPECT_EQ(st.hits, 0u);
  // A resident expert is a hit whatever its count: no ComputeInPlace.
  fake.RunLayer(0, {3, 5}, nullptr, 0, {1, 1});
  EXPECT_THAT(fake.inplace_calls, ElementsAre(Id{0, 1}, Id{0, 2}, Id{0, 5}));
  st = fake.stats();
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.inplace, 3u);
  EXPECT_EQ(st.misses, 2u);
  fake.EndStep();
  EXPECT_THAT(fake.gauges, ElementsAre(Pair(kGauge, 2)));
  EXPECT_TRUE(AsCpuCold(policy.get())->inplace_available());
}

TEST(CpuColdTest, ThresholdFollowsTheCosts) {
  FakeResidencyControl fake(/*layers=*/1, /*experts=*/8, /*k=*/2,
                            /*slots=*/8);
  auto policy = CreatePolicyOrFail<CpuColdPolicy>();
  fake.set_policy(policy.get());
  // Before the first transfer is measured: lru (everything loaded).
  fake.set_expert_costs(Costs(0, 1, 1));
  fake.BeginStep(0);
  fake.RunLayer(0, {0, 1}, nullptr, 0, {1, 1});
  fake.EndStep();
  EXPECT_THAT(fake.inplace_calls, IsEmpty());
  EXPECT_EQ(fake.misses(), 2);
  EXPECT_THAT(fake.gauges, ElementsAre(Pair(kGauge, 0)));
  // Link measured: recomputed at the next OnRoute.
  fake.set_expert_costs(Costs(3, 1, 1));
  fake.BeginStep(1);
  fake.RunLayer(0, {2, 3}, nullptr, 0, {2, 3});
  EXPECT_THAT(fake.inplace_calls, ElementsAre(Id{0, 2}));
  // A faster link within the step: 3 rows no longer cheaper, 1 row is.
  fake.set_expert_costs(Costs(1.5, 1, 1));
  fake.RunLayer(0, {4, 5}, nullptr, 0, {1, 2});
  EXPECT_THAT(fake.inplace_calls, ElementsAre(Id{0, 2}, Id{0, 4}));
  fake.EndStep();
  EXPECT_THAT(fake.gauges, ElementsAre(Pair(kGauge, 1)));
  EXPECT_EQ(fake.stats().inplace, 2u);
  EXPECT_EQ(fake.misses(), 4);  // 0, 1, 3, 5
  // The gauge follows the costs at each step end.
  fake.set_expert_costs(Costs(10, 1, 1));
  fake.BeginStep(2);
  fake.EndStep();
  EXPECT_THAT(fake.gauges, ElementsAre(Pair(kGauge, 9)));
}

// A workload of random routing (distinct ascending experts, counts 1..3).
struct Routed {
  int layer;
  std::vector<int> experts;
  std::vector<int> counts;
};
std::vector<std::vector<Routed>> Workload(int steps, int layers, int experts,
                                          int k) {
  std::mt19937 rng(7);
  std::vector<std::vector<Routed>> out(steps);
  for (auto& step : out) {
    for (int l = 0; l < layers; ++l) {
      std::set<int> chosen;
      const int want = k + static_cast<int>(rng() % 3);
      while (static_cast<int>(chosen.size()) < want) {
        chosen.insert(static_cast<int>(rng() % experts));
      }
      Routed r{l, {chosen.begin(), chosen.end()}, {}};
      for (size_t i = 0; i < r.experts.size(); ++i) {
        r.counts.push_back(1 + static_cast<int>(rng() % 3));
      }
      step.push_back(std::move(r));
    }
  }
  return out;
}

struct Outcome {
  std::vector<Id> victims;
  std::set<Id> resident;
  engine::ResidencyStats stats;
  std::vector<Id> inplace_calls;
};

Outcome RunWorkload(engine::OffloadPolicy* policy, const ExpertCosts& costs,
                    bool inplace_supported) {
  FakeResidencyControl fake(/*layers=*/3, /*experts=*/8, /*k=*/2,
                            /*slots=*/5);
  fake.set_policy(policy);
  fake.set_expert_costs(costs);
  fake.set_compute_in_place(inplace_supported);
  const auto workload = Workload(/*steps=*/12, 3, 8, 2);
  for (size_t s = 0; s < workload.size(); ++s) {
    fake.BeginStep(static_cast<int64_t>(s));
    for (const Routed& r : workload[s]) {
      fake.RunLayer(r.layer, r.experts, nullptr, 0, r.counts);
    }
    fake.EndStep();
  }
  return {fake.victims, fake.resident(), fake.stats(), fake.inplace_calls};
}

void ExpectSameAsLru(const Outcome& got) {
  auto lru = CreatePolicyOrFail<LruPolicy>();
  const Outcome want = RunWorkload(lru.get(), {}, true);
  EXPECT_EQ(got.victims, want.victims);
  EXPECT_EQ(got.resident, want.resident);
  EXPECT_EQ(got.stats.hits, want.stats.hits);
  EXPECT_EQ(got.stats.misses, want.stats.misses);
  EXPECT_EQ(got.stats.inplace, 0u);
  EXPECT_GT(want.victims.size(), 0u);  // the workload does evict
}

TEST(CpuColdTest, ExactlyLruBeforeTheLinkIsMeasured) {
  auto policy = CreatePolicyOrFail<CpuColdPolicy>();
  const Outcome got = RunWorkload(policy.get(), Costs(0, 1, 1), true);
  EXPECT_THAT(got.inplace_calls, IsEmpty());
  ExpectSameAsLru(got);
}

TEST(CpuColdTest, ExactlyLruWithoutHostCompute) {
  auto policy = CreatePolicyOrFail<CpuColdPolicy>();
  // A host fast tier: in-place compute measured, but no host compute.
  const Outcome got = RunWorkload(
      policy.get(), {.link_seconds = 3, .inplace_compute_seconds = 1}, true);
  EXPECT_THAT(got.inplace_calls, IsEmpty());
  ExpectSameAsLru(got);
}

TEST(CpuColdTest, ExactlyLruOnceComputeInPlaceIsRefused) {
  auto policy = CreatePolicyOrFail<CpuColdPolicy>();
  const Outcome got = RunWorkload(policy.get(), Costs(3, 1, 1), false);
  // Asked once, refused, never again.
  EXPECT_EQ(got.inplace_calls.size(), 1u);
  EXPECT_FALSE(AsCpuCold(policy.get())->inplace_available());
  EXPECT_EQ(AsCpuCold(policy.get())->threshold_rows(), 0);
  ExpectSameAsLru(got);
}

TEST(CpuColdTest, RefusalIsStickyAndTheGaugeSaysZero) {
  FakeResidencyControl fake(/*layers=*/1, /*experts=*/8, /*k=*/2,
                            /*slots=*/8);
  auto policy = CreatePolicyOrFail<CpuColdPolicy>({{"threshold_rows", "4"}});
  fake.set_policy(policy.get());
  fake.set_compute_in_place(false);
  fake.BeginStep(0);
  fake.RunLayer(0, {0, 1}, nullptr, 0, {1, 1});
  fake.EndStep();
  EXPECT_THAT(fake.inplace_calls, ElementsAre(Id{0, 0}));
  EXPECT_THAT(fake.gauges, ElementsAre(Pair(kGauge, 0)));
  // Even where the control would accept again.
  fake.set_compute_in_place(true);
  fake.BeginStep(1);
  fake.RunLayer(0, {2}, nullptr, 0, {1});
  fake.EndStep();
  EXPECT_THAT(fake.inplace_calls, ElementsAre(Id{0, 0}));
  EXPECT_EQ(fake.misses(), 3);
}

TEST(CpuColdTest, EvictsLeastRecentlyUsedAsLru) {
  // lru's own sequence (lru_test): in-place experts take no slot, and
  // stamp recency as every acquire does.
  FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/1,
                            /*slots=*/3);
  auto policy = CreatePolicyOrFail<CpuColdPolicy>({{"threshold_rows", "1"}});
  fake.set_policy(policy.get());
  for (int e : {0, 1, 2, 0, 3, 4, 0}) fake.RunLayer(0, {e}, nullptr, 0, {5});
  fake.RunLayer(1, {0}, nullptr, 0, {5});
  EXPECT_THAT(fake.victims, ElementsAre(Id{0, 1}, Id{0, 2}, Id{0, 3}));
  EXPECT_THAT(fake.resident(), ElementsAre(Id{0, 0}, Id{0, 4}, Id{1, 0}));
  EXPECT_THAT(fake.inplace_calls, IsEmpty());
  // One row: computed in place, nothing evicted, nothing loaded.
  fake.RunLayer(1, {5}, nullptr, 0, {1});
  EXPECT_THAT(fake.inplace_calls, ElementsAre(Id{1, 5}));
  EXPECT_THAT(fake.resident(), ElementsAre(Id{0, 0}, Id{0, 4}, Id{1, 0}));
  EXPECT_EQ(fake.misses(), 6);
}

// ---------------------------------------------------------------- config

TEST(CpuColdTest, FixedThresholdIgnoresTheCosts) {
  FakeResidencyControl fake(/*layers=*/1, /*experts=*/8, /*k=*/2,
                            /*slots=*/8);
  auto policy = CreatePolicyOrFail<CpuColdPolicy>({{"threshold_rows", "3"}});
  fake.set_policy(policy.get());  // costs unmeasured
  fake.BeginStep(0);
  fake.RunLayer(0, {0, 1, 2}, nullptr, 0, {3, 4, 1});
  fake.EndStep();
  EXPECT_THAT(fake.inplace_calls, ElementsAre(Id{0, 0}, Id{0, 2}));
  EXPECT_THAT(fake.gauges, ElementsAre(Pair(kGauge, 3)));
  // threshold_rows=0: never in place.
  auto off = CreatePolicyOrFail<CpuColdPolicy>({{"threshold_rows", "0"}});
  FakeResidencyControl fake2(1, 8, 2, 8);
  fake2.set_policy(off.get());
  fake2.set_expert_costs(Costs(3, 1, 1));
  fake2.RunLayer(0, {0}, nullptr, 0, {1});
  EXPECT_THAT(fake2.inplace_calls, IsEmpty());
}

TEST(CpuColdTest, MaxRowsCapsMeasuredAndFixedThresholds) {
  FakeResidencyControl fake(/*layers=*/1, /*experts=*/8, /*k=*/2,
                            /*slots=*/8);
  auto policy = CreatePolicyOrFail<CpuColdPolicy>({{"max_rows", "2"}});
  fake.set_policy(policy.get());
  fake.set_expert_costs(Costs(10, 1, 1));  // 9 uncapped
  fake.RunLayer(0, {0, 1, 2}, nullptr, 0, {1, 2, 3});
  EXPECT_EQ(AsCpuCold(policy.get())->threshold_rows(), 2);
  EXPECT_THAT(fake.inplace_calls, ElementsAre(Id{0, 0}, Id{0, 1}));

  auto fixed = CreatePolicyOrFail<CpuColdPolicy>(
      {{"max_rows", "2"}, {"threshold_rows", "5"}});
  FakeResidencyControl fake2(1, 8, 2, 8);
  fake2.set_policy(fixed.get());
  EXPECT_EQ(AsCpuCold(fixed.get())->threshold_rows(), 2);
}

TEST(CpuColdTest, ConfigKeysAndRefusals) {
  auto defaults = CreatePolicyOrFail<CpuColdPolicy>();
  const auto& options = AsCpuCold(defaults.get())->options();
  EXPECT_EQ(options.max_rows, CpuColdPolicy::kMaxRows);
  EXPECT_FALSE(options.threshold_rows.has_value());

  struct Bad {
    engine::PolicyConfig config;
    std::string key;
  };
  const std::vector<Bad> bad = {
      {{{"rows", "2"}}, "rows"},
      {{{"max_rows", "-1"}}, "max_rows"},
      {{{"max_rows", "many"}}, "max_rows"},
      {{{"max_rows", "2.5"}}, "max_rows"},
      {{{"max_rows", std::to_string(CpuColdPolicy::kMaxRows + 1)}}, "max_rows"},
      {{{"threshold_rows", ""}}, "threshold_rows"},
      {{{"threshold_rows", "-3"}}, "threshold_rows"},
      {{{"threshold_rows", "x"}}, "threshold_rows"},
      {{{"threshold_rows", std::to_string(CpuColdPolicy::kMaxRows + 1)}},
       "threshold_rows"},
  };
  for (const Bad& b : bad) {
    auto policy = CpuColdPolicy::Create(b.config);
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument)
        << b.key;
    EXPECT_THAT(policy.status().message(), HasSubstr(b.key));
  }
  // Through the registry: named, with its test config.
  auto unknown = engine::CreatePolicy("cpu_cold", {{"rows", "2"}});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("cpu_cold"));
  EXPECT_THAT(engine::PolicyTestConfig("cpu_cold"),
              UnorderedElementsAre(Pair("threshold_rows", "1")));
  auto built =
      engine::CreatePolicy("cpu_cold", engine::PolicyTestConfig("cpu_cold"));
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ((*built)->name(), "cpu_cold");
}

}  // namespace
}  // namespace moeserve::policies
