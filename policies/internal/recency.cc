#include "policies/internal/recency.h"

#include <algorithm>
#include <tuple>

namespace moeserve::policies::internal {

void AppendLowestFirst(std::span<const engine::ExpertId> candidates, int count,
                       const std::function<uint64_t(engine::ExpertId)>& key,
                       std::vector<engine::ExpertId>* victims) {
  const size_t n =
      std::min(static_cast<size_t>(std::max(count, 0)), candidates.size());
  if (n == 0) return;
  std::vector<std::tuple<uint64_t, int, int>> order;
  order.reserve(candidates.size());
  for (const engine::ExpertId& id : candidates) {
    order.emplace_back(key(id), id.layer, id.expert);
  }
  std::partial_sort(order.begin(), order.begin() + n, order.end());
  for (size_t i = 0; i < n; ++i) {
    victims->push_back(
        engine::ExpertId{std::get<1>(order[i]), std::get<2>(order[i])});
  }
}

uint64_t RecencyTracker::LastUse(engine::ExpertId id) const {
  auto it = last_use_.find({id.layer, id.expert});
  return it == last_use_.end() ? 0 : it->second;
}

void RecencyTracker::ChooseLeastRecent(
    std::span<const engine::ExpertId> candidates, int count,
    std::vector<engine::ExpertId>* victims) const {
  AppendLowestFirst(
      candidates, count, [this](engine::ExpertId id) { return LastUse(id); },
      victims);
}

}  // namespace moeserve::policies::internal
