// Qwen2-MoE (Qwen2MoeForCausalLM): routed experts plus one shared expert with
// a sigmoid gate; q/k/v projections carry biases.

#include "base/status_macros.h"
#include "engine/arch/qwen_style.h"
#include "engine/json_util.h"

namespace moeserve::engine::arch {
namespace {

class Qwen2Moe : public QwenStyleMoe {
 public:
  absl::string_view model_type() const override { return "qwen2_moe"; }

  absl::Status ParseHparams(const nlohmann::json& j,
                            ModelConfig* c) const override {
    MOESERVE_RETURN_IF_ERROR(
        ParseExpertCounts(j, "num_experts", "moe_intermediate_size", c));
    MOESERVE_ASSIGN_OR_RETURN(c->norm_topk_prob,
                              json_util::GetBool(j, "norm_topk_prob", false));
    MOESERVE_ASSIGN_OR_RETURN(
        c->shared_expert_intermediate_size,
        json_util::GetInt(j, "shared_expert_intermediate_size"));
    c->qk_norm = QkNorm::kNone;
    c->attention_bias = true;
    return ParseQwenSparsity(j, c);
  }

  std::optional<SharedExpertTensorNames> SharedExpertNames(
      int layer) const override {
    const std::string p = LayerPrefix(layer) + "mlp.shared_expert";
    return SharedExpertTensorNames{
        .mlp = {p + ".gate_proj.weight", p + ".up_proj.weight",
                p + ".down_proj.weight"},
        .gate = p + "_gate.weight",
    };
  }
};

MOESERVE_REGISTER_ARCHITECTURE(Qwen2Moe);

}  // namespace
}  // namespace moeserve::engine::arch
