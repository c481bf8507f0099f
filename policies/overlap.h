// overlap: MoE-Overlap (seeds 000 §II-A) with AdapMoE-style gating
// (seeds 003 §3.2): prefetch the next layer's experts while this layer
// computes.
//
// OnRoute(l, ..., hidden, n): for d = 1..lookahead with l + d < num_layers,
// predict layer l+d's experts by applying layer l+d's router to layer l's
// router input, control->PredictExperts(l + d, hidden, n,
// experts_per_token()), and Prefetch each predicted expert (nearest layer
// first). Nothing is predicted for the last layer. A predicted expert
// counts as used for recency (so a sibling prefetch does not evict it):
// OnRoute stamps, oldest to newest, the l+2 predictions, the l+1
// predictions, then layer l's routed experts (about to be acquired, so a
// prefetch never picks them as victims).
// Replacement: LRU, exactly as the `lru` policy (OnAccess stamps; least
// recently used victims first, ties by (layer, expert)).
//
// Config keys:
//   lookahead  layers to predict ahead, 1 or 2. Default: 1.
// Thread safety: none needed; every hook comes from the engine's step
// thread (offload_policy.h).
#ifndef MOESERVE_POLICIES_OVERLAP_H_
#define MOESERVE_POLICIES_OVERLAP_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"
#include "policies/internal/recency.h"

namespace moeserve::policies {

class OverlapPolicy : public engine::OffloadPolicy {
 public:
  static absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> Create(
      const engine::PolicyConfig& config);

  explicit OverlapPolicy(int lookahead) : lookahead_(lookahead) {}

  std::string_view name() const override { return "overlap"; }
  void Attach(engine::ResidencyControl* control) override {
    control_ = control;
  }
  void OnRoute(int layer, std::span<const int> experts,
               std::span<const int> token_counts, const float* hidden,
               int64_t n) override;
  void OnAccess(engine::ExpertId id) override { recency_.Touch(id); }
  void ChooseVictims(std::span<const engine::ExpertId> candidates, int count,
                     std::vector<engine::ExpertId>* victims) override {
    recency_.ChooseLeastRecent(candidates, count, victims);
  }

 private:
  const int lookahead_;
  engine::ResidencyControl* control_ = nullptr;  // not owned
  internal::RecencyTracker recency_;
};

}  // namespace moeserve::policies

#endif  // MOESERVE_POLICIES_OVERLAP_H_
