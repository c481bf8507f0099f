// on_demand: MoE-OnDemand (seeds 000 §II-A, the baseline of §IV).
//
// The routed experts are fetched when the router asks for them (the
// engine's own demand loads after OnRoute; this policy issues no prefetch),
// and nothing is kept beyond the layer: OnLayerDone(layer) calls Evict, in
// ascending order, on every expert of that layer that OnLoaded reported and
// OnEvicted has not (the residency keeps ones in use or pinned).
// ChooseVictims (needed only when one layer's experts overflow the fast
// tier): lowest (layer, expert) first.
//
// Config keys: none (any key is INVALID_ARGUMENT).
// Thread safety: none needed; every hook comes from the engine's step
// thread (offload_policy.h).
#ifndef MOESERVE_POLICIES_ON_DEMAND_H_
#define MOESERVE_POLICIES_ON_DEMAND_H_

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"
#include "policies/internal/loaded_experts.h"

namespace moeserve::policies {

class OnDemandPolicy : public engine::OffloadPolicy {
 public:
  static absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> Create(
      const engine::PolicyConfig& config);

  std::string_view name() const override { return "on_demand"; }
  void Attach(engine::ResidencyControl* control) override {
    control_ = control;
  }
  void OnLoaded(engine::ExpertId id) override { loaded_.OnLoaded(id); }
  void OnEvicted(engine::ExpertId id) override { loaded_.OnEvicted(id); }
  void OnLayerDone(int layer) override;
  void ChooseVictims(std::span<const engine::ExpertId> candidates, int count,
                     std::vector<engine::ExpertId>* victims) override;

 private:
  engine::ResidencyControl* control_ = nullptr;  // not owned
  internal::LoadedExperts loaded_;
};

}  // namespace moeserve::policies

#endif  // MOESERVE_POLICIES_ON_DEMAND_H_
