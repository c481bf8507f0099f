// Belady's MIN, the offline optimum of demand caching: replays a recorded
// sequence of expert acquires against a fast tier of `slots` experts that
// loads an expert only when it is acquired and, when full, evicts the
// resident expert whose next use is farthest in the future (never used
// again counts as farthest). No demand-paging policy can hit more on the
// same sequence with the same slots; a policy that prefetches can (its
// prefetched experts are hits without a miss), so the bench's "oracle hit"
// bounds the caching policies, not quant_draft's lookahead prefetch.
//
// Thread-compatible (pure function).
#ifndef MOESERVE_TOOLS_BENCH_BELADY_H_
#define MOESERVE_TOOLS_BENCH_BELADY_H_

#include <cstdint>
#include <span>

#include "engine/model_weights.h"

namespace moeserve::bench {

struct OracleHits {
  uint64_t accesses = 0;
  uint64_t hits = 0;
  // hits / accesses; 0 for an empty trace.
  double hit_rate() const { return accesses ? double(hits) / accesses : 0; }
};

// Belady's MIN over `trace` with `slots` (>= 1) slots. warm_start false: the
// tier starts empty (every expert's first acquire misses). warm_start true:
// it starts holding the first `slots` distinct experts of the trace, the
// best contents a tier could start with, so no first-use miss is charged to
// the oracle that a full tier would not have.
OracleHits BeladyHits(std::span<const engine::ExpertId> trace, int slots,
                      bool warm_start);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_BELADY_H_
