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

class ConnectionWatch;

// libmicrohttpd reports why a start failed only through its logger: keep
// what it says while Start() runs (bounded), to return it in the Status.
// Later messages (a client's broken TLS handshake, say) are dropped: they
// are the clients' problem and would let a client flood our log. Its one
// use of them: libmicrohttpd's refusal of a request's Content-Length is
// passed on to `watch` (ConnectionWatch::OnBadContentLength).
class HttpStartLog {
 public:
  explicit HttpStartLog(ConnectionWatch* watch = nullptr) : watch_(watch) {}
  // MHD_OPTION_EXTERNAL_LOGGER's callback; `self` is the HttpStartLog.
  static void Log(void* self, const char* format, va_list args);
  void Append(const char* format, va_list args);
  // Returns what was logged so far; drops everything from now on.
  std::string Close();

 private:
  ConnectionWatch* const watch_;
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
// It also gives the one answer to a Content-Length that libmicrohttpd
// refuses itself (OnBadContentLength, below).
//
// Thread-safe; the callbacks come from libmicrohttpd's threads. Must
// outlive the daemon (destroy it after MHD_stop_daemon).
class ConnectionWatch {
 public:
  // `name` says which port in the log line ("metrics", "HTTP API").
  // `bad_length_response(status)`: the whole HTTP/1.1 response, with
  // "Connection: close", sent for a Content-Length libmicrohttpd refuses
  // (400 not a number, 413 too large).
  ConnectionWatch(const HttpListenerOptions& options, std::string name,
                  std::function<std::string(int status)> bad_length_response);
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

  // libmicrohttpd 0.9.75 refuses a Content-Length that is not a number or
  // overflows (BadContentLengthStatus) itself, without calling the access
  // handler, and sends its status line and headers twice, then an HTML
  // page: src/microhttpd/connection.c, MHD_connection_handle_idle, case
  // MHD_CONNECTION_HEADERS_RECEIVED, overwrites the HEADERS_SENDING state
  // that transmit_error_response_len() left with HEADERS_PROCESSED, so the
  // error response goes through START_REPLY and build_header_response()
  // appends a second header (fixed upstream in 1.0.0, commit f1bfbe71).
  // It logs the refusal first, on the connection's thread, before it
  // builds or sends anything: HttpStartLog calls this then. It finds that
  // connection among this thread's (head complete, no access-handler call
  // yet, that header), sends `bad_length_response` on it and shuts the
  // socket down, so libmicrohttpd's answer fails to go out and it closes
  // the connection.
  void OnBadContentLength() ABSL_LOCKS_EXCLUDED(mu_);

  // Waits (up to `timeout`) until every connection refused by
  // OnBadContentLength is closed. Call before MHD_stop_daemon: libmicrohttpd
  // 0.9.75 must not be stopped while it is still building its refusal
  // (MHD_queue_response returns MHD_YES without queueing once the daemon
  // is shutting down, and transmit_error_response_len then builds headers
  // for a null response: SEGV), and our answer reaches the client before
  // libmicrohttpd is done. True when none is left.
  bool WaitForRefusedClosed(std::chrono::milliseconds timeout)
      ABSL_LOCKS_EXCLUDED(mu_);

  struct Cuts {
    int head = 0;        // past the head deadline
    int body = 0;        // body below the minimum rate
    int too_many = 0;    // over max_half_received
    int bad_length = 0;  // refused Content-Length (OnBadContentLength)
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
    bool refused = false;  // answered by OnBadContentLength
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
  const size_t max_connections_;
  const std::string name_;
  const std::function<std::string(int)> bad_length_response_;
  mutable base::Mutex mu_;
  base::CondVar wake_;
  base::CondVar refused_closed_;
  int refused_open_ ABSL_GUARDED_BY(mu_) = 0;
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

// How far above max_connections libmicrohttpd's own connection limit is
// set (max(8, max_connections / 8)): room for sockets the watch has cut
// but libmicrohttpd has not yet closed, and for the uneven split of its
// limit over its threads, so that the watch, not libmicrohttpd, decides who
// is turned away (ConnectionWatch: a request still arriving first).
int ConnectionHeadroom(const HttpListenerOptions& options);

// True when the TLS peer presented a certificate that the configured client
// CA verifies (libmicrohttpd requests one but leaves the check to us).
bool ClientCertificateVerified(MHD_Connection* conn);

// What libmicrohttpd 0.9.75 (parse_connection_headers) makes of the
// request's headers: 400 when its Content-Length is not a decimal number
// (empty, negative, "12x", "0x10"), 413 when it is one above 2^64 - 1, 0
// when it takes it (no Content-Length, one that parses, or any
// Transfer-Encoding, which it looks at first). The first Content-Length
// counts, as in libmicrohttpd.
int BadContentLengthStatus(MHD_Connection* conn);

// Sends `response` (a whole HTTP response) on the connection's socket, or
// its TLS session, itself. Only on libmicrohttpd's thread for the
// connection while it is not sending (OnBadContentLength). False when it
// could not all be sent.
bool SendRawResponse(MHD_Connection* conn, absl::string_view response);

}  // namespace moeserve::metrics

#endif  // MOESERVE_METRICS_MHD_DAEMON_H_
