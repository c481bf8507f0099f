// Shared victim ordering for the policies in policies/ (not a policy).
//
// RecencyTracker is the LRU bookkeeping used by `lru` and `overlap`: a
// logical clock stamped per expert. AppendLowestFirst is the deterministic
// ordering every policy's ChooseVictims reduces to: ascending by a key, ties
// by (layer, expert).
//
// Thread safety: none; used from the engine's step thread only.
#ifndef MOESERVE_POLICIES_INTERNAL_RECENCY_H_
#define MOESERVE_POLICIES_INTERNAL_RECENCY_H_

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/model_weights.h"

namespace moeserve::policies::internal {

// Appends min(max(count, 0), candidates.size()) of `candidates` to
// `victims`: those with the lowest key(id) first, ties by (layer, expert).
void AppendLowestFirst(std::span<const engine::ExpertId> candidates, int count,
                       const std::function<uint64_t(engine::ExpertId)>& key,
                       std::vector<engine::ExpertId>* victims);

class RecencyTracker {
 public:
  // Stamps `id` as the most recently used expert.
  void Touch(engine::ExpertId id) {
    last_use_[{id.layer, id.expert}] = ++clock_;
  }
  // The stamp of the last Touch of `id`; 0 when never touched.
  uint64_t LastUse(engine::ExpertId id) const;
  // ChooseVictims for LRU: least recently used first (never-touched ones
  // before all others), ties by (layer, expert).
  void ChooseLeastRecent(std::span<const engine::ExpertId> candidates,
                         int count,
                         std::vector<engine::ExpertId>* victims) const;

 private:
  uint64_t clock_ = 0;
  absl::flat_hash_map<std::pair<int, int>, uint64_t> last_use_;
};

}  // namespace moeserve::policies::internal

#endif  // MOESERVE_POLICIES_INTERNAL_RECENCY_H_
