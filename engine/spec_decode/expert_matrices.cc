#include "engine/spec_decode/expert_matrices.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/architecture.h"
#include "kernels/fp8_expert.h"
#include "kernels/int4_expert.h"
#include "kernels/tensor.h"

namespace moeserve::engine::spec_decode {

// Where expert (layer, e)'s matrices are: the packed blob, or the mmapped
// file tensors when the model was loaded without packing.
absl::StatusOr<ExpertMatrices> LocateExpertMatrices(
    const ModelWeights& weights, int layer, int e, size_t matrix_bytes,
    std::vector<uint16_t>* storage) {
  const ExpertBlob& blob = weights.expert({layer, e});
  if (weights.expert_format() != quant::ExpertFormat::kBf16) {
    if (storage == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "expert (", layer, ", ", e, ") is ",
          weights.expert_format_description(), ", not bf16 in memory"));
    }
    const ModelConfig& c = weights.config();
    const int64_t hidden = c.hidden_size, ffn = c.expert_intermediate_size;
    const size_t values = matrix_bytes / 2;
    if (static_cast<int64_t>(values) != hidden * ffn) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert (", layer, ", ", e, "): ", hidden, " x ", ffn,
                       " is not ", matrix_bytes, " bytes of bf16 matrices"));
    }
    storage->resize(3 * values);
    std::vector<float> row(std::max(hidden, ffn));
    ExpertMatrices m;
    for (int k = 0; k < 3; ++k) {
      const int64_t rows = k < 2 ? ffn : hidden;
      const int64_t cols = k < 2 ? hidden : ffn;
      uint16_t* dst = storage->data() + k * values;
      for (int64_t r = 0; r < rows; ++r) {
        if (const kernels::Int4ExpertLayout* l = weights.int4_layout()) {
          kernels::DequantizeInt4ExpertRow(
              blob.data, *l, static_cast<kernels::Int4Part>(k), r, row.data());
        } else {
          kernels::DequantizeFp8ExpertRow(blob.data, *weights.fp8_layout(),
                                          static_cast<kernels::Fp8Part>(k), r,
                                          row.data());
        }
        for (int64_t col = 0; col < cols; ++col) {
          dst[r * cols + col] = kernels::FloatToBf16(row[col]);
        }
      }
      m.m[k] = reinterpret_cast<const std::byte*>(dst);
    }
    return m;
  }
  if (blob.gate_bytes != matrix_bytes || blob.up_bytes != matrix_bytes ||
      blob.down_bytes != matrix_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert (", layer, ", ", e, "): matrices of ", blob.gate_bytes, "/",
        blob.up_bytes, "/", blob.down_bytes, " bytes, expected ", matrix_bytes,
        " (hidden_size x expert_intermediate_size bf16)"));
  }
  ExpertMatrices m;
  if (blob.data != nullptr) {
    m.m = {blob.data + blob.gate_offset, blob.data + blob.up_offset,
           blob.data + blob.down_offset};
    return m;
  }
  const Architecture* arch = weights.config().architecture;
  if (arch == nullptr) {
    return absl::InvalidArgumentError("model config has no architecture");
  }
  const ExpertTensorNames names = arch->ExpertNames(layer, e);
  const std::array<const std::string*, 3> tensor = {&names.gate, &names.up,
                                                    &names.down};
  for (int k = 0; k < 3; ++k) {
    std::optional<ShardedSafetensors::Located> found =
        weights.files().Find(*tensor[k]);
    if (!found.has_value() || found->info->data == nullptr ||
        found->info->byte_size != matrix_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert tensor '", *tensor[k], "' not readable"));
    }
    m.m[k] = static_cast<const std::byte*>(found->info->data);
  }
  return m;
}

}  // namespace moeserve::engine::spec_decode
