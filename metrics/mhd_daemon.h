// libmicrohttpd plumbing shared by the two HTTP servers built on it, the
// metrics exporter (metrics/http_exporter) and the OpenAI-compatible API
// (server/openai/http_api_server): the start-up log, the listen address,
// the bounded daemon options, and the mTLS client-certificate check.
#ifndef MOESERVE_METRICS_MHD_DAEMON_H_
#define MOESERVE_METRICS_MHD_DAEMON_H_

#include <sys/socket.h>

#include <chrono>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "metrics/http_listener_options.h"

struct MHD_Connection;
struct MHD_OptionItem;

namespace moeserve::metrics {

// libmicrohttpd reports why a start failed only through its logger: keep
// what it says while Start() runs (bounded), to return it in the Status.
// Later messages (a client's broken TLS handshake, say) are dropped: they
// are the clients' problem and would let a client flood our log.
class HttpStartLog {
 public:
  // MHD_OPTION_EXTERNAL_LOGGER's callback; `self` is the HttpStartLog.
  static void Log(void* self, const char* format, va_list args);
  void Append(const char* format, va_list args);
  // Returns what was logged so far; drops everything from now on.
  std::string Close();

 private:
  base::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::string text_ ABSL_GUARDED_BY(mu_);
};

// Deadlines for requests as they arrive, and a cap on how many may be
// arriving at once (HttpListenerOptions: head_timeout_s,
// min_body_bytes_per_s, max_half_received), which libmicrohttpd's idle
// timeout alone does not give: it restarts on every byte, so a client that
// sends a header line every few seconds holds its connection for ever
// (slowloris, issue 29).
//
// libmicrohttpd tells it when each connection starts and closes
// (OnConnection, MHD_OPTION_NOTIFY_CONNECTION: DaemonOptionItems adds it);
// the server's access handler says when a request's head is in
// (HeadReceived, its first call), how much body came (BodyBytes) and when
// the whole request is in (RequestReceived); its NOTIFY_COMPLETED says when
// the answer went out (RequestCompleted: the next request's head starts
// now). A thread checks every 200 ms and shuts down (never closes: the
// socket is libmicrohttpd's, which then closes it) the sockets of requests
// past a deadline, and, over the cap, of those that began first. The cap
// is also kept as each connection starts. Cuts are logged (spdlog warn), at
// most one line every 10 s.
//
// Thread-safe; the callbacks come from libmicrohttpd's threads. Must
// outlive the daemon (destroy it after MHD_stop_daemon).
class ConnectionWatch {
 public:
  // `name` says which port in the log line ("metrics", "HTTP API").
  ConnectionWatch(const HttpListenerOptions& options, std::string name);
  ~ConnectionWatch();  // joins the thread
  ConnectionWatch(const ConnectionWatch&) = delete;
  ConnectionWatch& operator=(const ConnectionWatch&) = delete;

  // MHD_OPTION_NOTIFY_CONNECTION's callback; `self` is the watch.
  static void OnConnection(void* self, MHD_Connection* conn,
                           void** socket_context, int code);

  void HeadReceived(MHD_Connection* conn) ABSL_LOCKS_EXCLUDED(mu_);
  void BodyBytes(MHD_Connection* conn, size_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void RequestReceived(MHD_Connection* conn) ABSL_LOCKS_EXCLUDED(mu_);
  void RequestCompleted(MHD_Connection* conn) ABSL_LOCKS_EXCLUDED(mu_);

  struct Cuts {
    int head = 0;      // past the head deadline
    int body = 0;      // body below the minimum rate
    int too_many = 0;  // over max_half_received
  };
  Cuts cuts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  enum class Phase { kHead, kBody, kAnswering };
  struct Tracked {
    int fd = -1;
    std::thread::id thread;  // libmicrohttpd's thread that serves it
    Phase phase = Phase::kHead;
    Clock::time_point began;  // the request's (or connection's) start
    Clock::time_point body_began;
    uint64_t body_bytes = 0;
    bool cut = false;
  };

  void Started(MHD_Connection* conn) ABSL_LOCKS_EXCLUDED(mu_);
  void Closed(MHD_Connection* conn) ABSL_LOCKS_EXCLUDED(mu_);
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  void CheckLocked(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CutLocked(Tracked* t, int* counter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogLocked(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock::duration head_timeout_;
  const double min_body_bytes_per_s_;
  const size_t max_half_received_;
  const std::string name_;
  mutable base::Mutex mu_;
  base::CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<MHD_Connection*, Tracked> conns_ ABSL_GUARDED_BY(mu_);
  Cuts cuts_ ABSL_GUARDED_BY(mu_);
  Cuts logged_ ABSL_GUARDED_BY(mu_);  // cuts_ when last logged
  Clock::time_point last_log_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: started once the rest is built
};

struct ListenAddress {
  sockaddr_storage storage = {};
  bool ipv6 = false;
};

// An IPv4 or IPv6 literal ("localhost" means 127.0.0.1) and a port;
// otherwise InvalidArgument "<what>'<host>' is not an IPv4 or IPv6 address".
absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view host,
                                                 int port,
                                                 absl::string_view what);

// What bounds a daemon and how it does TLS. The strings must outlive the
// daemon: libmicrohttpd keeps pointers into them.
// The MHD_OPTION_ARRAY items for `options` (its bounds and TLS material,
// whose strings libmicrohttpd keeps: `options` must outlive the daemon)
// listening on `*address` (which must outlive the daemon's start), each
// connection given `connection_memory_bytes`; ends with MHD_OPTION_END.
std::vector<MHD_OptionItem> DaemonOptionItems(
    const HttpListenerOptions& options, size_t connection_memory_bytes,
    ListenAddress* address, ConnectionWatch* watch);

// The cap on requests arriving at once that `options` means (its
// max_half_received, or max_connections / 4 when 0).
int MaxHalfReceived(const HttpListenerOptions& options);

// True when the TLS peer presented a certificate that the configured client
// CA verifies (libmicrohttpd requests one but leaves the check to us).
bool ClientCertificateVerified(MHD_Connection* conn);

}  // namespace moeserve::metrics

#endif  // MOESERVE_METRICS_MHD_DAEMON_H_
