#include "server/engines_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/builder/engine_settings.h"
#include "engine/json_util.h"

namespace moeserve::server {
namespace {

using engine::EngineSpec;
using nlohmann::json;
namespace json_util = engine::json_util;

// An engine's keys: its name and policy, then every engine setting
// (engine/builder/engine_settings.h), in the table's order.
const std::vector<absl::string_view>& EngineKeys() {
  static const auto* const keys = [] {
    auto* keys =
        new std::vector<absl::string_view>{"name", "policy", "policy_config"};
    for (const engine::EngineSetting& s : engine::EngineSettings()) {
      keys->push_back(s.name);
    }
    return keys;
  }();
  return *keys;
}

const std::vector<absl::string_view>& TopKeys() {
  static const auto* const keys =
      new std::vector<absl::string_view>{"engines", "ab", "default"};
  return *keys;
}

absl::Status CheckKeys(const json& obj,
                       const std::vector<absl::string_view>& known,
                       absl::string_view where) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "unknown key '", key,
                       "' (known: ", absl::StrJoin(known, ", "), ")"));
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

// The value of setting `s` in `obj` (which has its key, not null), typed
// as its row; a wrong JSON type is refused naming the key.
absl::StatusOr<engine::SettingValue> JsonValue(const json& obj,
                                               const engine::EngineSetting& s) {
  switch (s.type) {
    case engine::SettingType::kInt: {
      MOESERVE_ASSIGN_OR_RETURN(int64_t v, json_util::GetInt(obj, s.name));
      return engine::SettingValue(v);
    }
    case engine::SettingType::kDouble: {
      MOESERVE_ASSIGN_OR_RETURN(double v, json_util::GetDouble(obj, s.name));
      return engine::SettingValue(v);
    }
    case engine::SettingType::kString: {
      MOESERVE_ASSIGN_OR_RETURN(std::string v,
                                json_util::GetString(obj, s.name));
      return engine::SettingValue(std::move(v));
    }
  }
  return absl::InternalError(absl::StrCat(s.name, ": unknown type"));
}

// Fills `spec` from one element of "engines" (already known to be an
// object with a name). Errors name the key.
absl::Status ReadEngine(const json& obj, EngineSpec* spec) {
  MOESERVE_RETURN_IF_ERROR(CheckKeys(obj, EngineKeys(), ""));
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
  // Each setting the engine names is checked as it is read (a file may not
  // write a setting's "left to the policy" value: it leaves the key out).
  for (const engine::EngineSetting& s : engine::EngineSettings()) {
    if (!json_util::HasNonNull(obj, s.name)) continue;
    MOESERVE_ASSIGN_OR_RETURN(engine::SettingValue value, JsonValue(obj, s));
    MOESERVE_RETURN_IF_ERROR(
        engine::SetSetting(s, value, spec, engine::SettingSource::kFile));
  }
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
  MOESERVE_RETURN_IF_ERROR(CheckKeys(root, TopKeys(), ""));
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
