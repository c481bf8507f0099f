// The fake residency against the real one. The same engine-shaped sequence
// (steps of MoE layers with seeded random routing and router predictions)
// runs through FakeResidencyControl and through ExpertResidency (host slow
// tier, the mixtral_tiny fixture: 2 layers x 8 experts, top-2) for every
// registered policy, with its test config, at several fast-tier sizes. Both
// must give the same hook trace (every hook, ChooseVictims with its
// candidates and choice, every ResidencyControl lever and its result), the
// same hits, misses and prefetch outcomes, and the same resident experts.
//
// The fake's loads complete at once; the real link is asynchronous. So the
// real run waits for its loads (WaitIdle) after each Prefetch or Pin and at
// each OnAccess: before the policy or the residency looks at the slots
// again. Where loads land within one delivery of OnLoaded/OnEvicted may then
// still differ, so each delivery is compared as a sorted set.
#include "policies/internal/fake_residency_control.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/offload/expert_residency.h"
#include "engine/offload/policy_registry.h"
#include "engine/offload/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::policies {
namespace {

using engine::ExpertId;
using ::testing::ElementsAre;
using testing::Id;

std::string Str(ExpertId id) { return absl::StrCat(id.layer, ",", id.expert); }

// Forwards every hook to `inner` and every lever it pulls to the residency,
// logging both. With a `wait` function, calls it after each Prefetch/Pin and
// at each OnAccess (the real residency's WaitIdle).
class TracingPolicy : public engine::OffloadPolicy,
                      private engine::ResidencyControl {
 public:
  explicit TracingPolicy(engine::OffloadPolicy* inner) : inner_(inner) {}
  void set_wait(std::function<void()> wait) { wait_ = std::move(wait); }

  // OnLoaded/OnEvicted runs sorted.
  std::vector<std::string> trace() const {
    std::vector<std::string> out = trace_;
    auto is_event = [](const std::string& s) {
      return s.starts_with("loaded ") || s.starts_with("evicted ");
    };
    for (auto it = out.begin(); it != out.end();) {
      auto end = std::find_if_not(it, out.end(), is_event);
      std::sort(it, end);
      it = end == out.end() ? end : end + 1;
    }
    return out;
  }

  // OffloadPolicy.
  std::string_view name() const override { return inner_->name(); }
  void Attach(engine::ResidencyControl* control) override {
    control_ = control;
    inner_->Attach(this);
  }
  void OnStepBegin(const engine::StepInfo& info) override {
    Log(absl::StrCat("begin ", info.step));
    inner_->OnStepBegin(info);
  }
  void OnRoute(int layer, std::span<const int> experts,
               std::span<const int> counts, const float* hidden,
               int64_t n) override {
    Log(absl::StrCat("route ", layer, " ", absl::StrJoin(experts, " ")));
    inner_->OnRoute(layer, experts, counts, hidden, n);
  }
  void OnAccess(ExpertId id) override {
    Log("access " + Str(id));
    inner_->OnAccess(id);
    Wait();
  }
  void OnLayerDone(int layer) override {
    Log(absl::StrCat("done ", layer));
    inner_->OnLayerDone(layer);
  }
  void OnStepEnd(const engine::StepStats& stats) override {
    Log(absl::StrCat("end ", stats.step));
    inner_->OnStepEnd(stats);
  }
  void OnLoaded(ExpertId id) override {
    Log("loaded " + Str(id));
    inner_->OnLoaded(id);
  }
  void OnEvicted(ExpertId id) override {
    Log("evicted " + Str(id));
    inner_->OnEvicted(id);
  }
  void ChooseVictims(std::span<const ExpertId> candidates, int count,
                     std::vector<ExpertId>* victims) override {
    const size_t before = victims->size();
    inner_->ChooseVictims(candidates, count, victims);
    std::string line = "victims";
    for (const ExpertId& c : candidates) absl::StrAppend(&line, " ", Str(c));
    line += " ->";
    for (size_t i = before; i < victims->size(); ++i) {
      absl::StrAppend(&line, " ", Str((*victims)[i]));
    }
    Log(line);
  }

 private:
  // ResidencyControl, as the inner policy sees it.
  int num_layers() const override { return control_->num_layers(); }
  int num_experts() const override { return control_->num_experts(); }
  int experts_per_token() const override {
    return control_->experts_per_token();
  }
  int capacity_slots() const override { return control_->capacity_slots(); }
  bool IsResident(ExpertId id) const override {
    return control_->IsResident(id);
  }
  bool Prefetch(ExpertId id) override {
    const bool started = control_->Prefetch(id);
    Log(absl::StrCat("prefetch ", Str(id), started ? " started" : ""));
    Wait();
    return started;
  }
  bool Pin(ExpertId id) override {
    const bool pinned = control_->Pin(id);
    Log(absl::StrCat("pin ", Str(id), pinned ? "" : " refused"));
    Wait();
    return pinned;
  }
  void Unpin(ExpertId id) override {
    Log("unpin " + Str(id));
    control_->Unpin(id);
  }
  void Evict(ExpertId id) override {
    Log("evict " + Str(id));
    control_->Evict(id);
  }
  std::vector<int> PredictExperts(int layer, const float* hidden, int64_t n,
                                  int k) override {
    return control_->PredictExperts(layer, hidden, n, k);
  }
  // Forwarded so the in-place decisions (utility) are compared too.
  // expert_costs() is not: the fake's are unmeasured (zero), the
  // residency's measured, and a policy may decide by them.
  bool ComputeInPlace(ExpertId id) override {
    const bool accepted = control_->ComputeInPlace(id);
    Log(absl::StrCat("inplace ", Str(id), accepted ? "" : " refused"));
    return accepted;
  }

  void Log(std::string line) { trace_.push_back(std::move(line)); }
  void Wait() {
    if (wait_) wait_();
  }

  engine::OffloadPolicy* const inner_;
  engine::ResidencyControl* control_ = nullptr;
  std::function<void()> wait_;
  std::vector<std::string> trace_;
};

// One layer's routing.
struct Layer {
  int layer = 0;
  std::vector<int> experts;  // ascending, distinct
  std::vector<int> counts;
  std::vector<int> next_prediction;  // for layer + 1, if any
};

// `steps` steps over every layer: `k` distinct experts per layer with 1-3
// tokens each, and a prediction of `k` experts for the next layer.
std::vector<std::vector<Layer>> Workload(int steps, int layers, int experts,
                                         int k, uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&] {
    std::vector<int> all(experts);
    for (int e = 0; e < experts; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(k);
    std::sort(all.begin(), all.end());
    return all;
  };
  std::vector<std::vector<Layer>> out(steps);
  for (auto& step : out) {
    for (int l = 0; l < layers; ++l) {
      Layer layer{.layer = l, .experts = pick()};
      for (size_t i = 0; i < layer.experts.size(); ++i) {
        layer.counts.push_back(1 + static_cast<int>(rng() % 3));
      }
      if (l + 1 < layers) layer.next_prediction = pick();
      step.push_back(std::move(layer));
    }
  }
  return out;
}

const float kHidden[64] = {};  // The router input; only its address matters.

struct Outcome {
  std::vector<std::string> trace;
  engine::ResidencyStats stats;
  std::set<Id> resident;
};

std::unique_ptr<engine::OffloadPolicy> NewPolicy(const std::string& name) {
  auto policy = engine::CreatePolicy(name, engine::PolicyTestConfig(name));
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? *std::move(policy) : nullptr;
}

Outcome RunFake(const std::string& name, int slots,
                const engine::ModelWeights& w,
                const std::vector<std::vector<Layer>>& workload) {
  auto inner = NewPolicy(name);
  TracingPolicy policy(inner.get());
  testing::FakeResidencyControl fake(
      w.num_layers(), w.num_experts(),
      static_cast<int>(w.config().num_experts_per_tok), slots);
  fake.set_policy(&policy);
  for (size_t s = 0; s < workload.size(); ++s) {
    fake.BeginStep(static_cast<int64_t>(s));
    for (const Layer& l : workload[s]) {
      if (!l.next_prediction.empty()) {
        fake.set_prediction(l.layer + 1, l.next_prediction);
      }
      fake.RunLayer(l.layer, l.experts, kHidden, 1, l.counts);
    }
    fake.EndStep();
  }
  return {policy.trace(), fake.stats(), fake.resident()};
}

Outcome RunReal(const std::string& name, int slots,
                const engine::ModelWeights& w, engine::SlowTier* slow,
                const std::vector<std::vector<Layer>>& workload) {
  auto inner = NewPolicy(name);
  TracingPolicy policy(inner.get());
  // The layers' predictions the workload scripts, as the model's routers.
  struct ScriptedProbe final : engine::RouterProbe {
    std::map<int, std::vector<int>> predictions;
    std::vector<int> PredictExperts(int layer, const float*, int64_t,
                                    int) override {
      return predictions[layer];
    }
  } probe;
  std::map<int, std::vector<int>>& predictions = probe.predictions;
  auto r = engine::ExpertResidency::Create(
      &w, slow, slots * w.expert({0, 0}).bytes, engine::LinkOptions{}, &policy,
      nullptr, name);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  engine::ExpertResidency* res = r->get();
  res->AttachRouterProbe(&probe);
  policy.set_wait([res] { res->WaitIdle(); });
  for (size_t s = 0; s < workload.size(); ++s) {
    res->BeginStep({.step = static_cast<int64_t>(s)});
    for (const Layer& l : workload[s]) {
      if (!l.next_prediction.empty()) {
        predictions[l.layer + 1] = l.next_prediction;
      }
      res->BeginLayer(l.layer, l.experts, l.counts, kHidden, 1);
      for (int e : l.experts) {
        if (res->Acquire({l.layer, e}).ok()) res->Release({l.layer, e});
      }
      res->EndLayer(l.layer);
    }
    res->EndStep();
  }
  res->WaitIdle();
  Outcome out{policy.trace(), res->stats(), {}};
  for (int l = 0; l < w.num_layers(); ++l) {
    for (int e = 0; e < w.num_experts(); ++e) {
      if (res->IsResident({l, e})) out.resident.insert({l, e});
    }
  }
  return out;
}

TEST(FakeResidencyControlTest, DemandLoadsAfterOnRouteAndDeliversHooks) {
  auto lru = NewPolicy("lru");
  TracingPolicy policy(lru.get());
  testing::FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/2,
                                     /*slots=*/2);
  fake.set_policy(&policy);
  fake.BeginStep(0);
  fake.RunLayer(0, {1, 2});
  fake.RunLayer(1, {3, 4});
  fake.EndStep();
  EXPECT_THAT(policy.trace(),
              ElementsAre("begin 0",                                   //
                          "route 0 1 2",                               //
                          "access 0,1", "loaded 0,1", "loaded 0,2",    //
                          "access 0,2", "done 0",                      //
                          "route 1 3 4",                               //
                          "victims 0,1 0,2 -> 0,1",                    //
                          "victims 0,2 -> 0,2",                        //
                          "access 1,3", "evicted 0,1", "evicted 0,2",  //
                          "loaded 1,3", "loaded 1,4",                  //
                          "access 1,4", "done 1", "end 0"));
  EXPECT_EQ(fake.misses(), 4);
  EXPECT_THAT(fake.victims, ElementsAre(Id{0, 1}, Id{0, 2}));
}

// Runs `on_route` in OnRoute and `on_done` in OnLayerDone against the
// control; victims in candidate order.
class ScriptedPolicy : public engine::OffloadPolicy {
 public:
  std::function<void(engine::ResidencyControl*, int)> on_route, on_done;

  std::string_view name() const override { return "scripted"; }
  void Attach(engine::ResidencyControl* control) override {
    control_ = control;
  }
  void OnRoute(int layer, std::span<const int>, std::span<const int>,
               const float*, int64_t) override {
    if (on_route) on_route(control_, layer);
  }
  void OnLayerDone(int layer) override {
    if (on_done) on_done(control_, layer);
  }
  void ChooseVictims(std::span<const ExpertId> candidates, int count,
                     std::vector<ExpertId>* victims) override {
    for (int i = 0; i < count && i < static_cast<int>(candidates.size()); ++i)
      victims->push_back(candidates[i]);
  }

 private:
  engine::ResidencyControl* control_ = nullptr;
};

// ComputeInPlace as offload_policy.h has it: only in OnRoute, for a routed
// expert of that layer that is not resident; no demand load, counted as
// inplace; a hit if it became resident meanwhile; refused by a control
// that cannot compute in place. Costs and gauges are recorded.
TEST(FakeResidencyControlTest, ComputeInPlaceOnlyForRoutedNonResident) {
  testing::FakeResidencyControl fake(/*layers=*/2, /*experts=*/8, /*k=*/2,
                                     /*slots=*/2);
  ScriptedPolicy policy;
  std::vector<bool> answers;
  policy.on_route = [&answers](engine::ResidencyControl* c, int layer) {
    if (layer == 0) {
      answers.push_back(c->ComputeInPlace({0, 1}));  // routed, not resident
      answers.push_back(c->ComputeInPlace({0, 2}));  // resident
      answers.push_back(c->ComputeInPlace({0, 5}));  // not routed
      answers.push_back(c->ComputeInPlace({1, 1}));  // another layer
    } else {
      answers.push_back(c->ComputeInPlace({1, 4}));
      c->Prefetch({1, 4});  // resident by its acquire: an ordinary hit
    }
  };
  policy.on_done = [&answers](engine::ResidencyControl* c, int layer) {
    answers.push_back(c->ComputeInPlace({layer, 1}));  // outside OnRoute
  };
  fake.set_policy(&policy);
  ASSERT_TRUE(fake.Prefetch({0, 2}));
  fake.BeginStep(0);
  fake.RunLayer(0, {1, 2});
  EXPECT_THAT(answers, ElementsAre(true, false, false, false, false));
  engine::ResidencyStats st = fake.stats();
  EXPECT_EQ(st.inplace, 1u);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 0u);
  EXPECT_EQ(fake.resident(), (std::set<Id>{{0, 2}}));
  fake.RunLayer(1, {4});
  EXPECT_EQ(answers[5], true);
  st = fake.stats();
  EXPECT_EQ(st.inplace, 1u);
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.misses, 0u);
  fake.EndStep();
  EXPECT_THAT(fake.inplace_calls,
              ElementsAre(Id{0, 1}, Id{0, 2}, Id{0, 5}, Id{1, 1}, Id{0, 1},
                          Id{1, 4}, Id{1, 1}));

  // A control that cannot compute in place: refused, demand-loaded.
  fake.set_compute_in_place(false);
  answers.clear();
  policy.on_done = nullptr;
  fake.BeginStep(1);
  fake.RunLayer(0, {1, 3});
  EXPECT_FALSE(answers[0]);
  st = fake.stats();
  EXPECT_EQ(st.inplace, 1u);
  EXPECT_EQ(st.misses, 2u);  // (0,1) refused, (0,3) never asked
  fake.EndStep();

  engine::ResidencyControl* control = &fake;
  EXPECT_EQ(control->expert_costs().link_seconds, 0);
  fake.set_expert_costs({.link_seconds = 1,
                         .fast_compute_seconds = 2,
                         .inplace_compute_seconds = 3});
  EXPECT_EQ(control->expert_costs().inplace_compute_seconds, 3);
  control->SetPolicyGauge("moeserve_x", "help", 1);
  control->SetPolicyGauge("moeserve_x", "help", 2);
  EXPECT_EQ(fake.gauges, (std::map<std::string, double>{{"moeserve_x", 2}}));
}

class FakeVersusResidencyTest
    : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(FakeVersusResidencyTest, SameTraceSameCounts) {
  const auto& [name, slots] = GetParam();
  auto weights = engine::testing::LoadFixture(/*pack=*/true);
  ASSERT_NE(weights, nullptr);
  auto host = engine::NewHostSlowTier(weights.get());
  ASSERT_TRUE(host.ok()) << host.status();
  const auto workload =
      Workload(/*steps=*/6, weights->num_layers(), weights->num_experts(),
               static_cast<int>(weights->config().num_experts_per_tok),
               /*seed=*/slots);

  const Outcome fake = RunFake(name, slots, *weights, workload);
  const Outcome real = RunReal(name, slots, *weights, host->get(), workload);

  EXPECT_EQ(fake.trace, real.trace);
  EXPECT_EQ(fake.resident, real.resident);
  EXPECT_EQ(fake.stats.hits, real.stats.hits);
  EXPECT_EQ(fake.stats.misses, real.stats.misses);
  EXPECT_EQ(fake.stats.acquire_failures, real.stats.acquire_failures);
  EXPECT_EQ(fake.stats.demand_evicted_unused, real.stats.demand_evicted_unused);
  EXPECT_EQ(fake.stats.prefetch_loads, real.stats.prefetch_loads);
  EXPECT_EQ(fake.stats.prefetch_used, real.stats.prefetch_used);
  EXPECT_EQ(fake.stats.prefetch_wasted, real.stats.prefetch_wasted);
  EXPECT_EQ(fake.stats.prefetched_unused_resident,
            real.stats.prefetched_unused_resident);
  EXPECT_EQ(fake.stats.inplace, real.stats.inplace);
  if (name == "utility") {
    // Its cold experts (level < initial_tau, unmeasured costs) are computed
    // in place on both.
    EXPECT_GT(real.stats.inplace, 0u);
  }
  EXPECT_EQ(real.stats.link_transfers,
            real.stats.misses + real.stats.prefetch_loads);
  EXPECT_GT(real.stats.hits + real.stats.misses, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    EveryRegisteredPolicy, FakeVersusResidencyTest,
    ::testing::Combine(::testing::ValuesIn(engine::RegisteredPolicies()),
                       ::testing::Values(2, 3, 5, 16)),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param), "_", std::get<1>(info.param),
                          "slots");
    });

}  // namespace
}  // namespace moeserve::policies
