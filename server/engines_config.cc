#include "server/engines_config.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/json_util.h"

namespace moeserve::server {
namespace {

using engine::EngineSpec;
using nlohmann::json;
namespace json_util = engine::json_util;

constexpr const char* kEngineKeys[] = {"name",
                                       "policy",
                                       "policy_config",
                                       "expert_cache_ratio",
                                       "expert_cache_mb",
                                       "slow_tier",
                                       "link_gbps",
                                       "link_latency_us",
                                       "inplace_compute_ratio",
                                       "kv_cache_mb",
                                       "max_num_seqs",
                                       "max_batched_tokens",
                                       "max_waiting",
                                       "drafter",
                                       "num_speculative_tokens",
                                       "draft_model_dir",
                                       "draft_budget"};
constexpr const char* kTopKeys[] = {"engines", "ab", "default"};

template <size_t N>
absl::Status CheckKeys(const json& obj, const char* const (&known)[N],
                       absl::string_view where) {
  for (const auto& [key, value] : obj.items()) {
    bool found = false;
    for (const char* k : known) found = found || key == k;
    if (!found) {
      std::vector<std::string> names(std::begin(known), std::end(known));
      return absl::InvalidArgumentError(
          absl::StrCat(where, "unknown key '", key,
                       "' (known: ", absl::StrJoin(names, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

// A policy_config value as the policy's string config sees it.
absl::StatusOr<std::string> ConfigValue(const json& value,
                                        absl::string_view key) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (std::optional<int64_t> i = json_util::AsInt64(value)) {
    return absl::StrCat(*i);
  }
  if (value.is_number_float()) return absl::StrCat(value.get<double>());
  return absl::InvalidArgumentError(absl::StrCat(
      "policy_config: key '", key, "' must be a string, number or boolean"));
}

absl::StatusOr<int> GetPositiveInt(const json& obj, absl::string_view key,
                                   int default_value) {
  MOESERVE_ASSIGN_OR_RETURN(int64_t v,
                            json_util::GetInt(obj, key, default_value));
  if (v < 0 || v > (1 << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": ", v, " is out of range"));
  }
  return static_cast<int>(v);
}

// Fills `spec` from one element of "engines" (already known to be an
// object with a name). Errors name the key.
absl::Status ReadEngine(const json& obj, EngineSpec* spec) {
  MOESERVE_RETURN_IF_ERROR(CheckKeys(obj, kEngineKeys, ""));
  MOESERVE_ASSIGN_OR_RETURN(spec->policy,
                            json_util::GetString(obj, "policy", spec->name));
  spec->policy_config.clear();
  if (json_util::HasNonNull(obj, "policy_config")) {
    const json& config = obj.at("policy_config");
    if (!config.is_object()) {
      return absl::InvalidArgumentError("policy_config: must be an object");
    }
    for (const auto& [key, value] : config.items()) {
      MOESERVE_ASSIGN_OR_RETURN(spec->policy_config[key],
                                ConfigValue(value, key));
    }
  }
  const bool has_mb = json_util::HasNonNull(obj, "expert_cache_mb");
  const bool has_ratio = json_util::HasNonNull(obj, "expert_cache_ratio");
  if (has_mb && has_ratio) {
    return absl::InvalidArgumentError(
        "expert_cache_ratio: give expert_cache_ratio or expert_cache_mb, not "
        "both");
  }
  // An engine's own budget replaces the server-wide one whole.
  if (has_mb) spec->expert_cache_ratio = 1.0;
  if (has_ratio) spec->expert_cache_mb = 0;
  MOESERVE_ASSIGN_OR_RETURN(spec->expert_cache_ratio,
                            json_util::GetDouble(obj, "expert_cache_ratio",
                                                 spec->expert_cache_ratio));
  MOESERVE_ASSIGN_OR_RETURN(
      spec->expert_cache_mb,
      json_util::GetInt(obj, "expert_cache_mb", spec->expert_cache_mb));
  MOESERVE_ASSIGN_OR_RETURN(
      spec->slow_tier, json_util::GetString(obj, "slow_tier", spec->slow_tier));
  MOESERVE_ASSIGN_OR_RETURN(
      spec->link.gbps, json_util::GetDouble(obj, "link_gbps", spec->link.gbps));
  MOESERVE_ASSIGN_OR_RETURN(
      spec->link.latency_us,
      json_util::GetDouble(obj, "link_latency_us", spec->link.latency_us));
  MOESERVE_ASSIGN_OR_RETURN(
      spec->link.inplace_compute_ratio,
      json_util::GetDouble(obj, "inplace_compute_ratio",
                           spec->link.inplace_compute_ratio));
  MOESERVE_ASSIGN_OR_RETURN(
      int kv_mb, GetPositiveInt(obj, "kv_cache_mb",
                                static_cast<int>(spec->kv_cache_bytes >> 20)));
  spec->kv_cache_bytes = static_cast<uint64_t>(kv_mb) << 20;
  MOESERVE_ASSIGN_OR_RETURN(
      spec->max_num_seqs,
      GetPositiveInt(obj, "max_num_seqs", spec->max_num_seqs));
  MOESERVE_ASSIGN_OR_RETURN(
      spec->max_batched_tokens,
      GetPositiveInt(obj, "max_batched_tokens", spec->max_batched_tokens));
  MOESERVE_ASSIGN_OR_RETURN(
      spec->max_waiting, GetPositiveInt(obj, "max_waiting", spec->max_waiting));
  MOESERVE_ASSIGN_OR_RETURN(
      spec->drafter, json_util::GetString(obj, "drafter", spec->drafter));
  // 0..16 here; -1 (the policy's own) is what leaving the key out gives
  // when --num_speculative_tokens is not set either.
  if (json_util::HasNonNull(obj, "num_speculative_tokens")) {
    MOESERVE_ASSIGN_OR_RETURN(int64_t k,
                              json_util::GetInt(obj, "num_speculative_tokens",
                                                spec->num_speculative_tokens));
    if (k < 0 || k > engine::kMaxSpeculativeTokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "num_speculative_tokens: must be in [0, ",
          engine::kMaxSpeculativeTokens,
          "] (0: adaptive; leave it out for the policy's own), got ", k));
    }
    spec->num_speculative_tokens = static_cast<int>(k);
  }
  MOESERVE_ASSIGN_OR_RETURN(
      spec->draft_model_dir,
      json_util::GetString(obj, "draft_model_dir", spec->draft_model_dir));
  MOESERVE_ASSIGN_OR_RETURN(
      spec->draft_budget,
      json_util::GetString(obj, "draft_budget", spec->draft_budget));
  return engine::CheckEngineSpec(*spec);
}

absl::StatusOr<std::vector<AbArm>> ReadAb(
    const json& ab, const std::vector<EngineSpec>& engines) {
  if (!ab.is_object()) {
    return absl::InvalidArgumentError("ab: must be an object {name: weight}");
  }
  std::vector<AbArm> arms;
  double total = 0;
  for (const auto& [name, value] : ab.items()) {
    const bool known = std::any_of(
        engines.begin(), engines.end(),
        [&key = name](const EngineSpec& s) { return s.name == key; });
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("ab: '", name, "' is not one of the engines"));
    }
    if (!value.is_number() || !std::isfinite(value.get<double>()) ||
        value.get<double>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ab: weight of '", name, "' must be a number >= 0, got ",
                       value.dump()));
    }
    total += value.get<double>();
    arms.push_back({name, value.get<double>()});
  }
  if (!(total > 0)) {
    return absl::InvalidArgumentError("ab: weights sum to 0");
  }
  // Finite weights can sum to infinity (1e308 + 1e308): every share would
  // be 0.
  if (!std::isfinite(total)) {
    return absl::InvalidArgumentError(
        "ab: weights sum to infinity; use smaller numbers");
  }
  for (AbArm& arm : arms) arm.weight /= total;
  return arms;
}

}  // namespace

absl::StatusOr<EnginesConfig> ParseEnginesConfig(absl::string_view text,
                                                 const EngineSpec& defaults) {
  MOESERVE_ASSIGN_OR_RETURN(json root,
                            json_util::Parse(text, "engines config"));
  if (!root.is_object()) {
    return absl::InvalidArgumentError("the top level must be an object");
  }
  MOESERVE_RETURN_IF_ERROR(CheckKeys(root, kTopKeys, ""));
  if (!root.contains("engines") || !root.at("engines").is_array() ||
      root.at("engines").empty()) {
    return absl::InvalidArgumentError(
        "engines: must be a non-empty array of engine objects");
  }
  EnginesConfig config;
  std::set<std::string> names;
  const json& engines = root.at("engines");
  if (engines.size() > kMaxEngines) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engines: ", engines.size(), " engines, at most ", kMaxEngines));
  }
  for (size_t i = 0; i < engines.size(); ++i) {
    const json& obj = engines[i];
    const std::string where = absl::StrCat("engines[", i, "]");
    if (!obj.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": must be an object"));
    }
    absl::StatusOr<std::string> name = json_util::GetString(obj, "name");
    if (!name.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", name.status().message()));
    }
    EngineSpec spec = defaults;
    spec.name = *name;
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": engine name '", spec.name, "' appears twice"));
    }
    if (absl::Status st = ReadEngine(obj, &spec); !st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat("engine '", spec.name, "': ", st.message()));
    }
    config.engines.push_back(std::move(spec));
  }
  if (json_util::HasNonNull(root, "default")) {
    MOESERVE_ASSIGN_OR_RETURN(std::string name,
                              json_util::GetString(root, "default"));
    auto it = std::find_if(
        config.engines.begin(), config.engines.end(),
        [&key = name](const EngineSpec& s) { return s.name == key; });
    if (it == config.engines.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("default: '", name, "' is not one of the engines"));
    }
    std::rotate(config.engines.begin(), it, it + 1);
  }
  if (json_util::HasNonNull(root, "ab")) {
    MOESERVE_ASSIGN_OR_RETURN(config.ab, ReadAb(root.at("ab"), config.engines));
  }
  return config;
}

absl::StatusOr<EnginesConfig> LoadEnginesConfig(const std::string& path,
                                                const EngineSpec& defaults) {
  const std::string prefix = absl::StrCat("--engines_config=", path, ": ");
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(prefix, "cannot open the file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<EnginesConfig> config =
      ParseEnginesConfig(text.str(), defaults);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(prefix, config.status().message()));
  }
  return config;
}

}  // namespace moeserve::server
