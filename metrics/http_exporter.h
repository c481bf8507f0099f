// MetricsHttpServer: serves a Registry over HTTP for Prometheus, plus a
// readiness probe, on its own port (civetweb underneath).
//
//   GET /metrics  200, text format 0.0.4 (Registry::Serialize())
//   GET /healthz  200 "ok" when healthy() is true, else 503 "not ready"
//   other paths   404; other methods on the two paths 405
//
// Ownership: does not own the registry, which must outlive the server.
// Thread safety: requests are handled on civetweb's worker threads, so
// `healthy` must be thread-safe. Stop() and the destructor must not race
// with each other or with port().
#ifndef MOESERVE_METRICS_HTTP_EXPORTER_H_
#define MOESERVE_METRICS_HTTP_EXPORTER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "metrics/registry.h"

struct mg_connection;
struct mg_context;

namespace moeserve::metrics {

class MetricsHttpServer {
 public:
  // Listens on `host` only (an IPv4 or IPv6 literal, e.g. "127.0.0.1") and
  // `port`; port 0 picks a free port, see port(). Returns Unavailable when
  // the address cannot be bound (e.g. port in use), InvalidArgument on a bad
  // port. `healthy` may be empty, meaning always healthy.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      absl::string_view host, int port, const Registry* registry,
      std::function<bool()> healthy);

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;
  ~MetricsHttpServer();  // Stop()s

  // The bound port (the chosen one when started with port 0).
  int port() const { return port_; }

  // Stops accepting and waits for in-flight requests. Idempotent. Takes up
  // to about two seconds: civetweb's accept loop polls with that timeout.
  void Stop();

 private:
  MetricsHttpServer(const Registry* registry, std::function<bool()> healthy);

  static int HandleRequest(mg_connection* conn, void* self);
  int Handle(mg_connection* conn) const;

  const Registry* const registry_;
  const std::function<bool()> healthy_;
  mg_context* ctx_ = nullptr;  // owned; null once stopped
  int port_ = 0;
};

}  // namespace moeserve::metrics

#endif  // MOESERVE_METRICS_HTTP_EXPORTER_H_
