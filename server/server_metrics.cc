#include "server/server_metrics.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moeserve::server {
namespace {

// gRPC's canonical code names, as Prometheus label values.
const char* CodeName(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const int index = static_cast<int>(code);
  return index >= 0 && index < 17 ? kNames[index] : "UNKNOWN";
}

// Weight of `engine` in the A/B split (0 when it is reached only by name;
// 1 for the default engine when there is no split).
double AbWeight(const ServerOptions& options, const std::string& engine) {
  if (options.ab.empty()) return engine == options.policy ? 1 : 0;
  for (const AbArm& arm : options.ab) {
    if (arm.policy == engine) return arm.weight;
  }
  return 0;
}

}  // namespace

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
      {"policy", "offload_policy", "model_dir", "ab_weight", "slow_tier",
       "link_gbps"});
  if (!info.ok()) return info.status();
  for (const EngineSpec& spec : options.EngineSpecs()) {
    absl::StatusOr<metrics::Gauge*> g = (*info)->WithLabels(
        {spec.name, spec.policy, options.model_dir,
         absl::StrCat(AbWeight(options, spec.name)), options.slow_tier,
         absl::StrCat(options.link_gbps)});
    if (!g.ok()) return g.status();
    (*g)->Set(1);
  }
  return std::unique_ptr<ServerMetrics>(new ServerMetrics(*rpcs));
}

void ServerMetrics::CountRpc(const std::string& method,
                             const grpc::Status& status) {
  absl::StatusOr<metrics::Counter*> c =
      rpcs_->WithLabels({method, CodeName(status.error_code())});
  if (c.ok()) (*c)->Inc();
}

}  // namespace moeserve::server
