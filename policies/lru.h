// lru: the LRU expert cache of Mixtral-Offloading (seeds 003 §3.2).
//
// Experts stay in the fast tier until a slot is needed; a needed expert
// that is not resident is loaded on demand (the engine's acquire) and the
// least recently used one is evicted. OnAccess(id) stamps `id` with a
// logical clock; ChooseVictims returns the candidates least recently used
// first (never-accessed ones first), ties by (layer, expert).
//
// Config keys: none (any key is INVALID_ARGUMENT).
// Thread safety: none needed; every hook comes from the engine's step
// thread (offload_policy.h).
#ifndef MOESERVE_POLICIES_LRU_H_
#define MOESERVE_POLICIES_LRU_H_

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"
#include "policies/internal/recency.h"

namespace moeserve::policies {

class LruPolicy : public engine::OffloadPolicy {
 public:
  static absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> Create(
      const engine::PolicyConfig& config);

  std::string_view name() const override { return "lru"; }
  void OnAccess(engine::ExpertId id) override { recency_.Touch(id); }
  void ChooseVictims(std::span<const engine::ExpertId> candidates, int count,
                     std::vector<engine::ExpertId>* victims) override {
    recency_.ChooseLeastRecent(candidates, count, victims);
  }

 private:
  internal::RecencyTracker recency_;
};

}  // namespace moeserve::policies

#endif  // MOESERVE_POLICIES_LRU_H_
