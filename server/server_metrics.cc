#include "server/server_metrics.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/grpc_code_name.h"
#include "engine/model_config.h"
#include "engine/spec_decode/drafter_registry.h"
#include "server/client_message.h"

namespace moeserve::server {

absl::StatusOr<std::unique_ptr<ServerMetrics>> ServerMetrics::Create(
    metrics::Registry* registry, const ServerOptions& options,
    std::function<bool()> model_ready) {
  absl::StatusOr<metrics::CounterFamily*> rpcs = registry->AddCounter(
      "moeserve_grpc_requests_total",
      "Finished gRPC calls by method and status code.", {"method", "code"});
  if (!rpcs.ok()) return rpcs.status();

  absl::StatusOr<metrics::CallbackGaugeFamily*> loaded =
      registry->AddCallbackGauge(
          "moeserve_model_loaded",
          "1 while a model is loaded, warmed up and served; else 0.", {});
  if (!loaded.ok()) return loaded.status();
  if (auto st = (*loaded)->SetCallback(
          {}, [ready = std::move(model_ready)] { return ready() ? 1. : 0.; });
      !st.ok()) {
    return st;
  }

  absl::StatusOr<metrics::GaugeFamily*> info = registry->AddGauge(
      "moeserve_engine_info",
      "Configuration of each engine instance (value is always 1).",
      {"policy", "offload_policy", "policy_config", "model_dir", "backend",
       "ab_weight", "expert_cache_ratio", "expert_cache_mb", "slow_tier",
       "link_gbps", "link_latency_us", "kv_cache_bytes", "max_num_seqs",
       "max_batched_tokens", "max_waiting", "drafter", "num_speculative_tokens",
       "draft_budget", "draft_bytes"});
  if (!info.ok()) return info.status();
  // ResolveEngines resolved each engine's drafter and k from its policy
  // where the flags and file left them open: the labels show what the
  // engine runs (as ListModels does).
  // A drafter's own bytes in fast memory (its DrafterTraits, e.g. the int4
  // draft's pool: what BuildEngine charges, BuiltEngine::draft_bytes)
  // follow from the model's config alone; without a readable config.json
  // the model will not load either, and the label is empty.
  std::optional<engine::ModelConfig> model_config;
  for (const engine::EngineSpec& spec : options.engines) {
    if (!engine::spec_decode::DrafterUsesFastMemory(spec.drafter) ||
        model_config.has_value()) {
      continue;
    }
    absl::StatusOr<engine::ModelConfig> c =
        engine::LoadModelConfig(options.model_dir);
    if (c.ok()) model_config = *std::move(c);
    break;
  }
  auto draft_bytes = [&model_config](const engine::EngineSpec& spec) {
    if (!engine::spec_decode::DrafterUsesFastMemory(spec.drafter)) {
      return std::string("0");
    }
    if (!model_config.has_value()) return std::string();
    absl::StatusOr<uint64_t> bytes =
        engine::spec_decode::DrafterFastMemoryBytes(spec.drafter,
                                                    *model_config);
    return bytes.ok() ? absl::StrCat(*bytes) : std::string();
  };
  for (const engine::EngineSpec& spec : options.engines) {
    absl::StatusOr<metrics::Gauge*> g = (*info)->WithLabels(
        {spec.name, spec.policy, engine::PolicyConfigText(spec.policy_config),
         PublicModelName(options.model_dir), options.backend,
         absl::StrCat(options.AbWeight(spec.name)),
         absl::StrCat(spec.expert_cache_mb > 0 ? 0 : spec.expert_cache_ratio),
         absl::StrCat(spec.expert_cache_mb), spec.slow_tier,
         absl::StrCat(spec.link.gbps), absl::StrCat(spec.link.latency_us),
         absl::StrCat(spec.kv_cache_bytes), absl::StrCat(spec.max_num_seqs),
         absl::StrCat(spec.max_batched_tokens), absl::StrCat(spec.max_waiting),
         spec.drafter, absl::StrCat(spec.num_speculative_tokens),
         spec.draft_budget, draft_bytes(spec)});
    if (!g.ok()) return g.status();
    (*g)->Set(1);
  }
  return std::unique_ptr<ServerMetrics>(new ServerMetrics(*rpcs));
}

void ServerMetrics::CountRpc(const std::string& method,
                             const grpc::Status& status) {
  absl::StatusOr<metrics::Counter*> c =
      rpcs_->WithLabels({method, GrpcCodeName(status.error_code())});
  if (c.ok()) (*c)->Inc();
}

}  // namespace moeserve::server
