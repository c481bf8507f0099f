#include "server/offload_stack.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moeserve::server {

uint64_t ExpertCacheBytes(const engine::ModelWeights& weights, double ratio,
                          int64_t megabytes) {
  const uint64_t blob = weights.expert({0, 0}).bytes;
  const uint64_t bytes =
      megabytes > 0 ? static_cast<uint64_t>(megabytes) << 20
                    : static_cast<uint64_t>(std::ceil(
                          ratio * static_cast<double>(weights.expert_bytes())));
  return std::max(bytes, blob);
}

absl::StatusOr<std::unique_ptr<OffloadStack>> OffloadStack::Create(
    const engine::ModelWeights* weights, const OffloadOptions& options,
    engine::PredictFn predict) {
  auto stack = std::unique_ptr<OffloadStack>(new OffloadStack());
  absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> policy =
      policies::CreatePolicy(options.policy, options.policy_config);
  if (!policy.ok()) return policy.status();
  stack->policy_ = *std::move(policy);
  absl::StatusOr<std::unique_ptr<engine::SlowTier>> slow =
      options.slow_tier == "disk" ? engine::NewDiskSlowTier(weights)
                                  : engine::NewHostSlowTier(weights);
  if (!slow.ok()) return slow.status();
  stack->slow_ = *std::move(slow);
  absl::StatusOr<std::unique_ptr<engine::ExpertResidency>> residency =
      engine::ExpertResidency::Create(
          weights, stack->slow_.get(), options.capacity_bytes, options.link,
          stack->policy_.get(), std::move(predict), options.registry,
          options.engine_name, options.fast_tier_backend);
  if (!residency.ok()) return residency.status();
  stack->residency_ = *std::move(residency);
  return stack;
}

engine::ExpertProviderFactory OffloadStack::Factory(
    const engine::ModelWeights* weights, OffloadOptions options) {
  return [weights, options = std::move(options)](engine::PredictFn predict)
             -> absl::StatusOr<std::unique_ptr<engine::ExpertProvider>> {
    absl::StatusOr<std::unique_ptr<OffloadStack>> stack =
        Create(weights, options, std::move(predict));
    if (!stack.ok()) return stack.status();
    return std::unique_ptr<engine::ExpertProvider>(*std::move(stack));
  };
}

}  // namespace moeserve::server
