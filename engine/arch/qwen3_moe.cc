// Qwen3-MoE (Qwen3MoeForCausalLM): routed experts only, RMSNorm on q and k
// per head (weights [head_dim]).

#include "base/status_macros.h"
#include "engine/arch/qwen_style.h"
#include "engine/json_util.h"

namespace moeserve::engine::arch {
namespace {

class Qwen3Moe : public QwenStyleMoe {
 public:
  absl::string_view model_type() const override { return "qwen3_moe"; }

  absl::Status ParseHparams(const nlohmann::json& j,
                            ModelConfig* c) const override {
    MOESERVE_RETURN_IF_ERROR(
        ParseExpertCounts(j, "num_experts", "moe_intermediate_size", c));
    MOESERVE_ASSIGN_OR_RETURN(c->norm_topk_prob,
                              json_util::GetBool(j, "norm_topk_prob", false));
    MOESERVE_RETURN_IF_ERROR(RefuseAttentionBias(j, model_type()));
    c->shared_expert_intermediate_size = 0;
    c->qk_norm = QkNorm::kPerHead;
    c->attention_bias = false;
    return ParseQwenSparsity(j, c);
  }
};

MOESERVE_REGISTER_ARCHITECTURE(Qwen3Moe);

}  // namespace
}  // namespace moeserve::engine::arch
