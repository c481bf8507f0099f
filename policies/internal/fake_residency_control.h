// Test-only ResidencyControl for the policy tests: the real residency with
// an infinitely fast link and no bytes.
//
// It runs engine/offload's SlotPool (slot states, pins, in-use counts, the
// protected tiers, victims from the policy's ChooseVictims), HookQueue and
// ResidencyAccounting as ExpertResidency does, with a loader that completes
// every load the moment it starts. It plays the engine's part in
// ExpertResidency's order:
//   BeginStep   deliver OnLoaded/OnEvicted; OnStepBegin.
//   RunLayer    the layer's experts become protected; deliver; OnRoute;
//               demand-load every routed expert that is not resident, as far
//               as slots can be had without waiting (victims from outside
//               the layer); then per expert, in order, as the forward pass
//               does: OnAccess, acquire (a miss loads it, evicting through
//               ChooseVictims), deliver, release; unprotect; deliver;
//               OnLayerDone.
//   EndStep     deliver; OnStepEnd with the token counts RunLayer routed.
// So a policy that passes its unit test here makes the same decisions in the
// engine whenever the engine's loads finish before the policy next looks
// (fake_residency_control_test checks that against ExpertResidency for
// every registered policy).
//
// In-place compute (ComputeInPlace) as ExpertResidency's contract has it:
// accepted only during OnRoute, for an expert routed in that layer that is
// not resident (and while set_compute_in_place(true), the default; false
// plays a device fast tier that refuses every call). An accepted expert is
// not demand-loaded; at its acquire it is served in place (counted as
// `inplace`, no slot, no load) unless it has become resident meanwhile
// (then an ordinary hit). The acceptance holds for that layer only.
//
// Records every Prefetch/Pin/Unpin/Evict/ComputeInPlace call, every
// PredictExperts call (answered from set_prediction), every SetPolicyGauge
// value and every victim (an expert evicted to make room, not by Evict).
// expert_costs() returns what set_expert_costs set (default: nothing
// measured).
// Thread safety: none; single-threaded tests only.
#ifndef MOESERVE_POLICIES_INTERNAL_FAKE_RESIDENCY_CONTROL_H_
#define MOESERVE_POLICIES_INTERNAL_FAKE_RESIDENCY_CONTROL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/offload/hook_queue.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"
#include "engine/offload/residency_accounting.h"
#include "engine/offload/slot_pool.h"
#include "gtest/gtest.h"

namespace moeserve::policies::testing {

using Id = std::pair<int, int>;  // (layer, expert), printable by gtest

// P::Create(config); a refusal fails the calling test.
template <typename P>
std::unique_ptr<engine::OffloadPolicy> CreatePolicyOrFail(
    const engine::PolicyConfig& config = {}) {
  auto policy = P::Create(config);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return *std::move(policy);
}

// A scripted draft window: [position][layer] -> experts.
using Window = std::vector<std::vector<std::vector<int>>>;

// The lookahead of a draft that has produced the first `n` positions of
// `full` and plans full.size() of them.
inline engine::ExpertLookahead Prefix(const Window& full, int n) {
  engine::ExpertLookahead la;
  la.experts.assign(full.begin(), full.begin() + n);
  la.planned_positions = static_cast<int>(full.size());
  return la;
}

inline Id ToPair(engine::ExpertId id) { return {id.layer, id.expert}; }
inline std::vector<Id> ToPairs(const std::vector<engine::ExpertId>& ids) {
  std::vector<Id> out;
  for (const auto& id : ids) out.push_back(ToPair(id));
  return out;
}

class FakeResidencyControl : public engine::ResidencyControl,
                             private engine::SlotPool::Loader,
                             private engine::SlotPool::Observer {
 public:
  struct PredictCall {
    int layer;
    const float* hidden;
    int64_t n;
    int k;
  };

  FakeResidencyControl(int layers, int experts, int k, int slots);
  ~FakeResidencyControl() override;

  // Attaches `policy` (Attach is called); every hook goes to it.
  void set_policy(engine::OffloadPolicy* policy);
  void set_prediction(int layer, std::vector<int> experts) {
    predictions_[layer] = std::move(experts);
  }
  void set_expert_costs(const engine::ExpertCosts& costs) { costs_ = costs; }
  // false: every ComputeInPlace is refused (a device fast tier).
  void set_compute_in_place(bool supported) { inplace_supported_ = supported; }

  // The engine's part (see the header comment).
  void BeginStep(int64_t step = 0);
  // `counts` (default: 1 each) are the tokens routed to each expert.
  void RunLayer(int layer, const std::vector<int>& experts,
                const float* hidden = nullptr, int64_t n = 0,
                std::vector<int> counts = {});
  void EndStep();
  // A drafter's lookahead, as ExpertResidency::OnLookahead: deliver, then
  // OnLookahead.
  void Lookahead(const engine::ExpertLookahead& lookahead);

  // ResidencyControl.
  int num_layers() const override { return layers_; }
  int num_experts() const override { return experts_; }
  int experts_per_token() const override { return k_; }
  int capacity_slots() const override { return slots_; }
  bool IsResident(engine::ExpertId id) const override;
  bool Prefetch(engine::ExpertId id) override;
  // Recorded in `prefetches` and, with its priority, in `prefetch_priorities`
  // (Prefetch(id) is priority 0). Loads still finish at once.
  bool Prefetch(engine::ExpertId id, int priority) override;
  // Recorded in `prefetch_batches` (ids, priority), and each id in
  // `prefetches` / `prefetch_priorities`; one SlotPool::LoadManyNoWait, as
  // ExpertResidency does.
  int PrefetchBatch(std::span<const engine::ExpertId> ids,
                    int priority) override;
  bool Pin(engine::ExpertId id) override;
  void Unpin(engine::ExpertId id) override;
  void Evict(engine::ExpertId id) override;
  // Recorded in `inplace_calls` (accepted or not); see the header comment.
  bool ComputeInPlace(engine::ExpertId id) override;
  engine::ExpertCosts expert_costs() const override { return costs_; }
  // The latest value per name in `gauges`.
  void SetPolicyGauge(std::string_view name, std::string_view help,
                      double value) override;
  std::vector<int> PredictExperts(int layer, const float* hidden, int64_t n,
                                  int k) override;

  std::set<Id> resident() const;
  std::set<Id> pinned() const;
  // The accounting's counters (hits, misses, prefetch_*, ...) and slot
  // counts, as ExpertResidency::stats() has them; no link fields.
  engine::ResidencyStats stats() const;
  int misses() const { return static_cast<int>(stats().misses); }

  std::vector<Id> prefetches, pin_calls, unpins, evict_calls;
  std::vector<std::pair<Id, int>> prefetch_priorities;  // (id, priority)
  std::vector<std::pair<std::vector<Id>, int>> prefetch_batches;
  std::vector<Id> victims;  // evicted to make room, in order
  std::vector<PredictCall> predict_calls;
  std::vector<Id> inplace_calls;
  std::map<std::string, double> gauges;

 private:
  // SlotPool::Loader: the load is done at once.
  void StartLoad(int slot, engine::ExpertId id) override;
  // SlotPool::Observer: records victims.
  void OnEvicted(engine::ExpertId id, bool prefetched_unused,
                 bool demand_unused) override;
  void Deliver() { hooks_.Deliver(policy_); }

  const int layers_, experts_, k_, slots_;
  engine::OffloadPolicy* policy_ = nullptr;
  std::map<int, std::vector<int>> predictions_;
  engine::ResidencyAccounting accounting_;
  engine::HookQueue hooks_;
  std::unique_ptr<engine::SlotPool> pool_;  // Made by set_policy.
  bool in_evict_ = false;
  int64_t step_ = 0;
  std::vector<uint32_t> activations_;
  engine::ExpertCosts costs_;
  bool inplace_supported_ = true;
  // While OnRoute runs: its layer and experts (-1 / empty otherwise).
  int route_layer_ = -1;
  std::vector<int> route_experts_;
  std::set<int> inplace_;  // experts of the running layer accepted in place
};

}  // namespace moeserve::policies::testing

#endif  // MOESERVE_POLICIES_INTERNAL_FAKE_RESIDENCY_CONTROL_H_
