#include "engine/builder/engine_spec.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/builder/engine_settings.h"
#include "engine/offload/policy_registry.h"
#include "engine/spec_decode/drafter_registry.h"

namespace moeserve::engine {
namespace {

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

}  // namespace

bool IsValidEngineName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

absl::Status CheckEngineSpec(const EngineSpec& spec) {
  if (!IsValidEngineName(spec.name)) {
    return FieldError("name",
                      absl::StrCat("'", spec.name, "' is not [a-z0-9_]{1,64}"));
  }
  // Every setting's range (engine_settings.h).
  if (absl::Status st = CheckEngineSettings(spec); !st.ok()) return st;
  if (!spec.drafter.empty() && spec.drafter != "none" &&
      spec_decode::FindDrafter(spec.drafter) == nullptr) {
    return FieldError(
        "drafter",
        absl::StrCat("unknown drafter '", spec.drafter, "' (registered: none, ",
                     absl::StrJoin(spec_decode::RegisteredDrafters(), ", "),
                     ")"));
  }
  // The factory is the authority on its keys: build one and drop it.
  absl::StatusOr<std::unique_ptr<OffloadPolicy>> policy =
      CreatePolicy(spec.policy, spec.policy_config);
  if (!policy.ok()) {
    return absl::Status(
        policy.status().code(),
        absl::StrCat(policy.status().code() == absl::StatusCode::kNotFound
                         ? "policy: "
                         : "policy_config: ",
                     policy.status().message()));
  }
  return absl::OkStatus();
}

uint64_t ExpertCacheBytes(const ModelWeights& weights, double ratio,
                          int64_t megabytes) {
  const uint64_t blob = weights.expert({0, 0}).bytes;
  // Clamped before the shift, which wraps above 2^44 MiB (CheckEngineSpec
  // refuses such budgets; this keeps a caller that skipped it safe).
  const uint64_t bytes =
      megabytes > 0
          ? static_cast<uint64_t>(std::min(megabytes, kMaxExpertCacheMb)) << 20
          : static_cast<uint64_t>(
                std::ceil(ratio * static_cast<double>(weights.expert_bytes())));
  return std::max(bytes, blob);
}

uint64_t ExpertCacheBytes(const ModelWeights& weights, const EngineSpec& spec) {
  return ExpertCacheBytes(weights, spec.expert_cache_ratio,
                          spec.expert_cache_mb);
}

std::string PolicyConfigText(const std::map<std::string, std::string>& config) {
  return absl::StrJoin(config, ",", absl::PairFormatter("="));
}

absl::Status ResolveSpeculation(EngineSpec* spec) {
  // The policy's registered traits; no policy is built.
  absl::StatusOr<SpeculationDefaults> defaults =
      PolicySpeculation(spec->policy, spec->policy_config);
  if (!defaults.ok()) return defaults.status();
  if (defaults->host_attention) spec->host_attention = 1;
  if (spec->drafter.empty()) spec->drafter = defaults->drafter;
  if (spec->num_speculative_tokens < 0) {
    spec->num_speculative_tokens = defaults->num_speculative_tokens;
    if (spec->num_speculative_tokens < 0 ||
        spec->num_speculative_tokens > kMaxSpeculativeTokens) {
      return FieldError(
          "num_speculative_tokens",
          absl::StrCat("policy ", spec->policy, " asks for ",
                       spec->num_speculative_tokens, ", outside [0, ",
                       kMaxSpeculativeTokens, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace moeserve::engine
