#ifndef MOESERVE_ENGINE_MODEL_CONFIG_H_
#define MOESERVE_ENGINE_MODEL_CONFIG_H_

// ModelConfig: the hyperparameters of a Hugging Face MoE model, parsed from
// its config.json. Fields common to all architectures are read here; the
// architecture-specific ones (expert counts, shared expert, q/k norm, ...)
// by the Architecture registered for `model_type` (see architecture.h).
//
// Invariants of a config returned by ParseModelConfig:
//   - every dimension is positive; num_attention_heads % num_key_value_heads
//     == 0; 1 <= num_experts_per_tok <= num_experts;
//   - every layer is a sparse MoE layer (dense layers are refused for now);
//   - no rope_scaling, no effective sliding window, no clip_qkv;
//   - max_position_embeddings >= kMinPositions;
//   - bos_token_id and every eos_token_id inside [0, vocab_size).
// A plain value type; thread-compatible.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/quant/quantization_config.h"

namespace moeserve::engine {

class Architecture;

// Where q/k RMSNorm is applied, if at all.
enum class QkNorm {
  kNone,
  kPerHead,          // qwen3_moe: weight [head_dim], applied per head.
  kWholeProjection,  // olmoe: weight [heads*head_dim] over the projection.
};

// The fewest positions a model may declare: one prompt token and one
// generated token.
inline constexpr int64_t kMinPositions = 2;

struct ModelConfig {
  std::string model_type;
  const Architecture* architecture = nullptr;  // Static; not owned.

  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // Default: num_attention_heads.
  int64_t head_dim = 0;             // Default: hidden_size / heads.
  int64_t vocab_size = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::string torch_dtype;  // Empty when absent.
  // config.json's quantization_config (engine/quant/quantization_config.h);
  // method kNone for bf16 / f16 checkpoints.
  quant::QuantizationConfig quantization;
  std::optional<int64_t> bos_token_id;
  // End-of-sequence ids: config.json's "eos_token_id" (an id or a list),
  // then, when the model directory has a generation_config.json, the ids its
  // "eos_token_id" adds (Hugging Face's generate() stops on those: e.g.
  // Qwen1.5-MoE-A2.7B-Chat's config.json names only <|endoftext|>, its
  // generation_config.json also <|im_end|>, which ends every chat turn).
  std::vector<int64_t> eos_token_ids;

  // Mixture of experts.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t expert_intermediate_size = 0;  // ffn size of one routed expert.
  bool norm_topk_prob = true;
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert.
  QkNorm qk_norm = QkNorm::kNone;
  bool attention_bias = false;  // q/k/v projections carry biases.
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
};

// Parses config.json text. Errors (InvalidArgument) name the offending field,
// or the unknown model_type together with the supported ones.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text);

// Adds generation_config.json's "eos_token_id" (an id or a list; absent or
// null: nothing) to c->eos_token_ids, skipping ids already there. Refused
// (InvalidArgument naming the field) when the text is not a JSON object, the
// field is malformed, or an id is outside the vocabulary.
absl::Status MergeGenerationConfig(absl::string_view json_text, ModelConfig* c);

// Reads and parses `<model_dir>/config.json`, then merges
// `<model_dir>/generation_config.json` when it exists; errors are prefixed by
// the file's path.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_MODEL_CONFIG_H_
