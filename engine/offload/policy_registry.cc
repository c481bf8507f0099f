#include "engine/offload/policy_registry.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/named_registry.h"

namespace moeserve::engine {
namespace {

// The Debian Abseil's string_view is its own type, not std::string_view.
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

struct Registration {
  PolicyFactory factory;
  PolicyTraits traits;
};

base::NamedRegistry<Registration>& Policies() {
  static auto* registry =
      new base::NamedRegistry<Registration>("offload policy");
  return *registry;
}

absl::Status UnknownPolicy(std::string_view name) {
  return absl::NotFoundError(absl::StrCat(
      "unknown offload policy '", A(name),
      "'; registered: ", absl::StrJoin(RegisteredPolicies(), ", ")));
}

// A factory's or traits' error, as CreatePolicy reports it.
absl::Status InPolicy(std::string_view name, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("policy '", A(name),
                                                  "': ", status.message()));
}

}  // namespace

namespace internal {
bool RegisterPolicy(std::string_view name, PolicyFactory factory,
                    PolicyTraits traits) {
  return Policies().Register(
      name, Registration{std::move(factory), std::move(traits)});
}
}  // namespace internal

std::vector<std::string> RegisteredPolicies() { return Policies().Names(); }

PolicyConfig PolicyTestConfig(std::string_view name) {
  const Registration* r = Policies().Find(name);
  return r == nullptr ? PolicyConfig{} : r->traits.test_config;
}

absl::StatusOr<std::unique_ptr<OffloadPolicy>> CreatePolicy(
    std::string_view name, const PolicyConfig& config) {
  const Registration* r = Policies().Find(name);
  if (r == nullptr) return UnknownPolicy(name);
  absl::StatusOr<std::unique_ptr<OffloadPolicy>> policy = r->factory(config);
  if (!policy.ok()) return InPolicy(name, policy.status());
  return policy;
}

absl::StatusOr<SpeculationDefaults> PolicySpeculation(
    std::string_view name, const PolicyConfig& config) {
  const Registration* r = Policies().Find(name);
  if (r == nullptr) return UnknownPolicy(name);
  if (!r->traits.speculation) return SpeculationDefaults{};
  absl::StatusOr<SpeculationDefaults> defaults = r->traits.speculation(config);
  if (!defaults.ok()) return InPolicy(name, defaults.status());
  return defaults;
}

absl::StatusOr<PolicyConfig> ParsePolicyConfig(std::string_view text_in) {
  const absl::string_view text = A(text_in);
  PolicyConfig config;
  if (absl::StripAsciiWhitespace(text).empty()) return config;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> kv =
        absl::StrSplit(entry, absl::MaxSplits('=', 1));
    absl::string_view key = absl::StripAsciiWhitespace(kv[0]);
    if (kv.size() != 2 || key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy config entry '", entry, "' is not key=value"));
    }
    if (!config
             .emplace(std::string(key),
                      std::string(absl::StripAsciiWhitespace(kv[1])))
             .second) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy config key '", key, "' given twice"));
    }
  }
  return config;
}

absl::Status CheckConfigKeys(std::string_view policy,
                             const PolicyConfig& config,
                             std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : config) {
    bool found = false;
    for (std::string_view k : known) found = found || k == key;
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown config key '", key, "' for policy '", A(policy),
          "'; known: [",
          absl::StrJoin(
              known, ", ",
              [](std::string* out, std::string_view k) { out->append(k); }),
          "]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> GetIntConfig(const PolicyConfig& config,
                                     std::string_view key,
                                     int64_t default_value, int64_t min_value,
                                     int64_t max_value) {
  auto it = config.find(std::string(key));
  if (it == config.end()) return default_value;
  int64_t value = 0;
  if (!absl::SimpleAtoi(it->second, &value) || value < min_value ||
      value > max_value) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key '", A(key), "': '", it->second, "' is not an integer in [",
        min_value, ", ", max_value, "]"));
  }
  return value;
}

absl::StatusOr<double> GetDoubleConfig(const PolicyConfig& config,
                                       std::string_view key,
                                       double default_value, double min_value,
                                       double max_value) {
  auto it = config.find(std::string(key));
  if (it == config.end()) return default_value;
  double value = 0;
  if (!absl::SimpleAtod(it->second, &value) || !std::isfinite(value) ||
      value < min_value || value > max_value) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key '", A(key), "': '", it->second, "' is not a number in [",
        min_value, ", ", max_value, "]"));
  }
  return value;
}

absl::StatusOr<std::string> GetChoiceConfig(
    const PolicyConfig& config, std::string_view key,
    std::initializer_list<std::string_view> choices) {
  auto it = config.find(std::string(key));
  if (it == config.end()) return std::string(*choices.begin());
  for (std::string_view choice : choices) {
    if (it->second == choice) return it->second;
  }
  std::string expected;
  for (std::string_view choice : choices) {
    absl::StrAppend(&expected, expected.empty() ? "" : ", ",
                    std::string(choice));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("config key '", std::string(key), "': expected one of ",
                   expected, ", got '", it->second, "'"));
}

absl::StatusOr<std::string> GetDrafterConfig(const PolicyConfig& config,
                                             std::string_view default_value) {
  auto it = config.find("drafter");
  if (it == config.end()) return std::string(default_value);
  if (it->second.empty()) {
    return absl::InvalidArgumentError(
        "config key 'drafter': expected a drafter name, got ''");
  }
  return it->second;
}

absl::StatusOr<SpeculationDefaults> DrafterKeySpeculation(
    const PolicyConfig& config, std::string_view default_drafter) {
  absl::StatusOr<std::string> drafter =
      GetDrafterConfig(config, default_drafter);
  if (!drafter.ok()) return drafter.status();
  return SpeculationDefaults{.drafter = *std::move(drafter),
                             .num_speculative_tokens = 0};
}

absl::StatusOr<SpeculativeTokens> GetSpeculativeTokens(
    const PolicyConfig& config) {
  SpeculativeTokens tokens;
  absl::StatusOr<int64_t> max_k =
      GetIntConfig(config, "max_speculative_tokens", /*default_value=*/8,
                   /*min_value=*/0, /*max_value=*/16);  // kMaxSpeculativeTokens
  if (!max_k.ok()) return max_k.status();
  tokens.max = static_cast<int>(*max_k);
  absl::StatusOr<int64_t> k = GetIntConfig(
      config, "num_speculative_tokens",
      /*default_value=*/std::min<int64_t>(4, *max_k), /*min_value=*/0,
      /*max_value=*/*max_k);
  if (!k.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        k.status().message(), " (max_speculative_tokens ", *max_k, ")"));
  }
  tokens.num = static_cast<int>(*k);
  return tokens;
}

}  // namespace moeserve::engine
