// MetricsHttpServer: serves a Registry over HTTP(S) for Prometheus, plus a
// readiness probe, on its own port (GNU libmicrohttpd underneath).
//
//   GET /metrics  200, text format 0.0.4 (Registry::Serialize())
//   GET /healthz  200 "ok" when healthy() is true, else 503 "not ready";
//                 503 "draining" for good once StartDraining() was called
//   other paths   404; other methods on the two paths 405
//   with `authorize` set: 401 + WWW-Authenticate when it refuses the
//   request's Authorization header; with a client CA: 403 without a client
//   certificate that it signed
//
// Why libmicrohttpd and not civetweb: Debian 12's libcivetweb loads OpenSSL
// 1.1 symbols at run time and finds none of SSL_get_peer_certificate in
// OpenSSL 3, so every TLS connection jumps to a null pointer; and its
// thread-per-connection model lets a few half-sent requests hold every
// worker. libmicrohttpd multiplexes connections on a few epoll threads
// (a slow client holds a connection slot, never a thread) and does TLS
// with GnuTLS. The bounds are in HttpExporterOptions and metrics/README.md;
// a ConnectionWatch (mhd_daemon.h) adds the deadlines for requests as they
// arrive (slowloris). GETs are answered once read, so keep-alive works.
//
// Ownership: does not own the registry, which must outlive the server.
// Thread safety: requests are handled on the server's threads, so `healthy`
// and `authorize` must be thread-safe. StartDraining() may be called from
// any thread; Stop() and the destructor must not race with each other.
#ifndef MOESERVE_METRICS_HTTP_EXPORTER_H_
#define MOESERVE_METRICS_HTTP_EXPORTER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "metrics/http_listener_options.h"
#include "metrics/registry.h"

struct MHD_Connection;
struct MHD_Daemon;

namespace moeserve::metrics {

class ConnectionWatch;  // mhd_daemon.h
class HttpStartLog;     // mhd_daemon.h

// Address, TLS and bounds as every HTTP listener (HttpListenerOptions),
// and who may read.
struct HttpExporterOptions : HttpListenerOptions {
  // When set, called with the request's Authorization header ("" when
  // absent); false answers 401. Must be thread-safe and constant-time in
  // the secret; the header is never logged.
  std::function<bool(absl::string_view authorization)> authorize;
};

class MetricsHttpServer {
 public:
  // Listens on options.host:options.port only. Returns Unavailable when the
  // address cannot be bound (e.g. port in use), InvalidArgument on a bad
  // host, port, bound or TLS material. `healthy` may be empty, meaning
  // always healthy.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const HttpExporterOptions& options, const Registry* registry,
      std::function<bool()> healthy);

  // Plain HTTP with the default bounds.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      absl::string_view host, int port, const Registry* registry,
      std::function<bool()> healthy);

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;
  ~MetricsHttpServer();  // Stop()s

  // The bound port (the chosen one when started with port 0).
  int port() const { return port_; }

  // Connections cut for arriving too slowly: past the head deadline, below
  // the body rate, over the cap on requests arriving at once.
  struct SlowCuts {
    int head = 0;
    int body = 0;
    int too_many = 0;
  };
  SlowCuts slow_cuts() const;

  // From now on /healthz answers 503 "draining", whatever healthy() says:
  // a load balancer stops sending work as soon as shutdown starts, as gRPC
  // health's NOT_SERVING tells gRPC clients. Never undone.
  void StartDraining() { draining_.store(true, std::memory_order_relaxed); }

  // Stops accepting, closes every connection and joins the threads.
  // Idempotent.
  void Stop();

 private:
  MetricsHttpServer(const HttpExporterOptions& options,
                    const Registry* registry, std::function<bool()> healthy);

  friend class MetricsHttpHandler;  // libmicrohttpd's callbacks (.cc)

  // Answers one request; returns false when no response could be queued.
  bool Handle(MHD_Connection* conn, absl::string_view url,
              absl::string_view method) const;

  // A copy: the daemon reads the PEM strings, the handler `authorize`.
  const HttpExporterOptions options_;
  const Registry* const registry_;
  const std::function<bool()> healthy_;
  std::atomic<bool> draining_{false};
  // Request deadlines and the cap on requests arriving (slowloris), and
  // the daemon's logger state; both outlive the daemon (declared before it).
  std::unique_ptr<ConnectionWatch> watch_;
  std::unique_ptr<HttpStartLog> start_log_;
  MHD_Daemon* daemon_ = nullptr;  // owned; null once stopped
  int port_ = 0;
};

}  // namespace moeserve::metrics

#endif  // MOESERVE_METRICS_HTTP_EXPORTER_H_
