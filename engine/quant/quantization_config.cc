#include "engine/quant/quantization_config.h"

#include <algorithm>
#include <regex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace moeserve::engine::quant {
namespace {

using nlohmann::json;

absl::Status Bad(absl::string_view key, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("quantization_config.", key, ": ", why));
}

// The value of `key` in `obj` as T, or `fallback` when absent or null.
template <typename T>
absl::StatusOr<T> Get(const json& obj, const std::string& path,
                      const std::string& key, T fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return Bad(absl::StrCat(path, key),
               absl::StrCat("has the wrong type (", it->type_name(), ")"));
  }
}

absl::StatusOr<std::vector<std::string>> GetNames(const json& obj,
                                                  const std::string& key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::vector<std::string>{};
  if (!it->is_array()) return Bad(key, "must be a list of module names");
  std::vector<std::string> names;
  for (const json& v : *it) {
    if (!v.is_string()) return Bad(key, "must be a list of module names");
    names.push_back(v.get<std::string>());
  }
  return names;
}

absl::StatusOr<QuantizationConfig> ParseFp8(const json& q) {
  QuantizationConfig c;
  c.method = QuantMethod::kFp8Block;
  c.bits = 8;
  MOESERVE_ASSIGN_OR_RETURN(std::string fmt,
                            Get<std::string>(q, "", "fmt", "e4m3"));
  if (fmt != "e4m3") return Bad("fmt", absl::StrCat("'", fmt, "' (only e4m3)"));
  MOESERVE_ASSIGN_OR_RETURN(
      std::string act, Get<std::string>(q, "", "activation_scheme", "dynamic"));
  if (act != "dynamic") {
    return Bad("activation_scheme",
               absl::StrCat("'", act,
                            "' (only dynamic: static activation scales are "
                            "not supported)"));
  }
  auto block = q.find("weight_block_size");
  if (block == q.end() || block->is_null()) {
    return Bad("weight_block_size",
               "missing (per-tensor fp8 without blocks is not supported; "
               "use compressed-tensors for channel or tensor scales)");
  }
  if (!block->is_array() || block->size() != 2 ||
      !(*block)[0].is_number_integer() || !(*block)[1].is_number_integer() ||
      (*block)[0].get<int64_t>() <= 0 || (*block)[1].get<int64_t>() <= 0) {
    return Bad("weight_block_size", "must be two positive integers");
  }
  c.granularity = ScaleGranularity::kBlock;
  c.block_rows = (*block)[0].get<int64_t>();
  c.block_cols = (*block)[1].get<int64_t>();
  MOESERVE_ASSIGN_OR_RETURN(c.unquantized_modules,
                            GetNames(q, "modules_to_not_convert"));
  return c;
}

absl::StatusOr<QuantizationConfig> ParseGptqOrAwq(const json& q, bool gptq) {
  QuantizationConfig c;
  c.method = gptq ? QuantMethod::kGptq : QuantMethod::kAwq;
  MOESERVE_ASSIGN_OR_RETURN(c.bits, Get<int>(q, "", "bits", 0));
  if (c.bits != 4) {
    return Bad("bits", absl::StrCat(c.bits, " (only 4-bit is supported)"));
  }
  MOESERVE_ASSIGN_OR_RETURN(int64_t group,
                            Get<int64_t>(q, "", "group_size", 128));
  if (group == 0 || group < -1) {
    return Bad("group_size", absl::StrCat(group, " (need > 0 or -1)"));
  }
  c.granularity = ScaleGranularity::kGroup;
  c.block_rows = 1;
  c.block_cols = group;  // -1: one group per row
  if (gptq) {
    MOESERVE_ASSIGN_OR_RETURN(bool desc_act,
                              Get<bool>(q, "", "desc_act", false));
    if (desc_act) {
      return Bad("desc_act",
                 "true (act-order GPTQ permutes the groups; not supported)");
    }
    MOESERVE_ASSIGN_OR_RETURN(c.symmetric, Get<bool>(q, "", "sym", true));
    MOESERVE_ASSIGN_OR_RETURN(
        std::string format,
        Get<std::string>(q, "", "checkpoint_format", "gptq"));
    if (format != "gptq" && format != "gptq_v2") {
      return Bad("checkpoint_format",
                 absl::StrCat("'", format, "' (gptq or gptq_v2)"));
    }
    c.gptq_zeros_minus_one = format == "gptq";
  } else {
    MOESERVE_ASSIGN_OR_RETURN(bool zero_point,
                              Get<bool>(q, "", "zero_point", true));
    c.symmetric = !zero_point;
    MOESERVE_ASSIGN_OR_RETURN(std::string version,
                              Get<std::string>(q, "", "version", "gemm"));
    if (version != "gemm" && version != "GEMM") {
      return Bad("version",
                 absl::StrCat("'", version, "' (only the gemm packing)"));
    }
  }
  MOESERVE_ASSIGN_OR_RETURN(c.unquantized_modules,
                            GetNames(q, "modules_to_not_convert"));
  return c;
}

absl::StatusOr<QuantizationConfig> ParseCompressedTensors(const json& q) {
  QuantizationConfig c;
  MOESERVE_ASSIGN_OR_RETURN(std::string format,
                            Get<std::string>(q, "", "format", ""));
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) {
    return Bad("config_groups", "missing or empty");
  }
  if (groups->size() != 1) {
    return Bad("config_groups",
               absl::StrCat(groups->size(),
                            " groups (one scheme for every Linear is "
                            "supported)"));
  }
  const std::string gname = groups->begin().key();
  const json& g = groups->begin().value();
  const std::string path = absl::StrCat("config_groups.", gname, ".");
  auto targets = g.find("targets");
  if (targets == g.end() || !targets->is_array() ||
      std::find(targets->begin(), targets->end(), json("Linear")) ==
          targets->end()) {
    return Bad(absl::StrCat(path, "targets"), "must include \"Linear\"");
  }
  auto w = g.find("weights");
  if (w == g.end() || !w->is_object()) {
    return Bad(absl::StrCat(path, "weights"), "missing");
  }
  const std::string wpath = absl::StrCat(path, "weights.");
  MOESERVE_ASSIGN_OR_RETURN(c.bits, Get<int>(*w, wpath, "num_bits", 0));
  MOESERVE_ASSIGN_OR_RETURN(std::string type,
                            Get<std::string>(*w, wpath, "type", ""));
  MOESERVE_ASSIGN_OR_RETURN(std::string strategy,
                            Get<std::string>(*w, wpath, "strategy", ""));
  MOESERVE_ASSIGN_OR_RETURN(c.symmetric,
                            Get<bool>(*w, wpath, "symmetric", true));
  MOESERVE_ASSIGN_OR_RETURN(bool dynamic,
                            Get<bool>(*w, wpath, "dynamic", false));
  if (dynamic) return Bad(absl::StrCat(wpath, "dynamic"), "true for weights");
  if (g.contains("input_activations") && !g["input_activations"].is_null()) {
    const json& a = g["input_activations"];
    MOESERVE_ASSIGN_OR_RETURN(bool adyn, Get<bool>(a, path, "dynamic", false));
    if (!adyn) {
      return Bad(absl::StrCat(path, "input_activations.dynamic"),
                 "false (static activation scales are not supported; "
                 "moeserve computes weight-only)");
    }
  }
  if (type == "float" && c.bits == 8) {
    if (format != "float-quantized" && format != "naive-quantized") {
      return Bad("format",
                 absl::StrCat("'", format,
                              "' for 8-bit float weights "
                              "(float-quantized or naive-quantized)"));
    }
    if (!c.symmetric) {
      return Bad(absl::StrCat(wpath, "symmetric"), "false for fp8 weights");
    }
    c.method = QuantMethod::kFp8Compressed;
    if (strategy == "channel") {
      c.granularity = ScaleGranularity::kChannel;
    } else if (strategy == "tensor") {
      c.granularity = ScaleGranularity::kTensor;
    } else if (strategy == "block") {
      auto block = w->find("block_structure");
      if (block == w->end() || !block->is_array() || block->size() != 2) {
        return Bad(absl::StrCat(wpath, "block_structure"),
                   "must be [rows, cols] for strategy block");
      }
      c.granularity = ScaleGranularity::kBlock;
      c.block_rows = (*block)[0].get<int64_t>();
      c.block_cols = (*block)[1].get<int64_t>();
    } else {
      return Bad(absl::StrCat(wpath, "strategy"),
                 absl::StrCat("'", strategy,
                              "' for fp8 weights (channel, tensor or block)"));
    }
  } else if (type == "int" && c.bits == 4) {
    if (format != "pack-quantized") {
      return Bad("format", absl::StrCat("'", format,
                                        "' for 4-bit int weights (only "
                                        "pack-quantized)"));
    }
    if (strategy != "group") {
      return Bad(absl::StrCat(wpath, "strategy"),
                 absl::StrCat("'", strategy, "' for 4-bit weights (group)"));
    }
    MOESERVE_ASSIGN_OR_RETURN(int64_t group,
                              Get<int64_t>(*w, wpath, "group_size", 0));
    if (group <= 0) {
      return Bad(absl::StrCat(wpath, "group_size"),
                 absl::StrCat(group, " (need > 0)"));
    }
    auto actorder = w->find("actorder");
    if (actorder != w->end() && !actorder->is_null() &&
        !(actorder->is_boolean() && !actorder->get<bool>()) &&
        !(actorder->is_string() && actorder->get<std::string>() == "static")) {
      return Bad(absl::StrCat(wpath, "actorder"),
                 "set (activation-ordered groups are not supported)");
    }
    c.method = QuantMethod::kInt4Compressed;
    c.granularity = ScaleGranularity::kGroup;
    c.block_rows = 1;
    c.block_cols = group;
  } else {
    return Bad(absl::StrCat(wpath, "type"),
               absl::StrCat("'", type, "' with num_bits ", c.bits,
                            " (float 8 or int 4)"));
  }
  MOESERVE_ASSIGN_OR_RETURN(c.unquantized_modules, GetNames(q, "ignore"));
  return c;
}

}  // namespace

std::string QuantizationConfig::Describe() const {
  switch (method) {
    case QuantMethod::kNone:
      return "none";
    case QuantMethod::kFp8Block:
      return absl::StrCat("fp8 e4m3, block ", block_rows, "x", block_cols);
    case QuantMethod::kFp8Compressed:
      return absl::StrCat(
          "compressed-tensors fp8 e4m3, ",
          granularity == ScaleGranularity::kChannel ? "per channel"
          : granularity == ScaleGranularity::kTensor
              ? "per tensor"
              : absl::StrCat("block ", block_rows, "x", block_cols));
    case QuantMethod::kInt4Compressed:
      return absl::StrCat("compressed-tensors int4, group ", block_cols,
                          symmetric ? ", symmetric" : ", zero points");
    case QuantMethod::kGptq:
      return absl::StrCat("gptq int4, group ", block_cols,
                          symmetric ? ", symmetric" : ", zero points");
    case QuantMethod::kAwq:
      return absl::StrCat("awq int4 (gemm), group ", block_cols,
                          symmetric ? ", symmetric" : ", zero points");
  }
  return "?";
}

bool QuantizationConfig::IsUnquantized(absl::string_view module) const {
  for (const std::string& p : unquantized_modules) {
    if (absl::StartsWith(p, "re:")) {
      try {
        if (std::regex_match(std::string(module), std::regex(p.substr(3)))) {
          return true;
        }
      } catch (const std::regex_error&) {
        continue;  // refused at parse time; never reached
      }
      continue;
    }
    // Exact, or a dotted component sequence inside the name (Hugging Face's
    // modules_to_not_convert lists short names such as "gate" or "lm_head").
    if (module == p || absl::EndsWith(module, absl::StrCat(".", p)) ||
        absl::StrContains(module, absl::StrCat(".", p, "."))) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<QuantizationConfig> ParseQuantizationConfig(
    const nlohmann::json& config_json) {
  auto it = config_json.find("quantization_config");
  if (it == config_json.end() || it->is_null()) return QuantizationConfig{};
  if (!it->is_object()) {
    return absl::InvalidArgumentError("quantization_config: must be an object");
  }
  const json& q = *it;
  MOESERVE_ASSIGN_OR_RETURN(std::string method,
                            Get<std::string>(q, "", "quant_method", ""));
  absl::StatusOr<QuantizationConfig> c;
  if (method == "fp8") {
    c = ParseFp8(q);
  } else if (method == "gptq") {
    c = ParseGptqOrAwq(q, /*gptq=*/true);
  } else if (method == "awq") {
    c = ParseGptqOrAwq(q, /*gptq=*/false);
  } else if (method == "compressed-tensors") {
    c = ParseCompressedTensors(q);
  } else {
    return Bad("quant_method",
               absl::StrCat("'", method,
                            "' is not supported (fp8, compressed-tensors, "
                            "gptq, awq)"));
  }
  if (!c.ok()) return c.status();
  for (const std::string& p : c->unquantized_modules) {
    if (!absl::StartsWith(p, "re:")) continue;
    try {
      std::regex r(p.substr(3));
    } catch (const std::regex_error&) {
      return Bad("ignore", absl::StrCat("'", p, "' is not a valid regex"));
    }
  }
  return c;
}

}  // namespace moeserve::engine::quant
