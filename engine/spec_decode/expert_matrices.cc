#include "engine/spec_decode/expert_matrices.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/architecture.h"

namespace moeserve::engine::spec_decode {

// Where expert (layer, e)'s matrices are: the packed blob, or the mmapped
// file tensors when the model was loaded without packing.
absl::StatusOr<ExpertMatrices> LocateExpertMatrices(const ModelWeights& weights,
                                                    int layer, int e,
                                                    size_t matrix_bytes) {
  const ExpertBlob& blob = weights.expert({layer, e});
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
