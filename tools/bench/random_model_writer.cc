#include "tools/bench/random_model_writer.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/architecture.h"
#include "engine/model_config.h"
#include "tools/bench/random_weights.h"

namespace moeserve::bench {
namespace {

using engine::TensorSpec;
using nlohmann::json;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// Every tensor of the model, non-experts first, in the engine's naming.
absl::StatusOr<std::vector<TensorSpec>> AllTensors(const json& config) {
  absl::StatusOr<engine::ModelConfig> c =
      engine::ParseModelConfig(config.dump());
  if (!c.ok()) return c.status();
  std::vector<TensorSpec> out = NonExpertTensorSpecs(*c);
  const int64_t ffn = c->expert_intermediate_size, hidden = c->hidden_size;
  for (int layer = 0; layer < c->num_hidden_layers; ++layer) {
    for (int e = 0; e < c->num_experts; ++e) {
      engine::ExpertTensorNames n = c->architecture->ExpertNames(layer, e);
      out.push_back({n.gate, {ffn, hidden}});
      out.push_back({n.up, {ffn, hidden}});
      out.push_back({n.down, {hidden, ffn}});
    }
  }
  return out;
}

// Writes one tensor's values (random_weights.h), generated in chunks.
absl::Status WriteTensor(std::FILE* f, const TensorSpec& t, uint64_t seed) {
  std::vector<uint16_t> chunk(1 << 21);  // a multiple of 4 values
  const int64_t total = NumElements(t);
  for (int64_t begin = 0; begin < total;) {
    const size_t n = static_cast<size_t>(
        std::min<int64_t>(total - begin, static_cast<int64_t>(chunk.size())));
    FillRandomTensor(t, seed, begin, static_cast<int64_t>(n), chunk.data());
    if (std::fwrite(chunk.data(), 2, n, f) != n) {
      return absl::InternalError(absl::StrCat("short write of ", t.name));
    }
    begin += static_cast<int64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  File f(std::fopen(path.c_str(), "wb"));
  if (!f || std::fwrite(text.data(), 1, text.size(), f.get()) != text.size()) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace

QwenMoeShape TinyQwenMoeShape() {
  return {.hidden = 64,
          .num_layers = 2,
          .num_heads = 4,
          .num_kv_heads = 2,
          .vocab = 256,
          .num_experts = 8,
          .top_k = 2,
          .expert_ffn = 32,
          .shared_expert_ffn = 64,
          .max_positions = 2048};
}

json QwenMoeConfig(const QwenMoeShape& s) {
  return json{
      {"architectures", {"Qwen2MoeForCausalLM"}},
      {"model_type", "qwen2_moe"},
      {"hidden_size", s.hidden},
      {"num_hidden_layers", s.num_layers},
      {"num_attention_heads", s.num_heads},
      {"num_key_value_heads", s.num_kv_heads},
      {"vocab_size", s.vocab},
      {"intermediate_size", s.shared_expert_ffn},
      {"num_experts", s.num_experts},
      {"num_experts_per_tok", s.top_k},
      {"moe_intermediate_size", s.expert_ffn},
      {"shared_expert_intermediate_size", s.shared_expert_ffn},
      {"norm_topk_prob", false},
      {"decoder_sparse_step", 1},
      {"mlp_only_layers", json::array()},
      {"hidden_act", "silu"},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 1e6},
      {"max_position_embeddings", s.max_positions},
      {"use_sliding_window", false},
      {"sliding_window", nullptr},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      // Qwen's <|endoftext|>, inside a tiny vocabulary too (token ids
      // outside the vocabulary are refused at load).
      {"bos_token_id", std::min<int64_t>(151643, s.vocab - 1)},
      {"eos_token_id", std::min<int64_t>(151643, s.vocab - 1)},
  };
}

Qwen3MoeShape TinyQwen3MoeShape() {
  return {.hidden = 64,
          .num_layers = 2,
          .num_heads = 4,
          .num_kv_heads = 2,
          .head_dim = 32,
          .vocab = 256,
          .num_experts = 16,
          .top_k = 4,
          .expert_ffn = 32,
          .dense_ffn = 128,
          .max_positions = 2048};
}

// Qwen3-30B-A3B's config.json (Hugging Face Qwen/Qwen3-30B-A3B) with the
// shape's numbers; the training-only fields are kept for fidelity.
json Qwen3MoeConfig(const Qwen3MoeShape& s) {
  return json{
      {"architectures", {"Qwen3MoeForCausalLM"}},
      {"model_type", "qwen3_moe"},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"hidden_size", s.hidden},
      {"num_hidden_layers", s.num_layers},
      {"num_attention_heads", s.num_heads},
      {"num_key_value_heads", s.num_kv_heads},
      {"head_dim", s.head_dim},
      {"vocab_size", s.vocab},
      {"intermediate_size", s.dense_ffn},
      {"num_experts", s.num_experts},
      {"num_experts_per_tok", s.top_k},
      {"moe_intermediate_size", s.expert_ffn},
      {"norm_topk_prob", true},
      {"decoder_sparse_step", 1},
      {"mlp_only_layers", json::array()},
      {"max_window_layers", s.num_layers},
      {"hidden_act", "silu"},
      {"initializer_range", 0.02},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 1e6},
      {"rope_scaling", nullptr},
      {"max_position_embeddings", s.max_positions},
      {"use_sliding_window", false},
      {"sliding_window", nullptr},
      {"output_router_logits", false},
      {"router_aux_loss_coef", 0.001},
      {"use_cache", true},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      // <|endoftext|> and <|im_end|>, inside a tiny vocabulary too.
      {"bos_token_id", std::min<int64_t>(151643, s.vocab - 1)},
      {"eos_token_id", std::min<int64_t>(151645, s.vocab - 1)},
  };
}

MixtralShape TinyMixtralShape() {
  return {.hidden = 64,
          .num_layers = 2,
          .num_heads = 4,
          .num_kv_heads = 2,
          .head_dim = 16,
          .vocab = 256,
          .num_experts = 8,
          .top_k = 2,
          .expert_ffn = 32,
          .max_positions = 2048,
          .rope_theta = 1e6};
}

json MixtralConfig(const MixtralShape& s) {
  return json{
      {"architectures", {"MixtralForCausalLM"}},
      {"model_type", "mixtral"},
      {"hidden_size", s.hidden},
      {"num_hidden_layers", s.num_layers},
      {"num_attention_heads", s.num_heads},
      {"num_key_value_heads", s.num_kv_heads},
      {"head_dim", s.head_dim},
      {"vocab_size", s.vocab},
      {"intermediate_size", s.expert_ffn},
      {"num_local_experts", s.num_experts},
      {"num_experts_per_tok", s.top_k},
      {"hidden_act", "silu"},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", s.rope_theta},
      {"max_position_embeddings", s.max_positions},
      {"sliding_window", nullptr},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
  };
}

absl::Status WriteRandomQwenMoe(const std::string& dir,
                                const QwenMoeShape& shape, uint64_t seed) {
  return WriteRandomModel(dir, QwenMoeConfig(shape), seed);
}

absl::Status WriteRandomModel(const std::string& dir, const json& config,
                              uint64_t seed) {
  absl::StatusOr<std::vector<TensorSpec>> tensors = AllTensors(config);
  if (!tensors.ok()) return tensors.status();
  // The weights go to a temporary name and config.json is written last, so
  // a directory interrupted mid-write is never taken for a complete model.
  const std::string path = dir + "/model.safetensors";
  const std::string partial = path + ".partial";
  File f(std::fopen(partial.c_str(), "wb"));
  if (!f) return absl::InternalError(absl::StrCat("cannot create ", partial));
  const std::string header = SafetensorsHeader(*tensors);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  if (std::fwrite(len, 1, 8, f.get()) != 8 ||
      std::fwrite(header.data(), 1, header.size(), f.get()) != header.size()) {
    return absl::InternalError(absl::StrCat("cannot write ", partial));
  }
  for (const TensorSpec& t : *tensors) {
    absl::Status s = WriteTensor(f.get(), t, seed);
    if (!s.ok())
      return absl::InternalError(absl::StrCat(partial, ": ", s.message()));
  }
  if (std::fclose(f.release()) != 0) {
    return absl::InternalError(absl::StrCat("cannot close ", partial));
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", partial));
  }
  return WriteText(dir + "/config.json", config.dump(2));
}

}  // namespace moeserve::bench
