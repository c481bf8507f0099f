// Where one expert's three bf16 matrices (gate, up, down) are in memory:
// in the packed blob when the weights were loaded with packed experts, or
// in the memory-mapped safetensors files otherwise. For code that reads
// every expert once at load (the affinity table, the int4 quantizer).
#ifndef MOESERVE_ENGINE_SPEC_DECODE_EXPERT_MATRICES_H_
#define MOESERVE_ENGINE_SPEC_DECODE_EXPERT_MATRICES_H_

#include <array>
#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_weights.h"

namespace moeserve::engine::spec_decode {

struct ExpertMatrices {
  std::array<const std::byte*, 3> m{};  // gate, up, down
};

// InvalidArgument when a matrix is not `matrix_bytes` (hidden x ffn bf16)
// or cannot be read. The experts of a quantized checkpoint (int4) are
// dequantized into `storage` (resized to the three matrices; each value
// rounded to the nearest bf16) and the result points there; without
// storage they are refused (FailedPrecondition naming the format).
absl::StatusOr<ExpertMatrices> LocateExpertMatrices(
    const ModelWeights& weights, int layer, int e, size_t matrix_bytes,
    std::vector<uint16_t>* storage = nullptr);

}  // namespace moeserve::engine::spec_decode

#endif  // MOESERVE_ENGINE_SPEC_DECODE_EXPERT_MATRICES_H_
