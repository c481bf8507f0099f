// EngineStats: what Engine::stats() reports (the serving gauges, the
// benchmark's speculation figures). EngineMetrics exports the same.
#ifndef MOESERVE_ENGINE_ENGINE_STATS_H_
#define MOESERVE_ENGINE_ENGINE_STATS_H_

#include <cstdint>
#include <vector>

namespace moeserve::engine {

// Speculative decoding totals.
struct SpecStats {
  uint64_t drafts = 0;           // verifications with >= 1 draft token
  uint64_t draft_tokens = 0;     // proposed
  uint64_t accepted_tokens = 0;  // accepted
  std::vector<uint64_t> accepted_per_position;
  double draft_seconds = 0;   // in the drafter
  double verify_seconds = 0;  // target passes that verified drafts

  void Add(const SpecStats& other) {
    drafts += other.drafts;
    draft_tokens += other.draft_tokens;
    accepted_tokens += other.accepted_tokens;
    if (accepted_per_position.size() < other.accepted_per_position.size()) {
      accepted_per_position.resize(other.accepted_per_position.size(), 0);
    }
    for (size_t i = 0; i < other.accepted_per_position.size(); ++i) {
      accepted_per_position[i] += other.accepted_per_position[i];
    }
    draft_seconds += other.draft_seconds;
    verify_seconds += other.verify_seconds;
  }
};

struct EngineStats {
  int running = 0;
  int waiting = 0;
  int64_t kv_free_blocks = 0;
  int64_t kv_total_blocks = 0;
  uint64_t preemptions = 0;
  SpecStats spec;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_ENGINE_STATS_H_
