// Which forward passes run their dense sub-steps as graphs (issue 30 item
// 3; Backend::RunGraph) and under which key. MoeModel splits a step into
// num_layers + 1 dense segments, each ending where the host must look at
// the device (a layer's routing) or at the step's end:
//   segment 0:          embedding, layer 0's attention, post-attention norm,
//                       router matmul + top-k
//   segment l (0 < l < L): layer l-1's shared expert and residual add, then
//                       layer l's attention, norm, router matmul + top-k
//   segment L:          layer L-1's shared expert and residual add, final
//                       norm, lm_head
// The routed experts (host-driven) run eagerly between them.
//
// A recorded segment bakes in every by-value kernel argument and device
// pointer, so the key holds what decides them: the tokens n, the sequences,
// and the block-table stride, which a graph step pads to a power of two
// (GraphBucket) so that growing sequences reuse a graph until the stride
// doubles. The values that change from step to step (token ids, positions,
// KV slots, query starts, block tables, the rows wanting logits) are read by
// the kernels from the step's metadata in device memory, uploaded before the
// first segment. Only decode and verify steps (every token of the step
// wants logits: rows == n) of at most kMaxGraphTokens tokens are recorded,
// keyed by their exact n; prefill runs eagerly (its shapes rarely repeat).
#ifndef MOESERVE_ENGINE_INTERNAL_DENSE_GRAPHS_H_
#define MOESERVE_ENGINE_INTERNAL_DENSE_GRAPHS_H_

#include <array>
#include <cstdint>
#include <optional>

#include "kernels/backend.h"

namespace moeserve::engine {

// Steps with more tokens run eagerly.
inline constexpr int64_t kMaxGraphTokens = 64;

// The shape half of a step's graph keys (kernels::GraphKey::shape), or
// nullopt when the step runs eagerly: n tokens of num_seqs sequences,
// `rows` of them wanting logits, block tables of up to max_blocks blocks.
inline std::optional<std::array<int64_t, 4>> DenseGraphShape(
    int64_t n, int64_t num_seqs, int64_t rows, int64_t max_blocks) {
  if (n < 1 || n > kMaxGraphTokens || rows != n || num_seqs < 1) {
    return std::nullopt;
  }
  return std::array<int64_t, 4>{n, num_seqs, kernels::GraphBucket(max_blocks),
                                0};
}

// The block-table stride of a step: its longest table, or in a graph step
// the bucket the key holds.
inline int64_t BlockTableStride(bool graph_step, int64_t max_blocks) {
  return graph_step ? kernels::GraphBucket(max_blocks) : max_blocks;
}

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_INTERNAL_DENSE_GRAPHS_H_
