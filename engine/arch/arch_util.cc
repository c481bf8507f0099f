#include "engine/arch/arch_util.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/json_util.h"

namespace moeserve::engine::arch {

std::string LayerPrefix(int layer) {
  return absl::StrCat("model.layers.", layer, ".");
}

absl::Status ParseExpertCounts(const nlohmann::json& j, const char* experts_key,
                               const char* ffn_key, ModelConfig* c) {
  MOESERVE_ASSIGN_OR_RETURN(c->num_experts, json_util::GetInt(j, experts_key));
  MOESERVE_ASSIGN_OR_RETURN(c->num_experts_per_tok,
                            json_util::GetInt(j, "num_experts_per_tok"));
  MOESERVE_ASSIGN_OR_RETURN(c->expert_intermediate_size,
                            json_util::GetInt(j, ffn_key));
  return absl::OkStatus();
}

absl::Status ParseQwenSparsity(const nlohmann::json& j, ModelConfig* c) {
  MOESERVE_ASSIGN_OR_RETURN(c->decoder_sparse_step,
                            json_util::GetInt(j, "decoder_sparse_step", 1));
  if (c->decoder_sparse_step < 1) {
    return absl::InvalidArgumentError(
        "field \"decoder_sparse_step\" must be >= 1");
  }
  c->mlp_only_layers.clear();
  if (json_util::HasNonNull(j, "mlp_only_layers")) {
    const nlohmann::json& v = j["mlp_only_layers"];
    if (!v.is_array()) {
      return absl::InvalidArgumentError(
          "field \"mlp_only_layers\" must be a list of integers");
    }
    for (const nlohmann::json& e : v) {
      std::optional<int64_t> layer = json_util::AsInt64(e);
      if (!layer) {
        return absl::InvalidArgumentError(
            "field \"mlp_only_layers\" must be a list of integers");
      }
      c->mlp_only_layers.push_back(*layer);
    }
  }
  // Layer l is sparse iff l is not in mlp_only_layers and
  // (l + 1) % decoder_sparse_step == 0; so any step > 1 makes layer 0 dense.
  int64_t dense_layer = -1;
  if (c->decoder_sparse_step > 1 && c->num_hidden_layers > 0) dense_layer = 0;
  for (int64_t layer : c->mlp_only_layers) {
    if (layer >= 0 && layer < c->num_hidden_layers) dense_layer = layer;
  }
  if (dense_layer >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", dense_layer,
                     " would be a dense MLP layer (decoder_sparse_step=",
                     c->decoder_sparse_step, ", mlp_only_layers=[",
                     absl::StrJoin(c->mlp_only_layers, ","),
                     "]); dense layers are not supported yet"));
  }
  return absl::OkStatus();
}

absl::Status RefuseAttentionBias(const nlohmann::json& j,
                                 absl::string_view model_type) {
  MOESERVE_ASSIGN_OR_RETURN(bool bias,
                            json_util::GetBool(j, "attention_bias", false));
  if (bias) {
    return absl::InvalidArgumentError(absl::StrCat(
        "field \"attention_bias\" = true is not supported for ", model_type));
  }
  return absl::OkStatus();
}

}  // namespace moeserve::engine::arch
