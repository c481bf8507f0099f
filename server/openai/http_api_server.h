// OpenAiHttpServer: the OpenAI-compatible HTTP API on its own port
// (--http_port), on GNU libmicrohttpd like the metrics port
// (metrics/http_exporter.h: why libmicrohttpd, and the bounds).
//
//   POST /v1/completions        JSON, or server-sent events with stream
//   POST /v1/chat/completions   the same, messages through the chat template
//   GET  /v1/models             one entry per engine instance
//   GET  /v1/models/{id}
//   POST /tokenize, /detokenize vLLM's: prompt or messages -> ids, ids -> text
//   GET  /health                200 "ok" when a model is served; 503 while
//                               loading, and for good once draining
//   other paths 404, other methods 405 (OpenAI error bodies)
//
// Access: TLS and mTLS as the other ports (PEM text in HttpApiOptions; 403
// without a client certificate the client CA signed, on every path); with
// `identify` set every path but /health needs "Authorization: Bearer
// <token>" (401 otherwise). The caller (request-id scope,
// server/caller_identity.h) is "id:" + the token's identity, or "peer:http:"
// + the client's address when there are no tokens.
//
// Bounds: a few epoll threads serve every connection; a generation in
// progress parks its connection (libmicrohttpd's suspend/resume) and holds
// no thread; request bodies over max_body_bytes are 413, POST bodies not
// sent as application/json 415; connections as HttpExporterOptions bounds
// them (idle cut, total and per address, and metrics::ConnectionWatch's
// head deadline, body rate and cap on requests arriving). GETs are
// answered once read, so keep-alive works. A
// client that goes away cancels its engine request: a parked connection's
// socket is watched for the hangup (hangup_watch.h: one thread polls them),
// and a streamed one also notices at its next failed write (sse_stream.h).
//
// Shutdown: StartDraining() (503 for new generations and /health),
// WaitForOpenCalls() for the generations in flight, then Stop() ends the
// rest (cancelled; a stream gets an error event and [DONE], a waiting
// unary request 503), gives those up to 1 s to go out, and closes every
// connection.
//
// Thread-safe. Does not own the frontend, which must outlive the server.
#ifndef MOESERVE_SERVER_OPENAI_HTTP_API_SERVER_H_
#define MOESERVE_SERVER_OPENAI_HTTP_API_SERVER_H_

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "metrics/http_listener_options.h"
#include "server/openai/openai_frontend.h"

struct MHD_Connection;
struct MHD_Daemon;

namespace moeserve::metrics {
class ConnectionWatch;  // metrics/mhd_daemon.h
class HttpStartLog;     // metrics/mhd_daemon.h
}  // namespace moeserve::metrics

namespace moeserve::server::openai {

class HangupWatch;     // hangup_watch.h
class HttpExchange;    // http_api_server.cc: one request
class HttpApiHandler;  // http_api_server.cc: libmicrohttpd's callbacks

// Address, TLS and bounds as every HTTP listener (metrics/mhd_daemon.h);
// then who may call and how large a body may be.
struct HttpApiOptions : metrics::HttpListenerOptions {
  // When set, tokens are required: returns the caller's identity for an
  // Authorization header value ("" when absent), or nullopt (401). Must be
  // thread-safe and constant-time in the secret.
  std::function<std::optional<std::string>(absl::string_view authorization)>
      identify;

  // Largest request body; more is 413.
  size_t max_body_bytes = 1 << 20;
};

class OpenAiHttpServer {
 public:
  // Listens on options.host:options.port. UNAVAILABLE when the address
  // cannot be bound, INVALID_ARGUMENT on a bad option.
  static absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> Start(
      const HttpApiOptions& options, OpenAiFrontend* frontend);

  OpenAiHttpServer(const OpenAiHttpServer&) = delete;
  OpenAiHttpServer& operator=(const OpenAiHttpServer&) = delete;
  ~OpenAiHttpServer();  // Stop()s

  int port() const { return port_; }

  // Connections cut for arriving too slowly (head deadline, body rate, over
  // the cap), for tests and diagnostics.
  struct SlowCuts {
    int head = 0;
    int body = 0;
    int too_many = 0;
  };
  SlowCuts slow_cuts() const;

  // New generations and /health get 503 from now on; never undone.
  void StartDraining() { frontend_->StartDraining(); }

  // Waits until no generation is in flight, or `deadline`; true when none.
  bool WaitForOpenCalls(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  int open_calls() const ABSL_LOCKS_EXCLUDED(mu_);

  // Cancels every generation in flight, closes every connection and joins
  // the threads. Idempotent; must not race with the destructor.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class HttpApiHandler;

  OpenAiHttpServer(const HttpApiOptions& options, OpenAiFrontend* frontend);

  // A generation's exchange is open from Register to Unregister. Register
  // refuses (false) once Stop() began.
  bool Register(const std::shared_ptr<HttpExchange>& exchange)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Unregister(const std::shared_ptr<HttpExchange>& exchange)
      ABSL_LOCKS_EXCLUDED(mu_);

  const HttpApiOptions options_;  // the daemon reads its PEM strings
  OpenAiFrontend* const frontend_;
  mutable base::Mutex mu_;
  base::CondVar no_calls_;  // signalled when open_ becomes empty
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::shared_ptr<HttpExchange>> open_ ABSL_GUARDED_BY(mu_);
  // Non-streamed generations' sockets, from Register to Unregister.
  std::unique_ptr<HangupWatch> hangups_;
  // Request deadlines and the cap on requests arriving (slowloris); it
  // and the logger outlive the daemon.
  std::unique_ptr<metrics::ConnectionWatch> watch_;
  std::unique_ptr<metrics::HttpStartLog> start_log_;
  MHD_Daemon* daemon_ = nullptr;  // owned; null once stopped
  int port_ = 0;
};

}  // namespace moeserve::server::openai

#endif  // MOESERVE_SERVER_OPENAI_HTTP_API_SERVER_H_
