// Mixtral (MixtralForCausalLM): 8 routed experts per layer in
// block_sparse_moe, experts w1 (gate), w3 (up), w2 (down); top-k weights are
// always renormalised.

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/arch/arch_util.h"
#include "engine/architecture.h"

namespace moeserve::engine::arch {
namespace {

class Mixtral : public Architecture {
 public:
  absl::string_view model_type() const override { return "mixtral"; }

  absl::Status ParseHparams(const nlohmann::json& j,
                            ModelConfig* c) const override {
    MOESERVE_RETURN_IF_ERROR(
        ParseExpertCounts(j, "num_local_experts", "intermediate_size", c));
    c->norm_topk_prob = true;
    c->shared_expert_intermediate_size = 0;
    c->qk_norm = QkNorm::kNone;
    c->attention_bias = false;
    return absl::OkStatus();
  }

  ExpertTensorNames ExpertNames(int layer, int expert) const override {
    const std::string p = absl::StrCat(
        LayerPrefix(layer), "block_sparse_moe.experts.", expert, ".");
    return {p + "w1.weight", p + "w3.weight", p + "w2.weight"};
  }

  std::string RouterName(int layer) const override {
    return LayerPrefix(layer) + "block_sparse_moe.gate.weight";
  }
};

MOESERVE_REGISTER_ARCHITECTURE(Mixtral);

}  // namespace
}  // namespace moeserve::engine::arch
