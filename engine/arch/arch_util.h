#ifndef MOESERVE_ENGINE_ARCH_ARCH_UTIL_H_
#define MOESERVE_ENGINE_ARCH_ARCH_UTIL_H_

// Helpers shared by the Architecture implementations in engine/arch/.

#include <string>

#include "absl/status/status.h"
#include "engine/model_config.h"
#include "nlohmann/json.hpp"

namespace moeserve::engine::arch {

// "model.layers.<layer>."
std::string LayerPrefix(int layer);

// Reads the routed-expert fields every MoE config has under some name:
// `experts_key` (count), "num_experts_per_tok", `ffn_key` (expert ffn size).
absl::Status ParseExpertCounts(const nlohmann::json& j, const char* experts_key,
                               const char* ffn_key, ModelConfig* c);

// Reads decoder_sparse_step / mlp_only_layers (qwen2_moe, qwen3_moe) and
// refuses configs in which some layer would be a dense MLP.
absl::Status ParseQwenSparsity(const nlohmann::json& j, ModelConfig* c);

// Refuses attention_bias == true for architectures that do not implement it.
absl::Status RefuseAttentionBias(const nlohmann::json& j,
                                 absl::string_view model_type);

}  // namespace moeserve::engine::arch

#endif  // MOESERVE_ENGINE_ARCH_ARCH_UTIL_H_
