// Test-only in-memory ResidencyControl for the policy tests.
//
// N slots, no transfers: an expert is resident as soon as it is loaded.
// Records every Prefetch/Pin/Unpin/Evict call and every PredictExperts call;
// PredictExperts answers what set_prediction says. When a slot is needed it
// asks the attached policy's ChooseVictims, as ExpertResidency does (the
// candidates: resident, not pinned, not in use; ascending). Acquire/RunLayer
// play the engine's part. Thread safety: none (tests are single-threaded).
#ifndef MOESERVE_POLICIES_INTERNAL_FAKE_RESIDENCY_CONTROL_H_
#define MOESERVE_POLICIES_INTERNAL_FAKE_RESIDENCY_CONTROL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "engine/offload/offload_policy.h"
#include "gtest/gtest.h"
#include "policies/registry.h"

namespace moeserve::policies::testing {

using Id = std::pair<int, int>;  // (layer, expert), printable by gtest

// P::Create(config); a refusal fails the calling test.
template <typename P>
std::unique_ptr<engine::OffloadPolicy> CreatePolicyOrFail(
    const PolicyConfig& config = {}) {
  auto policy = P::Create(config);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return *std::move(policy);
}

inline Id ToPair(engine::ExpertId id) { return {id.layer, id.expert}; }
inline std::vector<Id> ToPairs(const std::vector<engine::ExpertId>& ids) {
  std::vector<Id> out;
  for (const auto& id : ids) out.push_back(ToPair(id));
  return out;
}

class FakeResidencyControl : public engine::ResidencyControl {
 public:
  struct PredictCall {
    int layer;
    const float* hidden;
    int64_t n;
    int k;
  };

  FakeResidencyControl(int layers, int experts, int k, int slots)
      : layers_(layers), experts_(experts), k_(k), slots_(slots) {}

  // Attaches `policy` (Attach is called) for ChooseVictims.
  void set_policy(engine::OffloadPolicy* policy) {
    policy_ = policy;
    policy->Attach(this);
  }
  void set_prediction(int layer, std::vector<int> experts) {
    predictions_[layer] = std::move(experts);
  }

  int num_layers() const override { return layers_; }
  int num_experts() const override { return experts_; }
  int experts_per_token() const override { return k_; }
  int capacity_slots() const override { return slots_; }
  bool IsResident(engine::ExpertId id) const override {
    return resident_.count(ToPair(id)) > 0;
  }
  bool Prefetch(engine::ExpertId id) override {
    prefetches.push_back(ToPair(id));
    return Load(ToPair(id));
  }
  bool Pin(engine::ExpertId id) override {
    pin_calls.push_back(ToPair(id));
    if (!IsResident(id) && !Load(ToPair(id))) return false;
    pinned_.insert(ToPair(id));
    return true;
  }
  void Unpin(engine::ExpertId id) override {
    unpins.push_back(ToPair(id));
    pinned_.erase(ToPair(id));
  }
  void Evict(engine::ExpertId id) override {
    evict_calls.push_back(ToPair(id));
    if (pinned_.count(ToPair(id)) || in_use_.count(ToPair(id))) return;
    resident_.erase(ToPair(id));
  }
  std::vector<int> PredictExperts(int layer, const float* hidden, int64_t n,
                                  int k) override {
    predict_calls.push_back({layer, hidden, n, k});
    auto it = predictions_.find(layer);
    return it == predictions_.end() ? std::vector<int>{} : it->second;
  }

  // The engine's acquire of one routed expert: OnAccess, then load on a miss.
  void Acquire(engine::ExpertId id) {
    policy_->OnAccess(id);
    if (!IsResident(id)) {
      ++misses;
      Load(ToPair(id));
    }
    in_use_.insert(ToPair(id));
  }
  // One MoE layer as the engine runs it: OnRoute, Acquire each, release all,
  // OnLayerDone.
  void RunLayer(int layer, const std::vector<int>& experts,
                const float* hidden = nullptr, int64_t n = 0) {
    std::vector<int> counts(experts.size(), 1);
    policy_->OnRoute(layer, experts, counts, hidden, n);
    for (int e : experts) Acquire({layer, e});
    in_use_.clear();
    policy_->OnLayerDone(layer);
  }

  const std::set<Id>& resident() const { return resident_; }
  const std::set<Id>& pinned() const { return pinned_; }

  std::vector<Id> prefetches, pin_calls, unpins, evict_calls;
  std::vector<Id> victims;  // what ChooseVictims gave, in order
  std::vector<PredictCall> predict_calls;
  int misses = 0;

 private:
  bool Load(Id id) {
    if (resident_.count(id)) return false;
    if (static_cast<int>(resident_.size()) >= slots_) {
      std::vector<engine::ExpertId> candidates, chosen;
      for (const Id& r : resident_) {
        if (!pinned_.count(r) && !in_use_.count(r)) {
          candidates.push_back({r.first, r.second});
        }
      }
      if (candidates.empty()) return false;
      policy_->ChooseVictims(candidates, 1, &chosen);
      if (chosen.size() != 1) return false;
      victims.push_back(ToPair(chosen[0]));
      resident_.erase(ToPair(chosen[0]));
    }
    resident_.insert(id);
    return true;
  }

  const int layers_, experts_, k_, slots_;
  engine::OffloadPolicy* policy_ = nullptr;
  std::map<int, std::vector<int>> predictions_;
  std::set<Id> resident_, pinned_, in_use_;
};

}  // namespace moeserve::policies::testing

#endif  // MOESERVE_POLICIES_INTERNAL_FAKE_RESIDENCY_CONTROL_H_
