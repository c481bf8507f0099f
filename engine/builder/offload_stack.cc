#include "engine/builder/offload_stack.h"

#include <utility>

#include "base/status_macros.h"
#include "policies/registry.h"

namespace moeserve::engine {

absl::StatusOr<std::unique_ptr<OffloadStack>> OffloadStack::Create(
    const ModelWeights* weights, const EngineSpec& spec,
    uint64_t capacity_bytes, kernels::Backend* fast_tier_backend,
    metrics::Registry* registry, PredictFn predict) {
  auto stack = std::unique_ptr<OffloadStack>(new OffloadStack());
  MOESERVE_ASSIGN_OR_RETURN(
      stack->policy_, policies::CreatePolicy(spec.policy, spec.policy_config));
  MOESERVE_ASSIGN_OR_RETURN(stack->slow_, spec.slow_tier == "disk"
                                              ? NewDiskSlowTier(weights)
                                              : NewHostSlowTier(weights));
  MOESERVE_ASSIGN_OR_RETURN(
      stack->residency_,
      ExpertResidency::Create(weights, stack->slow_.get(), capacity_bytes,
                              spec.link, stack->policy_.get(),
                              std::move(predict), registry, spec.name,
                              fast_tier_backend));
  return stack;
}

}  // namespace moeserve::engine
