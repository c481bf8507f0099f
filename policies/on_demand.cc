#include "policies/on_demand.h"

#include "policies/internal/recency.h"

namespace moeserve::policies {

absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> OnDemandPolicy::Create(
    const engine::PolicyConfig& config) {
  absl::Status keys = engine::CheckConfigKeys("on_demand", config, {});
  if (!keys.ok()) return keys;
  return std::make_unique<OnDemandPolicy>();
}

void OnDemandPolicy::OnLayerDone(int layer) {
  if (control_ == nullptr) return;
  for (int e : loaded_.OfLayer(layer)) control_->Evict({layer, e});
}

void OnDemandPolicy::ChooseVictims(std::span<const engine::ExpertId> candidates,
                                   int count,
                                   std::vector<engine::ExpertId>* victims) {
  internal::AppendLowestFirst(
      candidates, count, [](engine::ExpertId) { return uint64_t{0}; }, victims);
}

MOESERVE_REGISTER_POLICY("on_demand", OnDemandPolicy::Create);

}  // namespace moeserve::policies
