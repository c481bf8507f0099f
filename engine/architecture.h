#ifndef MOESERVE_ENGINE_ARCHITECTURE_H_
#define MOESERVE_ENGINE_ARCHITECTURE_H_

// Architecture: one class per supported model_type (mixtral, qwen2_moe,
// qwen3_moe, olmoe), the llama.cpp way: each reads its own hyperparameters
// and names its tensors; no central switch over model types. Each class
// registers itself with MOESERVE_REGISTER_ARCHITECTURE in its own .cc under
// engine/arch/ (the library is alwayslink so registration survives linking).
//
// Instances are stateless singletons with static lifetime; every method is
// const and thread-safe. Registration happens during static initialisation
// only.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/model_config.h"
#include "nlohmann/json_fwd.hpp"

namespace moeserve::engine {

struct ExpertTensorNames {
  std::string gate, up, down;
};

// Names of one layer's attention tensors. Bias and q/k norm names are always
// filled; whether the tensors exist depends on the config
// (attention_bias, qk_norm).
struct AttentionTensorNames {
  std::string q, k, v, o;
  std::string q_bias, k_bias, v_bias;
  std::string q_norm, k_norm;
};

// Shared (always-on) expert of qwen2_moe: an MLP plus a sigmoid gate whose
// weight is [1, hidden].
struct SharedExpertTensorNames {
  ExpertTensorNames mlp;
  std::string gate;
};

// A tensor the config implies, with its exact shape.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

class Architecture {
 public:
  virtual ~Architecture() = default;

  virtual absl::string_view model_type() const = 0;

  // Fills the architecture-specific fields of `config` (experts, expert ffn
  // size, norm_topk_prob, shared expert, qk_norm, attention_bias, sparsity)
  // from config.json and refuses unsupported settings.
  virtual absl::Status ParseHparams(const nlohmann::json& json,
                                    ModelConfig* config) const = 0;

  virtual ExpertTensorNames ExpertNames(int layer, int expert) const = 0;
  virtual std::string RouterName(int layer) const = 0;
  // nullopt for architectures without a shared expert.
  virtual std::optional<SharedExpertTensorNames> SharedExpertNames(
      int layer) const {
    return std::nullopt;
  }
  virtual AttentionTensorNames AttentionNames(int layer) const;
  virtual std::string InputNormName(int layer) const;
  virtual std::string PostAttentionNormName(int layer) const;
  virtual std::string EmbeddingName() const {
    return "model.embed_tokens.weight";
  }
  virtual std::string FinalNormName() const { return "model.norm.weight"; }
  virtual std::string LmHeadName() const { return "lm_head.weight"; }

  // Every non-expert tensor the config implies (embedding, attention, norms,
  // routers, shared experts, lm_head unless tied) with its shape.
  std::vector<TensorSpec> NonExpertTensors(const ModelConfig& config) const;
};

// nullptr when no architecture is registered for `model_type`.
const Architecture* FindArchitecture(absl::string_view model_type);

// Registered model types, sorted.
std::vector<std::string> SupportedModelTypes();

namespace internal {
// Registers `arch` (static lifetime). Returns true; for static initialisers.
bool RegisterArchitecture(const Architecture* arch);
}  // namespace internal

#define MOESERVE_REGISTER_ARCHITECTURE(Class)                    \
  [[maybe_unused]] static const bool moeserve_arch_registered_ = \
      ::moeserve::engine::internal::RegisterArchitecture(new Class())

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_ARCHITECTURE_H_
