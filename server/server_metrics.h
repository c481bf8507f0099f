// The server-level Prometheus metrics: the outcome of every RPC, whether a
// model is being served, and the configured engine instances. Engine metrics
// (expert tier, serving latencies) are registered by the engines themselves
// in the same registry.
//
// Thread-safe; owns nothing but pointers into the registry.
#ifndef MOESERVE_SERVER_SERVER_METRICS_H_
#define MOESERVE_SERVER_SERVER_METRICS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/support/status.h"
#include "metrics/registry.h"
#include "server/server_options.h"

namespace moeserve::server {

class ServerMetrics {
 public:
  // Registers the families in `registry` (which must outlive this object).
  // `model_ready` is polled at scrape time.
  static absl::StatusOr<std::unique_ptr<ServerMetrics>> Create(
      metrics::Registry* registry, const ServerOptions& options,
      std::function<bool()> model_ready);

  // Counts one finished RPC of `method` with its final status code.
  void CountRpc(const std::string& method, const grpc::Status& status);

 private:
  explicit ServerMetrics(metrics::CounterFamily* rpcs) : rpcs_(rpcs) {}

  metrics::CounterFamily* const rpcs_;
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_SERVER_METRICS_H_
