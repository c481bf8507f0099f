#include "engine/builder/engine_spec.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/spec/drafter_registry.h"
#include "policies/registry.h"

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
  if (!(spec.expert_cache_ratio > 0 && spec.expert_cache_ratio <= 1)) {
    return FieldError(
        "expert_cache_ratio",
        absl::StrCat("must be in (0, 1], got ", spec.expert_cache_ratio));
  }
  if (spec.expert_cache_mb < 0 || spec.expert_cache_mb > kMaxExpertCacheMb) {
    return FieldError("expert_cache_mb",
                      absl::StrCat("must be in [1, ", kMaxExpertCacheMb,
                                   "] MiB (0: use expert_cache_ratio), got ",
                                   spec.expert_cache_mb));
  }
  if (spec.slow_tier != "host" && spec.slow_tier != "disk") {
    return FieldError("slow_tier", absl::StrCat("must be host or disk, got '",
                                                spec.slow_tier, "'"));
  }
  // NaN fails every comparison below, so each check is written to accept.
  const double gbps = spec.link.gbps;
  if (!(gbps == 0 || (gbps >= kMinLinkGbps && gbps <= kMaxLinkGbps))) {
    return FieldError(
        "link_gbps", absl::StrCat("must be 0 (off) or in [", kMinLinkGbps, ", ",
                                  kMaxLinkGbps, "] GB/s, got ", gbps));
  }
  if (!(spec.link.latency_us >= 0 &&
        spec.link.latency_us <= kMaxLinkLatencyUs)) {
    return FieldError("link_latency_us",
                      absl::StrCat("must be in [0, ", kMaxLinkLatencyUs,
                                   "], got ", spec.link.latency_us));
  }
  if (!(spec.link.inplace_compute_ratio >= 1 &&
        spec.link.inplace_compute_ratio <= kMaxInplaceComputeRatio)) {
    return FieldError("inplace_compute_ratio",
                      absl::StrCat("must be in [1, ", kMaxInplaceComputeRatio,
                                   "], got ", spec.link.inplace_compute_ratio));
  }
  if (spec.kv_cache_bytes < (1u << 20) ||
      spec.kv_cache_bytes > kMaxKvCacheBytes) {
    return FieldError("kv_cache_mb", absl::StrCat("must be in [1, ",
                                                  kMaxKvCacheBytes >> 20, "]"));
  }
  if (spec.max_num_seqs < 1 || spec.max_num_seqs > kMaxNumSeqs) {
    return FieldError("max_num_seqs",
                      absl::StrCat("must be in [1, ", kMaxNumSeqs, "], got ",
                                   spec.max_num_seqs));
  }
  if (spec.max_batched_tokens < 1 ||
      spec.max_batched_tokens > kMaxBatchedTokens) {
    return FieldError("max_batched_tokens",
                      absl::StrCat("must be in [1, ", kMaxBatchedTokens,
                                   "], got ", spec.max_batched_tokens));
  }
  // 0 would refuse every request, the engine's own warm-up included: the
  // server would never become ready.
  if (spec.max_waiting < 1 || spec.max_waiting > kMaxWaiting) {
    return FieldError("max_waiting",
                      absl::StrCat("must be in [1, ", kMaxWaiting, "], got ",
                                   spec.max_waiting));
  }
  if (!spec.drafter.empty() && spec.drafter != "none" &&
      spec::FindDrafter(spec.drafter) == nullptr) {
    return FieldError(
        "drafter",
        absl::StrCat("unknown drafter '", spec.drafter, "' (registered: none, ",
                     absl::StrJoin(spec::RegisteredDrafters(), ", "), ")"));
  }
  if (spec.draft_budget != "shared" && spec.draft_budget != "extra") {
    return FieldError(
        "draft_budget",
        absl::StrCat("must be shared or extra, got '", spec.draft_budget, "'"));
  }
  if (spec.num_speculative_tokens < -1 ||
      spec.num_speculative_tokens > kMaxSpeculativeTokens) {
    return FieldError(
        "num_speculative_tokens",
        absl::StrCat("must be in [0, ", kMaxSpeculativeTokens,
                     "] (0: adaptive), got ", spec.num_speculative_tokens));
  }
  // The factory is the authority on its keys: build one and drop it.
  absl::StatusOr<std::unique_ptr<OffloadPolicy>> policy =
      policies::CreatePolicy(spec.policy, spec.policy_config);
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
  if (!spec->drafter.empty() && spec->num_speculative_tokens >= 0) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<OffloadPolicy>> policy =
      policies::CreatePolicy(spec->policy, spec->policy_config);
  if (!policy.ok()) return policy.status();
  if (spec->drafter.empty()) {
    spec->drafter = std::string((*policy)->default_drafter());
  }
  if (spec->num_speculative_tokens < 0) {
    spec->num_speculative_tokens = (*policy)->default_num_speculative_tokens();
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
