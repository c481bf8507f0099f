#include "policies/overlap.h"

namespace moeserve::policies {

absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> OverlapPolicy::Create(
    const engine::PolicyConfig& config) {
  absl::Status keys = engine::CheckConfigKeys("overlap", config, {"lookahead"});
  if (!keys.ok()) return keys;
  absl::StatusOr<int64_t> lookahead =
      engine::GetIntConfig(config, "lookahead", 1, 1, 2);
  if (!lookahead.ok()) return lookahead.status();
  return std::make_unique<OverlapPolicy>(static_cast<int>(*lookahead));
}

void OverlapPolicy::OnRoute(int layer, std::span<const int> experts,
                            std::span<const int> token_counts,
                            const float* hidden, int64_t n) {
  (void)token_counts;
  if (control_ == nullptr || hidden == nullptr || n <= 0) return;
  // predicted[d - 1]: the experts predicted for layer + d.
  std::vector<std::vector<int>> predicted;
  for (int d = 1; d <= lookahead_ && layer + d < control_->num_layers(); ++d) {
    predicted.push_back(control_->PredictExperts(
        layer + d, hidden, n, control_->experts_per_token()));
  }
  // Recency, oldest to newest: farthest predictions, nearer ones, then this
  // layer's routed experts, which are acquired right after this returns and
  // so must not be the victims of these prefetches.
  for (size_t i = predicted.size(); i-- > 0;) {
    for (int e : predicted[i]) {
      recency_.Touch({layer + static_cast<int>(i) + 1, e});
    }
  }
  for (int e : experts) recency_.Touch({layer, e});
  // Nearest first: it is needed soonest.
  for (size_t i = 0; i < predicted.size(); ++i) {
    for (int e : predicted[i]) {
      control_->Prefetch({layer + static_cast<int>(i) + 1, e});
    }
  }
}

MOESERVE_REGISTER_POLICY("overlap", OverlapPolicy::Create);

}  // namespace moeserve::policies
