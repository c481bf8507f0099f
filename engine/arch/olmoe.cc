// OLMoE (OlmoeForCausalLM): routed experts, RMSNorm over the whole q and k
// projections (weights [heads*head_dim] and [kv_heads*head_dim]).

#include "base/status_macros.h"
#include "engine/arch/qwen_style.h"
#include "engine/json_util.h"

namespace moeserve::engine::arch {
namespace {

class Olmoe : public QwenStyleMoe {
 public:
  absl::string_view model_type() const override { return "olmoe"; }

  absl::Status ParseHparams(const nlohmann::json& j,
                            ModelConfig* c) const override {
    MOESERVE_RETURN_IF_ERROR(
        ParseExpertCounts(j, "num_experts", "intermediate_size", c));
    MOESERVE_ASSIGN_OR_RETURN(c->norm_topk_prob,
                              json_util::GetBool(j, "norm_topk_prob", false));
    MOESERVE_RETURN_IF_ERROR(RefuseAttentionBias(j, model_type()));
    if (json_util::HasNonNull(j, "clip_qkv")) {
      return absl::InvalidArgumentError(
          "field \"clip_qkv\" is set; clipping q/k/v is not supported yet");
    }
    c->shared_expert_intermediate_size = 0;
    c->qk_norm = QkNorm::kWholeProjection;
    c->attention_bias = false;
    return absl::OkStatus();
  }
};

MOESERVE_REGISTER_ARCHITECTURE(Olmoe);

}  // namespace
}  // namespace moeserve::engine::arch
