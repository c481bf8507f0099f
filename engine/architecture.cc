#include "engine/architecture.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace moeserve::engine {
namespace {

std::map<std::string, const Architecture*, std::less<>>& Registry() {
  static auto* registry =
      new std::map<std::string, const Architecture*, std::less<>>();
  return *registry;
}

std::string LayerPrefix(int layer) {
  return absl::StrCat("model.layers.", layer, ".");
}

void AddAttention(const Architecture& arch, const ModelConfig& c, int layer,
                  std::vector<TensorSpec>* out) {
  const AttentionTensorNames n = arch.AttentionNames(layer);
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  out->push_back({n.q, {q_dim, c.hidden_size}});
  out->push_back({n.k, {kv_dim, c.hidden_size}});
  out->push_back({n.v, {kv_dim, c.hidden_size}});
  out->push_back({n.o, {c.hidden_size, q_dim}});
  if (c.attention_bias) {
    out->push_back({n.q_bias, {q_dim}});
    out->push_back({n.k_bias, {kv_dim}});
    out->push_back({n.v_bias, {kv_dim}});
  }
  if (c.qk_norm == QkNorm::kPerHead) {
    out->push_back({n.q_norm, {c.head_dim}});
    out->push_back({n.k_norm, {c.head_dim}});
  } else if (c.qk_norm == QkNorm::kWholeProjection) {
    out->push_back({n.q_norm, {q_dim}});
    out->push_back({n.k_norm, {kv_dim}});
  }
}

void AddSharedExpert(const Architecture& arch, const ModelConfig& c, int layer,
                     std::vector<TensorSpec>* out) {
  std::optional<SharedExpertTensorNames> n = arch.SharedExpertNames(layer);
  if (!n || c.shared_expert_intermediate_size <= 0) return;
  const int64_t ffn = c.shared_expert_intermediate_size;
  out->push_back({n->mlp.gate, {ffn, c.hidden_size}});
  out->push_back({n->mlp.up, {ffn, c.hidden_size}});
  out->push_back({n->mlp.down, {c.hidden_size, ffn}});
  out->push_back({n->gate, {1, c.hidden_size}});
}

}  // namespace

AttentionTensorNames Architecture::AttentionNames(int layer) const {
  const std::string p = absl::StrCat(LayerPrefix(layer), "self_attn.");
  return {
      .q = p + "q_proj.weight",
      .k = p + "k_proj.weight",
      .v = p + "v_proj.weight",
      .o = p + "o_proj.weight",
      .q_bias = p + "q_proj.bias",
      .k_bias = p + "k_proj.bias",
      .v_bias = p + "v_proj.bias",
      .q_norm = p + "q_norm.weight",
      .k_norm = p + "k_norm.weight",
  };
}

std::string Architecture::InputNormName(int layer) const {
  return LayerPrefix(layer) + "input_layernorm.weight";
}

std::string Architecture::PostAttentionNormName(int layer) const {
  return LayerPrefix(layer) + "post_attention_layernorm.weight";
}

std::vector<TensorSpec> Architecture::NonExpertTensors(
    const ModelConfig& c) const {
  std::vector<TensorSpec> out;
  out.push_back({EmbeddingName(), {c.vocab_size, c.hidden_size}});
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    out.push_back({InputNormName(layer), {c.hidden_size}});
    out.push_back({PostAttentionNormName(layer), {c.hidden_size}});
    AddAttention(*this, c, layer, &out);
    out.push_back({RouterName(layer), {c.num_experts, c.hidden_size}});
    AddSharedExpert(*this, c, layer, &out);
  }
  out.push_back({FinalNormName(), {c.hidden_size}});
  if (!c.tie_word_embeddings) {
    out.push_back({LmHeadName(), {c.vocab_size, c.hidden_size}});
  }
  return out;
}

const Architecture* FindArchitecture(absl::string_view model_type) {
  auto it = Registry().find(model_type);
  return it == Registry().end() ? nullptr : it->second;
}

std::vector<std::string> SupportedModelTypes() {
  std::vector<std::string> types;
  for (const auto& [name, arch] : Registry()) types.push_back(name);
  return types;
}

namespace internal {
bool RegisterArchitecture(const Architecture* arch) {
  Registry().emplace(std::string(arch->model_type()), arch);
  return true;
}
}  // namespace internal

}  // namespace moeserve::engine
