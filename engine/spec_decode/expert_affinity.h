// ExpertAffinity: SpecMoE's affinity table (seeds 000 §III-B,
// "Affinity-based expert selection mechanism"): per MoE layer, the L2
// distance between every pair of that layer's experts' weights, so the
// self-assisted drafter can send a token whose router picked a non-draft
// expert to the draft expert that most resembles it (Nearest).
//
// The distance of experts a and b of one layer is
//   sqrt(sum over the sampled rows of gate, up and down of (w_a - w_b)^2)
// with every weight widened from bf16 to f32 and the sum kept in double.
// Which rows: row r of each of the three matrices (gate [ffn, hidden],
// up [ffn, hidden], down [hidden, ffn]) with r % row_stride() == 0, so row 0
// of each is always in.
//   - row_stride() == 1 (exact: every weight) when
//       pairs * elements <= max_pair_elements_per_layer
//     where pairs = E * (E - 1) / 2 and elements = 3 * ffn * hidden, the
//     per-layer work (one subtract-square-add per element per pair). The
//     demo models are exact: models/demo (8 experts, 256 x 384) does 8.3M
//     per layer, models/demo-fg (32 experts, 256 x 96) 36.6M.
//   - otherwise the smallest stride that brings the work under the bound:
//       row_stride = ceil(pairs * elements / max_pair_elements_per_layer).
//     Mixtral-8x7B (8 experts, 4096 x 14336): 28 pairs x 176M elements ->
//     stride 74, ~2.4M elements per expert, ~67M pair-element steps and
//     ~20M bf16 reads per layer: tens of milliseconds per layer with an
//     optimised build, well under a second in any build.
//   The default bound is kMaxPairElementsPerLayer = 2^26 (~67M). The
//   stride never passes the longest matrix, so row 0 of each is always
//   compared and the work is at least pairs * (2 * hidden + ffn) (e.g.
//   DeepSeek-V2, 160 experts of 5120 x 1536: ~170M, still a fraction of a
//   second).
// Sampled distances are not rescaled: they order pairs (which is all
// Nearest needs) but are not the full-weight distances.
//
// Memory: E * E floats per layer (128 experts x 48 layers: 3 MiB).
// Weights are read from the packed expert arena, or straight from the
// mmapped safetensors files when the model was loaded without packing
// (LoadOptions::pack_experts = false); nothing is copied.
//
// Thread safety: immutable after Compute; every const method is
// thread-safe.
#ifndef MOESERVE_ENGINE_SPEC_DECODE_EXPERT_AFFINITY_H_
#define MOESERVE_ENGINE_SPEC_DECODE_EXPERT_AFFINITY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_weights.h"

namespace moeserve::engine::spec_decode {

class ExpertAffinity {
 public:
  // The default bound on the per-layer work (see the header comment).
  static constexpr int64_t kMaxPairElementsPerLayer = int64_t{1} << 26;

  // The table for every MoE layer of `weights`, under the default bound.
  // INVALID_ARGUMENT when the expert blobs do not match the config's shapes
  // (hidden_size, expert_intermediate_size) or a weight cannot be found.
  static absl::StatusOr<ExpertAffinity> Compute(const ModelWeights& weights);
  // As above with another bound (>= 1); tests use it to take the strided
  // path on a tiny model.
  static absl::StatusOr<ExpertAffinity> Compute(
      const ModelWeights& weights, int64_t max_pair_elements_per_layer);

  // The row stride Compute uses for a layer of `num_experts` experts of
  // `hidden` x `ffn` under `max_pair_elements_per_layer`; 1 = exact.
  static int64_t RowStride(int num_experts, int64_t hidden, int64_t ffn,
                           int64_t max_pair_elements_per_layer);

  int num_layers() const { return num_layers_; }
  int num_experts() const { return num_experts_; }
  // 1 when every weight was compared.
  int64_t row_stride() const { return row_stride_; }
  bool exact() const { return row_stride_ == 1; }

  // The distance between experts `a` and `b` of `layer` (symmetric; 0 when
  // a == b). REQUIRES: all three in range.
  float Distance(int layer, int a, int b) const {
    return distances_[(static_cast<size_t>(layer) * num_experts_ + a) *
                          num_experts_ +
                      b];
  }

  // The expert of `allowed` nearest to `expert` in `layer`: `expert` itself
  // when it is allowed, else the smallest Distance, ties by lower id. -1
  // when `allowed` is empty (or holds no expert in range), or `layer` or
  // `expert` is out of range. Out-of-range entries of `allowed` are
  // skipped; order and duplicates do not matter.
  int Nearest(int layer, int expert, std::span<const int> allowed) const;

 private:
  ExpertAffinity(int num_layers, int num_experts, int64_t row_stride)
      : num_layers_(num_layers),
        num_experts_(num_experts),
        row_stride_(row_stride) {}

  int num_layers_ = 0;
  int num_experts_ = 0;
  int64_t row_stride_ = 1;
  std::vector<float> distances_;  // [(layer * E + a) * E + b]
};

}  // namespace moeserve::engine::spec_decode

#endif  // MOESERVE_ENGINE_SPEC_DECODE_EXPERT_AFFINITY_H_
