#include "engine/model_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/architecture.h"
#include "engine/json_util.h"

namespace moeserve::engine {
namespace {

using json_util::GetBool;
using json_util::GetDouble;
using json_util::GetInt;
using json_util::GetString;
using nlohmann::json;

absl::StatusOr<const Architecture*> ResolveArchitecture(const json& j) {
  MOESERVE_ASSIGN_OR_RETURN(std::string type, GetString(j, "model_type"));
  const Architecture* arch = FindArchitecture(type);
  if (arch == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported model_type \"", type,
        "\"; supported: ", absl::StrJoin(SupportedModelTypes(), ", ")));
  }
  return arch;
}

// "eos_token_id": an id or a list of ids, appended to `ids` (skipping ids
// already there).
absl::Status ParseEosIds(const json& j, std::vector<int64_t>* ids) {
  if (!json_util::HasNonNull(j, "eos_token_id")) return absl::OkStatus();
  auto add = [ids](int64_t id) {
    if (std::find(ids->begin(), ids->end(), id) == ids->end()) {
      ids->push_back(id);
    }
  };
  const json& eos = j["eos_token_id"];
  if (!eos.is_array()) {
    MOESERVE_ASSIGN_OR_RETURN(int64_t id, GetInt(j, "eos_token_id"));
    add(id);
    return absl::OkStatus();
  }
  for (const json& e : eos) {
    std::optional<int64_t> id = json_util::AsInt64(e);
    if (!id) {
      return absl::InvalidArgumentError(
          "field \"eos_token_id\" must be an integer or a list of integers");
    }
    add(*id);
  }
  return absl::OkStatus();
}

absl::Status ParseTokenIds(const json& j, ModelConfig* c) {
  if (json_util::HasNonNull(j, "bos_token_id")) {
    MOESERVE_ASSIGN_OR_RETURN(c->bos_token_id, GetInt(j, "bos_token_id"));
  }
  c->eos_token_ids.clear();
  return ParseEosIds(j, &c->eos_token_ids);
}

absl::Status ParseDims(const json& j, ModelConfig* c) {
  MOESERVE_ASSIGN_OR_RETURN(c->hidden_size, GetInt(j, "hidden_size"));
  MOESERVE_ASSIGN_OR_RETURN(c->num_hidden_layers,
                            GetInt(j, "num_hidden_layers"));
  MOESERVE_ASSIGN_OR_RETURN(c->num_attention_heads,
                            GetInt(j, "num_attention_heads"));
  MOESERVE_ASSIGN_OR_RETURN(
      c->num_key_value_heads,
      GetInt(j, "num_key_value_heads", c->num_attention_heads));
  if (c->num_attention_heads <= 0) {
    return absl::InvalidArgumentError(
        "field \"num_attention_heads\" must be positive");
  }
  if (!json_util::HasNonNull(j, "head_dim") &&
      c->hidden_size % c->num_attention_heads != 0) {
    return absl::InvalidArgumentError(
        "hidden_size must be divisible by num_attention_heads when head_dim "
        "is not given");
  }
  MOESERVE_ASSIGN_OR_RETURN(
      c->head_dim,
      GetInt(j, "head_dim", c->hidden_size / c->num_attention_heads));
  MOESERVE_ASSIGN_OR_RETURN(c->vocab_size, GetInt(j, "vocab_size"));
  MOESERVE_ASSIGN_OR_RETURN(c->max_position_embeddings,
                            GetInt(j, "max_position_embeddings"));
  return absl::OkStatus();
}

// Refuses features we do not implement yet.
absl::Status RefuseUnsupported(const json& j, const ModelConfig& c) {
  if (json_util::HasNonNull(j, "rope_scaling")) {
    return absl::InvalidArgumentError(
        "field \"rope_scaling\" is set; RoPE scaling is not supported yet");
  }
  MOESERVE_ASSIGN_OR_RETURN(bool use_sw,
                            GetBool(j, "use_sliding_window", true));
  if (use_sw && json_util::HasNonNull(j, "sliding_window")) {
    MOESERVE_ASSIGN_OR_RETURN(int64_t window, GetInt(j, "sliding_window"));
    if (window < c.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(
          "field \"sliding_window\" = ", window,
          " < max_position_embeddings; sliding-window attention is not "
          "supported yet"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseCommon(const json& j, ModelConfig* c) {
  MOESERVE_RETURN_IF_ERROR(ParseDims(j, c));
  MOESERVE_ASSIGN_OR_RETURN(c->rms_norm_eps, GetDouble(j, "rms_norm_eps"));
  MOESERVE_ASSIGN_OR_RETURN(c->rope_theta, GetDouble(j, "rope_theta"));
  MOESERVE_ASSIGN_OR_RETURN(c->tie_word_embeddings,
                            GetBool(j, "tie_word_embeddings", false));
  MOESERVE_ASSIGN_OR_RETURN(c->torch_dtype, GetString(j, "torch_dtype", ""));
  MOESERVE_RETURN_IF_ERROR(ParseTokenIds(j, c));
  return RefuseUnsupported(j, *c);
}

absl::Status Positive(int64_t v, absl::string_view field) {
  if (v > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("field \"", field, "\" must be positive, got ", v));
}

// bos and eos ids index the embedding and logits rows: outside the
// vocabulary they would read or compare against rows that do not exist.
absl::Status CheckTokenIds(const ModelConfig& c) {
  auto in_vocab = [&c](int64_t id) { return id >= 0 && id < c.vocab_size; };
  if (c.bos_token_id.has_value() && !in_vocab(*c.bos_token_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("field \"bos_token_id\" = ", *c.bos_token_id,
                     " is outside the vocabulary [0, ", c.vocab_size, ")"));
  }
  for (int64_t id : c.eos_token_ids) {
    if (!in_vocab(id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("field \"eos_token_id\" = ", id,
                       " is outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Validate(const ModelConfig& c) {
  MOESERVE_RETURN_IF_ERROR(Positive(c.hidden_size, "hidden_size"));
  MOESERVE_RETURN_IF_ERROR(Positive(c.num_hidden_layers, "num_hidden_layers"));
  MOESERVE_RETURN_IF_ERROR(
      Positive(c.num_key_value_heads, "num_key_value_heads"));
  MOESERVE_RETURN_IF_ERROR(Positive(c.head_dim, "head_dim"));
  MOESERVE_RETURN_IF_ERROR(Positive(c.vocab_size, "vocab_size"));
  MOESERVE_RETURN_IF_ERROR(
      Positive(c.max_position_embeddings, "max_position_embeddings"));
  MOESERVE_RETURN_IF_ERROR(Positive(c.num_experts, "num_experts"));
  MOESERVE_RETURN_IF_ERROR(
      Positive(c.num_experts_per_tok, "num_experts_per_tok"));
  MOESERVE_RETURN_IF_ERROR(
      Positive(c.expert_intermediate_size, "expert intermediate size"));
  if (c.shared_expert_intermediate_size < 0) {
    return absl::InvalidArgumentError(
        "field \"shared_expert_intermediate_size\" must be >= 0");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_attention_heads (", c.num_attention_heads,
                     ") must be divisible by num_key_value_heads (",
                     c.num_key_value_heads, ")"));
  }
  if (c.num_experts_per_tok > c.num_experts) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_experts_per_tok (", c.num_experts_per_tok,
                     ") exceeds the number of experts (", c.num_experts, ")"));
  }
  // A prompt token and a generated one: anything less cannot generate
  // (issue 16: max_position_embeddings=1 was served).
  if (c.max_position_embeddings < kMinPositions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "field \"max_position_embeddings\" = ", c.max_position_embeddings,
        " is less than ", kMinPositions,
        " (a prompt token and a generated token)"));
  }
  MOESERVE_RETURN_IF_ERROR(CheckTokenIds(c));
  if (!(c.rms_norm_eps > 0) || !(c.rope_theta > 0)) {
    return absl::InvalidArgumentError(
        "fields \"rms_norm_eps\" and \"rope_theta\" must be positive");
  }
  // Keep every dimension small enough that products of two fit easily.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  for (int64_t d :
       {c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.head_dim,
        c.vocab_size, c.num_experts, c.expert_intermediate_size,
        c.shared_expert_intermediate_size}) {
    if (d > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimension ", d, " exceeds the limit of 2^24"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text) {
  MOESERVE_ASSIGN_OR_RETURN(json j, json_util::Parse(json_text, "config.json"));
  if (!j.is_object()) {
    return absl::InvalidArgumentError("config.json is not a JSON object");
  }
  ModelConfig c;
  MOESERVE_ASSIGN_OR_RETURN(c.architecture, ResolveArchitecture(j));
  c.model_type = std::string(c.architecture->model_type());
  MOESERVE_RETURN_IF_ERROR(ParseCommon(j, &c));
  MOESERVE_ASSIGN_OR_RETURN(c.quantization, quant::ParseQuantizationConfig(j));
  MOESERVE_RETURN_IF_ERROR(c.architecture->ParseHparams(j, &c));
  MOESERVE_RETURN_IF_ERROR(Validate(c));
  return c;
}

absl::Status MergeGenerationConfig(absl::string_view json_text,
                                   ModelConfig* c) {
  MOESERVE_ASSIGN_OR_RETURN(
      json j, json_util::Parse(json_text, "generation_config.json"));
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        "generation_config.json is not a JSON object");
  }
  MOESERVE_RETURN_IF_ERROR(ParseEosIds(j, &c->eos_token_ids));
  return CheckTokenIds(*c);
}

namespace {

absl::Status Prefixed(const std::string& path, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

}  // namespace

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  MOESERVE_ASSIGN_OR_RETURN(std::string text, json_util::ReadFileText(path));
  absl::StatusOr<ModelConfig> c = ParseModelConfig(text);
  if (!c.ok()) return Prefixed(path, c.status());
  const std::string gen_path = model_dir + "/generation_config.json";
  if (json_util::FileExists(gen_path)) {
    MOESERVE_ASSIGN_OR_RETURN(std::string gen_text,
                              json_util::ReadFileText(gen_path));
    absl::Status merged = MergeGenerationConfig(gen_text, &*c);
    if (!merged.ok()) return Prefixed(gen_path, merged);
  }
  return c;
}

}  // namespace moeserve::engine
