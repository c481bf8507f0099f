#include "tools/bench/belady.h"

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace moeserve::bench {

OracleHits BeladyHits(std::span<const engine::ExpertId> trace, int slots,
                      bool warm_start) {
  OracleHits out;
  out.accesses = trace.size();
  if (trace.empty() || slots < 1) return out;
  // Dense keys, then each access's next use of the same key.
  std::unordered_map<int64_t, int> index;
  std::vector<int> key(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    const int64_t k =
        (int64_t{trace[i].layer} << 32) | uint32_t(trace[i].expert);
    key[i] = index.try_emplace(k, static_cast<int>(index.size())).first->second;
  }
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> next_use(trace.size());
  std::vector<int64_t> next_of_key(index.size(), kNever);
  for (size_t i = trace.size(); i-- > 0;) {
    next_use[i] = next_of_key[key[i]];
    next_of_key[key[i]] = static_cast<int64_t>(i);
  }
  // next_of_key[k] is now k's first use. Resident keys ordered by next use;
  // the last one is the victim.
  std::set<std::pair<int64_t, int>> by_next;
  std::vector<int64_t> resident_next(index.size(), -1);  // -1: not resident
  if (warm_start) {
    for (size_t i = 0; i < trace.size() && by_next.size() < size_t(slots);
         ++i) {
      if (resident_next[key[i]] >= 0) continue;
      resident_next[key[i]] = next_of_key[key[i]];
      by_next.insert({next_of_key[key[i]], key[i]});
    }
  }
  for (size_t i = 0; i < trace.size(); ++i) {
    const int k = key[i];
    if (resident_next[k] >= 0) {
      ++out.hits;
      by_next.erase({resident_next[k], k});
    } else if (by_next.size() >= size_t(slots)) {
      auto victim = std::prev(by_next.end());
      resident_next[victim->second] = -1;
      by_next.erase(victim);
    }
    resident_next[k] = next_use[i];
    by_next.insert({next_use[i], k});
  }
  return out;
}

}  // namespace moeserve::bench
