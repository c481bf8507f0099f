#include "metrics/http_exporter.h"

#include <arpa/inet.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"

namespace moeserve::metrics {

// libmicrohttpd reports why a start failed only through its logger: keep
// what it says while Start() runs (bounded), to return it in the Status.
// Later messages (a client's broken TLS handshake, say) are dropped: they
// are the clients' problem and would let a client flood our log.
class HttpStartLog {
 public:
  static void Log(void* self, const char* format, va_list args) {
    static_cast<HttpStartLog*>(self)->Append(format, args);
  }
  void Append(const char* format, va_list args) {
    char line[256];
    std::vsnprintf(line, sizeof(line), format, args);
    base::MutexLock lock(&mu_);
    if (closed_ || text_.size() > 512) return;
    absl::StrAppend(&text_, text_.empty() ? "" : "; ", line);
  }
  // Returns what was logged so far; drops everything from now on.
  std::string Close() {
    base::MutexLock lock(&mu_);
    closed_ = true;
    while (!text_.empty() && (text_.back() == '\n' || text_.back() == ' ')) {
      text_.pop_back();
    }
    return text_;
  }

 private:
  base::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::string text_ ABSL_GUARDED_BY(mu_);
};

namespace {

constexpr char kMetricsContentType[] =
    "text/plain; version=0.0.4; charset=utf-8";
constexpr char kTextContentType[] = "text/plain; charset=utf-8";
// Headers and request line must fit here (MHD answers 431 otherwise); it is
// also each connection's whole buffer, so it bounds memory per connection.
constexpr size_t kConnectionMemoryBytes = 16 * 1024;

// The address to bind: an IPv4 or IPv6 literal, or "localhost".
struct ListenAddress {
  sockaddr_storage storage = {};
  bool ipv6 = false;
};

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view host,
                                                 int port) {
  ListenAddress address;
  const std::string literal(host == "localhost" ? "127.0.0.1" : host);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&address.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&address.storage);
  if (inet_pton(AF_INET, literal.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
  } else if (inet_pton(AF_INET6, literal.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    address.ipv6 = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics host '", host, "' is not an IPv4 or IPv6 address"));
  }
  return address;
}

absl::Status CheckOptions(const HttpExporterOptions& o) {
  if (o.port < 0 || o.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad metrics port ", o.port));
  }
  if (o.threads < 1 || o.threads > 64 || o.idle_timeout_s < 1 ||
      o.max_connections < o.threads || o.max_connections_per_ip < 1 ||
      o.max_connections_per_ip > o.max_connections) {
    return absl::InvalidArgumentError(
        "metrics server: threads must be 1-64, idle_timeout_s >= 1, and "
        "1 <= max_connections_per_ip <= max_connections, threads <= "
        "max_connections");
  }
  if (o.tls_cert_pem.empty() != o.tls_key_pem.empty()) {
    return absl::InvalidArgumentError(
        "metrics server: a TLS certificate needs its key and vice versa");
  }
  if (!o.tls_client_ca_pem.empty() && o.tls_cert_pem.empty()) {
    return absl::InvalidArgumentError(
        "metrics server: a client CA needs a server certificate (mTLS is TLS)");
  }
  return absl::OkStatus();
}

// True when the TLS peer presented a certificate that the configured client
// CA verifies (libmicrohttpd requests one but leaves the check to us).
bool ClientCertificateVerified(MHD_Connection* conn) {
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (info == nullptr || info->tls_session == nullptr) return false;
  unsigned int problems = 0;
  // Fails (GNUTLS_E_NO_CERTIFICATE_FOUND) when the client sent none.
  if (gnutls_certificate_verify_peers2(
          static_cast<gnutls_session_t>(info->tls_session), &problems) !=
      GNUTLS_E_SUCCESS) {
    return false;
  }
  return problems == 0;
}

bool Respond(
    MHD_Connection* conn, unsigned int code, absl::string_view content_type,
    absl::string_view body,
    const std::vector<std::pair<const char*, std::string>>& extra = {}) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return false;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                          std::string(content_type).c_str());
  MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  for (const auto& [name, value] : extra) {
    MHD_add_response_header(response, name, value.c_str());
  }
  const MHD_Result queued = MHD_queue_response(conn, code, response);
  MHD_destroy_response(response);  // reference-counted: sent, then freed
  return queued == MHD_YES;
}

}  // namespace

// libmicrohttpd's entry points, kept out of the header (its types are C).
class MetricsHttpHandler {
 public:
  static MHD_Result OnRequest(void* self, MHD_Connection* conn, const char* url,
                              const char* method, const char* /*version*/,
                              const char* /*upload_data*/,
                              size_t* /*upload_data_size*/,
                              void** /*request_state*/) {
    // Answered on the first call, when the headers are in: no request here
    // has a body worth reading (a body sent anyway is discarded with the
    // connection).
    return static_cast<const MetricsHttpServer*>(self)->Handle(
               conn, url ? url : "", method ? method : "")
               ? MHD_YES
               : MHD_NO;
  }
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    absl::string_view host, int port, const Registry* registry,
    std::function<bool()> healthy) {
  HttpExporterOptions options;
  options.host = std::string(host);
  options.port = port;
  return Start(options, registry, std::move(healthy));
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const HttpExporterOptions& options, const Registry* registry,
    std::function<bool()> healthy) {
  if (absl::Status st = CheckOptions(options); !st.ok()) return st;
  absl::StatusOr<ListenAddress> address =
      ParseListenAddress(options.host, options.port);
  if (!address.ok()) return address.status();
  const bool tls = !options.tls_cert_pem.empty();
  if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
    return absl::UnavailableError(
        "metrics server: this libmicrohttpd was built without TLS");
  }
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(options, registry, std::move(healthy)));
  const HttpExporterOptions& o = server->options_;  // stable strings

  // Every option below bounds what a client can hold: see README.
  std::vector<MHD_OptionItem> items = {
      {MHD_OPTION_THREAD_POOL_SIZE, options.threads, nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT, options.idle_timeout_s, nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, options.max_connections, nullptr},
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT, options.max_connections_per_ip,
       nullptr},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT,
       static_cast<intptr_t>(kConnectionMemoryBytes), nullptr},
      {MHD_OPTION_SOCK_ADDR, 0, &address->storage},
  };
  if (tls) {
    // libmicrohttpd keeps these pointers: they point into options_.
    items.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0,
                     const_cast<char*>(o.tls_cert_pem.c_str())});
    items.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0,
                     const_cast<char*>(o.tls_key_pem.c_str())});
    if (!o.tls_client_ca_pem.empty()) {
      items.push_back({MHD_OPTION_HTTPS_MEM_TRUST, 0,
                       const_cast<char*>(o.tls_client_ca_pem.c_str())});
    }
  }
  items.push_back({MHD_OPTION_END, 0, nullptr});

  // ITC: Stop() wakes the threads at once instead of waiting for a timeout.
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
                       MHD_USE_ITC | MHD_USE_ERROR_LOG;
  if (address->ipv6) flags |= MHD_USE_IPv6;
  if (tls) flags |= MHD_USE_TLS;
  server->daemon_ = MHD_start_daemon(
      flags, static_cast<uint16_t>(options.port), nullptr, nullptr,
      &MetricsHttpHandler::OnRequest, server.get(), MHD_OPTION_EXTERNAL_LOGGER,
      &HttpStartLog::Log, server->start_log_.get(), MHD_OPTION_ARRAY,
      items.data(), MHD_OPTION_END);
  const std::string why = server->start_log_->Close();
  if (server->daemon_ == nullptr) {
    const char* kind = tls ? "https" : "http";
    return absl::UnavailableError(absl::StrCat(
        "metrics server cannot listen on ", kind, "://", options.host, ":",
        options.port, why.empty() ? "" : ": ", why));
  }
  const MHD_DaemonInfo* info =
      MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  if (info == nullptr || info->port == 0) {
    return absl::InternalError("metrics server: no listening port");
  }
  server->port_ = info->port;
  return server;
}

MetricsHttpServer::MetricsHttpServer(const HttpExporterOptions& options,
                                     const Registry* registry,
                                     std::function<bool()> healthy)
    : options_(options),
      registry_(registry),
      healthy_(std::move(healthy)),
      start_log_(std::make_unique<HttpStartLog>()) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (daemon_ == nullptr) return;
  MHD_stop_daemon(daemon_);  // closes the sockets, joins the threads
  daemon_ = nullptr;
}

bool MetricsHttpServer::Handle(MHD_Connection* conn, absl::string_view url,
                               absl::string_view method) const {
  const bool head = method == "HEAD";
  if (url != "/metrics" && url != "/healthz") {
    return Respond(conn, 404, kTextContentType, "not found\n");
  }
  if (method != "GET" && !head) {
    return Respond(conn, 405, kTextContentType, "method not allowed\n",
                   {{MHD_HTTP_HEADER_ALLOW, "GET, HEAD"}});
  }
  if (!options_.tls_client_ca_pem.empty() && !ClientCertificateVerified(conn)) {
    return Respond(
        conn, 403, kTextContentType,
        "a client certificate signed by the client CA is required\n");
  }
  if (options_.authorize) {
    const char* header = MHD_lookup_connection_value(
        conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!options_.authorize(header ? header : "")) {
      return Respond(
          conn, 401, kTextContentType, "unauthorized\n",
          {{MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"moeserve\""}});
    }
  }
  if (url == "/metrics") {
    return Respond(conn, 200, kMetricsContentType, registry_->Serialize());
  }
  if (draining_.load(std::memory_order_relaxed)) {
    return Respond(conn, 503, kTextContentType, "draining");
  }
  if (!healthy_ || healthy_()) {
    return Respond(conn, 200, kTextContentType, "ok");
  }
  return Respond(conn, 503, kTextContentType, "not ready");
}

}  // namespace moeserve::metrics
