// libmicrohttpd plumbing shared by the two HTTP servers built on it, the
// metrics exporter (metrics/http_exporter) and the OpenAI-compatible API
// (server/openai/http_api_server): the start-up log, the listen address,
// the bounded daemon options, and the mTLS client-certificate check.
#ifndef MOESERVE_METRICS_MHD_DAEMON_H_
#define MOESERVE_METRICS_MHD_DAEMON_H_

#include <sys/socket.h>

#include <cstdarg>
#include <cstddef>
#include <string>
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
    ListenAddress* address);

// True when the TLS peer presented a certificate that the configured client
// CA verifies (libmicrohttpd requests one but leaves the check to us).
bool ClientCertificateVerified(MHD_Connection* conn);

}  // namespace moeserve::metrics

#endif  // MOESERVE_METRICS_MHD_DAEMON_H_
