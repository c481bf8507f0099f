#include "engine/spec_decode/self_drafter.h"

#include <utility>

#include "base/status_macros.h"
#include "engine/spec_decode/drafter_registry.h"

namespace moeserve::engine::spec_decode {

absl::StatusOr<std::unique_ptr<Drafter>> SelfDrafter::Create(
    const DrafterContext& context) {
  if (context.weights == nullptr || context.target == nullptr ||
      context.kv == nullptr) {
    return absl::InvalidArgumentError(
        "self drafter: needs the target model and its KV cache");
  }
  MOESERVE_ASSIGN_OR_RETURN(ExpertAffinity affinity,
                            ExpertAffinity::Compute(*context.weights));
  return std::unique_ptr<Drafter>(
      new SelfDrafter(context, std::move(affinity)));
}

SelfDrafter::SelfDrafter(const DrafterContext& context, ExpertAffinity affinity)
    : ModelDrafter(context, context.draft_experts),
      affinity_(std::move(affinity)) {}

void SelfDrafter::BeginDraft() {
  const int layers = num_layers(), experts = num_experts();
  usable_.assign(layers, {});
  remap_.assign(static_cast<size_t>(layers) * experts, -1);
}

// The experts of `layer` the draft may use now (ready, and draft experts by
// the policy's word), and where every expert maps to. Asked
// again at every layer of every draft position: the policy may prefetch
// (and so evict) between positions (OnLookahead), and an expert that was
// ready at the draft's start may be gone by then.
void SelfDrafter::RefreshLayer(int layer) {
  const int experts = num_experts();
  std::vector<int>& usable = usable_[layer];
  usable.clear();
  const ResidencyControl* residency = context().residency;
  const OffloadPolicy* policy = context().policy;
  for (int e = 0; e < experts; ++e) {
    const ExpertId id{layer, e};
    if ((residency == nullptr || residency->IsReady(id)) &&
        (policy == nullptr || policy->IsDraftExpert(id))) {
      usable.push_back(e);
    }
  }
  for (int e = 0; e < experts; ++e) {
    remap_[static_cast<size_t>(layer) * experts + e] =
        affinity_.Nearest(layer, e, usable);
  }
}

void SelfDrafter::Remap(int layer, int64_t n, int k, std::span<int32_t> ids,
                        std::span<float> weights) {
  RefreshLayer(layer);
  const int32_t* remap =
      remap_.data() + static_cast<size_t>(layer) * num_experts();
  for (int64_t t = 0; t < n; ++t) {
    int32_t* row = ids.data() + t * k;
    float* w = weights.data() + t * k;
    for (int j = 0; j < k; ++j) {
      row[j] = row[j] >= 0 ? remap[row[j]] : -1;
      if (row[j] < 0) continue;
      // Two choices remapped onto one expert: compute it once with both
      // weights (the same sum, half the work).
      for (int i = 0; i < j; ++i) {
        if (row[i] == row[j]) {
          w[i] += w[j];
          row[j] = -1;
          break;
        }
      }
    }
  }
}

MOESERVE_REGISTER_DRAFTER("self", SelfDrafter::Create);

}  // namespace moeserve::engine::spec_decode
